//! Result files: the JSON every benchmark writes (schema
//! `peregrine.result/1`, documented in docs/RESULTS.md and
//! docs/results.schema.json) and the human table.
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "peregrine.result/1";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResultFile {
    pub schema: String,
    /// What produced it: "bench-gen", "showcase", ...
    pub kind: String,
    /// The command line that produced it.
    pub command: String,
    pub created_unix: u64,
    pub machine: Machine,
    pub runs: Vec<Run>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    pub kernel: String,
    pub cpus: usize,
}

impl Machine {
    pub fn this() -> Machine {
        let kernel = nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default();
        Machine {
            kernel,
            cpus: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        }
    }
}

/// One contender / configuration and its trials.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Run {
    pub label: String,
    pub params: RunParams,
    pub trials: Vec<Trial>,
    pub rfc2544: Option<Rfc2544>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// "xdp" (live frames) or "socket".
    pub backend: String,
    /// "ipv4" or "ipv6".
    pub ip: String,
    /// Frame size with FCS in bytes, or "imix".
    pub frame_size: String,
    pub mean_frame_bytes: f64,
    pub flows: u32,
    pub threads: usize,
    /// Where delivery is counted.
    pub sink: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Trial {
    /// "max" (unpaced), "fixed" (a set rate), "search" (RFC 2544 step).
    pub phase: String,
    /// Requested rate; null when unpaced.
    pub requested_pps: Option<f64>,
    pub duration_s: f64,
    pub offered_packets: u64,
    pub delivered_packets: u64,
    pub offered_pps: f64,
    pub delivered_pps: f64,
    /// Ethernet bits per second, FCS included, preamble and gap excluded.
    pub offered_bps: f64,
    pub delivered_bps: f64,
    /// (offered - delivered) / offered.
    pub loss_ratio: f64,
    pub cpu: Vec<CoreCpu>,
    pub latency: Option<Latency>,
    /// Delivered rate in consecutive windows of about one second.
    pub windows: Vec<Window>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoreCpu {
    pub core: usize,
    pub user_pct: f64,
    pub system_pct: f64,
    pub softirq_pct: f64,
    pub irq_pct: f64,
    pub idle_pct: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    pub count: u64,
    pub min_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Window {
    /// End of the window, seconds from the trial's start.
    pub t_s: f64,
    pub seconds: f64,
    pub offered_pps: f64,
    pub delivered_pps: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rfc2544 {
    pub loss_tolerance: f64,
    pub resolution_pps: f64,
    pub trial_s: f64,
    /// Highest offered rate whose loss stayed within the tolerance.
    pub throughput_pps: f64,
    pub throughput_bps: f64,
}

impl ResultFile {
    pub fn new(kind: &str, command: String, runs: Vec<Run>) -> ResultFile {
        let created_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ResultFile {
            schema: SCHEMA.into(),
            kind: kind.into(),
            command,
            created_unix,
            machine: Machine::this(),
            runs,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results serialise")
    }

    pub fn from_json(text: &str) -> Result<ResultFile, String> {
        let r: ResultFile =
            serde_json::from_str(text).map_err(|e| format!("not a peregrine result file: {e}"))?;
        if r.schema != SCHEMA {
            return Err(format!(
                "result schema {:?}, this peregrine reads {SCHEMA:?}",
                r.schema
            ));
        }
        Ok(r)
    }

    /// A fixed-width table: one row per trial.
    pub fn table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "{:<28} {:<6} {:>11} {:>11} {:>11} {:>10} {:>9} {:>12}\n",
            "run",
            "phase",
            "req Mpps",
            "offer Mpps",
            "deliv Mpps",
            "deliv Gb/s",
            "loss %",
            "cpu busy %"
        ));
        for r in &self.runs {
            for t in &r.trials {
                let busy: Vec<String> = t
                    .cpu
                    .iter()
                    .map(|c| format!("{:.0}", 100.0 - c.idle_pct))
                    .collect();
                out.push_str(&format!(
                    "{:<28} {:<6} {:>11} {:>11.3} {:>11.3} {:>10.3} {:>9.4} {:>12}\n",
                    truncate(&r.label, 28),
                    t.phase,
                    t.requested_pps
                        .map(|p| format!("{:.3}", p / 1e6))
                        .unwrap_or_else(|| "max".into()),
                    t.offered_pps / 1e6,
                    t.delivered_pps / 1e6,
                    t.delivered_bps / 1e9,
                    t.loss_ratio * 100.0,
                    busy.join("/")
                ));
                if let Some(l) = &t.latency {
                    out.push_str(&format!(
                        "{:<28} latency us: min {:.1} p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} ({} samples)\n",
                        "",
                        l.min_ns as f64 / 1e3,
                        l.p50_ns as f64 / 1e3,
                        l.p90_ns as f64 / 1e3,
                        l.p99_ns as f64 / 1e3,
                        l.p999_ns as f64 / 1e3,
                        l.max_ns as f64 / 1e3,
                        l.count
                    ));
                }
            }
            if let Some(s) = &r.rfc2544 {
                out.push_str(&format!(
                    "{:<28} RFC 2544 throughput (loss <= {}): {:.3} Mpps, {:.3} Gb/s\n",
                    truncate(&r.label, 28),
                    s.loss_tolerance,
                    s.throughput_pps / 1e6,
                    s.throughput_bps / 1e9
                ));
            }
        }
        out
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).collect::<String>() + "~"
    }
}
