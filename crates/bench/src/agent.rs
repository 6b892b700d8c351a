//! `peregrine bench agent`: the node agent's control plane, measured as a
//! user runs it (the `peregrine agent` binary in a namespace made here,
//! its declaration applied over its socket):
//!
//! - applying a node of N router ports (tc) and a policer of M rules, from
//!   nothing, then the same declaration again (adopted: nothing changes);
//! - a new agent after `kill -9` adopting that node (time until ready);
//! - reconcile after a declared port appears (`ip link add` to the port's
//!   program running, read from its pins): p50, p99, max of S samples;
//! - the agent's resident memory, idle, with that node applied;
//! - UDP through two more router ports, the first policed, at half of what
//!   one sendmmsg sender pushes through them, while the agent is killed
//!   (-9) and started again: datagrams lost (goal 0), and the router's and
//!   the policer's counters must show every delivered one.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use peregrine_agent::control::{self, Reply, Request};
use peregrine_dataplane::pins;
use peregrine_dataplane::{PinScope, TcAttach};
use peregrine_host::nl::Netlink;
use peregrine_host::{netns, signals};
use peregrine_lab::iopath::{self, IoPath, Receiver, RecvConfig, SendConfig, SendReport};
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_lab::plot::{Bar, BarGroup, Chart, Figure};
use peregrine_lab::results::{ResultFile, Run, RunParams, Values};
use serde::{Deserialize, Serialize};

use crate::common::{command_line, ResultOutput};
use crate::report::Report;

/// `peregrine bench agent`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-agent")))]
pub struct AgentBenchConfig {
    /// Router ports of the node applied (veth pairs made by the bench).
    #[arg(long, default_value_t = 100)]
    pub ports: usize,
    /// Policer rules of the node applied (on its first port).
    #[arg(long, default_value_t = 10_000)]
    pub rules: usize,
    /// Samples of the reconcile latency after a port appears.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Rounds of the apply, re-apply and adopt measures.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// How the router's ports at tc are attached, each measured in turn
    /// (the apply, re-apply, adopt and reconcile rows): tcx links, cls_bpf
    /// filters.
    #[arg(long, value_delimiter = ',', default_value = "tcx,cls")]
    pub tc_attach: Vec<TcAttach>,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// What each run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentValues {
    #[serde(rename = "seconds", default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    #[serde(rename = "p50 ms", default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(rename = "p99 ms", default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    #[serde(rename = "max ms", default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    #[serde(rename = "rss mb", default, skip_serializing_if = "Option::is_none")]
    pub rss_mb: Option<f64>,
    /// Router ports and policer rules of the node measured.
    #[serde(rename = "ports", default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<f64>,
    #[serde(rename = "rules", default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<f64>,
    /// Through a restart: datagrams sent, and those that never arrived.
    #[serde(rename = "sent", default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<f64>,
    #[serde(rename = "lost", default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<f64>,
    /// The rate sent through the restart, and the path's saturation.
    #[serde(rename = "rate kpps", default, skip_serializing_if = "Option::is_none")]
    pub rate_kpps: Option<f64>,
    #[serde(
        rename = "saturation kpps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub saturation_kpps: Option<f64>,
}

impl Values for AgentValues {
    fn is_empty(&self) -> bool {
        *self == AgentValues::default()
    }
}

/// The measures, by run label, and the goal for each.
const APPLY: &str = "apply a node from nothing";
const REAPPLY: &str = "apply it again (nothing to change)";
const ADOPT: &str = "a new agent after kill -9 (first pass done)";
const RECONCILE: &str = "reconcile after a port appears";
const RSS: &str = "agent RSS, idle";
const RESTART: &str = "traffic through kill -9 and restart";

/// An agent in namespace `ns` with its own run directory; dropping it
/// applies an empty declaration (everything it made goes) and stops it.
struct AgentProc {
    ns: String,
    dir: PathBuf,
    exe: PathBuf,
    child: Option<Child>,
}

impl AgentProc {
    fn socket(&self) -> PathBuf {
        self.dir.join("run/agent.sock")
    }

    fn start(exe: &Path, ns: &str, dir: &Path) -> Result<AgentProc> {
        std::fs::write(dir.join("node.toml"), "")?;
        let mut a = AgentProc {
            ns: ns.into(),
            dir: dir.into(),
            exe: exe.into(),
            child: None,
        };
        a.spawn()?;
        Ok(a)
    }

    /// Starts the agent; returns once its first pass is done.
    fn spawn(&mut self) -> Result<Duration> {
        let t0 = Instant::now();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns])
            .arg(&self.exe)
            .arg("agent")
            .arg("--config")
            .arg(self.dir.join("node.toml"))
            .env("PEREGRINE_AGENT_DIR", self.dir.join("run"))
            .env("PEREGRINE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting peregrine agent")?;
        self.child = Some(child);
        while t0.elapsed() < Duration::from_secs(20) {
            if let Ok(r) = self.request(&Request::Status) {
                // Its first pass done without an error (the declared
                // port that is not there yet keeps it from `ready`).
                let done = r.status.as_ref().is_some_and(|s| {
                    s["reconciles"].as_u64() > Some(0)
                        && s["errors"].as_array().is_some_and(|e| e.is_empty())
                });
                if done {
                    return Ok(t0.elapsed());
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!(
            "the agent was not ready within 20 s (its log: {})",
            self.dir.join("agent.log").display()
        )
    }

    fn request(&self, r: &Request) -> Result<Reply> {
        control::request(&self.socket(), r).map_err(|e| anyhow::anyhow!(e))
    }

    fn apply(&self, text: &str) -> Result<Duration> {
        let t0 = Instant::now();
        let r = self.request(&Request::Apply {
            name: "bench.toml".into(),
            text: text.into(),
        })?;
        let took = t0.elapsed();
        if !r.ok {
            bail!(
                "the agent refused the bench's declaration: {}",
                r.lines.join("; ")
            );
        }
        Ok(took)
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.apply("");
        }
        if let Some(mut c) = self.child.take() {
            signals::terminate(&mut c, Duration::from_secs(5));
        }
    }
}

/// Namespaces this bench made, deleted when dropped (a killed run's are
/// deleted before they are made again).
struct Owned(Vec<String>);

impl Owned {
    fn create(names: &[&str]) -> Result<Owned> {
        let o = Owned(names.iter().map(|n| n.to_string()).collect());
        for n in &o.0 {
            let _ = netns::delete(n);
        }
        for n in &o.0 {
            netns::create(n)?;
        }
        Ok(o)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = netns::delete(n);
        }
    }
}

/// The bench's namespaces (the node, and the far ends of its ports),
/// removed when dropped.
struct Namespaces {
    node: String,
    far: String,
    _owned: Owned,
}

impl Namespaces {
    fn up(ports: usize) -> Result<Namespaces> {
        let (node, far) = ("pgba-node", "pgba-far");
        let n = Namespaces {
            node: node.into(),
            far: far.into(),
            _owned: Owned::create(&[node, far])?,
        };
        let mut nl = Netlink::new()?;
        for i in 0..ports {
            nl.add_veth(&n.node, &format!("p{i}"), &n.far, &format!("f{i}"), 1, 1500)?;
            nl.set_up(&n.node, &format!("p{i}"))?;
            nl.set_up(&n.far, &format!("f{i}"))?;
        }
        Ok(n)
    }
}

/// A node of `ports` router ports (p0..) at tc attached `how`, plus the
/// declared port `late` (absent), and a policer on p0 of `rules` rules;
/// with `traffic`, also the restart row's ports ps and pd and its policer
/// on ps.
fn declaration(ports: usize, rules: usize, late: &str, traffic: bool, how: TcAttach) -> String {
    use std::fmt::Write;
    let mut t = String::from("[router]\nports = [");
    if traffic {
        t.push_str("\"ps\", \"pd\", ");
    }
    for i in 0..ports {
        let _ = write!(t, "\"p{i}\", ");
    }
    let _ = writeln!(t, "\"{late}\"]\nhook = \"tc\"\ntc_attach = \"{how}\"\n");
    if rules > 0 {
        t.push_str("[[qos]]\niface = \"p0\"\nhook = \"tc\"\n");
        for i in 0..rules {
            let _ = writeln!(
                t,
                "[[qos.rule]]\ndst = \"198.19.{}.{}/32\"\nproto = \"udp\"\nrate = \"10Mbit\"",
                i / 256,
                i % 256
            );
        }
    }
    if traffic {
        t.push_str(TRAFFIC_POLICER);
    }
    t
}

/// The port `iface` of the router pinned for namespace `ns` runs.
fn port_live(dir: &Path, iface: &str) -> bool {
    pins::attachment(dir)
        .ports
        .iter()
        .any(|p| p.iface == iface && p.link.is_some_and(|l| l.live()))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Resident memory (VmRSS) of process `pid`, MB.
pub(crate) fn rss_mb(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")?;
    Ok(kb / 1024.0)
}

fn run(label: &str, params: RunParams, values: AgentValues) -> Run<AgentValues> {
    Run {
        label: label.into(),
        params,
        trials: Vec::new(),
        rfc2544: None,
        placement: None,
        tcp: None,
        values,
    }
}

fn min_med_max(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    (s[0], percentile(&s, 50.0), s[s.len() - 1])
}

/// Runs every measure; the result file, table and plot.
pub fn bench_agent(a: AgentBenchConfig) -> Result<()> {
    peregrine_host::caps::require_bpf("bench agent")?;
    // The agent runs as this binary: `peregrine agent`.
    let exe = std::env::current_exe()?;
    if a.ports == 0 || a.samples == 0 || a.rounds == 0 || a.tc_attach.is_empty() {
        bail!("--ports, --samples and --rounds are at least 1, and --tc-attach names one way");
    }
    let nss = Namespaces::up(a.ports)?;
    let tmp = std::env::temp_dir().join(format!("peregrine-bench-agent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let mut agent = AgentProc::start(&exe, &nss.node, &tmp)?;
    let late = "late0";
    let params = RunParams {
        backend: "agent".into(),
        ..Default::default()
    };
    let mut runs = Vec::new();
    let dir = PinScope::Named(nss.node.clone()).dir()?;
    for (k, &how) in a.tc_attach.iter().enumerate() {
        if k > 0 {
            // The next way attaches every port afresh.
            agent.apply("")?;
        }
        let node = declaration(a.ports, a.rules, late, false, how);
        let params = RunParams {
            backend: format!("{AGENT_AS}{how}"),
            ..Default::default()
        };
        attach_rows(&a, &mut agent, &node, &params, &mut runs)?;
        reconcile_row(&a, &nss, &dir, late, &params, &mut runs)?;
    }
    std::thread::sleep(Duration::from_secs(2));
    idle_and_restart_rows(&a, &mut agent, &nss, late, &params, &mut runs)?;
    drop(agent);
    drop(nss);
    let _ = std::fs::remove_dir_all(&tmp);
    let result = ResultFile::new(BenchAgent::KIND, command_line(), runs);
    a.output.write::<BenchAgent>(&result)
}

/// `v` with the node's size.
fn size(a: &AgentBenchConfig, mut v: AgentValues) -> AgentValues {
    v.ports = Some(a.ports as f64);
    v.rules = Some(a.rules as f64);
    v
}

/// The run backend of the rows measured per way of attaching ports at tc.
const AGENT_AS: &str = "agent, tc ports as ";

/// The apply, re-apply and adopt rows of declaration `node`.
fn attach_rows(
    a: &AgentBenchConfig,
    agent: &mut AgentProc,
    node: &str,
    params: &RunParams,
    runs: &mut Vec<Run<AgentValues>>,
) -> Result<()> {
    let (mut apply, mut reapply, mut adopt) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=a.rounds {
        signals::check()?;
        eprintln!(
            "round {round} ({}): applying {} ports and {} rules",
            params.backend, a.ports, a.rules
        );
        apply.push(agent.apply(node)?.as_secs_f64());
        reapply.push(agent.apply(node)?.as_secs_f64());
        agent.kill9();
        adopt.push(agent.spawn()?.as_secs_f64());
        if round < a.rounds {
            agent.apply("")?;
        }
    }
    for (label, v) in [(APPLY, &apply), (REAPPLY, &reapply), (ADOPT, &adopt)] {
        let (_, med, max) = min_med_max(v);
        eprintln!("  {label}: median {med:.3} s, max {max:.3} s");
        runs.push(run(
            label,
            params.clone(),
            size(
                a,
                AgentValues {
                    seconds: Some(med),
                    max_ms: Some(max * 1e3),
                    ..Default::default()
                },
            ),
        ));
    }
    Ok(())
}

/// The reconcile row: a declared port appears, until it runs (S samples).
fn reconcile_row(
    a: &AgentBenchConfig,
    nss: &Namespaces,
    dir: &Path,
    late: &str,
    params: &RunParams,
    runs: &mut Vec<Run<AgentValues>>,
) -> Result<()> {
    let mut nl = Netlink::new()?;
    let mut samples = Vec::new();
    for _ in 0..a.samples {
        signals::check()?;
        let t0 = Instant::now();
        nl.add_veth(&nss.node, late, &nss.far, "late0f", 1, 1500)?;
        while !port_live(dir, late) {
            if t0.elapsed() > Duration::from_secs(5) {
                bail!("{late} was not attached within 5 s of appearing");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e3);
        nl.del_link(&nss.node, late)?;
        let t1 = Instant::now();
        while port_live(dir, late) || pins::attachment(dir).ports.iter().any(|p| p.iface == late) {
            if t1.elapsed() > Duration::from_secs(5) {
                bail!("{late} was not cleaned up within 5 s of going");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    samples.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&samples, 50.0),
        percentile(&samples, 99.0),
        samples[samples.len() - 1],
    );
    eprintln!(
        "  {RECONCILE}: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms ({} samples)",
        samples.len()
    );
    runs.push(run(
        RECONCILE,
        params.clone(),
        size(
            a,
            AgentValues {
                p50_ms: Some(p50),
                p99_ms: Some(p99),
                max_ms: Some(max),
                ..Default::default()
            },
        ),
    ));
    Ok(())
}

/// The idle memory and restart rows, with the node attached the last
/// way measured.
fn idle_and_restart_rows(
    a: &AgentBenchConfig,
    agent: &mut AgentProc,
    nss: &Namespaces,
    late: &str,
    params: &RunParams,
    runs: &mut Vec<Run<AgentValues>>,
) -> Result<()> {
    let rss = rss_mb(agent.pid().context("the agent runs")?)?;
    eprintln!("  {RSS}: {rss:.1} MB");
    runs.push(run(
        RSS,
        params.clone(),
        size(
            a,
            AgentValues {
                rss_mb: Some(rss),
                ..Default::default()
            },
        ),
    ));
    eprintln!("  {RESTART}: router and policer traffic at 50% of saturation");
    let how = *a.tc_attach.last().expect("one way at least");
    let with_traffic = declaration(a.ports, a.rules, late, true, how);
    let restart = through_restart(agent, &nss.node, &with_traffic)?;
    eprintln!(
        "  {RESTART}: lost {} of {} at {:.0} kpps",
        restart.lost.unwrap_or(0.0),
        restart.sent.unwrap_or(0.0),
        restart.rate_kpps.unwrap_or(0.0)
    );
    runs.push(run(RESTART, params.clone(), size(a, restart)));
    Ok(())
}

/// A run's label and `what`, with the way its router ports were attached
/// at tc.
fn labelled(r: &Run<AgentValues>, what: &str) -> String {
    match r.params.backend.strip_prefix(AGENT_AS) {
        Some(how) => format!("{}{what} ({how})", r.label),
        None => format!("{}{what}", r.label),
    }
}

/// `bench agent`'s result file.
pub struct BenchAgent;

/// Its figure: each measure against its goal.
pub const GOALS_FIGURE: &str = "goals";

/// A measure's figure and the goal for it: (value, goal, unit).
fn against_goal(r: &Run<AgentValues>) -> Option<(f64, f64, &'static str)> {
    let v = &r.values;
    match r.label.as_str() {
        APPLY => Some((v.seconds? * 1e3, 1000.0, "ms")),
        REAPPLY | ADOPT => Some((v.seconds? * 1e3, 1000.0, "ms")),
        RECONCILE => Some((v.p99_ms?, 100.0, "ms")),
        RSS => Some((v.rss_mb?, 50.0, "MB")),
        _ => None,
    }
}

impl Report for BenchAgent {
    const KIND: &'static str = "bench-agent";
    type Values = AgentValues;

    fn table(r: &ResultFile<AgentValues>) -> String {
        use std::fmt::Write;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<52} {:>12} {:>10} {:>8}",
            "measure", "value", "goal", "ratio"
        );
        for run in &r.runs {
            let Some((v, goal, unit)) = against_goal(run) else {
                continue;
            };
            let what = if run.label == RECONCILE { " (p99)" } else { "" };
            let _ = writeln!(
                t,
                "{:<52} {:>9.1} {unit} {:>7} {unit} {:>7.2}x",
                labelled(run, what),
                v,
                format!("<= {goal}"),
                v / goal
            );
        }
        for run in r.runs.iter().filter(|r| r.label == RESTART) {
            let v = &run.values;
            let _ = writeln!(
                t,
                "{:<52} lost {} of {} datagrams at {:.0} kpps (goal: 0), half of the {:.0} kpps one sendmmsg sender pushed through router and policer",
                run.label,
                v.lost.unwrap_or(f64::NAN),
                v.sent.unwrap_or(f64::NAN),
                v.rate_kpps.unwrap_or(f64::NAN),
                v.saturation_kpps.unwrap_or(f64::NAN)
            );
        }
        if let Some(v) = r.runs.first().map(|r| &r.values) {
            let _ = writeln!(
                t,
                "node: {} router ports (tc), a policer of {} rules",
                v.ports.unwrap_or(0.0),
                v.rules.unwrap_or(0.0)
            );
        }
        t
    }

    fn figures(r: &ResultFile<AgentValues>) -> Vec<Figure> {
        let groups = r
            .runs
            .iter()
            .filter_map(|run| {
                let (v, goal, unit) = against_goal(run)?;
                Some(BarGroup {
                    label: labelled(run, ""),
                    bars: vec![Bar {
                        contender: 0,
                        median: v / goal,
                        min: v / goal,
                        max: v / goal,
                        note: format!("{v:.1} {unit}"),
                    }],
                })
            })
            .collect();
        vec![Figure {
            name: GOALS_FIGURE,
            chart: Chart::Bars {
                title: "peregrine agent: each measure over its goal (below 1 meets it)".into(),
                y_desc: "measure / goal".into(),
                legend: vec!["peregrine agent".into()],
                groups,
            },
        }]
    }
}

/// The traffic path of the restart measure: namespace `src` (s0,
/// 198.18.20.2) -> the node's router ports ps and pd (a policer on ps) ->
/// namespace `dst` (d0, 198.18.21.2); removed when dropped.
struct TrafficPath {
    src: String,
    dst: String,
    _owned: Owned,
}

/// Where the restart measure's datagrams go.
const TRAFFIC_DST: &str = "198.18.21.2:9000";

impl TrafficPath {
    fn up(node: &str) -> Result<TrafficPath> {
        let (src, dst) = ("pgba-src", "pgba-dst");
        let t = TrafficPath {
            src: src.into(),
            dst: dst.into(),
            _owned: Owned::create(&[src, dst])?,
        };
        let mut nl = Netlink::new()?;
        nl.add_veth(&t.src, "s0", node, "ps", 1, 1500)?;
        nl.add_veth(node, "pd", &t.dst, "d0", 1, 1500)?;
        for (ns, dev, ip) in [
            (t.src.as_str(), "s0", "198.18.20.2"),
            (node, "ps", "198.18.20.1"),
            (node, "pd", "198.18.21.1"),
            (t.dst.as_str(), "d0", "198.18.21.2"),
        ] {
            nl.add_addr(ns, dev, ip.parse()?, 24)?;
            nl.set_up(ns, dev)?;
        }
        let any = "0.0.0.0".parse()?;
        nl.add_route(&t.src, any, 0, Some("198.18.20.1".parse()?), None)?;
        nl.add_route(&t.dst, any, 0, Some("198.18.21.1".parse()?), None)?;
        // The node routes (the router's FIB lookups need forwarding on).
        netns::run_in(node, || {
            netns::write_sysctl("net.ipv4.conf.all.forwarding", "1")
        })??;
        Ok(t)
    }

    /// Sends numbered datagrams from `src` at `rate` for `secs`.
    fn send(src: &str, rate: Rate, secs: f64) -> Result<SendReport> {
        let progress = AtomicU64::new(0);
        let report = netns::run_in(src, || -> Result<SendReport> {
            let mut cfg = SendConfig::toward(
                IoPath::Mmsg,
                TRAFFIC_DST.parse()?,
                40000,
                64,
                Limit {
                    count: None,
                    duration: Some(Duration::from_secs_f64(secs)),
                },
            )?;
            cfg.rate = rate;
            Ok(iopath::send(&cfg, &progress)?)
        })??;
        Ok(report)
    }

    fn receiver(&self) -> Result<Receiver> {
        Ok(Receiver::start(
            Some(&self.dst),
            RecvConfig {
                path: IoPath::Mmsg,
                iface: "d0".into(),
                local: TRAFFIC_DST.parse()?,
            },
            None,
        )?)
    }
}

/// The restart row's policer on ps: every datagram of the measure matches
/// its rule and conforms to it.
const TRAFFIC_POLICER: &str = "[[qos]]\niface = \"ps\"\nhook = \"tc\"\n[[qos.rule]]\ndst = \"198.18.21.0/24\"\nproto = \"udp\"\nrate = \"10Gbit\"\n";

/// Router-forwarded datagrams on `port` and conforming ones of the
/// policer on ps, read from the pins in namespace `node`.
fn stage_counts(node: &str, port: &str) -> Result<(u64, u64)> {
    let dir = PinScope::Named(node.into()).dir()?;
    let forward = (0..peregrine_bpf::router::ACTIONS)
        .find(|&a| peregrine_bpf::router::action_name(a) == "forward")
        .context("the router counts forward")?;
    let routed = peregrine_dataplane::router::stats(&dir)?
        .into_iter()
        .find(|(n, _, _)| n == port)
        .map(|(_, _, st)| st.packets[forward])
        .with_context(|| format!("no router port {port}"))?;
    let policed = netns::run_in(node, || peregrine_qos::attach::stats("ps"))??
        .rules
        .iter()
        .map(|(_, c)| c.conform_packets)
        .sum();
    Ok((routed, policed))
}

/// Router and policer traffic at 50% of the path's saturation while the
/// agent is killed (-9) and started again: every datagram sent must
/// arrive, through both stages (their counters say so).
fn through_restart(agent: &mut AgentProc, node: &str, decl: &str) -> Result<AgentValues> {
    let path = TrafficPath::up(node)?;
    agent.apply(decl)?;
    // Saturation of this path (its first datagrams also resolve the
    // neighbours): as fast as the sender goes for 1 s, what arrived.
    let rx = path.receiver()?;
    let sat = TrafficPath::send(&path.src, Rate::Max, 1.0)?;
    let (got, _) = rx.finish(Some(sat.sent), Duration::from_secs(3))?;
    let saturation = got.packets as f64 / sat.elapsed_s.max(1e-3);
    if saturation < 1000.0 {
        bail!("the traffic path carried {saturation:.0} datagrams/s: it does not route");
    }
    let rate = saturation / 2.0;
    let before = stage_counts(node, "ps")?;
    let rx = path.receiver()?;
    let src = path.src.clone();
    let sender = std::thread::spawn(move || TrafficPath::send(&src, Rate::Pps(rate), 4.0));
    std::thread::sleep(Duration::from_secs(1));
    agent.kill9();
    agent.spawn()?;
    let sent = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender thread panicked"))??;
    let (got, _) = rx.finish(Some(sent.sent), Duration::from_secs(3))?;
    let after = stage_counts(node, "ps")?;
    let (Some(routed), Some(policed)) =
        (after.0.checked_sub(before.0), after.1.checked_sub(before.1))
    else {
        bail!("the router's or the policer's counters went back through the restart: it was rebuilt, not adopted");
    };
    if routed < got.packets || policed < got.packets {
        bail!(
            "{} datagrams arrived, but the router forwarded {routed} and the policer passed {policed} on ps: they did not all go through both",
            got.packets
        );
    }
    Ok(AgentValues {
        sent: Some(sent.sent as f64),
        lost: Some(sent.sent.saturating_sub(got.packets) as f64),
        rate_kpps: Some(rate / 1e3),
        saturation_kpps: Some(saturation / 1e3),
        ..Default::default()
    })
}
