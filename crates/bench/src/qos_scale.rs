//! `peregrine bench qos`, the scheduler part's scale scenario (issue 27):
//! at each point of (classes, rules), 64 B frames from the generator
//! unpaced, delivered packets per second at the sink and the seconds each
//! contender took to be installed:
//!
//! - "tc htb+u32": HTB on dut:out0 as users write it: a root class at the
//!   link, N leaves under it, and one `filter add ... u32 match ip dst
//!   A/32 flowid 1:X` per rule, linear, 4,000 to a prio (a u32 table
//!   numbers at most 4,095 filters); all of it one `tc -batch FILE` in the
//!   DUT's namespace (one process, not 100,000).
//! - "htb engine": `qos serve` of the same classes and rules with
//!   `[scheduler] engine = "htb"` (the kernel's HTB built through netlink,
//!   the class set by one map lookup).
//! - "scheduler (af_xdp)": the same file with the afxdp engine, at points
//!   of 63 classes or fewer (its limit); skipped elsewhere, as the rows'
//!   notes say.
//!
//! The classes: N leaves under one root at the link rate (10 Gbit/s), each
//! assured link/N with the link as ceiling: nothing binds at what veth
//! carries. The rules: R rules on the destination (a /32 each), rule i to
//! class i % N. The generator spreads its flows over destinations (flow k:
//! the frame's destination + k, within the sink's 198.19.0.0/16), one flow
//! per rule up to 65,000 rules; above that (up to 120,000) one per two
//! rules, every other rule of the table, turning by one each N rules so
//! the rules hit still send to every class; the rules no flow hits match
//! addresses nothing is sent to (198.18.16.0 up). The rules packets find
//! are so spread uniformly over the table: a linear u32 list walks half
//! of it per packet on average, what users with large tables get.
use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use peregrine_host::{netns, signals};
use peregrine_lab::pacing::Rate;
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_qos::config::Engine;
use peregrine_qos::PolicerConfig;
use peregrine_testbed::gen::{FlowVary, FrameSizes};

use crate::common::{place, progress_line, shown_trial, trial_setup};
use crate::qos_sched::{
    is_scale, run_of, Htb, Path, Rec, SchedContender, SchedFigure, SchedValues, Scheduler,
    SCALE_PREFIX,
};
use crate::tcp::{wait_reading, Reaped};

/// `--scale-points`' default: issue 27's points.
pub(crate) const DEFAULT_POINTS: &str = "1:1,1000:10000,10000:100000";
/// The link every point is shaped to: the saturation scenario's.
const LINK: u64 = 10_000_000_000;
/// The frame size of every row (FCS included).
const FRAME: usize = 64;
/// A leaf's queue, packets (HTB's default pfifo on veth: txqueuelen).
const QUEUE: u32 = 1000;
/// The most flows the generator spreads over: destinations from the
/// frame's (198.19.0.1) up, all within the DUT's route to the sink
/// (198.19.0.0/16).
const MAX_FLOWS: u32 = 65_000;
/// Addresses of the rules no flow hits: 198.18.16.0 up to 198.18.255.255.
const UNHIT_BASE: u32 = 0xC612_1000;
const UNHIT_ROOM: u32 = 0xC612_FFFF - UNHIT_BASE + 1;
/// The most rules a point may have: the unhit addresses' room.
pub(crate) const MAX_RULES: u32 = 120_000;
/// The afxdp engine's most classes.
fn afxdp_max_classes() -> u32 {
    Engine::Afxdp.max_classes() - 1
}
/// The htb engine's most classes.
fn htb_max_classes() -> u32 {
    Engine::Htb.max_classes() - 1
}

/// One point of the scale scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScalePoint {
    pub classes: u32,
    pub rules: u32,
}

impl ScalePoint {
    /// Rules per flow: 1 up to `MAX_FLOWS` rules, then 2 (up to
    /// `MAX_RULES`).
    fn stride(self) -> u32 {
        self.rules.div_ceil(MAX_FLOWS).max(1)
    }

    /// A flow sends to rule `i`'s destination: every stride-th rule, the
    /// offset turning by one every N rules when N is a multiple of the
    /// stride, so that the rules hit send to every class (i % N), not to
    /// every stride-th class.
    fn hit(self, i: u32) -> bool {
        let s = self.stride();
        let turn = if self.classes.is_multiple_of(s) {
            i / self.classes
        } else {
            0
        };
        (i + turn).is_multiple_of(s)
    }

    /// The generator's flows: one per rule hit.
    pub(crate) fn flows(self) -> u32 {
        (0..self.rules).filter(|&i| self.hit(i)).count() as u32
    }

    /// The destination (a /32) each rule matches, in order: the rules hit
    /// get `base` (the frame's destination, flow 0's), `base` + 1, ... in
    /// order (flow k's destination is `base` + k); the others addresses
    /// from 198.18.16.0 up, where nothing is sent.
    pub(crate) fn rule_dsts(self, base: Ipv4Addr) -> Vec<Ipv4Addr> {
        let (mut to_flow, mut to_none) = (u32::from(base), UNHIT_BASE);
        (0..self.rules)
            .map(|i| {
                let next = if self.hit(i) {
                    &mut to_flow
                } else {
                    &mut to_none
                };
                *next += 1;
                Ipv4Addr::from(*next - 1)
            })
            .collect()
    }
}

/// `--scale-points`: CLASSES:RULES, comma-separated, or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePoints(pub Vec<ScalePoint>);

impl std::str::FromStr for ScalePoints {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<ScalePoints, String> {
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(ScalePoints(Vec::new()));
        }
        let mut points = Vec::new();
        for p in s.split(',').map(str::trim) {
            let bad = || format!("scale point {p:?}: expected CLASSES:RULES (1000:10000) or none");
            let (c, r) = p.split_once(':').ok_or_else(bad)?;
            let classes: u32 = c.trim().parse().map_err(|_| bad())?;
            let rules: u32 = r.trim().parse().map_err(|_| bad())?;
            if classes == 0 || classes > htb_max_classes() {
                return Err(format!(
                    "scale point {p:?}: 1 to {} classes (the htb engine's most)",
                    htb_max_classes()
                ));
            }
            let point = ScalePoint { classes, rules };
            if rules == 0
                || rules > MAX_RULES
                || point.flows() > MAX_FLOWS
                || rules - point.flows() > UNHIT_ROOM
            {
                return Err(format!("scale point {p:?}: 1 to {MAX_RULES} rules"));
            }
            points.push(point);
        }
        Ok(ScalePoints(points))
    }
}

/// Bucket depth of every class and the link: 1 ms of the link, at least
/// ten 1514 B frames.
fn burst(link: u64) -> u64 {
    (link / 8 / 1000).max(10 * 1514)
}

/// Each leaf's assured rate: its share of the link.
fn leaf_rate(link: u64, classes: u32) -> u64 {
    (link / u64::from(classes)).max(8000)
}

/// The `qos serve` file of `point` for `engine`: N leaf classes (c0..)
/// with no parent (under the link, HTB's link class for the htb engine),
/// R filters, filter i sending its destination (`rule_dsts`) to class
/// i % N.
pub(crate) fn scale_toml(point: ScalePoint, engine: Engine, link: u64, base: Ipv4Addr) -> String {
    let b = burst(link);
    let rate = leaf_rate(link, point.classes);
    let mut t = String::with_capacity(100 * (point.classes + point.rules) as usize + 200);
    let _ = write!(
        t,
        "[scheduler]\nengine = \"{}\"\negress = \"out0\"\nrate = \"{link}bit\"\nburst = \"{b}\"\n",
        engine.as_str()
    );
    for k in 0..point.classes {
        let _ = write!(
            t,
            "\n[[class]]\nname = \"c{k}\"\nrate = \"{rate}bit\"\nceil = \"{link}bit\"\nburst = \"{b}\"\nqueue = {QUEUE}\n"
        );
    }
    for (i, dst) in (0..point.rules).zip(point.rule_dsts(base)) {
        let _ = write!(
            t,
            "\n[[filter]]\nclass = \"c{}\"\ndst = \"{dst}\"\n",
            i % point.classes
        );
    }
    t
}

/// Leaf k's HTB minor (`tc` reads "1:X" as hex): root 1:1, leaves from 1:2.
fn leaf_minor(k: u32) -> u32 {
    k + 2
}

/// Rules per prio in the `tc -batch` file: a u32 table numbers the filters
/// it is given without a handle 1..=0xfff, so one prio holds at most 4,095.
const U32_PER_PRIO: u32 = 4000;

/// The `tc -batch` file of `point`, as users write it: HTB at the root of
/// out0 (unclassified traffic to a default class below the rest), a root
/// class at the link, N leaves under it (each link/N, ceil the link), and
/// one u32 filter per rule on the destination, linear: `U32_PER_PRIO` to a
/// prio, prios 1, 2, ... in the order of the rules.
///
/// `hashed`: the rules instead in one u32 hash table of 256 buckets keyed
/// on the destination's last byte (`divisor 256`, a `hashkey mask
/// 0x000000ff at 16` filter linking every IPv4 packet to it), each rule in
/// its address's bucket: what an expert writes for a large table.
pub(crate) fn tc_batch(point: ScalePoint, link: u64, base: Ipv4Addr, hashed: bool) -> String {
    let b = burst(link);
    let rate = leaf_rate(link, point.classes);
    let default = leaf_minor(point.classes);
    let low = (link / 1000).max(8000);
    let mut t = String::with_capacity(110 * (point.classes + point.rules) as usize + 400);
    let _ = writeln!(
        t,
        "qdisc replace dev out0 root handle 1: htb default {default:x}"
    );
    let _ = writeln!(
        t,
        "class add dev out0 parent 1: classid 1:1 htb rate {link}bit ceil {link}bit burst {b} cburst {b} quantum 1514"
    );
    for k in 0..point.classes {
        let _ = writeln!(
            t,
            "class add dev out0 parent 1:1 classid 1:{:x} htb rate {rate}bit ceil {link}bit burst {b} cburst {b} prio 0 quantum 1514",
            leaf_minor(k)
        );
    }
    let _ = writeln!(
        t,
        "class add dev out0 parent 1:1 classid 1:{default:x} htb rate {low}bit ceil {link}bit burst {b} cburst {b} prio 7 quantum 1514"
    );
    if hashed {
        let _ = writeln!(
            t,
            "filter add dev out0 parent 1: prio 1 handle 2: protocol ip u32 divisor 256"
        );
        let _ = writeln!(
            t,
            "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 800:: match u32 0 0 hashkey mask 0x000000ff at 16 link 2:"
        );
    }
    for (i, dst) in (0..point.rules).zip(point.rule_dsts(base)) {
        let class = leaf_minor(i % point.classes);
        let _ = if hashed {
            writeln!(
                t,
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 2:{:x}: match ip dst {dst}/32 flowid 1:{class:x}",
                dst.octets()[3]
            )
        } else {
            writeln!(
                t,
                "filter add dev out0 parent 1: protocol ip prio {} u32 match ip dst {dst}/32 flowid 1:{class:x}",
                1 + i / U32_PER_PRIO
            )
        };
    }
    t
}

/// The scale scenario's contenders, in the order they run: tc htb+u32
/// first, so each point's bars show their ratio to it.
const CONTENDERS: [SchedContender; 4] = [
    SchedContender::HtbU32,
    SchedContender::HtbU32Hashed,
    SchedContender::HtbEngine,
    SchedContender::Scheduler,
];

/// A scale scenario's name.
fn scenario_name(point: ScalePoint) -> String {
    format!(
        "{SCALE_PREFIX}, {} classes, {} rules, {FRAME} B",
        point.classes, point.rules
    )
}

/// A file removed when dropped.
struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The longest `tc -batch` of `point` may take: class creation is O(n^2)
/// in the kernel, and each u32 filter is appended to a linear list.
fn tc_limit(point: ScalePoint) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(3) * (point.classes + point.rules)
}

/// The longest `qos serve` of `point` may take to be ready.
fn serve_limit(point: ScalePoint) -> Duration {
    Duration::from_secs(60)
        + Duration::from_millis(20) * point.classes
        + Duration::from_millis(1) * point.rules
}

/// Runs `tc -batch` of `batch` in namespace `dut` within `limit`: HTB on
/// dut:out0 (removed when the guard drops, also after a failure part-way)
/// and the seconds tc took.
fn install_tc(dut: &str, batch: &str, limit: Duration) -> Result<(Htb, f64)> {
    let path = std::env::temp_dir().join(format!(
        "peregrine-bench-qos-scale-{}.batch",
        std::process::id()
    ));
    std::fs::write(&path, batch).with_context(|| format!("writing {}", path.display()))?;
    let file = TempFile(path);
    // Made first: what a failed or interrupted batch left goes too.
    let on = Htb(dut.to_string());
    let start = Instant::now();
    let mut child = Reaped(
        netns::command(dut, "tc")?
            .arg("-batch")
            .arg(&file.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running tc -batch (iproute2)")?,
    );
    let stderr = child.0.stderr.take();
    // Dropping `child` on a timeout kills it; `on` removes what it made.
    let (status, err) = wait_reading(&mut child, stderr, limit, "tc -batch")?;
    let took = start.elapsed().as_secs_f64();
    if !status.success() {
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        bail!(
            "tc -batch ({status}): {}",
            tail.into_iter().rev().collect::<Vec<_>>().join("; ")
        );
    }
    Ok((on, took))
}

/// A contender in place; removed when dropped.
enum Installed {
    Tc(#[allow(dead_code)] Htb),
    Serve(#[allow(dead_code)] Scheduler),
}

/// Puts contender `c` of `point` on the DUT: it, and the seconds it took
/// (tc: the `tc -batch` process; an engine: the file parsed, applied and
/// scheduling, as `qos serve FILE` does).
fn install(
    p: &Path,
    c: SchedContender,
    point: ScalePoint,
    base: Ipv4Addr,
) -> Result<(Installed, f64)> {
    let dut = p.lab.ns("dut");
    match c {
        SchedContender::HtbU32 | SchedContender::HtbU32Hashed => {
            let hashed = c == SchedContender::HtbU32Hashed;
            let batch = tc_batch(point, LINK, base, hashed);
            let (on, secs) = install_tc(&dut, &batch, tc_limit(point))?;
            Ok((Installed::Tc(on), secs))
        }
        SchedContender::HtbEngine | SchedContender::Scheduler => {
            let engine = if c == SchedContender::HtbEngine {
                Engine::Htb
            } else {
                Engine::Afxdp
            };
            let text = scale_toml(point, engine, LINK, base);
            let start = Instant::now();
            let cfg = PolicerConfig::parse(&text).context("the scale scenario's class file")?;
            let s = Scheduler::start_config(&dut, cfg, p.dut_cpu, serve_limit(point))?;
            Ok((Installed::Serve(s), start.elapsed().as_secs_f64()))
        }
        _ => bail!("{}: not a contender of the scale scenario", c.label()),
    }
}

/// How contender `c` was installed, for its row's notes.
fn how(c: SchedContender) -> &'static str {
    match c {
        SchedContender::HtbU32 => {
            "one `tc -batch` process in the DUT's namespace (qdisc, classes, one `u32 match ip dst A/32 flowid 1:X` filter per rule, linear, 4,000 to a prio: a u32 table numbers at most 4,095)"
        }
        SchedContender::HtbU32Hashed => {
            "one `tc -batch` process in the DUT's namespace (qdisc, classes, a u32 hash table of 256 buckets keyed on the destination's last byte, one `u32 ht 2:B: match ip dst A/32 flowid 1:X` filter per rule in its bucket)"
        }
        SchedContender::HtbEngine => {
            "`qos serve` with engine = \"htb\": the file parsed, the rules as a tc policer on dut:in0, the HTB tree through netlink on dut:out0, the classifier at its tcx egress"
        }
        _ => "`qos serve` with engine = \"afxdp\": the file parsed, the XDP policer on dut:in0, the AF_XDP scheduler sending out of dut:out0",
    }
}

/// The scale scenario of one round: every point of `points`, every
/// contender that takes it.
pub(crate) fn scenario(p: &Path, points: &[ScalePoint], round: u32, rec: &mut Rec) -> Result<()> {
    if points.is_empty() {
        return Ok(());
    }
    let base = match p.frame.dst_ip {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => bail!("the scale scenario sends IPv4; the frame goes to {a}"),
    };
    for &point in points {
        let scenario = scenario_name(point);
        let mut spec = TrafficSpec::live(
            p.lab.ns("gen"),
            "eth0".into(),
            p.frame.clone(),
            FrameSizes::Fixed(FRAME),
            point.flows(),
        );
        spec.vary = FlowVary::Destination;
        let (s, nflows) = (point.stride(), spec.flows);
        let shape = format!(
            "{} leaf classes under a {} Gbit/s root (each assured link/{}, ceil the link: never binding), {} rules on the destination /32 (rule i to class i % {}); {nflows} flows by destination from {base}, {}; {FRAME} B, generator unpaced",
            point.classes,
            LINK / 1_000_000_000,
            point.classes,
            point.rules,
            point.classes,
            if s == 1 {
                "one per rule".to_string()
            } else {
                format!("one per {s} rules, spread over the table and every class (the others match addresses nothing is sent to)")
            }
        );
        let afxdp_skipped = point.classes > afxdp_max_classes();
        for c in CONTENDERS {
            signals::check()?;
            if c == SchedContender::Scheduler && afxdp_skipped {
                eprintln!(
                    "  {}: skipped at {} classes (the afxdp engine takes at most {})",
                    c.label(),
                    point.classes,
                    afxdp_max_classes()
                );
                continue;
            }
            let label = crate::common::announce(c.label(), &scenario, round);
            eprintln!(
                "  installing {} classes and {} rules",
                point.classes, point.rules
            );
            let mut values = SchedValues {
                classes: Some(point.classes),
                rules: Some(point.rules),
                ..Default::default()
            };
            let mut notes = vec![format!("{}: {shape}", c.label())];
            if afxdp_skipped {
                notes.push(format!(
                    "{} not run at this point: {} classes, the afxdp engine takes at most {}",
                    SchedContender::Scheduler.label(),
                    point.classes,
                    afxdp_max_classes()
                ));
            }
            let (on, secs) = match install(p, c, point, base) {
                Ok(x) => x,
                Err(e) => {
                    // Ctrl-C ends the run; a contender that cannot be
                    // installed is a row that says why.
                    signals::check()?;
                    eprintln!("  {}: not installed: {e:#}", c.label());
                    notes.push(format!("{}: not installed: {e:#}", c.label()));
                    let placement = peregrine_lab::results::Placement {
                        notes,
                        ..Default::default()
                    };
                    let params = crate::common::params(&spec, "xdp drop sink sink:eth0");
                    rec.add(
                        &scenario,
                        c,
                        run_of(label, params, Vec::new(), placement, values),
                    );
                    continue;
                }
            };
            eprintln!("  installed in {secs:.2} s");
            notes.push(format!(
                "{}: installed in {secs:.2} s by {}",
                c.label(),
                how(c)
            ));
            let gen = Generator::new(
                spec.clone(),
                Some((p.lab.ns(&p.peer.host), p.peer.iface.clone())),
            )?;
            let mut placement = place(p.lab, &spec.cpus, p.dut_in, p.dut_cpu)?;
            placement.notes.extend(notes);
            let setup = trial_setup(&gen, p.sink, p.drops, p.trial, FRAME as f64, 1.0);
            let t = shown_trial(&setup, &label, "max", Rate::Max, &mut progress_line(&label))?;
            let kpps = t.steady_delivered_pps() / 1e3;
            eprintln!("  delivered {kpps:.1} kpps");
            values.delivered_kpps = Some(kpps);
            values.setup_s = Some(secs);
            rec.trial(&scenario, c, label, &spec, t, placement, values);
            drop(on);
        }
    }
    Ok(())
}

/// The median of what `value` reads from `of`'s figures, if any has it.
fn median_of(of: &[&SchedFigure], value: impl Fn(&SchedValues) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = of.iter().filter_map(|f| value(&f.values)).collect();
    (!v.is_empty()).then(|| peregrine_lab::compare::median(&v))
}

/// The summary's line of scale scenario `s`: each contender's kpps and
/// setup seconds (medians over rounds), and htb engine / tc htb+u32.
/// The scale scenario's medians over rounds, one block per point.
pub(crate) fn summary(figures: &[SchedFigure]) {
    let scenarios = crate::common::in_first_seen_order(figures.iter().map(|f| f.scenario.as_str()));
    let points: Vec<&str> = scenarios.into_iter().filter(|s| is_scale(s)).collect();
    if points.is_empty() {
        return;
    }
    println!("Scale, medians over rounds:");
    for s in points {
        println!("{}", summary_line(s, figures));
    }
}

fn summary_line(s: &str, figures: &[SchedFigure]) -> String {
    let mut line = format!("{s}:");
    let mut kpps_of = |c: SchedContender| {
        let of: Vec<&SchedFigure> = figures
            .iter()
            .filter(|f| f.scenario == s && f.contender == c)
            .collect();
        let kpps = median_of(&of, |v| v.delivered_kpps);
        let setup = median_of(&of, |v| v.setup_s);
        line.push_str(&format!("\n  {}: ", c.label()));
        match (of.is_empty(), kpps) {
            (true, _) if c == SchedContender::Scheduler => {
                line.push_str(&format!(
                    "not run (the afxdp engine takes at most {} classes)",
                    afxdp_max_classes()
                ));
            }
            (true, _) => line.push_str("not run"),
            (false, None) => line.push_str("not installed (see its run's notes)"),
            (false, Some(k)) => {
                line.push_str(&format!("{k:.1} kpps"));
                if let Some(t) = setup {
                    line.push_str(&format!(", installed in {t:.2} s"));
                }
            }
        }
        kpps
    };
    let tc = kpps_of(SchedContender::HtbU32);
    let hashed = kpps_of(SchedContender::HtbU32Hashed);
    let engine = kpps_of(SchedContender::HtbEngine);
    kpps_of(SchedContender::Scheduler);
    for (peer, kpps) in [
        (SchedContender::HtbU32, tc),
        (SchedContender::HtbU32Hashed, hashed),
    ] {
        line.push_str(&format!("\n  htb engine / {}: ", peer.label()));
        match (engine, kpps) {
            (Some(e), Some(t)) => line.push_str(&format!("{:.2}x", e / t.max(1e-9))),
            _ => line.push('-'),
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

    #[test]
    fn points_parse_as_documented() {
        let d: ScalePoints = DEFAULT_POINTS.parse().unwrap();
        assert_eq!(
            d.0,
            vec![
                ScalePoint {
                    classes: 1,
                    rules: 1
                },
                ScalePoint {
                    classes: 1000,
                    rules: 10_000
                },
                ScalePoint {
                    classes: 10_000,
                    rules: 100_000
                },
            ]
        );
        assert!("none".parse::<ScalePoints>().unwrap().0.is_empty());
        assert_eq!(
            " 3:5 ".parse::<ScalePoints>().unwrap().0,
            vec![ScalePoint {
                classes: 3,
                rules: 5
            }]
        );
        for bad in ["1000", "a:1", "0:1", "1:0", "16384:1", "1:120001", "1:1,"] {
            assert!(bad.parse::<ScalePoints>().is_err(), "{bad}");
        }
        assert!("16383:120000".parse::<ScalePoints>().is_ok());
    }

    #[test]
    fn the_batch_file_is_one_command_per_class_and_rule() {
        let p = ScalePoint {
            classes: 3,
            rules: 5,
        };
        let batch = tc_batch(p, 300_000_000, BASE, false);
        let want = "\
qdisc replace dev out0 root handle 1: htb default 5
class add dev out0 parent 1: classid 1:1 htb rate 300000000bit ceil 300000000bit burst 37500 cburst 37500 quantum 1514
class add dev out0 parent 1:1 classid 1:2 htb rate 100000000bit ceil 300000000bit burst 37500 cburst 37500 prio 0 quantum 1514
class add dev out0 parent 1:1 classid 1:3 htb rate 100000000bit ceil 300000000bit burst 37500 cburst 37500 prio 0 quantum 1514
class add dev out0 parent 1:1 classid 1:4 htb rate 100000000bit ceil 300000000bit burst 37500 cburst 37500 prio 0 quantum 1514
class add dev out0 parent 1:1 classid 1:5 htb rate 300000bit ceil 300000000bit burst 37500 cburst 37500 prio 7 quantum 1514
filter add dev out0 parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.1/32 flowid 1:2
filter add dev out0 parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.2/32 flowid 1:3
filter add dev out0 parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.3/32 flowid 1:4
filter add dev out0 parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.4/32 flowid 1:2
filter add dev out0 parent 1: protocol ip prio 1 u32 match ip dst 198.19.0.5/32 flowid 1:3
";
        assert_eq!(batch, want);
        // tc reads the minors as hex: leaf 15 is 1:11, and 1,000 leaves
        // end at 1:3e9 with the default class at 1:3ea.
        let big = tc_batch(
            ScalePoint {
                classes: 1000,
                rules: 1000,
            },
            LINK,
            BASE,
            false,
        );
        assert!(big.contains(" classid 1:11 htb rate 10000000bit "));
        assert!(big.starts_with("qdisc replace dev out0 root handle 1: htb default 3ea\n"));
        assert!(big.contains(" classid 1:3e9 htb "));
        assert_eq!(big.lines().count(), 1 + 1 + 1000 + 1 + 1000);
        // 4,000 rules to a prio: rule 3,999 is the last of prio 1.
        let huge = tc_batch(
            ScalePoint {
                classes: 10,
                rules: 10_000,
            },
            LINK,
            BASE,
            false,
        );
        let prios: Vec<&str> = huge
            .lines()
            .filter(|l| l.starts_with("filter "))
            .map(|l| l.split(" prio ").nth(1).unwrap().split(' ').next().unwrap())
            .collect();
        assert_eq!(prios.len(), 10_000);
        assert_eq!((prios[3999], prios[4000], prios[9999]), ("1", "2", "3"));
        // Hashed: the same classes, then the table, the link to it, and
        // each rule in its destination's bucket.
        let hashed = tc_batch(p, 300_000_000, BASE, true);
        let filters: Vec<&str> = hashed.lines().skip(6).collect();
        assert_eq!(
            filters,
            [
                "filter add dev out0 parent 1: prio 1 handle 2: protocol ip u32 divisor 256",
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 800:: match u32 0 0 hashkey mask 0x000000ff at 16 link 2:",
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 2:1: match ip dst 198.19.0.1/32 flowid 1:2",
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 2:2: match ip dst 198.19.0.2/32 flowid 1:3",
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 2:3: match ip dst 198.19.0.3/32 flowid 1:4",
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 2:4: match ip dst 198.19.0.4/32 flowid 1:2",
                "filter add dev out0 parent 1: protocol ip prio 1 u32 ht 2:5: match ip dst 198.19.0.5/32 flowid 1:3",
            ]
        );
        assert_eq!(
            &hashed[..hashed.find("filter").unwrap()],
            &batch[..batch.find("filter").unwrap()]
        );
    }

    #[test]
    fn the_files_parse_with_every_class_and_filter() {
        for (point, engine) in [
            (
                ScalePoint {
                    classes: 3,
                    rules: 5,
                },
                Engine::Htb,
            ),
            (
                ScalePoint {
                    classes: 1000,
                    rules: 10_000,
                },
                Engine::Htb,
            ),
            (
                ScalePoint {
                    classes: 63,
                    rules: 100,
                },
                Engine::Afxdp,
            ),
        ] {
            let cfg = PolicerConfig::parse(&scale_toml(point, engine, LINK, BASE)).unwrap();
            let sc = cfg.scheduler.as_ref().unwrap();
            assert_eq!(sc.engine, engine);
            assert_eq!(sc.egress, "out0");
            assert_eq!(sc.link_bps, LINK);
            assert_eq!(sc.classes.len(), point.classes as usize);
            assert!(sc.classes.iter().all(|c| c.parent.is_none()
                && c.ceil_bps == LINK
                && c.rate_bps == LINK / u64::from(point.classes)));
            assert_eq!(cfg.rules.len(), point.rules as usize);
            let dsts = point.rule_dsts(BASE);
            for (i, r) in cfg.rules.iter().enumerate() {
                // Class ids are positions from 1: rule i to class i % N.
                assert_eq!(u32::from(r.class), i as u32 % point.classes + 1, "rule {i}");
                let dst = r.matches.dst.as_ref().unwrap();
                assert_eq!(dst.addr, IpAddr::V4(dsts[i]));
                assert_eq!(dst.len, 32);
            }
        }
        // 64 classes are more than the afxdp engine takes: the scenario
        // runs it only at 63 or fewer.
        let over = ScalePoint {
            classes: 64,
            rules: 64,
        };
        assert!(PolicerConfig::parse(&scale_toml(over, Engine::Afxdp, LINK, BASE)).is_err());
        assert_eq!(afxdp_max_classes(), 63);
    }

    #[test]
    fn the_flows_hit_rules_spread_over_the_whole_table_and_every_class() {
        let point = |classes, rules| ScalePoint { classes, rules };
        // Up to 65,000 rules: a flow per rule, every rule hit, in order.
        for p in [point(1, 1), point(1000, 10_000), point(7, 65_000)] {
            assert_eq!(p.flows(), p.rules);
            let dsts = p.rule_dsts(BASE);
            for (i, a) in dsts.iter().enumerate() {
                assert_eq!(u32::from(*a), u32::from(BASE) + i as u32);
            }
        }
        for (p, flows) in [
            (point(10_000, 100_000), 50_000),
            (point(1001, 100_000), 50_000),
            (point(1, MAX_RULES), 60_000),
            (point(16_383, MAX_RULES), 60_000),
        ] {
            assert_eq!(p.flows(), flows, "{p:?}");
            let dsts = p.rule_dsts(BASE);
            let traffic = u32::from(BASE)..u32::from(BASE) + flows;
            // Within the sink's /16 (what the DUT routes there).
            assert!(traffic.end - 1 <= 0xC613_FFFF);
            let mut seen = std::collections::HashSet::new();
            let (mut classes, mut per_tenth) = (vec![false; p.classes as usize], [0u32; 10]);
            let mut last_hit = 0;
            for (i, a) in dsts.iter().enumerate() {
                let (i, a) = (i as u32, u32::from(*a));
                assert!(seen.insert(a), "{p:?}: rule {i}: {a:x} twice");
                // Lab addresses only (198.18.0.0/15).
                assert!((0xC612_0000..=0xC613_FFFF).contains(&a));
                if traffic.contains(&a) {
                    // Flow k hits the k-th rule hit, in table order.
                    assert_eq!(a - u32::from(BASE), per_tenth.iter().sum::<u32>());
                    classes[(i % p.classes) as usize] = true;
                    per_tenth[(i * 10 / p.rules) as usize] += 1;
                    // At most two rules between two hit (where N rules turn).
                    assert!(i - last_hit <= 3, "{p:?}: rule {i}");
                    last_hit = i;
                } else {
                    assert!(a < 0xC613_0000, "{p:?}: rule {i}: {a:x}");
                }
            }
            // Every class gets traffic, every tenth of the table a tenth.
            assert!(classes.iter().all(|&c| c), "{p:?}");
            for n in per_tenth {
                assert!(n.abs_diff(flows / 10) <= 1, "{p:?}: {per_tenth:?}");
            }
        }
        // The rule a flow hits at 10,000 classes: the even rules of the
        // first 10,000, the odd of the next, ...
        let p = point(10_000, 100_000);
        let dsts = p.rule_dsts(BASE);
        assert_eq!(dsts[0], BASE);
        assert_eq!(dsts[1], Ipv4Addr::new(198, 18, 16, 0));
        assert_eq!(dsts[2], Ipv4Addr::new(198, 19, 0, 2));
        assert_eq!(dsts[10_001], Ipv4Addr::new(198, 19, 19, 137)); // BASE + 5000
        assert_eq!(dsts[10_000], Ipv4Addr::new(198, 18, 35, 136)); // unhit 5000
    }

    #[test]
    fn scale_scenarios_are_told_apart() {
        let s = scenario_name(ScalePoint {
            classes: 1000,
            rules: 10_000,
        });
        assert_eq!(s, "scale, 1000 classes, 10000 rules, 64 B");
        assert!(is_scale(&s));
        assert!(!is_scale("saturation, 64 B"));
    }
}
