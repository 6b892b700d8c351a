//! `peregrine bench qos`: the policer (tc and XDP hooks) against tc HTB with
//! the same rate and burst, side by side in one run, on gen -> dut -> sink.
//!
//! - Rate accuracy: UDP (the live-frame generator, 1000 B frames) offered
//!   at twice each rate; what the sink counts over the rate, in Ethernet
//!   bits without FCS (what both the policer and HTB count).
//! - CPU: the busy share of the DUT's CPU (its ingress NAPI thread pinned
//!   there, where the policer, forwarding and HTB all run) at the same
//!   offered load, and each mechanism's own cost: that share less the one
//!   of plain Linux forwarding offered the rate itself (the same delivered
//!   load without QoS).
//! - TCP: iperf3 goodput through each at the rate, over the rate.
//! - Scale: the XDP policer's saturation throughput (64 B frames) with
//!   one rule and with `rules` rules (none of which exceeds).
//!
//! HTB is configured with `tc` (iproute2), as its users do; the policer
//! through peregrine-qos. Every contender is removed after its run.
use std::net::IpAddr;
use std::time::Duration;

use anyhow::Result;
use peregrine_bpf::policer::{Exceed, Match, Rate as PolicerRate, Rule};
use peregrine_host::{netns, signals};
use peregrine_lab::compare::median;
use peregrine_lab::pacing::Rate;
use peregrine_lab::plot::{self, bars_by_key, BarGroup, Chart};
use peregrine_lab::results::{Placement, ResultFile, Run, RunKey, RunParams, Trial};
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::{Lab, Lifetime};
use peregrine_qos::attach as policer;
use peregrine_testbed::gen::FrameSizes;

use crate::common::{
    builtin_topology, command_line, duration, frame_for, params, place, progress_line, shown_trial,
    tc, trial_setup, ChainPath, PlacementConfig, RateSetting, ResultOutput,
};
pub use crate::qos_scale::{ScalePoint, ScalePoints};
pub use crate::qos_sched::SchedValues;
use crate::report::Report;
use crate::tcp::{self, TcpTransfer};

/// `peregrine bench qos`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-qos")))]
pub struct QosBenchConfig {
    /// Rates compared (bit/s: 10Mbit, 1Gbit), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10Mbit,100Mbit,1Gbit")]
    pub rates: Vec<RateSetting>,
    /// Length of each UDP trial (4, 4s); accuracy is read from its 1 s
    /// windows after the first.
    #[arg(long, default_value = "4s", value_parser = duration)]
    pub trial: Duration,
    /// Length of each iperf3 TCP transfer.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub tcp_time: Duration,
    /// iperf3 TCP streams of the goodput runs (each count at every rate),
    /// comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    pub tcp_streams: Vec<u32>,
    /// Rules in the scale comparison (against one rule).
    #[arg(long, default_value_t = 100_000)]
    pub rules: u32,
    /// Rounds; contenders alternate within each round. Ratios use medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// policer, scheduler, scale (the scheduler part's scale scenario
    /// alone) or all.
    #[arg(long, default_value = "all")]
    pub part: QosPart,
    /// The scheduler part's link rate (its root class; bit/s): low enough
    /// that the DUT's CPU is not what limits either contender.
    #[arg(long, default_value = "200Mbit")]
    pub sched_link: RateSetting,
    /// The scheduler part's scale points, CLASSES:RULES comma-separated
    /// (classes up to 16383, rules up to 120000), or none: the htb
    /// engine, tc htb with one u32 filter per rule, and the AF_XDP
    /// scheduler (up to 63 classes) at 64 B, unpaced.
    #[arg(long, default_value = crate::qos_scale::DEFAULT_POINTS)]
    pub scale_points: ScalePoints,
    #[command(flatten)]
    pub placement: PlacementConfig,
    #[command(flatten)]
    pub output: ResultOutput,
}

impl QosBenchConfig {
    /// The rates compared and the scheduler's link rate, bit/s, checked.
    fn bit_rates(&self) -> Result<(Vec<u64>, u64)> {
        let mut rates = Vec::new();
        for r in &self.rates {
            match r {
                RateSetting::Bps(b) if *b >= 1e3 => rates.push(b.round() as u64),
                _ => bad_setting!("--rates {r}: give bit rates (10Mbit, 1Gbit)"),
            }
        }
        match self.sched_link {
            RateSetting::Bps(b) if b >= 1e6 => Ok((rates, b.round() as u64)),
            r => bad_setting!("--sched-link {r}: give a bit rate of at least 1Mbit"),
        }
    }
}

/// `bench qos --part`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosPart {
    Policer,
    Scheduler,
    /// The scheduler part's scale scenario alone.
    Scale,
    All,
}

impl std::str::FromStr for QosPart {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<QosPart, String> {
        match s {
            "policer" => Ok(QosPart::Policer),
            "scheduler" => Ok(QosPart::Scheduler),
            "scale" => Ok(QosPart::Scale),
            "all" => Ok(QosPart::All),
            _ => Err(format!(
                "part {s:?}: expected policer, scheduler, scale or all"
            )),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    /// tc HTB on the egress port, Linux forwarding.
    Htb,
    PolicerTc,
    PolicerXdp,
    /// The tc policer with peregrine's tc router behind it on the same
    /// ports (tcx runs the policer first): what conforms is forwarded in
    /// BPF too, what exceeds costs only the policer.
    PolicerTcRouter,
    /// No QoS, Linux forwarding, offered the rate itself (1x): the cost of
    /// carrying what the others deliver, so each one's own cost can be read
    /// as the difference (UDP runs only).
    Baseline,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::Htb => "tc htb",
            Contender::PolicerTc => "policer (tc)",
            Contender::PolicerXdp => "policer (xdp)",
            Contender::PolicerTcRouter => "policer + router (tc)",
            Contender::Baseline => "no qos (offered 1x)",
        }
    }
}

const CONTENDERS: [Contender; 4] = [
    Contender::Htb,
    Contender::PolicerTc,
    Contender::PolicerXdp,
    Contender::PolicerTcRouter,
];

/// The UDP runs' contenders: the QoS ones, then the baseline.
const UDP_CONTENDERS: [Contender; 5] = [
    Contender::Htb,
    Contender::PolicerTc,
    Contender::PolicerXdp,
    Contender::PolicerTcRouter,
    Contender::Baseline,
];

/// UDP frames of the accuracy runs, FCS included; the policer and HTB
/// count them 4 bytes shorter.
const FRAME: usize = 1000;
const COUNTED: f64 = (FRAME - 4) as f64;

/// The burst both get: 10 ms of the rate, at least 16 KB.
fn burst_bytes(rate: u64) -> u64 {
    (rate / 8 / 100).max(16_000)
}

/// A contender on the DUT, removed when dropped: HTB's qdisc, the
/// policer, and the router behind it (which detaches itself when dropped,
/// after the policer).
struct Attached {
    ns: String,
    htb: bool,
    policer: bool,
    _router: Option<peregrine_dataplane::Dataplane>,
}

impl Attached {
    fn new(ns: &str, htb: bool, policer: bool) -> Attached {
        Attached {
            ns: ns.to_string(),
            htb,
            policer,
            _router: None,
        }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let ns = self.ns.clone();
        let mut r = Ok(());
        if self.htb {
            r = r.and(tc(&ns, &["qdisc", "del", "dev", "out0", "root"]));
        }
        if self.policer {
            r = r.and(
                netns::run_in(&ns, || policer::detach("in0"))
                    .map_err(anyhow::Error::from)
                    .and_then(|r| r.map_err(anyhow::Error::from)),
            );
        }
        if let Err(e) = r {
            eprintln!("peregrine: removing a bench qos contender: {e:#}");
        }
    }
}

/// The rule every policer run uses: traffic to the sink's prefix.
fn sink_rule(rate: u64, burst: u64) -> Rule {
    Rule {
        matches: Match {
            dst: Some("198.19.0.0/16".parse().expect("a prefix")),
            ..Default::default()
        },
        rate: PolicerRate::Bits(rate),
        burst,
        exceed: Exceed::Drop,
        priority: 0,
        class: 0,
    }
}

fn attach(lab: &Lab, c: Contender, rules: &[Rule], rate: u64) -> Result<Attached> {
    attach_with_burst(lab, c, rules, rate, burst_bytes(rate))
}

/// `attach`, HTB's class with burst and cburst `burst` (the policer's
/// rules carry their own).
fn attach_with_burst(
    lab: &Lab,
    c: Contender,
    rules: &[Rule],
    rate: u64,
    burst: u64,
) -> Result<Attached> {
    let dut = lab.ns("dut");
    match c {
        Contender::Baseline => Ok(Attached::new(&dut, false, false)),
        Contender::Htb => {
            let burst = burst.to_string();
            let r = format!("{rate}bit");
            tc(
                &dut,
                &[
                    "qdisc", "replace", "dev", "out0", "root", "handle", "1:", "htb", "default",
                    "10",
                ],
            )?;
            let a = Attached::new(&dut, true, false);
            tc(
                &dut,
                &[
                    "class", "add", "dev", "out0", "parent", "1:", "classid", "1:10", "htb",
                    "rate", &r, "ceil", &r, "burst", &burst, "cburst", &burst,
                ],
            )?;
            Ok(a)
        }
        Contender::PolicerTc | Contender::PolicerXdp | Contender::PolicerTcRouter => {
            let hook = if c == Contender::PolicerXdp {
                peregrine_bpf::Hook::Xdp(peregrine_bpf::XdpMode::Native)
            } else {
                peregrine_bpf::Hook::TC
            };
            netns::run_in(&dut, || policer::apply("in0", hook, rules))??;
            let mut on = Attached::new(&dut, false, true);
            if c != Contender::PolicerTcRouter {
                return Ok(on);
            }
            // Attached after the policer: tcx runs it second.
            let ports = ["in0".to_string(), "out0".to_string()];
            let dp = peregrine_dataplane::Dataplane::router(
                Some(&dut),
                &ports,
                peregrine_bpf::Hook::TC,
                peregrine_bpf::router::FibMode::Full,
                false,
            )?;
            on._router = Some(dp);
            Ok(on)
        }
    }
}

/// The burst of the TCP runs: the policer's own default (what the rate
/// earns over TCP's minimum retransmission timeout; docs/QOS.md), what a
/// rules file without `burst` gets; HTB gets the same.
fn tcp_burst(rate: u64) -> u64 {
    peregrine_qos::config::default_burst(PolicerRate::Bits(rate))
}

fn busy(t: &Trial, cpu: Option<usize>) -> f64 {
    cpu.map_or(f64::NAN, |c| t.busy_pct(c))
}

/// One measured figure of a contender, for the summary.
struct Figure {
    scenario: String,
    contender: Contender,
    /// Accuracy runs: delivered / rate; TCP runs: goodput / rate; scale
    /// runs: delivered Mpps at saturation.
    value: f64,
    /// Accuracy runs: the DUT CPU's busy share, %.
    cpu: Option<f64>,
}

pub fn bench_qos(a: QosBenchConfig) -> Result<()> {
    let (rates, sched_link) = a.bit_rates()?;
    let dut_cpu = a.placement.dut_cpu()?;
    let topo = builtin_topology("chain", "benchqos")?;
    eprintln!("building lab {} (gen -> dut -> sink)", topo.name);
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let path = ChainPath::new();
    let ChainPath {
        from,
        dut_in,
        sink: sink_ep,
    } = &path;
    let (src, dst): (IpAddr, IpAddr) = ("198.18.1.100".parse()?, "198.19.0.1".parse()?);
    let (frame, peer) = frame_for(&lab, from, src, dst, 9)?;
    let mut runs = Vec::new();
    let mut figures = Vec::new();

    let mut sched_figures = Vec::new();
    for round in 1..=a.rounds.max(1) {
        // The XDP drop sink counts the UDP trials' frames; it is taken
        // off for the TCP runs that end each round.
        let (sink, drops) = path.drop_sink(&lab)?;
        if a.part != QosPart::Policer {
            let path = crate::qos_sched::Path {
                lab: &lab,
                sink: &sink,
                drops: &drops,
                frame: &frame,
                peer: &peer,
                dut_in,
                dut_cpu,
                trial: a.trial,
                tcp_time: a.tcp_time,
            };
            if a.part != QosPart::Scale {
                crate::qos_sched::round(&path, sched_link, round, &mut runs, &mut sched_figures)?;
            }
            // Scale: the htb engine, tc htb+u32 and the scheduler at each
            // point.
            let mut rec = crate::qos_sched::Rec::new(&mut runs, &mut sched_figures);
            crate::qos_scale::scenario(&path, &a.scale_points.0, round, &mut rec)?;
        }
        if matches!(a.part, QosPart::Scheduler | QosPart::Scale) {
            continue;
        }
        // Rate accuracy and CPU, UDP at twice the rate.
        for &rate in &rates {
            let scenario = format!("udp at 2x {} Mbit/s", rate as f64 / 1e6);
            let sizes = FrameSizes::Fixed(FRAME);
            let spec = TrafficSpec::live(lab.ns("gen"), "eth0".into(), frame.clone(), sizes, 1);
            for c in UDP_CONTENDERS {
                let times = if c == Contender::Baseline { 1.0 } else { 2.0 };
                let offered = times * rate as f64 / (COUNTED * 8.0);
                signals::check()?;
                let _on = attach(&lab, c, &[sink_rule(rate, burst_bytes(rate))], rate)?;
                let gen =
                    Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
                let placement = place(&lab, &spec.cpus, dut_in, dut_cpu)?;
                let label = announce(c, &scenario, round);
                let setup = trial_setup(&gen, &sink, &drops, a.trial, FRAME as f64, 1.0);
                let t = shown_trial(
                    &setup,
                    &label,
                    "fixed",
                    Rate::Pps(offered),
                    &mut progress_line(&label),
                )?;
                let accuracy = t.steady_delivered_pps() * COUNTED * 8.0 / rate as f64;
                let cpu = busy(&t, dut_cpu);
                eprintln!(
                    "  delivered {:.3} Mbit/s in steady state = {:.4} of the rate; DUT cpu {cpu:.1}%",
                    t.steady_delivered_pps() * COUNTED * 8.0 / 1e6,
                    accuracy,
                );
                figures.push(Figure {
                    scenario: scenario.clone(),
                    contender: c,
                    value: accuracy,
                    cpu: Some(cpu),
                });
                runs.push(Run {
                    label,
                    params: params(&spec, &format!("xdp drop sink {sink_ep}")),
                    trials: vec![t],
                    rfc2544: None,
                    placement: Some(note(placement, c, rate)),
                    ..Default::default()
                });
            }
        }
        // Scale: the XDP policer with 1 rule and with `rules` rules.
        let sizes = FrameSizes::Fixed(64);
        let spec = TrafficSpec::live(lab.ns("gen"), "eth0".into(), frame.clone(), sizes, 1);
        for n in [1, a.rules.max(1)] {
            signals::check()?;
            let scenario = "xdp policer, 64 B, saturated".to_string();
            // Nothing exceeds (1 Tbit/s): the cost measured is the lookup.
            let mut rules = vec![sink_rule(1_000_000_000_000, 1 << 30)];
            rules.extend((1..n).map(|k| Rule {
                matches: Match {
                    dst: Some(peregrine_wire::Prefix {
                        addr: IpAddr::V4(std::net::Ipv4Addr::from(0xC612_0000u32 + k)),
                        len: 32,
                    }),
                    proto: Some(17),
                    dport: Some(9),
                    ..Default::default()
                },
                ..sink_rule(1_000_000, 16_000)
            }));
            let _on = attach(&lab, Contender::PolicerXdp, &rules, 0)?;
            let gen = Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
            let placement = place(&lab, &spec.cpus, dut_in, dut_cpu)?;
            let contender = format!("policer (xdp), {n} rule{}", if n > 1 { "s" } else { "" });
            let label = crate::common::announce(&contender, &scenario, round);
            let setup = trial_setup(&gen, &sink, &drops, a.trial, 64.0, 1.0);
            let t = shown_trial(&setup, &label, "max", Rate::Max, &mut progress_line(&label))?;
            eprintln!("  delivered {:.3} Mpps", t.delivered_pps / 1e6);
            figures.push(Figure {
                scenario: format!("{scenario}, {n} rules"),
                contender: Contender::PolicerXdp,
                value: t.delivered_pps / 1e6,
                cpu: None,
            });
            runs.push(Run {
                label,
                params: params(&spec, &format!("xdp drop sink {sink_ep}")),
                trials: vec![t],
                rfc2544: None,
                placement: Some(placement),
                ..Default::default()
            });
        }
        // TCP goodput through each, at every rate, one stream and several,
        // to a plain iperf3 receiver as users run one: the XDP drop sink
        // comes off first. An XDP program on the sink's veth turns GSO off
        // on the DUT's way out and gives it a 256-slot ring without a
        // qdisc: a policer's burst, admitted at line rate, overflows it
        // (docs/QOS.md, "TCP through a policer").
        drop(drops);
        drop(sink);
        for (&rate, &streams) in rates
            .iter()
            .flat_map(|r| a.tcp_streams.iter().map(move |s| (r, s)))
        {
            let scenario = format!(
                "tcp at {} Mbit/s, {streams} stream{}",
                rate as f64 / 1e6,
                if streams == 1 { "" } else { "s" }
            );
            for c in CONTENDERS {
                signals::check()?;
                let burst = tcp_burst(rate);
                let _on = attach_with_burst(&lab, c, &[sink_rule(rate, burst)], rate, burst)?;
                let label = announce(c, &scenario, round);
                let fig = tcp::iperf3(&TcpTransfer {
                    client_ns: lab.ns("gen"),
                    server_ns: lab.ns("sink"),
                    server: dst,
                    streams,
                    duration: a.tcp_time,
                })?;
                let ratio = fig.gbit_s * 1e9 / rate as f64;
                eprintln!(
                    "  {:.2} Mbit/s goodput = {ratio:.3} of the rate, {} retransmits",
                    fig.gbit_s * 1e3,
                    fig.retransmits
                );
                figures.push(Figure {
                    scenario: scenario.clone(),
                    contender: c,
                    value: ratio,
                    cpu: None,
                });
                runs.push(Run {
                    label,
                    params: RunParams {
                        backend: "iperf3".into(),
                        ip: "ipv4".into(),
                        frame_size: "tcp".into(),
                        mean_frame_bytes: 0.0,
                        flows: streams,
                        threads: 1,
                        sink: format!("iperf3 server {dst} in sink"),
                        sent: true,
                    },
                    trials: Vec::new(),
                    rfc2544: None,
                    placement: Some(Placement {
                        notes: vec![
                            format!("{} at {rate} bit/s, burst {burst} B; iperf3 client in gen, server in sink; goodput counts TCP payload, the rate Ethernet frames (at most ~0.957 of it with 1448 B segments)", c.label()),
                            lab.topo.offloads_note(),
                        ],
                        ..Default::default()
                    }),
                    tcp: Some(fig),
                    values: Default::default(),
                });
            }
        }
    }
    drop(lab);
    let result = ResultFile::new(BenchQos::KIND, command_line(), runs);
    if !a.output.json {
        if !figures.is_empty() {
            summary(&figures);
        }
        if !sched_figures.is_empty() {
            crate::qos_sched::summary(&sched_figures);
            crate::qos_scale::summary(&sched_figures);
        }
    }
    a.output.write::<BenchQos>(&result)
}

/// The label of contender `c`'s run in `scenario`, `round`, printed as the
/// run starts.
fn announce(c: Contender, scenario: &str, round: u32) -> String {
    crate::common::announce(c.label(), scenario, round)
}

fn note(mut p: Placement, c: Contender, rate: u64) -> Placement {
    p.notes.push(match c {
        Contender::Htb => format!(
            "tc htb on dut:out0, one class rate = ceil = {rate} bit, burst = cburst = {} B",
            burst_bytes(rate)
        ),
        Contender::PolicerTcRouter => format!(
            "policer (tc) on dut:in0, one rule dst 198.19.0.0/16 at {rate} bit/s, burst {} B, then peregrine's tc router on in0 and out0",
            burst_bytes(rate)
        ),
        Contender::Baseline => format!(
            "no QoS: Linux forwarding offered {rate} bit/s itself, the load the others deliver"
        ),
        _ => format!(
            "{} on dut:in0, one rule dst 198.19.0.0/16 at {rate} bit/s, burst {} B, then Linux forwarding",
            c.label(),
            burst_bytes(rate)
        ),
    });
    p
}

/// Medians over rounds per scenario and contender, with ratios to HTB;
/// for CPU also each contender's own cost (its busy share less the
/// baseline's, which carries the same delivered load without QoS).
fn summary(figures: &[Figure]) {
    let scenarios = crate::common::in_first_seen_order(figures.iter().map(|f| f.scenario.as_str()));
    println!("Medians over rounds (accuracy and TCP: delivered / configured rate; cpu: DUT cpu busy %; qos cost: busy % above the no-qos baseline):");
    for s in scenarios {
        let of = |c: Contender, cpu: bool| {
            let v: Vec<f64> = figures
                .iter()
                .filter(|f| f.scenario == s && f.contender == c)
                .filter_map(|f| if cpu { f.cpu } else { Some(f.value) })
                .collect();
            (!v.is_empty()).then(|| median(&v))
        };
        let base = of(Contender::Baseline, true);
        let htb = of(Contender::Htb, true);
        let mut line = format!("{s}:");
        for c in UDP_CONTENDERS {
            if let Some(v) = of(c, false) {
                line.push_str(&format!("  {} {v:.4}", c.label()));
                if let Some(cpu) = of(c, true) {
                    line.push_str(&format!(" (cpu {cpu:.1}%"));
                    if let (Some(b), Some(h)) = (base, htb) {
                        if c != Contender::Baseline {
                            let cost = cpu - b;
                            line.push_str(&format!(", qos cost {cost:.1}"));
                            if c != Contender::Htb {
                                line.push_str(&format!(" = {:.2}x htb's", cost / (h - b)));
                            }
                        }
                    }
                    line.push(')');
                }
            }
        }
        println!("{line}");
    }
}

/// `bench qos`'s result files: the policer's runs (nothing beside their
/// trials) and the scheduler part's (its [`SchedValues`]).
pub struct BenchQos;

/// Delivered in steady state per UDP scenario and contender.
pub const ACCURACY: &str = "accuracy";
/// The DUT CPU's busy share per UDP scenario and contender.
pub const CPU: &str = "cpu";

impl Report for BenchQos {
    const KIND: &'static str = "bench-qos";
    type Values = SchedValues;

    /// Its runs compare contenders per rate: the per-trial scatter and
    /// timeline of 75 runs say nothing there.
    fn figures(r: &ResultFile<SchedValues>) -> Vec<plot::Figure> {
        let mut f = Vec::new();
        if r.runs
            .iter()
            .any(|run| RunKey::parse(&run.label).is_some_and(|k| k.scenario.starts_with("udp ")))
        {
            for (name, cpu, what, y_desc) in [
                (
                    ACCURACY,
                    false,
                    "delivered in steady state (UDP offered at 2x the rate)",
                    "delivered (Mbit/s of frames, no FCS)",
                ),
                (
                    CPU,
                    true,
                    "DUT CPU busy at the same offered load (UDP at 2x the rate)",
                    "DUT CPU busy (%)",
                ),
            ] {
                let (legend, groups) = udp_groups(r, cpu);
                let base = legend.first().map(String::as_str).unwrap_or("-");
                f.push(plot::Figure {
                    name,
                    chart: Chart::Bars {
                        title: format!("{}: {what}; ratio to {base}", r.kind),
                        y_desc: y_desc.into(),
                        legend,
                        groups,
                    },
                });
            }
        }
        f.extend(crate::qos_sched::figures(r));
        f
    }
}

/// Per UDP scenario and contender, the delivered rate in steady state
/// (Mbit/s of frames without FCS) or the DUT CPU's busy share (`cpu`),
/// medians over rounds with min-max.
fn udp_groups(r: &ResultFile<SchedValues>, cpu: bool) -> (Vec<String>, Vec<BarGroup>) {
    bars_by_key(r, |key, run| {
        if !key.scenario.starts_with("udp ") {
            return None;
        }
        let t = run.trials.first()?;
        Some(if cpu {
            let core = run
                .placement
                .as_ref()
                .and_then(|p| p.dut_cpus.first().copied());
            core.map_or(f64::NAN, |c| t.busy_pct(c))
        } else {
            t.steady_delivered_pps() * (run.params.mean_frame_bytes - 4.0) * 8.0 / 1e6
        })
    })
}
