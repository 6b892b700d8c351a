//! `peregrine bench netmodes`: seed 003's question (PACKET_MMAP against UDP
//! sockets across container network modes) asked again with every path
//! (udp, mmsg, mmap, afxdp) in every mode this kernel builds, in one run,
//! with repeats. Its three scenarios: I, datagrams sent (2..10 million in
//! the seed) at 500 Mbit/s and 64 B; II, offered rate (200..800 Mbit/s in
//! the seed) and on to saturation (unpaced); III, payload size (64..1024 B
//! in the seed, to 1472 here) at 500 Mbit/s. Every run's receiver checks
//! count, order and payload; lost datagrams are attributed to the sender,
//! the path's devices and queues, or the receiver's socket or ring.
use std::time::Duration;

use anyhow::Result;
use peregrine_lab::iopath::IoPath;
use peregrine_lab::netmodes::{self, run_pair, ModeLab, NetMode, PairRun, PairSpec};
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_lab::results::{
    median, DropCount, Limiter, Placement, ResultFile, Run, RunKey, RunParams, Trial, Values,
};

use peregrine_lab::plot::{Chart, Figure, Series};
use serde::{Deserialize, Serialize};

use crate::common::{command_line, duration, ResultOutput};
use crate::report::Report;
use crate::RateSetting;

/// The seed's scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Datagrams sent, at `rate` and 64 B.
    Count,
    /// Offered rate, then unpaced.
    Rate,
    /// Payload size, at `rate`.
    Size,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Count, Scenario::Rate, Scenario::Size];

    /// "I", "II", "III": the seed's names.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Count => "I",
            Scenario::Rate => "II",
            Scenario::Size => "III",
        }
    }
}

const DEFAULT_PATHS: &str = "udp,mmsg,mmsg-gso,mmap,afxdp";
const DEFAULT_MODES: &str = "host,bridge,macvlan,overlay,same-host";
const DEFAULT_SCENARIOS: &str = "I,II,III";
const DEFAULT_COUNTS: &str = "2M,4M,6M,8M,10M";
const DEFAULT_RATES: &str = "200Mbit,400Mbit,600Mbit,800Mbit,unpaced";
const DEFAULT_SIZES: &str = "64,128,256,512,1024,1472";

/// `peregrine bench netmodes`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-netmodes")))]
pub struct NetmodesBenchConfig {
    /// I/O paths compared, comma-separated (udp, mmsg, mmsg-gso, mmap, afxdp).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_PATHS)]
    pub paths: Vec<IoPath>,
    /// Network modes, comma-separated (host, bridge, macvlan, overlay, same-host).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_MODES)]
    pub modes: Vec<NetMode>,
    /// Scenarios, comma-separated: I (count), II (rate), III (size).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SCENARIOS)]
    pub scenarios: Vec<String>,
    /// Scenario I: datagrams per run (the seed: 2M..10M).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_COUNTS)]
    pub counts: Vec<RateSetting>,
    /// Scenario II: offered rates (bit/s of frames with FCS), then
    /// "unpaced" for saturation.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_RATES)]
    pub rates: Vec<String>,
    /// Scenario III: UDP payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SIZES)]
    pub sizes: Vec<usize>,
    /// Rate of scenarios I and III (the seed: 500 Mbit/s).
    #[arg(long, default_value = "500Mbit")]
    pub rate: RateSetting,
    /// Datagrams per run in scenarios II and III (the seed: 1M).
    #[arg(long, default_value = "1M")]
    pub count: RateSetting,
    /// Longest a run sends.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub max_run: Duration,
    /// Repeats of every point; paths alternate within each.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Send IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// A short run for CI: 20k datagrams, two rates, two sizes, one repeat
    /// (overrides --counts, --rates, --sizes, --count and --repeats).
    #[arg(long)]
    pub quick: bool,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// The matrix the flags ask for, checked, with --quick applied.
struct Matrix {
    scenarios: Vec<Scenario>,
    /// Scenario I: datagrams per run.
    counts: Vec<u64>,
    /// Scenario II: offered rates, bit/s of Ethernet frames with FCS; None
    /// is unpaced (saturation).
    rates: Vec<Option<f64>>,
    /// Scenario III: UDP payload sizes.
    sizes: Vec<usize>,
    /// Rate of scenarios I and III, bit/s.
    rate: f64,
    /// Datagrams per run in scenarios II and III.
    count: u64,
    repeats: u32,
}

impl NetmodesBenchConfig {
    fn matrix(&self) -> Result<Matrix> {
        let mut scenarios = Vec::new();
        for s in &self.scenarios {
            match Scenario::ALL
                .into_iter()
                .find(|x| x.name() == s.to_uppercase())
            {
                Some(x) => scenarios.push(x),
                None => bad_setting!("--scenarios {s}: expected I, II or III"),
            }
        }
        let mut rates = Vec::new();
        for r in &self.rates {
            if r == "unpaced" {
                rates.push(None);
                continue;
            }
            match r.parse::<RateSetting>() {
                Ok(RateSetting::Bps(b)) => rates.push(Some(b)),
                _ => bad_setting!("--rates {r}: give bit rates (200Mbit) or unpaced"),
            }
        }
        let rate = match self.rate {
            RateSetting::Bps(b) => b,
            r => bad_setting!("--rate {r}: give a bit rate (500Mbit)"),
        };
        let mut counts = Vec::new();
        for &c in &self.counts {
            counts.push(count_of("--counts", c)?);
        }
        let count = count_of("--count", self.count)?;
        if self.quick {
            return Ok(Matrix {
                scenarios,
                counts: vec![20_000],
                rates: vec![Some(200e6), None],
                sizes: vec![64, 1472],
                rate,
                count: 20_000,
                repeats: 1,
            });
        }
        Ok(Matrix {
            scenarios,
            counts,
            rates,
            sizes: self.sizes.clone(),
            rate,
            count,
            repeats: self.repeats.max(1),
        })
    }
}

/// A count given as a plain or scaled number (2M, 500k).
fn count_of(flag: &str, r: RateSetting) -> Result<u64> {
    match r {
        RateSetting::Pps(p) if p >= 1.0 => Ok(p.round() as u64),
        _ => bad_setting!("{flag} {r}: give a count (20000, 2M)"),
    }
}

/// One point of the matrix.
#[derive(Debug, Clone, Copy)]
struct Point {
    scenario: Scenario,
    x: f64,
    payload: usize,
    rate_bps: Option<f64>,
    count: u64,
}

impl Point {
    fn scenario_label(&self) -> String {
        let x = match self.scenario {
            Scenario::Count => format!("{} datagrams", self.count),
            Scenario::Rate => match self.rate_bps {
                Some(b) => format!("{} Mbit/s", b / 1e6),
                None => "unpaced".into(),
            },
            Scenario::Size => format!("{} B", self.payload),
        };
        format!("{} {x}", self.scenario.name())
    }
}

fn points(cfg: &Matrix) -> Vec<Point> {
    let mut v = Vec::new();
    for s in &cfg.scenarios {
        match s {
            Scenario::Count => v.extend(cfg.counts.iter().map(|&c| Point {
                scenario: *s,
                x: c as f64,
                payload: 64,
                rate_bps: Some(cfg.rate),
                count: c,
            })),
            Scenario::Rate => v.extend(cfg.rates.iter().map(|&r| Point {
                scenario: *s,
                x: r.unwrap_or(0.0) / 1e6,
                payload: 64,
                rate_bps: r,
                count: cfg.count,
            })),
            Scenario::Size => v.extend(cfg.sizes.iter().map(|&p| Point {
                scenario: *s,
                x: p as f64,
                payload: p,
                rate_bps: Some(cfg.rate),
                count: cfg.count,
            })),
        }
    }
    v
}

/// Ethernet frame bytes (FCS included) of a datagram of `payload` bytes.
fn frame_bytes(payload: usize, v6: bool) -> f64 {
    (payload + 14 + if v6 { 48 } else { 28 } + 4) as f64
}

pub fn bench_netmodes(cfg: NetmodesBenchConfig) -> Result<()> {
    let m = cfg.matrix()?;
    if cfg.paths.is_empty() || cfg.modes.is_empty() || m.scenarios.is_empty() {
        bad_setting!("bench netmodes needs at least one path, one mode and one scenario");
    }
    for &s in &m.sizes {
        let (lo, hi) = peregrine_lab::iopath::payload_limits(cfg.ipv6);
        if s < lo || s > hi {
            bad_setting!("--sizes {s}: payloads run {lo}..={hi} bytes");
        }
    }
    let unavailable = netmodes::unavailable_modes();
    for u in &unavailable {
        eprintln!("mode {} is unavailable here: {}", u.mode, u.reason);
    }
    let pts = points(&m);
    let total = cfg.modes.len() * pts.len() * cfg.paths.len() * m.repeats as usize;
    let mut done = 0;
    let mut runs = Vec::new();
    for &mode in &cfg.modes {
        let ml = ModeLab::up(mode)?;
        for p in &pts {
            if let Err(e) = ml.check_fits(p.payload, cfg.ipv6) {
                eprintln!("skipping {}: {e}", p.scenario_label());
                done += cfg.paths.len() * m.repeats as usize;
                continue;
            }
            for round in 1..=m.repeats {
                // Paths alternate within a round, so drift on a shared
                // machine hits each alike.
                for &path in &cfg.paths {
                    peregrine_host::signals::check()?;
                    done += 1;
                    let fb = frame_bytes(p.payload, cfg.ipv6);
                    let spec = PairSpec {
                        path,
                        payload_len: p.payload,
                        v6: cfg.ipv6,
                        rate: match p.rate_bps {
                            Some(b) => Rate::Pps(b / (fb * 8.0)),
                            None => Rate::Max,
                        },
                        limit: Limit {
                            count: Some(p.count),
                            duration: Some(cfg.max_run),
                        },
                        cpus: Some((0, 1)),
                    };
                    let r = run_pair(&ml, &spec)?;
                    eprintln!(
                        "[{done}/{total}] {mode} {path} {}: sent {} delivered {} ({:.0} kpps), lost {}",
                        p.scenario_label(),
                        r.sent.sent,
                        r.received.packets,
                        r.delivered_pps() / 1e3,
                        r.lost
                    );
                    runs.push(to_run(&r, p, round, &spec, fb, &unavailable));
                }
            }
        }
    }
    let result = ResultFile::new(BenchNetmodes::KIND, command_line(), runs);
    cfg.output
        .write_with_table::<BenchNetmodes>(&result, &table(&result, &cfg.paths))
}

fn to_run(
    r: &PairRun,
    p: &Point,
    round: u32,
    spec: &PairSpec,
    fb: f64,
    unavailable: &[netmodes::Unavailable],
) -> Run<NetmodeValues> {
    let el = r.sent.elapsed_s.max(1e-9);
    // Offered over the sender's time, delivered over the delivery window.
    let offered_pps = r.sent.sent as f64 / el;
    let delivered_pps = r.delivered_pps();
    let requested = spec.rate.pps();
    let drops = [
        (
            "sender (send errors, ENOBUFS)",
            Limiter::Generator,
            r.loss.sender,
        ),
        (
            "path (interface and backlog drop counters)",
            Limiter::Dut,
            r.loss.path,
        ),
        (
            "receiver (socket buffer or ring full)",
            Limiter::Sink,
            r.loss.receiver,
        ),
        ("no counter", Limiter::Unattributed, r.loss.unattributed),
    ]
    .into_iter()
    .filter(|d| d.2 > 0)
    .map(|(at, role, packets)| DropCount {
        at: at.into(),
        role,
        packets,
    })
    .collect();
    let trial = Trial {
        phase: if requested.is_some() { "fixed" } else { "max" }.into(),
        requested_pps: requested,
        duration_s: r.window_s,
        offered_packets: r.sent.sent,
        delivered_packets: r.received.packets,
        offered_pps,
        delivered_pps,
        offered_bps: offered_pps * fb * 8.0,
        delivered_bps: delivered_pps * fb * 8.0,
        loss_ratio: r.lost as f64 / r.sent.sent.max(1) as f64,
        cpu: Vec::new(),
        latency: r.received.latency.clone(),
        windows: Vec::new(),
        limited_by: Some(limiter(r, requested, offered_pps)),
        drops,
        wrong: Some(r.received.corrupt + r.received.duplicates + r.received.out_of_order),
        repeated: 0,
    };
    let values = NetmodeValues {
        x: p.x,
        delivered_pps,
        delivered_gbit_s: delivered_pps * fb * 8.0 / 1e9,
        cpu_ns_per_packet: r.cpu_ns_per_packet(),
        machine_cpu_ns_per_packet: r.machine_cpu_ns_per_packet(),
        sender_cpu_s: r.sent.cpu_s,
        receiver_cpu_s: r.received.cpu_s,
        lost: r.lost as f64,
        lost_sender: r.loss.sender as f64,
        lost_path: r.loss.path as f64,
        lost_receiver: r.loss.receiver as f64,
        lost_unattributed: r.loss.unattributed as f64,
        out_of_order: r.received.out_of_order as f64,
        duplicates: r.received.duplicates as f64,
        corrupt: r.received.corrupt as f64,
        pacing_error_pct: requested.map(|q| (offered_pps - q) / q * 100.0),
    };
    let mut notes = vec![
        format!("mode {}: {}", r.mode, mode_words(r.mode)),
        format!("receiver: {}", r.received.note),
        "sender thread on CPU 0, receiver thread on CPU 1; veth receive work runs on the sending CPU".into(),
    ];
    notes.extend(
        unavailable
            .iter()
            .map(|u| format!("mode {} unavailable: {}", u.mode, u.reason)),
    );
    Run {
        label: RunKey {
            contender: format!("{} {}", r.path, r.mode),
            scenario: p.scenario_label(),
            round: Some(round),
        }
        .label(),
        params: RunParams {
            backend: r.path.as_str().into(),
            ip: if spec.v6 { "ipv6" } else { "ipv4" }.into(),
            frame_size: format!("{}", fb as usize),
            mean_frame_bytes: fb,
            flows: 1,
            threads: 1,
            sink: format!("{} receiver in mode {}", r.path, r.mode),
            sent: true,
        },
        trials: vec![trial],
        rfc2544: None,
        placement: Some(Placement {
            generator_cpus: vec![0],
            dut_cpus: vec![],
            sink_cpus: vec![1],
            notes,
        }),
        tcp: None,
        values,
    }
}

/// What held a run down: with no loss, the sender if it offered less
/// than asked (or ran unpaced: its own ceiling), else nothing; with loss,
/// the place that counted most of it.
fn limiter(r: &PairRun, requested: Option<f64>, offered_pps: f64) -> Limiter {
    if r.lost == 0 {
        return match requested {
            Some(q) if offered_pps >= q * 0.99 => Limiter::None,
            _ => Limiter::Generator,
        };
    }
    let l = &r.loss;
    [
        (l.sender, Limiter::Generator),
        (l.path, Limiter::Dut),
        (l.receiver, Limiter::Sink),
        (l.unattributed, Limiter::Unattributed),
    ]
    .into_iter()
    .max_by_key(|x| x.0)
    .map(|x| x.1)
    .unwrap_or(Limiter::Unattributed)
}

fn mode_words(m: NetMode) -> &'static str {
    match m {
        NetMode::Host => "two hosts on one veth",
        NetMode::Bridge => {
            "containers on Linux bridges, NAT port publishing (nftables DNAT, masquerade)"
        }
        NetMode::Macvlan => "macvlan (bridge mode) on each host's parent veth",
        NetMode::Overlay => "VXLAN + bridge on each host over an underlay veth",
        NetMode::SameHost => "two containers on one bridge",
    }
}

/// A run of `bench netmodes`.
type NRun = Run<NetmodeValues>;

/// A run's contender ("mmap host") split, its scenario label, a value.
fn keyed(r: &ResultFile<NetmodeValues>) -> Vec<(String, String, String, &NRun)> {
    r.runs
        .iter()
        .filter_map(|run| {
            let k = RunKey::parse(&run.label)?;
            let (path, mode) = k.contender.split_once(' ')?;
            Some((path.to_string(), mode.to_string(), k.scenario, run))
        })
        .collect()
}

/// Median of `value` over the repeats of (path, mode, scenario label).
fn med(
    rows: &[(String, String, String, &NRun)],
    path: &str,
    mode: &str,
    sc: &str,
    value: impl Fn(&NetmodeValues) -> Option<f64>,
) -> Option<f64> {
    let v: Vec<f64> = rows
        .iter()
        .filter(|r| r.0 == path && r.1 == mode && r.2 == sc)
        .filter_map(|r| value(&r.3.values))
        .collect();
    (!v.is_empty()).then(|| median(&v))
}

/// Per scenario: delivered kpps per path and mode (medians over repeats),
/// the ratios the issue asks for, then loss by place, CPU per datagram and
/// latency.
pub fn table(r: &ResultFile<NetmodeValues>, paths: &[IoPath]) -> String {
    let rows = keyed(r);
    let mut out = String::new();
    let mut scenarios: Vec<String> = Vec::new();
    for row in &rows {
        if !scenarios.contains(&row.2) {
            scenarios.push(row.2.clone());
        }
    }
    let mut modes: Vec<String> = Vec::new();
    for row in &rows {
        if !modes.contains(&row.1) {
            modes.push(row.1.clone());
        }
    }
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    out.push_str("delivered kpps (median of repeats); ratios of delivered pps\n");
    out.push_str(&format!("{:<22} {:<10}", "scenario", "mode"));
    for p in paths {
        out.push_str(&format!(" {:>9}", p.as_str()));
    }
    out.push_str(&format!(
        " {:>9} {:>9} {:>10}\n",
        "mmap/udp", "mmap/mmsg", "afxdp/mmap"
    ));
    for sc in &scenarios {
        for m in &modes {
            let v = |p: &str| med(&rows, p, m, sc, |v| Some(v.delivered_pps));
            if paths.iter().all(|p| v(p.as_str()).is_none()) {
                continue;
            }
            out.push_str(&format!("{sc:<22} {m:<10}"));
            for p in paths {
                let cell = v(p.as_str())
                    .map(|x| format!("{:.1}", x / 1e3))
                    .unwrap_or("-".into());
                out.push_str(&format!(" {cell:>9}"));
            }
            out.push_str(&format!(
                " {:>9} {:>9} {:>10}\n",
                ratio(v("mmap"), v("udp")),
                ratio(v("mmap"), v("mmsg")),
                ratio(v("afxdp"), v("mmap"))
            ));
        }
    }
    out.push_str("\nper path: pacing error %, lost (sender/path/receiver/unattributed), CPU ns per delivered datagram (sender + receiver threads; machine-wide from /proc/stat), latency p50/p99 us\n");
    out.push_str(&format!(
        "{:<22} {:<10} {:<8} {:>8} {:>24} {:>14} {:>16}\n",
        "scenario", "mode", "path", "pace %", "lost s/p/r/u", "ns/pkt thr/all", "p50/p99 us"
    ));
    for sc in &scenarios {
        for m in &modes {
            for p in paths {
                let p = p.as_str();
                let Some(run) = rows
                    .iter()
                    .find(|x| x.0 == p && &x.1 == m && &x.2 == sc)
                    .map(|x| x.3)
                else {
                    continue;
                };
                let g = |k: fn(&NetmodeValues) -> f64| {
                    med(&rows, p, m, sc, |v| Some(k(v))).unwrap_or(0.0)
                };
                let pace = med(&rows, p, m, sc, |v| v.pacing_error_pct)
                    .map(|e| format!("{e:+.2}"))
                    .unwrap_or("-".into());
                let lost = format!(
                    "{}/{}/{}/{}",
                    g(|v| v.lost_sender),
                    g(|v| v.lost_path),
                    g(|v| v.lost_receiver),
                    g(|v| v.lost_unattributed)
                );
                let lat = run
                    .trials
                    .first()
                    .and_then(|t| t.latency.as_ref())
                    .map(|l| format!("{:.0}/{:.0}", l.p50_ns as f64 / 1e3, l.p99_ns as f64 / 1e3))
                    .unwrap_or("-".into());
                let cpu = format!(
                    "{:.0}/{:.0}",
                    g(|v| v.cpu_ns_per_packet),
                    g(|v| v.machine_cpu_ns_per_packet)
                );
                out.push_str(&format!(
                    "{sc:<22} {m:<10} {p:<8} {pace:>8} {lost:>24} {cpu:>14} {lat:>16}\n"
                ));
            }
        }
    }
    if let Some(n) = r.runs.first().and_then(|x| x.placement.as_ref()) {
        for note in n.notes.iter().filter(|n| n.contains("unavailable")) {
            out.push_str(&format!("{note}\n"));
        }
    }
    out
}

/// What a run measured beside its trial, named in the file as before (the
/// keys of `values`, in their order).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetmodeValues {
    /// Datagrams corrupted on the way.
    pub corrupt: f64,
    /// CPU ns per delivered datagram, sender and receiver threads.
    pub cpu_ns_per_packet: f64,
    pub delivered_gbit_s: f64,
    pub delivered_pps: f64,
    /// Datagrams received twice.
    pub duplicates: f64,
    /// Datagrams lost, all places together, then by place.
    pub lost: f64,
    pub lost_path: f64,
    pub lost_receiver: f64,
    pub lost_sender: f64,
    pub lost_unattributed: f64,
    /// CPU ns per delivered datagram, machine-wide (/proc/stat).
    pub machine_cpu_ns_per_packet: f64,
    pub out_of_order: f64,
    /// Offered over requested rate, % off (paced runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_error_pct: Option<f64>,
    pub receiver_cpu_s: f64,
    pub sender_cpu_s: f64,
    /// What the scenario varies: datagrams sent (I), the requested rate
    /// (II), the UDP payload (III).
    pub x: f64,
}

impl Values for NetmodeValues {
    fn is_empty(&self) -> bool {
        *self == NetmodeValues::default()
    }
}

/// `bench netmodes`'s result files: delivered rate per path and mode.
pub struct BenchNetmodes;

/// The figures, one per scenario of seed 003: (name, scenario, x axis).
pub const SCENARIO_FIGURES: [(&str, &str, &str); 3] = [
    ("scenario-i", "I", "datagrams sent"),
    ("scenario-ii", "II", "offered Mbit/s (measured)"),
    ("scenario-iii", "III", "UDP payload (bytes)"),
];

impl Report for BenchNetmodes {
    const KIND: &'static str = "bench-netmodes";
    type Values = NetmodeValues;

    /// One chart per scenario; rates and timelines say nothing here.
    fn figures(r: &ResultFile<NetmodeValues>) -> Vec<Figure> {
        SCENARIO_FIGURES
            .iter()
            .filter_map(|&(name, scenario, x_desc)| {
                let panels = scenario_panels(r, scenario)?;
                Some(Figure {
                    name,
                    chart: Chart::Panels {
                        title: format!("{}: scenario {scenario}, delivered kpps", r.kind),
                        axes: (x_desc.into(), "delivered kpps".into()),
                        panels,
                    },
                })
            })
            .collect()
    }
}

/// Scenario `name`'s runs ("PATH MODE | I|II|III ... | round N"):
/// delivered kpps per path and mode (median of rounds) against what the
/// scenario varies (scenario II: the offered rate as measured, so the
/// unpaced run sits where it saturated), one panel per mode with a line
/// per path (twenty-five lines on one chart cannot be told apart); None
/// without runs.
fn scenario_panels(r: &ResultFile<NetmodeValues>, name: &str) -> Option<Vec<(String, Series)>> {
    // (contender, point label) -> (xs, ys) over rounds.
    let mut points: Vec<(String, String, Vec<f64>, Vec<f64>)> = Vec::new();
    for run in &r.runs {
        let Some(key) = RunKey::parse(&run.label) else {
            continue;
        };
        if key.scenario.split(' ').next() != Some(name) {
            continue;
        }
        let Some(t) = run.trials.first() else {
            continue;
        };
        let x = if name == "II" {
            t.offered_bps / 1e6
        } else {
            run.values.x
        };
        let at = points
            .iter()
            .position(|p| p.0 == key.contender && p.1 == key.scenario);
        let i = at.unwrap_or_else(|| {
            points.push((key.contender.clone(), key.scenario.clone(), vec![], vec![]));
            points.len() - 1
        });
        points[i].2.push(x);
        points[i].3.push(t.delivered_pps / 1e3);
    }
    if points.is_empty() {
        return None;
    }
    let mut series: Series = Vec::new();
    for (contender, _, xs, ys) in &points {
        let p = (median(xs), median(ys));
        match series.iter_mut().find(|s| &s.0 == contender) {
            Some(s) => s.1.push(p),
            None => series.push((contender.clone(), vec![p])),
        }
    }
    let mut modes: Vec<&str> = Vec::new();
    for (name, _) in &series {
        let mode = name.split_once(' ').map_or("", |(_, m)| m);
        if !modes.contains(&mode) {
            modes.push(mode);
        }
    }
    let panels = modes
        .iter()
        .map(|mode| {
            let of_mode: Series = series
                .iter()
                .filter(|(name, _)| name.split_once(' ').map_or("", |(_, m)| m) == *mode)
                .map(|(name, pts)| {
                    let path = name.split_once(' ').map_or(name.as_str(), |(p, _)| p);
                    (path.to_string(), pts.clone())
                })
                .collect();
            (mode.to_string(), of_mode)
        })
        .collect();
    Some(panels)
}
