//! `peregrine bench qos`, the scheduler part: peregrine's AF_XDP egress
//! scheduler (`qos serve`, fed by the XDP policer on dut:in0, sending out
//! of dut:out0) against tc HTB on dut:out0 with the same classes (rate,
//! ceil, priority, weight as quantum, 1000-packet queues), side by side in
//! one run, on gen -> dut -> sink:
//!
//! - WFQ: two classes of one level, weights 80 and 20 (assured rates of
//!   1/1000 of the link each), both offered the whole link: UDP from the
//!   generator (one flow per class, by destination) and TCP (an iperf3
//!   flow per class, by port). The gold class's share of what left,
//!   read from each mechanism's own class counters over the trial, and
//!   the DUT CPU's busy share per Gbit/s delivered (UDP).
//! - Strict priority: a voice class (priority 0, assured half the link)
//!   carrying an iperf3 UDP flow at 30% of the link and pings, under a
//!   bulk class (priority 7) the generator floods at 150% of the link:
//!   the voice flow's delivered share of what it offered, and the pings'
//!   p99 round trip under load over the same contender's idle p99.
//! - Saturation: one class with a ceiling (10 Gbit/s) that never binds, the
//!   generator unpaced, 64 B and 1500 B: delivered packets per second,
//!   beside Linux forwarding with no QoS.
//! - Scale (`qos_scale`): the htb engine, hand-written tc HTB with u32
//!   filters and the AF_XDP scheduler (63 classes at most) at points of
//!   (classes, rules), 64 B unpaced: delivered packets per second and the
//!   seconds each took to be installed.
//!
//! The scheduler runs in a thread of this process, pinned to the DUT's
//! CPU (where its ingress NAPI runs, and HTB's work too).
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use peregrine_host::tc::{ClassStats, Tc};
use peregrine_host::{netns, signals};
use peregrine_lab::pacing::Rate;
use peregrine_lab::plot::{bars_by_key, Chart, Figure};
use peregrine_lab::results::{Placement, ResultFile, Run, RunParams, Values};
use peregrine_lab::sinks::XdpSink;
use peregrine_lab::topology::Endpoint;
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::trial::DropProbes;
use peregrine_lab::Lab;
use peregrine_qos::attach as policer;
use peregrine_qos::engine::serve;
use peregrine_qos::serve::ServeOptions;
use peregrine_qos::PolicerConfig;
use peregrine_testbed::gen::{FlowVary, FrameSizes};
use peregrine_wire::UdpFrameSpec;
use serde::{Deserialize, Serialize};

use crate::common::{params, place, progress_line, shown_trial, tc, trial_setup};
use crate::tcp::{finish, Reaped};

/// A contender of the scheduler part.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum SchedContender {
    /// tc HTB with the same classes on dut:out0, Linux forwarding.
    Htb,
    /// peregrine's AF_XDP scheduler.
    Scheduler,
    /// No QoS: Linux forwarding (saturation runs only).
    Baseline,
    /// peregrine's htb engine (`engine = "htb"`): the kernel's HTB built
    /// through netlink, classified by one map lookup (scale runs only).
    HtbEngine,
    /// tc HTB with one u32 filter per rule, linear (4,000 to a prio),
    /// installed with `tc -batch` as users write it (scale runs only).
    HtbU32,
    /// The same rules in a u32 hash table of 256 buckets keyed on the
    /// destination's last byte, as an expert writes a large table (scale
    /// runs only).
    HtbU32Hashed,
}

impl SchedContender {
    pub(crate) fn label(self) -> &'static str {
        match self {
            SchedContender::Htb => "tc htb classes",
            SchedContender::Scheduler => "scheduler (af_xdp)",
            SchedContender::Baseline => "no qos",
            SchedContender::HtbEngine => "htb engine",
            SchedContender::HtbU32 => "tc htb+u32",
            SchedContender::HtbU32Hashed => "tc htb+u32 hashed",
        }
    }
}

/// What a packet is classified by: the same match for both mechanisms.
#[derive(Clone, Copy)]
enum Filter {
    Dst(&'static str),
    UdpPort(u16),
    TcpPort(u16),
    Icmp,
}

struct Class {
    name: &'static str,
    /// HTB minor id (1:id).
    id: u16,
    rate: u64,
    ceil: u64,
    prio: u8,
    weight: u32,
    /// HTB's assured rate. HTB shares what its classes' rates leave over
    /// by those rates (its quantum orders only the turns), so its users
    /// express weights as rates: 80/20 of the link. The scheduler gets DRR
    /// weights and tiny assured rates.
    htb_rate: u64,
}

/// One class set, as both mechanisms get it: a root class at the link
/// rate (HTB's 1:1) with the leaves below it.
struct ClassSet {
    link: u64,
    classes: Vec<Class>,
    filters: Vec<(Filter, &'static str)>,
}

/// A leaf's queue, packets: HTB's default leaf qdisc is a pfifo as long as
/// the device's txqueuelen (1000 on veth).
const QUEUE: u32 = 1000;
const MTU_FRAME: u64 = 1514;

impl ClassSet {
    /// Bucket depth of every class: 10 ms of the link, at least 10 frames.
    fn burst(&self) -> u64 {
        (self.link / 8 / 100).max(10 * MTU_FRAME)
    }

    fn toml(&self) -> String {
        let mut t = format!(
            "[scheduler]\negress = \"out0\"\nrate = \"{}bit\"\nburst = \"{}\"\n\n[[class]]\nname = \"link\"\nrate = \"{}bit\"\nburst = \"{}\"\n",
            self.link,
            self.burst(),
            self.link,
            self.burst()
        );
        for c in &self.classes {
            t += &format!(
                "\n[[class]]\nname = \"{}\"\nparent = \"link\"\nrate = \"{}bit\"\nceil = \"{}bit\"\nburst = \"{}\"\npriority = {}\nweight = {}\nqueue = {QUEUE}\n",
                c.name, c.rate, c.ceil, self.burst(), c.prio, c.weight
            );
        }
        for (f, class) in &self.filters {
            t += &format!("\n[[filter]]\nclass = \"{class}\"\n");
            t += &match f {
                Filter::Dst(d) => format!("dst = \"{d}\"\n"),
                Filter::UdpPort(p) => format!("proto = \"udp\"\ndport = {p}\n"),
                Filter::TcpPort(p) => format!("proto = \"tcp\"\ndport = {p}\n"),
                Filter::Icmp => "proto = \"icmp\"\n".into(),
            };
        }
        t
    }

    fn htb(&self, dut: &str) -> Result<Htb> {
        let b = self.burst().to_string();
        let link = format!("{}bit", self.link);
        // Unclassified traffic (ARP, ...) to a default class below the rest.
        tc(
            dut,
            &[
                "qdisc", "replace", "dev", "out0", "root", "handle", "1:", "htb", "default", "99",
            ],
        )?;
        let on = Htb(dut.to_string());
        tc(
            dut,
            &[
                "class", "add", "dev", "out0", "parent", "1:", "classid", "1:1", "htb", "rate",
                &link, "ceil", &link, "burst", &b, "cburst", &b,
            ],
        )?;
        let low = format!("{}bit", (self.link / 1000).max(8000));
        tc(
            dut,
            &[
                "class", "add", "dev", "out0", "parent", "1:1", "classid", "1:99", "htb", "rate",
                &low, "ceil", &link, "prio", "7",
            ],
        )?;
        for c in &self.classes {
            let id = format!("1:{}", c.id);
            let quantum = (u64::from(c.weight) * MTU_FRAME).to_string();
            tc(
                dut,
                &[
                    "class",
                    "add",
                    "dev",
                    "out0",
                    "parent",
                    "1:1",
                    "classid",
                    &id,
                    "htb",
                    "rate",
                    &format!("{}bit", c.htb_rate),
                    "ceil",
                    &format!("{}bit", c.ceil),
                    "burst",
                    &b,
                    "cburst",
                    &b,
                    "prio",
                    &c.prio.to_string(),
                    "quantum",
                    &quantum,
                ],
            )?;
        }
        for (f, class) in &self.filters {
            let c = self
                .classes
                .iter()
                .find(|c| c.name == *class)
                .expect("a class");
            let flow = format!("1:{}", c.id);
            let mut args = vec![
                "filter", "add", "dev", "out0", "parent", "1:", "protocol", "ip", "prio", "1",
                "u32",
            ];
            let (port, proto);
            match f {
                Filter::Dst(d) => args.extend(["match", "ip", "dst", d]),
                Filter::UdpPort(p) | Filter::TcpPort(p) => {
                    port = p.to_string();
                    proto = if matches!(f, Filter::UdpPort(_)) {
                        "17"
                    } else {
                        "6"
                    };
                    args.extend([
                        "match", "ip", "protocol", proto, "0xff", "match", "ip", "dport", &port,
                        "0xffff",
                    ]);
                }
                Filter::Icmp => args.extend(["match", "ip", "protocol", "1", "0xff"]),
            }
            args.extend(["flowid", &flow]);
            tc(dut, &args)?;
        }
        Ok(on)
    }
}

/// HTB on dut:out0 (of the namespace named), removed when dropped.
pub(crate) struct Htb(pub(crate) String);

impl Drop for Htb {
    fn drop(&mut self) {
        if let Err(e) = tc(&self.0, &["qdisc", "del", "dev", "out0", "root"]) {
            eprintln!("peregrine: removing bench qos's htb: {e:#}");
        }
    }
}

/// The scheduler running in a thread in the DUT's namespace (either
/// engine, as its file says); stopped and detached when dropped.
pub(crate) struct Scheduler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Scheduler {
    fn start(dut: &str, set: &ClassSet, cpu: Option<usize>) -> Result<Scheduler> {
        let cfg = PolicerConfig::parse(&set.toml()).context("the bench's class file")?;
        Scheduler::start_config(dut, cfg, cpu, Duration::from_secs(10))
    }

    /// `qos serve` of `cfg` on dut:in0, ready within `within` (or stopped,
    /// and the error); Ctrl-C stops the wait too.
    pub(crate) fn start_config(
        dut: &str,
        cfg: PolicerConfig,
        cpu: Option<usize>,
        within: Duration,
    ) -> Result<Scheduler> {
        let stop = Arc::new(AtomicBool::new(false));
        let opts = ServeOptions {
            cpu,
            stop: Some(stop.clone()),
        };
        let (ready_tx, ready) = mpsc::channel();
        let dut = dut.to_string();
        let thread = std::thread::spawn(move || -> Result<()> {
            netns::run_in(&dut, || {
                serve("in0", &cfg, &opts, || {
                    let _ = ready_tx.send(());
                })
            })??;
            Ok(())
        });
        let mut s = Scheduler {
            stop,
            thread: Some(thread),
        };
        let deadline = Instant::now() + within;
        loop {
            match ready.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => return Ok(s),
                Err(mpsc::RecvTimeoutError::Timeout)
                    if Instant::now() < deadline && !signals::stop_requested() => {}
                Err(_) => {
                    // Ended, interrupted or late: stopped, and why.
                    s.finish()?;
                    signals::check()?;
                    bail!(
                        "qos serve was not ready within {:.0} s",
                        within.as_secs_f64()
                    );
                }
            }
        }
    }

    fn finish(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow!("the scheduler thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            eprintln!("peregrine: bench qos's scheduler: {e:#}");
        }
    }
}

/// A contender in place; removed when dropped.
enum On {
    Htb(#[allow(dead_code)] Htb),
    Scheduler(#[allow(dead_code)] Scheduler),
    Nothing,
}

fn put_on(c: SchedContender, dut: &str, set: &ClassSet, cpu: Option<usize>) -> Result<On> {
    Ok(match c {
        SchedContender::Htb => On::Htb(set.htb(dut)?),
        SchedContender::Scheduler => On::Scheduler(Scheduler::start(dut, set, cpu)?),
        SchedContender::Baseline => On::Nothing,
        SchedContender::HtbEngine | SchedContender::HtbU32 | SchedContender::HtbU32Hashed => {
            bail!("{}: a contender of the scale scenario only", c.label())
        }
    })
}

/// Bytes each named class sent so far, by the contender's own counters.
fn class_bytes(c: SchedContender, dut: &str, set: &ClassSet) -> Result<BTreeMap<String, u64>> {
    let mut out = BTreeMap::new();
    match c {
        SchedContender::Htb => {
            // The classes' counters through netlink (TCA_STATS2), in the
            // DUT's namespace: qdisc 1: on out0.
            let classes = netns::run_in(dut, || -> Result<Vec<ClassStats>> {
                let idx = peregrine_bpf::link::ifindex("out0")?;
                Ok(Tc::open()?.classes(idx, 1)?)
            })??;
            for c in &set.classes {
                // `tc` reads the "1:ID" given to it as hex.
                let minor = u32::from_str_radix(&c.id.to_string(), 16)?;
                let bytes = classes
                    .iter()
                    .find(|k| k.classid == (1 << 16) | minor)
                    .map(|k| k.bytes)
                    .ok_or_else(|| anyhow!("dut:out0 has no htb class 1:{}", c.id))?;
                out.insert(c.name.to_string(), bytes);
            }
        }
        SchedContender::Scheduler => {
            let stats = netns::run_in(dut, || policer::stats("in0"))??;
            let sched = stats
                .scheduler
                .ok_or_else(|| anyhow!("no scheduler on dut:in0"))?;
            for (_, c, k) in sched.classes {
                out.insert(c.name, k.sent_bytes);
            }
        }
        SchedContender::Baseline
        | SchedContender::HtbEngine
        | SchedContender::HtbU32
        | SchedContender::HtbU32Hashed => {}
    }
    Ok(out)
}

fn share_of(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, class: &str) -> f64 {
    let d =
        |k: &str| (after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)) as f64;
    let all: f64 = after.keys().map(|k| d(k)).sum();
    d(class) / all.max(1.0)
}

/// What a run of the scheduler part measured beside its trial, named in
/// the file as before (the keys of `values`, in their order); each
/// scenario fills its own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedValues {
    /// Bulk's delivered Mbit/s of frames (priority).
    #[serde(
        rename = "bulk delivered mbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub bulk_delivered_mbit_s: Option<f64>,
    /// The point's classes (scale).
    #[serde(rename = "classes", default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<u32>,
    /// Delivered Gbit/s of frames in steady state (WFQ, UDP).
    #[serde(
        rename = "delivered gbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub delivered_gbit_s: Option<f64>,
    /// Delivered kpps in steady state, 64 B unpaced (scale).
    #[serde(
        rename = "delivered kpps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub delivered_kpps: Option<f64>,
    /// Delivered Mpps in steady state (saturation).
    #[serde(
        rename = "delivered mpps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub delivered_mpps: Option<f64>,
    /// The DUT CPU's busy share (WFQ, UDP).
    #[serde(rename = "dut cpu %", default, skip_serializing_if = "Option::is_none")]
    pub dut_cpu_pct: Option<f64>,
    /// That share per Gbit/s delivered.
    #[serde(
        rename = "dut cpu % per gbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dut_cpu_pct_per_gbit_s: Option<f64>,
    /// The gold class's share of what left (WFQ).
    #[serde(
        rename = "gold share",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gold_share: Option<f64>,
    /// Both TCP flows' goodput (WFQ, TCP).
    #[serde(
        rename = "goodput mbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub goodput_mbit_s: Option<f64>,
    /// Frames on the link, Mbit/s (WFQ, TCP).
    #[serde(
        rename = "link mbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub link_mbit_s: Option<f64>,
    /// Share of pings lost under the flood (priority).
    #[serde(
        rename = "ping lost loaded",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ping_lost_loaded: Option<f64>,
    /// Ping p99 without load, us (priority).
    #[serde(
        rename = "ping p99 idle us",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ping_p99_idle_us: Option<f64>,
    /// Ping p99 under the flood over idle (priority).
    #[serde(
        rename = "ping p99 loaded / idle",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ping_p99_loaded_over_idle: Option<f64>,
    /// Ping p99 under the flood, us (priority).
    #[serde(
        rename = "ping p99 loaded us",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ping_p99_loaded_us: Option<f64>,
    /// The point's rules (scale).
    #[serde(rename = "rules", default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<u32>,
    /// Seconds the contender took to be installed (scale).
    #[serde(rename = "setup s", default, skip_serializing_if = "Option::is_none")]
    pub setup_s: Option<f64>,
    /// Voice's delivered share of what it offered (priority).
    #[serde(
        rename = "voice delivered / offered",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub voice_delivered_over_offered: Option<f64>,
}

impl Values for SchedValues {
    fn is_empty(&self) -> bool {
        *self == SchedValues::default()
    }
}

/// What the scheduler part needs of the bench's lab.
pub(crate) struct Path<'a> {
    pub lab: &'a Lab,
    pub sink: &'a XdpSink,
    pub drops: &'a DropProbes,
    pub frame: &'a UdpFrameSpec,
    pub peer: &'a Endpoint,
    pub dut_in: &'a Endpoint,
    pub dut_cpu: Option<usize>,
    pub trial: Duration,
    pub tcp_time: Duration,
}

/// One measured figure of the scheduler part, for the summary.
pub(crate) struct SchedFigure {
    pub scenario: String,
    pub contender: SchedContender,
    pub values: SchedValues,
}

const CONTENDERS: [SchedContender; 2] = [SchedContender::Htb, SchedContender::Scheduler];
/// The accuracy runs' frame size, FCS included (counted 4 bytes shorter).
const FRAME: usize = 1000;

pub(crate) fn run_of(
    label: String,
    params: RunParams,
    trials: Vec<peregrine_lab::results::Trial>,
    placement: Placement,
    values: SchedValues,
) -> Run<SchedValues> {
    Run {
        label,
        params,
        trials,
        rfc2544: None,
        placement: Some(placement),
        tcp: None,
        values,
    }
}

/// Where a round's runs go, and their figures for the summary.
pub(crate) struct Rec<'a> {
    runs: &'a mut Vec<Run<SchedValues>>,
    figures: &'a mut Vec<SchedFigure>,
}

impl<'a> Rec<'a> {
    pub(crate) fn new(
        runs: &'a mut Vec<Run<SchedValues>>,
        figures: &'a mut Vec<SchedFigure>,
    ) -> Rec<'a> {
        Rec { runs, figures }
    }

    /// Keeps `run` and its figures under `scenario`.
    pub(crate) fn add(&mut self, scenario: &str, contender: SchedContender, run: Run<SchedValues>) {
        self.figures.push(SchedFigure {
            scenario: scenario.to_string(),
            contender,
            values: run.values.clone(),
        });
        self.runs.push(run);
    }

    /// Keeps the run of generator trial `t` (of `spec`, into the XDP drop
    /// sink) with `values`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn trial(
        &mut self,
        scenario: &str,
        c: SchedContender,
        label: String,
        spec: &TrafficSpec,
        t: peregrine_lab::results::Trial,
        placement: Placement,
        values: SchedValues,
    ) {
        let params = params(spec, "xdp drop sink sink:eth0");
        self.add(
            scenario,
            c,
            run_of(label, params, vec![t], placement, values),
        );
    }
}

fn notes(lab: &Lab, c: SchedContender, what: &str) -> Placement {
    Placement {
        notes: vec![format!("{}: {what}", c.label()), lab.topo.offloads_note()],
        ..Default::default()
    }
}

/// The scheduler part of one round at link rate `link`: runs and figures.
pub(crate) fn round(
    p: &Path,
    link: u64,
    round: u32,
    runs: &mut Vec<Run<SchedValues>>,
    figures: &mut Vec<SchedFigure>,
) -> Result<()> {
    let mut rec = Rec { runs, figures };
    let dut = p.lab.ns("dut");
    let gen_for = |spec: &TrafficSpec| {
        Generator::new(
            spec.clone(),
            Some((p.lab.ns(&p.peer.host), p.peer.iface.clone())),
        )
    };
    let mbit = link as f64 / 1e6;

    // WFQ 80/20, UDP: one generator flow per class (by destination).
    let wfq = |tcp: bool| ClassSet {
        link,
        classes: vec![
            Class {
                name: "gold",
                id: 10,
                rate: link / 1000,
                ceil: link,
                prio: 1,
                weight: 80,
                htb_rate: link / 100 * 80,
            },
            Class {
                name: "silver",
                id: 20,
                rate: link / 1000,
                ceil: link,
                prio: 1,
                weight: 20,
                htb_rate: link / 100 * 20,
            },
        ],
        filters: if tcp {
            vec![
                (Filter::TcpPort(5401), "gold"),
                (Filter::TcpPort(5402), "silver"),
            ]
        } else {
            vec![
                (Filter::Dst("198.19.0.1/32"), "gold"),
                (Filter::Dst("198.19.0.2/32"), "silver"),
            ]
        },
    };
    let scenario = format!("wfq 80/20, udp, {mbit} Mbit/s");
    let mut spec = TrafficSpec::live(
        p.lab.ns("gen"),
        "eth0".into(),
        p.frame.clone(),
        FrameSizes::Fixed(FRAME),
        2,
    );
    spec.vary = FlowVary::Destination;
    let counted = (FRAME - 4) as f64;
    for c in CONTENDERS {
        signals::check()?;
        let set = wfq(false);
        let _on = put_on(c, &dut, &set, p.dut_cpu)?;
        let gen = gen_for(&spec)?;
        let mut placement = place(p.lab, &spec.cpus, p.dut_in, p.dut_cpu)?;
        placement.notes.push(format!(
            "{}: gold and silver under a {mbit} Mbit/s root, ceilings the link, {}; each offered the link (1000 B frames, by destination)",
            c.label(),
            match c {
                SchedContender::Htb => "rates 80% / 20% of the link (HTB shares the excess by rate), quantum 80 / 20 x 1514 B",
                _ => "DRR weights 80 / 20, assured 1/1000 of the link each",
            }
        ));
        let label = crate::common::announce(c.label(), &scenario, round);
        let setup = trial_setup(&gen, p.sink, p.drops, p.trial, FRAME as f64, 1.0);
        let before = class_bytes(c, &dut, &set)?;
        let t = shown_trial(
            &setup,
            &label,
            "fixed",
            Rate::Pps(2.0 * link as f64 / (counted * 8.0)),
            &mut progress_line(&label),
        )?;
        let after = class_bytes(c, &dut, &set)?;
        let gbit = t.steady_delivered_pps() * counted * 8.0 / 1e9;
        let cpu = p.dut_cpu.map_or(f64::NAN, |cpu| t.busy_pct(cpu));
        let (gold, per_gbit) = (share_of(&before, &after, "gold"), cpu / gbit.max(1e-9));
        let values = SchedValues {
            gold_share: Some(gold),
            delivered_gbit_s: Some(gbit),
            dut_cpu_pct: Some(cpu),
            dut_cpu_pct_per_gbit_s: Some(per_gbit),
            ..Default::default()
        };
        eprintln!(
            "  gold's share {gold:.4}, {:.1} Mbit/s delivered, DUT cpu {cpu:.1}% = {per_gbit:.1}% per Gbit/s",
            gbit * 1e3,
        );
        rec.trial(&scenario, c, label, &spec, t, placement, values);
    }

    // WFQ 80/20, TCP: an iperf3 flow per class (by port).
    let scenario = format!("wfq 80/20, tcp, {mbit} Mbit/s");
    for c in CONTENDERS {
        signals::check()?;
        let set = wfq(true);
        let _on = put_on(c, &dut, &set, p.dut_cpu)?;
        let label = crate::common::announce(c.label(), &scenario, round);
        let flows = Iperf::start(p.lab, &[5401, 5402], &[], p.tcp_time)?;
        // Both flows surely run in the middle of the transfer.
        let mid = p
            .tcp_time
            .saturating_sub(Duration::from_secs(2))
            .max(Duration::from_secs(1));
        std::thread::sleep(Duration::from_secs(1));
        let before = class_bytes(c, &dut, &set)?;
        std::thread::sleep(mid);
        let after = class_bytes(c, &dut, &set)?;
        let got = flows.finish()?;
        let gold = share_of(&before, &after, "gold");
        let link_mbit = after
            .values()
            .zip(before.values())
            .map(|(a, b)| (a - b) as f64)
            .sum::<f64>()
            * 8.0
            / mid.as_secs_f64()
            / 1e6;
        let values = SchedValues {
            gold_share: Some(gold),
            link_mbit_s: Some(link_mbit),
            goodput_mbit_s: Some(got.iter().map(|g| g.1).sum::<f64>() / 1e6),
            ..Default::default()
        };
        eprintln!("  gold's share {gold:.4}, {link_mbit:.1} Mbit/s of frames on the link");
        let placement = notes(p.lab, c, &format!("two iperf3 TCP flows gen -> sink, ports 5401 (gold) / 5402 (silver), {} s; share from the class counters over the middle {} s", p.tcp_time.as_secs(), mid.as_secs()));
        let params = tcp_params("2 iperf3 flows");
        let run = run_of(label, params, Vec::new(), placement, values);
        rec.add(&scenario, c, run);
    }

    // Strict priority: voice (iperf3 UDP at 30% + pings) under a bulk flood.
    let scenario = format!("priority, voice 30% under bulk 150%, {mbit} Mbit/s");
    let set = ClassSet {
        link,
        classes: vec![
            Class {
                name: "voice",
                id: 10,
                rate: link / 2,
                ceil: link,
                prio: 0,
                weight: 1,
                htb_rate: link / 2,
            },
            Class {
                name: "bulk",
                id: 20,
                rate: link / 1000,
                ceil: link,
                prio: 7,
                weight: 1,
                htb_rate: link / 1000,
            },
        ],
        filters: vec![
            (Filter::Icmp, "voice"),
            (Filter::UdpPort(5401), "voice"),
            (Filter::UdpPort(9), "bulk"),
        ],
    };
    let spec = TrafficSpec::live(
        p.lab.ns("gen"),
        "eth0".into(),
        p.frame.clone(),
        FrameSizes::Fixed(FRAME),
        1,
    );
    for c in CONTENDERS {
        signals::check()?;
        let _on = put_on(c, &dut, &set, p.dut_cpu)?;
        let label = crate::common::announce(c.label(), &scenario, round);
        let (idle, _) = ping_p99(p.lab, 200)?;
        let gen = gen_for(&spec)?;
        let placement = place(p.lab, &spec.cpus, p.dut_in, p.dut_cpu)?;
        let voice_rate = link * 3 / 10;
        let rate_arg = format!("{voice_rate}");
        let flows = Iperf::start(
            p.lab,
            &[5401],
            &["-u", "-b", &rate_arg, "-l", "1000"],
            p.trial,
        )?;
        let pinger = {
            let (lab_gen, pings) = (p.lab.ns("gen"), p_trial_pings(p.trial) as u32);
            std::thread::spawn(move || ping_p99_in(&lab_gen, pings))
        };
        let setup = trial_setup(&gen, p.sink, p.drops, p.trial, FRAME as f64, 1.0);
        let t = shown_trial(
            &setup,
            &label,
            "fixed",
            Rate::Pps(1.5 * link as f64 / (counted * 8.0)),
            &mut progress_line(&label),
        )?;
        let (loaded, ping_lost) = pinger
            .join()
            .map_err(|_| anyhow!("ping thread panicked"))??;
        let voice = flows.finish()?;
        // iperf3's rate is of UDP payload, as is what it reports received.
        let delivered = voice.first().map_or(0.0, |v| v.1) / voice_rate as f64;
        let values = SchedValues {
            voice_delivered_over_offered: Some(delivered),
            ping_p99_idle_us: Some(idle),
            ping_p99_loaded_us: Some(loaded),
            ping_p99_loaded_over_idle: Some(loaded / idle.max(1e-9)),
            ping_lost_loaded: Some(ping_lost),
            bulk_delivered_mbit_s: Some(t.steady_delivered_pps() * counted * 8.0 / 1e6),
            ..Default::default()
        };
        eprintln!("  voice got {delivered:.4} of what it offered; ping p99 {loaded:.0} us loaded vs {idle:.0} us idle ({:.2}x), {:.1}% of pings lost", loaded / idle.max(1e-9),
            ping_lost * 100.0);
        rec.trial(&scenario, c, label, &spec, t, placement, values);
    }

    // Saturation: one class that never binds, unpaced, 64 B and 1500 B.
    let set = ClassSet {
        link: 10_000_000_000,
        classes: vec![Class {
            name: "all",
            id: 10,
            rate: 10_000_000_000,
            ceil: 10_000_000_000,
            prio: 0,
            weight: 1,
            htb_rate: 10_000_000_000,
        }],
        filters: vec![(Filter::Dst("198.19.0.0/16"), "all")],
    };
    for size in [64usize, 1500] {
        let scenario = format!("saturation, {size} B");
        let spec = TrafficSpec::live(
            p.lab.ns("gen"),
            "eth0".into(),
            p.frame.clone(),
            FrameSizes::Fixed(size),
            1,
        );
        for c in [
            SchedContender::Baseline,
            SchedContender::Htb,
            SchedContender::Scheduler,
        ] {
            signals::check()?;
            let _on = put_on(c, &dut, &set, p.dut_cpu)?;
            let gen = gen_for(&spec)?;
            let placement = place(p.lab, &spec.cpus, p.dut_in, p.dut_cpu)?;
            let label = crate::common::announce(c.label(), &scenario, round);
            let setup = trial_setup(&gen, p.sink, p.drops, p.trial, size as f64, 1.0);
            let t = shown_trial(&setup, &label, "max", Rate::Max, &mut progress_line(&label))?;
            let values = SchedValues {
                delivered_mpps: Some(t.steady_delivered_pps() / 1e6),
                ..Default::default()
            };
            eprintln!("  delivered {:.3} Mpps", t.steady_delivered_pps() / 1e6);
            rec.trial(&scenario, c, label, &spec, t, placement, values);
        }
    }
    Ok(())
}

fn p_trial_pings(trial: Duration) -> u64 {
    // One ping per 10 ms over the trial, less a second of margin.
    (trial.as_millis() as u64 / 10).saturating_sub(100).max(50)
}

fn tcp_params(sink: &str) -> RunParams {
    RunParams {
        backend: "iperf3".into(),
        ip: "ipv4".into(),
        frame_size: "tcp".into(),
        mean_frame_bytes: 0.0,
        flows: 2,
        threads: 1,
        sink: sink.into(),
        sent: true,
    }
}

/// iperf3 flows from gen to the sink host, one server per port.
struct Iperf {
    servers: Vec<Reaped>,
    clients: Vec<(u16, Reaped)>,
    limit: Duration,
}

impl Iperf {
    fn start(lab: &Lab, ports: &[u16], args: &[&str], time: Duration) -> Result<Iperf> {
        let dst = "198.19.0.1";
        let mut servers = Vec::new();
        for port in ports {
            servers.push(Reaped(
                netns::command(&lab.ns("sink"), "iperf3")?
                    .args(["-s", "-1", "-B", dst, "-p", &port.to_string()])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting iperf3 -s (scripts/setup.sh installs iperf3)")?,
            ));
        }
        std::thread::sleep(Duration::from_millis(300));
        let secs = time.as_secs().max(1).to_string();
        let mut clients = Vec::new();
        for &port in ports {
            clients.push((
                port,
                Reaped(
                    netns::command(&lab.ns("gen"), "iperf3")?
                        .args(["-c", dst, "-p", &port.to_string(), "-t", &secs, "-J"])
                        .args(args)
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .context("starting iperf3 -c")?,
                ),
            ));
        }
        Ok(Iperf {
            servers,
            clients,
            limit: time + Duration::from_secs(15),
        })
    }

    /// (port, received bit/s) of each flow.
    fn finish(self) -> Result<Vec<(u16, f64)>> {
        let mut out = Vec::new();
        for (port, c) in self.clients {
            let json = finish(c, self.limit, "iperf3 client")?;
            let v: serde_json::Value = serde_json::from_str(&json).context("iperf3 -J")?;
            let end = &v["end"];
            let bps = end["sum_received"]["bits_per_second"]
                .as_f64()
                .or_else(|| {
                    end["sum"]["bits_per_second"].as_f64().map(|b| {
                        b * (1.0 - end["sum"]["lost_percent"].as_f64().unwrap_or(0.0) / 100.0)
                    })
                })
                .ok_or_else(|| anyhow!("iperf3 on port {port}: no result"))?;
            out.push((port, bps));
        }
        drop(self.servers);
        Ok(out)
    }
}

fn ping_p99(lab: &Lab, count: u32) -> Result<(f64, f64)> {
    ping_p99_in(&lab.ns("gen"), count)
}

/// The p99 round trip (µs) of `count` pings from `ns` to the sink host,
/// one per 10 ms, and the share of them lost.
fn ping_p99_in(ns: &str, count: u32) -> Result<(f64, f64)> {
    let o = netns::command(ns, "ping")?
        .args([
            "-c",
            &count.to_string(),
            "-i",
            "0.01",
            "-W",
            "1",
            "198.19.0.1",
        ])
        .output()
        .context("running ping")?;
    let mut rtt: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse::<f64>().ok())
        .map(|ms| ms * 1000.0)
        .collect();
    if rtt.is_empty() {
        bail!("ping from {ns}: none of {count} answered");
    }
    rtt.sort_by(f64::total_cmp);
    let lost = 1.0 - rtt.len() as f64 / f64::from(count);
    Ok((rtt[(rtt.len() * 99 / 100).min(rtt.len() - 1)], lost))
}

/// Medians over rounds per scenario and contender, with the goals' ratios.
/// (The scale scenario's are `qos_scale::summary`'s.)
pub(crate) fn summary(figures: &[SchedFigure]) {
    let scenarios: Vec<&str> =
        crate::common::in_first_seen_order(figures.iter().map(|f| f.scenario.as_str()))
            .into_iter()
            .filter(|s| !is_scale(s))
            .collect();
    if scenarios.is_empty() {
        return;
    }
    println!("Scheduler part, medians over rounds:");
    for s in scenarios {
        let mut line = format!("{s}:");
        for c in [
            SchedContender::Baseline,
            SchedContender::Htb,
            SchedContender::Scheduler,
        ] {
            let of: Vec<&SchedFigure> = figures
                .iter()
                .filter(|f| f.scenario == s && f.contender == c)
                .collect();
            let Some(first) = of.first() else { continue };
            line.push_str(&format!("\n  {}:", c.label()));
            for (k, _) in first.values.named() {
                let v: Vec<f64> = of
                    .iter()
                    .flat_map(|f| f.values.named())
                    .filter(|(name, _)| *name == k)
                    .map(|(_, v)| v)
                    .collect();
                line.push_str(&format!(" {k} {:.4};", peregrine_lab::compare::median(&v)));
            }
        }
        println!("{line}");
    }
}

/// The gold class's share under WFQ overload.
pub const SHARES: &str = "shares";
/// DUT CPU per Gbit/s under WFQ.
pub const WFQ_CPU: &str = "wfq-cpu";
/// Voice's ping p99 under a bulk flood over idle.
pub const PRIORITY: &str = "priority";
/// Delivered with one class that never binds.
pub const SATURATION: &str = "saturation";
/// Delivered at 64 B per point of classes and rules.
pub const SCALE: &str = "scale";

/// Every scale scenario's name starts with this (`qos_scale`).
pub(crate) const SCALE_PREFIX: &str = "scale";

/// `scenario` is one of the scale scenario's.
pub(crate) fn is_scale(scenario: &str) -> bool {
    scenario.starts_with(&format!("{SCALE_PREFIX}, "))
}

/// The scheduler part's figures: (name, title, y axis, the value, the
/// scenarios' prefix).
type SchedFigureSpec = (
    &'static str,
    &'static str,
    &'static str,
    fn(&SchedValues) -> Option<f64>,
    &'static str,
);

const SCHED_FIGURES: [SchedFigureSpec; 5] = [
    (
        SHARES,
        "WFQ 80/20 under overload: the gold class's share of what left",
        "gold share",
        |v| v.gold_share,
        "wfq",
    ),
    (
        WFQ_CPU,
        "WFQ 80/20, UDP: DUT CPU busy per Gbit/s delivered",
        "DUT CPU % per Gbit/s",
        |v| v.dut_cpu_pct_per_gbit_s,
        "wfq",
    ),
    (
        PRIORITY,
        "Strict priority: voice's ping p99 under a bulk flood over its idle p99",
        "p99 loaded / idle",
        |v| v.ping_p99_loaded_over_idle,
        "priority",
    ),
    (
        SATURATION,
        "Saturation: delivered with one class that never binds",
        "delivered (Mpps)",
        |v| v.delivered_mpps,
        "saturation",
    ),
    (
        SCALE,
        "Scale: delivered at 64 B, unpaced, per point of classes and rules",
        "delivered (kpps)",
        |v| v.delivered_kpps,
        SCALE_PREFIX,
    ),
];

/// Bars per scenario and contender of each figure the runs have a value
/// for, ratios to each group's first bar.
pub(crate) fn figures(r: &ResultFile<SchedValues>) -> Vec<Figure> {
    SCHED_FIGURES
        .iter()
        .filter(|f| r.runs.iter().any(|run| f.3(&run.values).is_some()))
        .map(|&(name, title, y, value, prefix)| {
            let (legend, groups) = bars_by_key(r, |key, run| {
                value(&run.values).filter(|_| key.scenario.starts_with(prefix))
            });
            let first = legend.first().map(String::as_str).unwrap_or("-");
            Figure {
                name,
                chart: Chart::Bars {
                    title: format!("{}: {title}; ratio to {first}", r.kind),
                    y_desc: y.into(),
                    legend,
                    groups,
                },
            }
        })
        .collect()
}
