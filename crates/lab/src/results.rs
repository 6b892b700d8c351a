//! Result files: the JSON every benchmark writes (schema
//! `peregrine.result/1`, documented in docs/RESULTS.md and
//! docs/results.schema.json) and the human table.
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "peregrine.result/1";

/// What a benchmark measured beside a run's trials (its `values`): each
/// benchmark declares its own typed struct, serialised as the JSON object
/// of numbers the schema describes.
pub trait Values:
    Serialize + DeserializeOwned + Default + Clone + std::fmt::Debug + PartialEq
{
    /// Nothing measured: the run's `values` is left out of the file.
    fn is_empty(&self) -> bool;

    /// The figures present, by their name in the file, in the file's order.
    fn named(&self) -> Vec<(String, f64)> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m
                .into_iter()
                .filter_map(|(k, v)| Some((k, v.as_f64()?)))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Runs that measure nothing beside their trials (no `values` in the file).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NoValues {}

impl Values for NoValues {
    fn is_empty(&self) -> bool {
        true
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, bound = "V: Values")]
pub struct ResultFile<V = NoValues> {
    pub schema: String,
    /// What produced it: each benchmark's `Report::KIND`.
    pub kind: String,
    /// The command line that produced it.
    pub command: String,
    pub created_unix: u64,
    pub machine: Machine,
    pub runs: Vec<Run<V>>,
}

/// The `kind` of a result file's text, read before its type is known.
pub fn kind_of(text: &str) -> Result<String, String> {
    #[derive(Deserialize)]
    struct Kind {
        kind: String,
    }
    serde_json::from_str::<Kind>(text)
        .map(|k| k.kind)
        .map_err(|e| format!("not a peregrine result file: {e}"))
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
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, bound = "V: Values")]
pub struct Run<V = NoValues> {
    pub label: String,
    pub params: RunParams,
    pub trials: Vec<Trial>,
    pub rfc2544: Option<Rfc2544>,
    /// CPU placement of generator, device under test and sink.
    #[serde(default)]
    pub placement: Option<Placement>,
    /// A TCP transfer's figures, for runs that carried real TCP instead of
    /// generated frames (then `trials` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpFigure>,
    /// Figures a benchmark measured beside the trials, typed by the
    /// benchmark (bench qos's scheduler part: a class's share, latency
    /// percentiles, CPU per Gbit/s).
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    pub values: V,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// The generator's backend: "xdp" (live frames), "socket" (sendmmsg) or
    /// "afxdp" (AF_XDP TX ring); for bench faas the server's: "socket",
    /// "mmsg" or "afxdp".
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
    /// False for runs whose frames were built and dropped by the generator
    /// itself (its own ceiling): their "delivered" is what was built, and
    /// plots do not show it as delivered.
    #[serde(default = "yes")]
    pub sent: bool,
}

fn yes() -> bool {
    true
}

/// What a run of a comparing benchmark is: a contender in a scenario, in
/// one round. Benchmarks keep typed contenders and scenarios and make the
/// run's label from this ("CONTENDER | SCENARIO[ | round N]"); plots and
/// tables read it back with [`RunKey::parse`]. Labels of other runs (the
/// showcase, bench gen) do not parse: they stand alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKey {
    pub contender: String,
    pub scenario: String,
    /// The round, for benchmarks that repeat the comparison.
    pub round: Option<u32>,
}

impl RunKey {
    pub fn label(&self) -> String {
        match self.round {
            Some(r) => format!("{} | {} | round {r}", self.contender, self.scenario),
            None => format!("{} | {}", self.contender, self.scenario),
        }
    }

    pub fn parse(label: &str) -> Option<RunKey> {
        let mut parts = label.split(" | ");
        let contender = parts.next()?.to_string();
        let scenario = parts.next()?.to_string();
        let round = match parts.next() {
            Some(r) => Some(r.strip_prefix("round ")?.parse().ok()?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(RunKey {
            contender,
            scenario,
            round,
        })
    }
}

/// What held a figure down.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    /// The generator: it offered less than requested, or, unpaced, the
    /// receivers took everything it made (its own ceiling is the figure).
    Generator,
    /// The device under test: frames lost at its input ring or inside it.
    Dut,
    /// The receiver that counts delivery: frames lost at its input.
    Sink,
    /// Nothing: the requested rate was offered and delivered within the
    /// loss tolerance.
    None,
    /// Loss beyond the tolerance that no drop counter accounts for.
    Unattributed,
}

impl Limiter {
    pub fn as_str(self) -> &'static str {
        match self {
            Limiter::Generator => "generator",
            Limiter::Dut => "DUT",
            Limiter::Sink => "sink",
            Limiter::None => "-",
            Limiter::Unattributed => "unattributed",
        }
    }
}

/// Frames a counter saw dropped during a trial.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DropCount {
    /// The counter, e.g. "rx_dropped of dut:in0 (input ring full)".
    pub at: String,
    /// Whose limit the drops show.
    pub role: Limiter,
    pub packets: u64,
}

/// Where each party of a run ran: CPUs, and how the placement was made.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// CPUs of the generator's sending threads.
    pub generator_cpus: Vec<usize>,
    /// CPUs of the device under test's receive work; empty when it runs
    /// wherever the sender transmits (veth's default: the sender's CPU).
    pub dut_cpus: Vec<usize>,
    /// CPUs of the counting sink's receive work; empty as for `dut_cpus`.
    pub sink_cpus: Vec<usize>,
    /// How the placement was made and what the lab tunes, in words
    /// (threaded NAPI, offloads), so a reader can repeat it.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Trial {
    /// "max" (unpaced), "saturate" (a set rate above capacity, a search's
    /// first trial), "fixed" (a set rate), "search" (RFC 2544 step),
    /// "latency" (the rate latency is compared at).
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
    /// What held this trial's figure down (see `Limiter`); null in files
    /// written before it was recorded.
    #[serde(default)]
    pub limited_by: Option<Limiter>,
    /// Drop counters that moved during the trial.
    #[serde(default)]
    pub drops: Vec<DropCount>,
    /// Replies that arrived but were wrong (function loads); null where
    /// nothing is checked beyond counting.
    #[serde(default)]
    pub wrong: Option<u64>,
    /// Earlier attempts of this trial that were starved of CPU (see
    /// `Trial::starved`) and repeated; this one stands. Absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A trial whose measured threads waited for a CPU (run queue, or the
/// hypervisor's steal) for more than this share of its time was starved:
/// its figures say what the machine allowed that moment, not what the
/// path can do.
pub const STARVED_SHARE: f64 = 0.05;

impl Trial {
    /// A trial of one second in `phase` that offered and delivered these
    /// rates, nothing else measured (for fixtures and simulations).
    pub fn of_rates(
        phase: &str,
        requested_pps: Option<f64>,
        offered: f64,
        delivered: f64,
    ) -> Trial {
        Trial {
            phase: phase.into(),
            requested_pps,
            duration_s: 1.0,
            offered_packets: offered as u64,
            delivered_packets: delivered as u64,
            offered_pps: offered,
            delivered_pps: delivered,
            offered_bps: 0.0,
            delivered_bps: 0.0,
            loss_ratio: if offered > 0.0 {
                (offered - delivered) / offered
            } else {
                0.0
            },
            cpu: vec![],
            latency: None,
            windows: vec![],
            limited_by: None,
            drops: vec![],
            wrong: None,
            repeated: 0,
        }
    }

    /// Seconds this trial's threads waited for a CPU, over its windows.
    pub fn cpu_wait_s(&self) -> f64 {
        self.windows.iter().map(|w| w.cpu_wait_s).sum()
    }

    /// Starved of CPU (`STARVED_SHARE`): a bench repeats such a trial.
    pub fn starved(&self) -> bool {
        self.duration_s > 0.0 && self.cpu_wait_s() > STARVED_SHARE * self.duration_s
    }

    /// Delivered packets/s in steady state: the median of the 1 s windows
    /// after the first (which holds a policer's or shaper's initial burst),
    /// so neither a burst nor what a queue drains after the trial counts.
    /// The whole trial's figure when it has no such windows.
    pub fn steady_delivered_pps(&self) -> f64 {
        let w: Vec<f64> = self
            .windows
            .iter()
            .skip(1)
            .map(|w| w.delivered_pps)
            .collect();
        if w.is_empty() {
            self.delivered_pps
        } else {
            median(&w)
        }
    }

    /// Busy share (%) of CPU `core` over the trial (NaN if not measured).
    pub fn busy_pct(&self, core: usize) -> f64 {
        self.cpu
            .iter()
            .find(|u| u.core == core)
            .map_or(f64::NAN, |u| 100.0 - u.idle_pct)
    }
}

/// A TCP transfer through the device under test (iperf3): how benchmarks
/// of forwarding paths measure real TCP, with GSO and checksum offload as
/// kernel senders use them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TcpFigure {
    /// Parallel streams (`iperf3 -P`).
    pub streams: u32,
    pub seconds: f64,
    /// Received by the server, all streams together.
    pub gbit_s: f64,
    /// Segments the client retransmitted.
    pub retransmits: u64,
    /// Busy CPU over the transfer, in cores, all cores together: client,
    /// server and the path between them share the machine's CPUs.
    pub cpu_cores: f64,
    /// `cpu_cores / gbit_s`: CPU for each Gbit/s carried.
    pub cpu_cores_per_gbit_s: f64,
    pub cpu: Vec<CoreCpu>,
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
    /// Seconds of the window peregrine's threads waited for a CPU (run
    /// queue, plus the largest hypervisor steal of any CPU): a window short
    /// of its rate by about this share lost it to contention, not pacing.
    #[serde(default)]
    pub cpu_wait_s: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rfc2544 {
    pub loss_tolerance: f64,
    pub resolution_pps: f64,
    pub trial_s: f64,
    /// Highest measured offered rate whose loss stayed within the
    /// tolerance (a lower bound when `generator_limited`).
    pub throughput_pps: f64,
    pub throughput_bps: f64,
    /// The search stopped because the generator could not offer the rate
    /// asked for: the device under test takes at least `throughput_pps`.
    #[serde(default)]
    pub generator_limited: bool,
    /// What the search ran into above `throughput_pps`.
    #[serde(default)]
    pub limited_by: Option<Limiter>,
}

impl<V: Values> ResultFile<V> {
    pub fn new(kind: &str, command: String, runs: Vec<Run<V>>) -> ResultFile<V> {
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

    /// Parses a result file, first checking it against the published schema
    /// so an error names the offending field.
    pub fn from_json(text: &str) -> Result<ResultFile<V>, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let schema: serde_json::Value =
            serde_json::from_str(JSON_SCHEMA).expect("embedded schema is JSON");
        if let Some(first) = schema_errors(&v, &schema).into_iter().next() {
            return Err(format!("not a {SCHEMA} result file: {first}"));
        }
        let r: ResultFile<V> =
            serde_json::from_str(text).map_err(|e| format!("not a peregrine result file: {e}"))?;
        if r.schema != SCHEMA {
            return Err(format!(
                "result schema {:?}, this peregrine reads {SCHEMA:?}",
                r.schema
            ));
        }
        Ok(r)
    }

    /// A table for people: one row per trial, the RFC 2544 figure and the
    /// placement under each run, and a key to the columns at the end.
    /// Labels are never cut: the first column is as wide as the longest.
    pub fn table(&self) -> String {
        let w = self
            .runs
            .iter()
            .map(|r| r.label.chars().count())
            .max()
            .unwrap_or(3)
            .max(3);
        let ncpu = self
            .runs
            .iter()
            .flat_map(|r| r.trials.iter())
            .map(|t| t.cpu.len())
            .max()
            .unwrap_or(0);
        let cpu_head = if ncpu == 0 {
            "cpu busy %".to_string()
        } else {
            let names: Vec<String> = (0..ncpu).map(|c| format!("cpu{c}")).collect();
            format!("busy % {}", names.join("/"))
        };
        let mut out = String::new();
        out.push_str(&format!(
            "{:<w$}  {:<8} {:>10} {:>10} {:>10} {:>10} {:>9}  {:<12} {}\n",
            "run",
            "phase",
            "req Mpps",
            "offer Mpps",
            "deliv Mpps",
            "deliv Gb/s",
            "loss %",
            "limited by",
            cpu_head,
        ));
        for r in &self.runs {
            for t in &r.trials {
                let busy: Vec<String> = t
                    .cpu
                    .iter()
                    .map(|c| format!("{:.0}", 100.0 - c.idle_pct))
                    .collect();
                let (deliv, gbps) = if r.params.sent {
                    (
                        format!("{:.3}", t.delivered_pps / 1e6),
                        format!("{:.3}", t.delivered_bps / 1e9),
                    )
                } else {
                    ("not sent".into(), "-".into())
                };
                out.push_str(&format!(
                    "{:<w$}  {:<8} {:>10} {:>10.3} {:>10} {:>10} {:>9.4}  {:<12} {}\n",
                    r.label,
                    t.phase,
                    t.requested_pps
                        .map(|p| format!("{:.3}", p / 1e6))
                        .unwrap_or_else(|| "max".into()),
                    t.offered_pps / 1e6,
                    deliv,
                    gbps,
                    t.loss_ratio * 100.0,
                    t.limited_by.map(Limiter::as_str).unwrap_or("?"),
                    busy.join("/")
                ));
                if let Some(l) = &t.latency {
                    out.push_str(&format!(
                        "{:<w$}  latency us: min {:.1} p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} ({} samples)\n",
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
                    "{:<w$}  RFC 2544 throughput (loss <= {}): {}\n",
                    r.label,
                    s.loss_tolerance,
                    s.describe()
                ));
            }
            if let Some(p) = &r.placement {
                out.push_str(&format!("{:<w$}  placement: {}\n", "", p.describe()));
            }
        }
        out.push_str(
            "offered: measured at the generator; delivered: counted at the receiver; \
             limited by: with no loss beyond the tolerance, generator (offered short of the request by \
             more than 1%, or unpaced: its own ceiling) or - (rate carried); with loss, DUT or sink \
             (where the drops were counted); \
             busy %: 100 - idle per CPU over the trial\n",
        );
        out
    }
}

impl Rfc2544 {
    /// "2.645 Mpps, 1.354 Gb/s, limited by DUT" or ">= 2.645 Mpps, ...,
    /// generator-limited".
    pub fn describe(&self) -> String {
        if self.generator_limited {
            format!(
                ">= {:.3} Mpps, >= {:.3} Gb/s, generator-limited",
                self.throughput_pps / 1e6,
                self.throughput_bps / 1e9
            )
        } else {
            format!(
                "{:.3} Mpps, {:.3} Gb/s, limited by {}",
                self.throughput_pps / 1e6,
                self.throughput_bps / 1e9,
                self.limited_by.map(Limiter::as_str).unwrap_or("?")
            )
        }
    }
}

impl Placement {
    pub fn describe(&self) -> String {
        let cpus = |c: &[usize]| {
            if c.is_empty() {
                "the sender's CPU".to_string()
            } else {
                let v: Vec<String> = c.iter().map(|x| x.to_string()).collect();
                format!("cpu {}", v.join(","))
            }
        };
        let mut s = format!(
            "generator {}, DUT {}, sink {}",
            cpus(&self.generator_cpus),
            cpus(&self.dut_cpus),
            cpus(&self.sink_cpus)
        );
        for n in &self.notes {
            s.push_str("; ");
            s.push_str(n);
        }
        s
    }
}

/// The published JSON Schema of result files.
pub const JSON_SCHEMA: &str = include_str!("../../../docs/results.schema.json");

/// Checks `v` against the subset of JSON Schema our schema uses (type,
/// const, enum, required, properties, additionalProperties: false, items).
/// Returns one message per violation, each naming the JSON path.
pub fn schema_errors(v: &serde_json::Value, schema: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    check_node(v, schema, "$", &mut out);
    out
}

fn type_ok(v: &serde_json::Value, t: &str) -> bool {
    use serde_json::Value as V;
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => matches!(v, V::Null),
        _ => false,
    }
}

fn check_node(v: &serde_json::Value, s: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    if let Some(t) = s.get("type") {
        let types: Vec<&str> = match t {
            serde_json::Value::String(x) => vec![x.as_str()],
            serde_json::Value::Array(xs) => xs.iter().filter_map(|x| x.as_str()).collect(),
            _ => vec![],
        };
        if !types.iter().any(|t| type_ok(v, t)) {
            out.push(format!(
                "{path}: expected {}, found {v}",
                types.join(" or ")
            ));
            return;
        }
    }
    if let Some(c) = s.get("const") {
        if v != c {
            out.push(format!("{path}: expected {c}, found {v}"));
        }
    }
    if let Some(allowed) = s.get("enum").and_then(|e| e.as_array()) {
        if !allowed.contains(v) {
            out.push(format!(
                "{path}: {v} is not one of {}",
                serde_json::Value::from(allowed.clone())
            ));
        }
    }
    if let (Some(obj), Some(props)) = (
        v.as_object(),
        s.get("properties").and_then(|p| p.as_object()),
    ) {
        for r in s
            .get("required")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(k) = r.as_str() {
                if !obj.contains_key(k) {
                    out.push(format!("{path}: missing field {k:?}"));
                }
            }
        }
        let closed = s.get("additionalProperties") == Some(&serde_json::Value::Bool(false));
        for (k, val) in obj {
            match props.get(k) {
                Some(ps) => check_node(val, ps, &format!("{path}.{k}"), out),
                None if closed => out.push(format!("{path}: unknown field {k:?}")),
                None => {}
            }
        }
    }
    if let (Some(arr), Some(items)) = (v.as_array(), s.get("items")) {
        for (i, x) in arr.iter().enumerate() {
            check_node(x, items, &format!("{path}[{i}]"), out);
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count); 0 for
/// none.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> ResultFile {
        let trial = Trial {
            phase: "max".into(),
            requested_pps: None,
            duration_s: 1.0,
            offered_packets: 10,
            delivered_packets: 9,
            offered_pps: 10.0,
            delivered_pps: 9.0,
            offered_bps: 5120.0,
            delivered_bps: 4608.0,
            loss_ratio: 0.1,
            cpu: vec![CoreCpu {
                core: 0,
                user_pct: 1.0,
                system_pct: 2.0,
                softirq_pct: 3.0,
                irq_pct: 0.0,
                idle_pct: 94.0,
            }],
            latency: Some(Latency {
                count: 9,
                min_ns: 1,
                p50_ns: 2,
                p90_ns: 3,
                p99_ns: 4,
                p999_ns: 5,
                max_ns: 6,
            }),
            windows: vec![Window {
                t_s: 1.0,
                seconds: 1.0,
                offered_pps: 10.0,
                delivered_pps: 9.0,
                cpu_wait_s: 0.002,
            }],
            limited_by: Some(Limiter::Sink),
            drops: vec![DropCount {
                at: "rx_dropped of b:eth0".into(),
                role: Limiter::Sink,
                packets: 1,
            }],
            wrong: Some(0),
            repeated: 1, // the schema knows the field (CI found it did not)
        };
        let run = Run {
            label: "x".into(),
            params: RunParams {
                backend: "xdp".into(),
                ip: "ipv4".into(),
                frame_size: "64".into(),
                mean_frame_bytes: 64.0,
                flows: 1,
                threads: 1,
                sink: "s".into(),
                sent: true,
            },
            trials: vec![
                trial.clone(),
                Trial {
                    latency: None,
                    requested_pps: Some(5.0),
                    ..trial
                },
            ],
            rfc2544: Some(Rfc2544 {
                loss_tolerance: 0.0,
                resolution_pps: 1.0,
                trial_s: 1.0,
                throughput_pps: 5.0,
                throughput_bps: 2560.0,
                generator_limited: false,
                limited_by: Some(Limiter::Dut),
            }),
            placement: Some(Placement {
                generator_cpus: vec![0],
                dut_cpus: vec![1],
                sink_cpus: vec![1],
                notes: vec!["threaded NAPI".into()],
            }),
            ..Default::default()
        };
        ResultFile::new(
            "test",
            "peregrine test".into(),
            vec![
                run.clone(),
                Run {
                    rfc2544: None,
                    placement: None,
                    tcp: Some(TcpFigure {
                        streams: 8,
                        seconds: 2.0,
                        gbit_s: 9.5,
                        retransmits: 3,
                        cpu_cores: 1.9,
                        cpu_cores_per_gbit_s: 0.2,
                        cpu: run.trials[0].cpu.clone(),
                    }),
                    ..run
                },
            ],
        )
    }

    #[test]
    fn results_match_the_published_schema() {
        let schema: serde_json::Value = serde_json::from_str(JSON_SCHEMA).unwrap();
        let r = example();
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(schema_errors(&v, &schema), Vec::<String>::new());
        assert_eq!(ResultFile::from_json(&r.to_json()).unwrap(), r);
    }

    #[test]
    fn schema_names_what_is_wrong() {
        let schema: serde_json::Value = serde_json::from_str(JSON_SCHEMA).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&example().to_json()).unwrap();
        v["runs"][0]["trials"][0]["surprise"] = 1.into();
        v["runs"][1]["params"]["flows"] = "many".into();
        v["machine"].as_object_mut().unwrap().remove("cpus");
        let e = schema_errors(&v, &schema);
        assert!(
            e.iter()
                .any(|m| m.contains("$.runs[0].trials[0]: unknown field \"surprise\"")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.contains("$.runs[1].params.flows: expected integer")),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|m| m.contains("$.machine: missing field \"cpus\"")),
            "{e:?}"
        );
        assert!(ResultFile::<NoValues>::from_json("{}").is_err());
    }
}
