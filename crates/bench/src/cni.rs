//! `peregrine bench cni`: pod networking as a runtime makes it, issue 26's
//! goals against the reference `bridge` chain. A node namespace runs
//! `peregrine agent` (a fresh node each round: the router's port table
//! ends at ifindex 1024, and one node's ~1000 veths reach it); pods are
//! namespaces made here; their interfaces are
//! made by each contender's CNI chain through the reference `cnitool`
//! (libcni, what containerd uses), as a runtime does. Contenders:
//!
//! - `bridge`: bridge (isGateway) + host-local, the baseline;
//! - `bridge+peregrine`: the same, then peregrine-cni chained (deploy/'s
//!   Kubernetes default): the bridge's veths become router ports;
//! - `peregrine`: peregrine-cni standalone with host-local: pods routed by
//!   the agent's router (tc, `bpf_redirect_peer`);
//! - `ptp`: the reference ptp + host-local (kernel routing, the analogue
//!   of standalone).
//!
//! Each round runs every contender in turn: iperf3 TCP pod to pod (Gbit/s,
//! CPU per Gbit/s over the run), 64 B UDP pod to pod unpaced (one sendmmsg
//! sender, one recvmmsg receiver: pps delivered), then N pods added one by
//! one and deleted (ADD and DEL latency of cnitool), and what those N left
//! behind (veths in the node, host-local leases, libcni's result cache,
//! the agent's pods, router ports; goal 0).
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use peregrine_agent::control::{self, Request};
use peregrine_dataplane::{pins, PinScope, TcAttach};
use peregrine_host::nl::Netlink;
use peregrine_host::{netns, signals};
use peregrine_lab::iopath::{self, IoPath, Receiver, RecvConfig, SendConfig, SendReport};
use peregrine_lab::pacing::Limit;
use peregrine_lab::plot::{Bar, BarGroup, Chart, Figure};
use peregrine_lab::results::{ResultFile, Run, RunParams, TcpFigure, Values};
use serde::{Deserialize, Serialize};

use crate::common::{command_line, ResultOutput};
use crate::report::Report;
use crate::tcp::{self, TcpTransfer};

/// Where scripts/k8s/build.sh leaves the reference plugins and cnitool.
const PLUGINS: &str = "/var/cache/peregrine/cni/v1.10.0/bin";
const CNITOOL: &str = "/var/cache/peregrine/tools/bin/cnitool";
/// libcni's result cache (cnitool has no flag for another).
const RESULTS_CACHE: &str = "/var/lib/cni/results";

/// The contenders `bench cni` runs unless told (`--contenders`).
const CONTENDERS: &str = "bridge,bridge+peregrine,peregrine,ptp";

/// `peregrine bench cni`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-cni")))]
pub struct CniBenchConfig {
    /// Contenders, side by side: bridge (the baseline), bridge+peregrine,
    /// peregrine, ptp.
    #[arg(long, value_delimiter = ',', default_value = CONTENDERS)]
    pub contenders: Vec<Contender>,
    /// Rounds; each runs every contender once, in turn, on a fresh node.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Pods added one by one (and deleted) per contender and round.
    #[arg(long, default_value_t = 100)]
    pub pods: usize,
    /// Length of each TCP and UDP measure.
    #[arg(long, default_value = "3s", value_parser = crate::common::duration)]
    pub trial: Duration,
    /// Parallel TCP streams (iperf3 -P).
    #[arg(long, default_value_t = 1)]
    pub streams: u32,
    /// One round, 5 pods, 1 s trials (a smoke run).
    #[arg(long)]
    pub quick: bool,
    /// The reference CNI plugins (bridge, ptp, host-local).
    #[arg(long, default_value = PLUGINS)]
    pub plugins: PathBuf,
    /// The reference cnitool.
    #[arg(long, default_value = CNITOOL)]
    pub cnitool: PathBuf,
    /// How the agent's router attaches the pods' ports at tc: tcx (a link
    /// a port) or cls (a cls_bpf filter a port: the node's `[router]
    /// tc_attach = "cls"`). The peregrine contenders' labels say "(cls)".
    #[arg(long, default_value = "tcx")]
    pub tc_attach: TcAttach,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// A CNI chain under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Bridge,
    BridgePeregrine,
    Peregrine,
    Ptp,
}

impl Contender {
    pub fn as_str(self) -> &'static str {
        match self {
            Contender::Bridge => "bridge",
            Contender::BridgePeregrine => "bridge+peregrine",
            Contender::Peregrine => "peregrine",
            Contender::Ptp => "ptp",
        }
    }

    /// Short name in namespaces and networks (none a prefix of another
    /// followed by '-').
    fn short(self) -> &'static str {
        match self {
            Contender::Bridge => "br",
            Contender::BridgePeregrine => "brpg",
            Contender::Peregrine => "pg",
            Contender::Ptp => "ptp",
        }
    }

    /// The CNI network (conflist) name.
    fn net(self) -> String {
        format!("pgbc-{}", self.short())
    }

    /// Its pods' subnet, inside 198.18.0.0/15.
    fn subnet(self) -> String {
        let third = match self {
            Contender::Bridge => 10,
            Contender::BridgePeregrine => 11,
            Contender::Peregrine => 12,
            Contender::Ptp => 13,
        };
        format!("198.19.{third}.0/24")
    }

    /// peregrine's agent holds its pods (they are router ports).
    fn routed(self) -> bool {
        matches!(self, Contender::BridgePeregrine | Contender::Peregrine)
    }

    /// The conflist's plugins.
    fn plugins(self, socket: &Path, ipam_dir: &Path) -> serde_json::Value {
        let ipam = |routes: bool| {
            let mut v = serde_json::json!({
                "type": "host-local",
                "ranges": [[{"subnet": self.subnet()}]],
                "dataDir": ipam_dir,
            });
            if routes {
                v["routes"] = serde_json::json!([{"dst": "0.0.0.0/0"}]);
            }
            v
        };
        let bridge = |name: &str| {
            serde_json::json!({
                "type": "bridge", "bridge": name, "isGateway": true, "ipam": ipam(false),
            })
        };
        let peregrine = serde_json::json!({"type": "peregrine-cni", "agentSocket": socket});
        match self {
            Contender::Bridge => serde_json::json!([bridge("pgbcbr0")]),
            Contender::BridgePeregrine => serde_json::json!([bridge("pgbcbr1"), peregrine]),
            Contender::Peregrine => {
                let mut p = peregrine;
                p["ipam"] = ipam(true);
                serde_json::json!([p])
            }
            Contender::Ptp => {
                serde_json::json!([{"type": "ptp", "ipMasq": false, "ipam": ipam(true)}])
            }
        }
    }
}

impl FromStr for Contender {
    type Err = String;
    fn from_str(s: &str) -> Result<Contender, String> {
        [
            Contender::Bridge,
            Contender::BridgePeregrine,
            Contender::Peregrine,
            Contender::Ptp,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
        .ok_or_else(|| {
            format!("unknown contender {s:?} (bridge, bridge+peregrine, peregrine, ptp)")
        })
    }
}

/// What each contender measured (one run per contender).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CniValues {
    /// Pod-to-pod TCP: medians over the rounds and their spread.
    #[serde(
        rename = "tcp gbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_gbit_s: Option<f64>,
    #[serde(
        rename = "tcp gbit/s min",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_gbit_s_min: Option<f64>,
    #[serde(
        rename = "tcp gbit/s max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_gbit_s_max: Option<f64>,
    /// Busy cores (all CPUs) per Gbit/s carried.
    #[serde(
        rename = "tcp cpu per gbit/s",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_cpu_per_gbit: Option<f64>,
    #[serde(
        rename = "tcp cpu per gbit/s min",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_cpu_per_gbit_min: Option<f64>,
    #[serde(
        rename = "tcp cpu per gbit/s max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_cpu_per_gbit_max: Option<f64>,
    #[serde(
        rename = "tcp retransmits",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub tcp_retransmits: Option<f64>,
    /// 64 B UDP pod to pod, unpaced: delivered to the receiver.
    #[serde(rename = "udp kpps", default, skip_serializing_if = "Option::is_none")]
    pub udp_kpps: Option<f64>,
    #[serde(
        rename = "udp kpps min",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub udp_kpps_min: Option<f64>,
    #[serde(
        rename = "udp kpps max",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub udp_kpps_max: Option<f64>,
    /// What the sender pushed (median).
    #[serde(
        rename = "udp sent kpps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub udp_sent_kpps: Option<f64>,
    /// cnitool ADD and DEL, over every pod of every round.
    #[serde(
        rename = "add p50 ms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub add_p50_ms: Option<f64>,
    #[serde(
        rename = "add p99 ms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub add_p99_ms: Option<f64>,
    #[serde(
        rename = "add max ms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub add_max_ms: Option<f64>,
    #[serde(
        rename = "del p50 ms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub del_p50_ms: Option<f64>,
    #[serde(
        rename = "del p99 ms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub del_p99_ms: Option<f64>,
    #[serde(
        rename = "del max ms",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub del_max_ms: Option<f64>,
    /// Left behind by the deleted pods, summed over the rounds.
    #[serde(rename = "leaked", default, skip_serializing_if = "Option::is_none")]
    pub leaked: Option<f64>,
    #[serde(
        rename = "leaked veths",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub leaked_veths: Option<f64>,
    #[serde(
        rename = "leaked leases",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub leaked_leases: Option<f64>,
    #[serde(
        rename = "leaked cache entries",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub leaked_cache: Option<f64>,
    #[serde(
        rename = "leaked agent pods",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub leaked_agent_pods: Option<f64>,
    #[serde(
        rename = "leaked router ports",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub leaked_router_ports: Option<f64>,
    /// Pods added and deleted per round, rounds, trial seconds.
    #[serde(rename = "pods", default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<f64>,
    #[serde(rename = "rounds", default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<f64>,
    #[serde(rename = "trial s", default, skip_serializing_if = "Option::is_none")]
    pub trial_s: Option<f64>,
    /// For contenders through the router: 1 where it ran at XDP, 0 at tc.
    #[serde(
        rename = "router at xdp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub router_xdp: Option<f64>,
}

impl Values for CniValues {
    fn is_empty(&self) -> bool {
        *self == CniValues::default()
    }
}

/// What exists that a contender's pods could leave behind.
#[derive(Debug, Default)]
struct Objects {
    links: BTreeSet<String>,
    leases: BTreeSet<String>,
    cache: BTreeSet<String>,
    pods: BTreeSet<String>,
    ports: BTreeSet<String>,
}

/// Objects in `after` that were not in `before`, per kind.
#[derive(Debug, Default, Clone, Copy)]
struct Leaks {
    veths: usize,
    leases: usize,
    cache: usize,
    pods: usize,
    ports: usize,
}

impl Leaks {
    fn between(before: &Objects, after: &Objects) -> Leaks {
        let new = |a: &BTreeSet<String>, b: &BTreeSet<String>| a.difference(b).count();
        Leaks {
            veths: new(&after.links, &before.links),
            leases: new(&after.leases, &before.leases),
            cache: new(&after.cache, &before.cache),
            pods: new(&after.pods, &before.pods),
            ports: new(&after.ports, &before.ports),
        }
    }

    fn add(&mut self, o: Leaks) {
        self.veths += o.veths;
        self.leases += o.leases;
        self.cache += o.cache;
        self.pods += o.pods;
        self.ports += o.ports;
    }

    fn total(&self) -> usize {
        self.veths + self.leases + self.cache + self.pods + self.ports
    }
}

/// Everything the bench made: the node namespace and its agent, pod
/// namespaces, pods added through cnitool, a scratch directory (plugin
/// links, conflists, host-local leases, the agent's run directory). Drop
/// removes it all, after an error or Ctrl-C too: every pod still added is
/// deleted through its chain, the agent forgets the rest and stops, the
/// namespaces go, then libcni's cache entries of the bench's networks,
/// the node's pins and the directory.
struct Node {
    ns: String,
    tmp: PathBuf,
    cnitool: PathBuf,
    agent: Option<Child>,
    pin_dir: Option<PathBuf>,
    namespaces: Vec<String>,
    /// Pods added and not deleted yet: (contender, pod namespace).
    added: Vec<(Contender, String)>,
    nets: Vec<String>,
}

/// cnitool's answer: how long it took and its stdout.
struct Answer {
    took: Duration,
    out: serde_json::Value,
}

impl Node {
    fn up(a: &CniBenchConfig, contenders: &[Contender]) -> Result<Node> {
        let exe = std::env::current_exe()?;
        let cni = exe.with_file_name("peregrine-cni");
        if !cni.exists() {
            bail!(
                "{} is missing (cargo build --release builds it beside peregrine)",
                cni.display()
            );
        }
        for p in ["bridge", "ptp", "host-local"] {
            if !a.plugins.join(p).exists() {
                bail!(
                    "the reference CNI plugin {} is missing (bash scripts/k8s/build.sh cni)",
                    a.plugins.join(p).display()
                );
            }
        }
        if !a.cnitool.exists() {
            bail!(
                "{} is missing (bash scripts/k8s/build.sh cni)",
                a.cnitool.display()
            );
        }
        let tmp = std::env::temp_dir().join(format!("peregrine-bench-cni-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let mut n = Node {
            ns: "pgbc-node".into(),
            tmp: tmp.clone(),
            cnitool: a.cnitool.clone(),
            agent: None,
            pin_dir: None,
            namespaces: Vec::new(),
            added: Vec::new(),
            nets: contenders.iter().map(|c| c.net()).collect(),
        };
        for d in ["bin", "net.d", "ipam", "run"] {
            std::fs::create_dir_all(tmp.join(d))?;
        }
        for p in ["bridge", "ptp", "host-local"] {
            std::os::unix::fs::symlink(a.plugins.join(p), tmp.join("bin").join(p))?;
        }
        std::os::unix::fs::symlink(&cni, tmp.join("bin/peregrine-cni"))?;
        for c in contenders {
            let v = serde_json::json!({
                "cniVersion": "1.1.0",
                "name": c.net(),
                "plugins": c.plugins(&n.socket(), &tmp.join("ipam")),
            });
            std::fs::write(
                tmp.join("net.d").join(format!("{}.conflist", c.net())),
                serde_json::to_string_pretty(&v)?,
            )?;
        }
        n.namespace(&n.ns.clone())?;
        // A node forwards (kubelet requires it), whichever chain it runs.
        netns::run_in(&n.ns, || {
            netns::write_sysctl("net.ipv4.conf.all.forwarding", "1")
        })??;
        n.pin_dir = Some(PinScope::Named(n.ns.clone()).dir()?);
        n.start_agent(&exe, a.tc_attach)?;
        Ok(n)
    }

    fn socket(&self) -> PathBuf {
        self.tmp.join("run/agent.sock")
    }

    /// Makes namespace `name` (a killed run's is deleted first).
    fn namespace(&mut self, name: &str) -> Result<()> {
        let _ = netns::delete(name);
        netns::create(name)?;
        self.namespaces.push(name.into());
        Ok(())
    }

    fn drop_namespace(&mut self, name: &str) {
        let _ = netns::delete(name);
        self.namespaces.retain(|n| n != name);
    }

    /// Starts the node's agent: its declaration is empty (a router of pods
    /// alone, as the CNI plugin hands them), or says how ports attach at tc.
    fn start_agent(&mut self, exe: &Path, how: TcAttach) -> Result<()> {
        let decl = match how {
            TcAttach::Tcx => String::new(),
            TcAttach::Cls => format!("[router]\ntc_attach = \"{how}\"\n"),
        };
        std::fs::write(self.tmp.join("node.toml"), decl)?;
        let log = std::fs::File::create(self.tmp.join("agent.log"))?;
        // Its own process group: Ctrl-C reaches the bench, which stops it
        // after the pods are deleted.
        let child = netns::command(&self.ns, &exe.to_string_lossy())?
            .arg("agent")
            .arg("--config")
            .arg(self.tmp.join("node.toml"))
            .env("PEREGRINE_AGENT_DIR", self.tmp.join("run"))
            .env("PEREGRINE_LOG", "warn")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting peregrine agent")?;
        self.agent = Some(child);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            signals::check()?;
            if self
                .status()
                .is_ok_and(|s| s["reconciles"].as_u64() > Some(0))
            {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("the agent did not answer within 20 s: {}", self.agent_log())
    }

    fn agent_log(&self) -> String {
        let log = std::fs::read_to_string(self.tmp.join("agent.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    fn status(&self) -> Result<serde_json::Value> {
        let r = control::request(&self.socket(), &Request::Status).map_err(|e| anyhow!(e))?;
        r.status.context("the agent's status has no body")
    }

    /// `cnitool VERB net /run/netns/POD` in the node's namespace, as a
    /// runtime runs the chain (its own process group: Ctrl-C does not cut
    /// an ADD or DEL short; the bench undoes what is left).
    fn cnitool(&self, verb: &str, c: Contender, pod: &str) -> Result<Answer> {
        let t0 = Instant::now();
        let mut child = netns::command(&self.ns, &self.cnitool.to_string_lossy())?
            .args([verb, &c.net()])
            .arg(netns::path(pod))
            .env("CNI_PATH", self.tmp.join("bin"))
            .env("NETCONFPATH", self.tmp.join("net.d"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting cnitool")?;
        let limit = Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if t0.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                bail!("cnitool {verb} {} {pod}: no answer within 30 s", c.net());
            }
            std::thread::sleep(Duration::from_micros(200));
        };
        let took = t0.elapsed();
        let read = |r: Option<&mut dyn std::io::Read>| {
            let mut s = String::new();
            if let Some(r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        };
        let out = read(child.stdout.as_mut().map(|o| o as &mut dyn std::io::Read));
        let err = read(child.stderr.as_mut().map(|o| o as &mut dyn std::io::Read));
        if !status.success() {
            bail!(
                "cnitool {verb} {} {pod} ({}): {} {}",
                c.net(),
                c.as_str(),
                out.trim(),
                err.trim()
            );
        }
        Ok(Answer {
            took,
            out: serde_json::from_str(&out).unwrap_or(serde_json::Value::Null),
        })
    }

    fn add(&mut self, c: Contender, pod: &str) -> Result<Answer> {
        self.added.push((c, pod.into()));
        self.cnitool("add", c, pod)
    }

    fn del(&mut self, c: Contender, pod: &str) -> Result<Answer> {
        let a = self.cnitool("del", c, pod)?;
        self.added.retain(|(x, p)| !(*x == c && p == pod));
        Ok(a)
    }

    /// What the node holds that pods of `c` could leave behind.
    fn objects(&self, c: Contender) -> Result<Objects> {
        let names = |dir: &Path| -> BTreeSet<String> {
            peregrine_host::fs::list_dir(dir).into_iter().collect()
        };
        let net = c.net();
        let mut nl = Netlink::new()?;
        let status = self.status()?;
        let pods = status["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some(format!("{}/{}", p["container_id"].as_str()?, p["ifname"])))
            .collect();
        let ports = self
            .pin_dir
            .as_deref()
            .map(|d| {
                pins::attachment(d)
                    .ports
                    .into_iter()
                    .map(|p| p.iface)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Objects {
            links: nl.links(&self.ns)?.into_iter().collect(),
            leases: names(&self.tmp.join("ipam").join(&net))
                .into_iter()
                .filter(|n| n.parse::<IpAddr>().is_ok())
                .collect(),
            cache: names(Path::new(RESULTS_CACHE))
                .into_iter()
                .filter(|n| n.starts_with(&format!("{net}-")))
                .collect(),
            pods,
            ports,
        })
    }

    /// The router's hook, where the agent runs one.
    fn router_hook(&self) -> Option<String> {
        let s = self.status().ok()?;
        s["router"]["hook"].as_str().map(str::to_string)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for (c, pod) in std::mem::take(&mut self.added).into_iter().rev() {
            let _ = self.cnitool("del", c, &pod);
        }
        if let Some(mut child) = self.agent.take() {
            let _ = control::request(&self.socket(), &Request::PodGc { keep: Vec::new() });
            signals::terminate(&mut child, Duration::from_secs(5));
        }
        for n in std::mem::take(&mut self.namespaces).into_iter().rev() {
            let _ = netns::delete(&n);
        }
        // The bench's networks' entries in libcni's cache (a DEL removes
        // them; what a failed ADD left).
        for e in peregrine_host::fs::list_dir(Path::new(RESULTS_CACHE)) {
            if self
                .nets
                .iter()
                .any(|n| e.starts_with(&format!("{n}-cnitool-")))
            {
                let _ = std::fs::remove_file(Path::new(RESULTS_CACHE).join(e));
            }
        }
        // The node namespace's pin directory (named by its cookie: this
        // run's alone), should the agent have left one.
        if let Some(d) = &self.pin_dir {
            let _ = std::fs::remove_dir_all(d);
        }
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// A contender's two traffic pods, A (client) and B (server), and B's
/// address.
struct PodPair {
    a: String,
    b: String,
    b_ip: IpAddr,
}

fn pod_ip(r: &serde_json::Value) -> Result<IpAddr> {
    let a = r["ips"][0]["address"]
        .as_str()
        .with_context(|| format!("no address in the ADD result {r}"))?;
    Ok(a.split('/').next().unwrap_or_default().parse()?)
}

/// The traffic pods of `c`; B answers A's ping.
fn pod_pair(node: &mut Node, c: Contender) -> Result<PodPair> {
    let (a, b) = (
        format!("pgbc-{}-a", c.short()),
        format!("pgbc-{}-b", c.short()),
    );
    node.namespace(&a)?;
    node.namespace(&b)?;
    node.add(c, &a)?;
    let rb = node.add(c, &b)?;
    let b_ip = pod_ip(&rb.out)?;
    let ping = netns::command(&a, "ping")?
        .args(["-c", "3", "-i", "0.2", "-W", "1", &b_ip.to_string()])
        .output()
        .context("running ping")?;
    if !ping.status.success() {
        bail!(
            "{}: pod A does not reach pod B ({b_ip}): {}",
            c.as_str(),
            String::from_utf8_lossy(&ping.stdout).trim()
        );
    }
    Ok(PodPair { a, b, b_ip })
}

/// UDP payload of a 64 B frame (Ethernet, IPv4, UDP, FCS).
const UDP_PAYLOAD: usize = 64 - 14 - 20 - 8 - 4;

/// 64 B UDP from A to B, one sendmmsg sender unpaced for `trial`: (pps
/// delivered to B's receiver, pps sent).
fn udp(p: &PodPair, trial: Duration) -> Result<(f64, f64)> {
    let dst = SocketAddr::new(p.b_ip, 9000);
    let rx = Receiver::start(
        Some(&p.b),
        RecvConfig {
            path: IoPath::Mmsg,
            iface: "eth0".into(),
            local: dst,
        },
        None,
    )?;
    let progress = AtomicU64::new(0);
    let payload = UDP_PAYLOAD.max(iopath::payload_limits(false).0);
    let sent = netns::run_in(&p.a, || -> Result<SendReport> {
        let cfg = SendConfig::toward(
            IoPath::Mmsg,
            dst,
            40000,
            payload,
            Limit {
                count: None,
                duration: Some(trial),
            },
        )?;
        Ok(iopath::send(&cfg, &progress)?)
    })??;
    let (got, _) = rx.finish(Some(sent.sent), Duration::from_secs(2))?;
    let secs = sent.elapsed_s.max(1e-3);
    Ok((got.packets as f64 / secs, sent.sent as f64 / secs))
}

/// ADD N pods one by one, DEL them; (ADD ms, DEL ms, leaks).
fn churn(node: &mut Node, c: Contender, n: usize) -> Result<(Vec<f64>, Vec<f64>, Leaks)> {
    let pods: Vec<String> = (0..n).map(|i| format!("pgbc-{}-{i}", c.short())).collect();
    for p in &pods {
        node.namespace(p)?;
    }
    let before = node.objects(c)?;
    let (mut add, mut del) = (Vec::new(), Vec::new());
    for p in &pods {
        signals::check()?;
        add.push(node.add(c, p)?.took.as_secs_f64() * 1e3);
    }
    // The leak check sees what the pods made: every kind it counts has
    // grown by N (a blind check would pass any chain).
    let during = node.objects(c)?;
    let grown = Leaks::between(&before, &during);
    let want = |kind: &str, got: usize, expected: bool| -> Result<()> {
        if expected && got < n {
            bail!(
                "{}: {n} pods added, but the leak check sees {got} new {kind}: it cannot count them",
                c.as_str()
            );
        }
        Ok(())
    };
    want("veths in the node", grown.veths, true)?;
    want("host-local leases", grown.leases, true)?;
    want("cache entries", grown.cache, true)?;
    want("agent pods", grown.pods, c.routed())?;
    want("router ports", grown.ports, c.routed())?;
    for p in &pods {
        signals::check()?;
        del.push(node.del(c, p)?.took.as_secs_f64() * 1e3);
    }
    let after = node.objects(c)?;
    for p in &pods {
        node.drop_namespace(p);
    }
    Ok((add, del, Leaks::between(&before, &after)))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// (min, median, max).
fn spread(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (s[0], percentile(&s, 50.0), s[s.len() - 1])
}

/// What one contender measured over the rounds.
#[derive(Default)]
struct Tally {
    tcp: Vec<TcpFigure>,
    udp: Vec<(f64, f64)>,
    add: Vec<f64>,
    del: Vec<f64>,
    leaks: Leaks,
    hook: Option<String>,
}

/// Runs every contender in every round; the result file, table and plot.
pub fn bench_cni(mut a: CniBenchConfig) -> Result<()> {
    peregrine_host::caps::require_bpf("bench cni")?;
    if a.quick {
        a.rounds = 1;
        a.pods = a.pods.min(5);
        a.trial = a.trial.min(Duration::from_secs(1));
    }
    if a.rounds == 0 || a.pods == 0 || a.streams == 0 || a.trial < Duration::from_secs(1) {
        bad_setting!("--rounds, --pods and --streams are at least 1, --trial at least 1s");
    }
    if a.pods > 200 {
        bad_setting!("--pods is at most 200 (each contender's pods share one /24)");
    }
    let mut contenders: Vec<Contender> = Vec::new();
    for c in &a.contenders {
        if !contenders.contains(c) {
            contenders.push(*c);
        }
    }
    if contenders.is_empty() {
        bad_setting!("--contenders names none");
    }
    let mut tallies: Vec<Tally> = contenders.iter().map(|_| Tally::default()).collect();
    for round in 1..=a.rounds {
        // A fresh node each round: the router's port table is indexed by
        // ifindex (below 1024), and a namespace never reuses one, so one
        // node stops taking peregrine pods after about a thousand veths
        // (`ifindex 1024 is beyond the router's port table`).
        let mut node = Node::up(&a, &contenders)?;
        let mut pairs = Vec::new();
        for &c in &contenders {
            signals::check()?;
            eprintln!("round {round}: {}: two traffic pods", c.as_str());
            pairs.push(pod_pair(&mut node, c)?);
        }
        for (i, &c) in contenders.iter().enumerate() {
            signals::check()?;
            let p = &pairs[i];
            let t = tcp::iperf3(&TcpTransfer {
                client_ns: p.a.clone(),
                server_ns: p.b.clone(),
                server: p.b_ip,
                streams: a.streams,
                duration: a.trial,
            })
            .with_context(|| format!("{}: iperf3 pod to pod", c.as_str()))?;
            signals::check()?;
            let (pps, sent) =
                udp(p, a.trial).with_context(|| format!("{}: UDP pod to pod", c.as_str()))?;
            let (add, del, leaks) = churn(&mut node, c, a.pods)?;
            let (_, add50, _) = spread(&add);
            eprintln!(
                "round {round} {}: TCP {:.2} Gbit/s ({:.2} cores/Gbit/s), UDP 64 B {:.0} kpps (sent {:.0}), ADD p50 {add50:.1} ms, leaked {}",
                c.as_str(),
                t.gbit_s,
                t.cpu_cores_per_gbit_s,
                pps / 1e3,
                sent / 1e3,
                leaks.total()
            );
            let tally = &mut tallies[i];
            tally.tcp.push(t);
            tally.udp.push((pps, sent));
            tally.add.extend(add);
            tally.del.extend(del);
            tally.leaks.add(leaks);
            if c.routed() && tally.hook.is_none() {
                tally.hook = node.router_hook();
            }
        }
        drop(pairs);
        drop(node);
    }
    let runs = contenders
        .iter()
        .zip(&tallies)
        .map(|(c, t)| run(*c, t, &a))
        .collect();
    let result = ResultFile::new(BenchCni::KIND, command_line(), runs);
    a.output.write::<BenchCni>(&result)
}

fn run(c: Contender, t: &Tally, a: &CniBenchConfig) -> Run<CniValues> {
    let gbit: Vec<f64> = t.tcp.iter().map(|f| f.gbit_s).collect();
    let cpu: Vec<f64> = t.tcp.iter().map(|f| f.cpu_cores_per_gbit_s).collect();
    let retr: Vec<f64> = t.tcp.iter().map(|f| f.retransmits as f64).collect();
    let kpps: Vec<f64> = t.udp.iter().map(|u| u.0 / 1e3).collect();
    let sent: Vec<f64> = t.udp.iter().map(|u| u.1 / 1e3).collect();
    let (g0, g, g1) = spread(&gbit);
    let (c0, cm, c1) = spread(&cpu);
    let (k0, k, k1) = spread(&kpps);
    let mut add = t.add.clone();
    add.sort_by(f64::total_cmp);
    let mut del = t.del.clone();
    del.sort_by(f64::total_cmp);
    let n = |x: usize| Some(x as f64);
    let label = match (c, a.tc_attach) {
        (Contender::Peregrine | Contender::BridgePeregrine, TcAttach::Cls) => {
            format!("{} (cls)", c.as_str())
        }
        _ => c.as_str().to_string(),
    };
    Run {
        label,
        params: RunParams {
            backend: c.as_str().into(),
            ip: "ipv4".into(),
            frame_size: "64".into(),
            mean_frame_bytes: 64.0,
            flows: 1,
            threads: 1,
            sink: "pod".into(),
            sent: true,
        },
        trials: Vec::new(),
        rfc2544: None,
        placement: None,
        tcp: None,
        values: CniValues {
            tcp_gbit_s: Some(g),
            tcp_gbit_s_min: Some(g0),
            tcp_gbit_s_max: Some(g1),
            tcp_cpu_per_gbit: Some(cm),
            tcp_cpu_per_gbit_min: Some(c0),
            tcp_cpu_per_gbit_max: Some(c1),
            tcp_retransmits: Some(spread(&retr).1),
            udp_kpps: Some(k),
            udp_kpps_min: Some(k0),
            udp_kpps_max: Some(k1),
            udp_sent_kpps: Some(spread(&sent).1),
            add_p50_ms: Some(percentile(&add, 50.0)),
            add_p99_ms: Some(percentile(&add, 99.0)),
            add_max_ms: add.last().copied(),
            del_p50_ms: Some(percentile(&del, 50.0)),
            del_p99_ms: Some(percentile(&del, 99.0)),
            del_max_ms: del.last().copied(),
            leaked: n(t.leaks.total()),
            leaked_veths: n(t.leaks.veths),
            leaked_leases: n(t.leaks.leases),
            leaked_cache: n(t.leaks.cache),
            leaked_agent_pods: n(t.leaks.pods),
            leaked_router_ports: n(t.leaks.ports),
            pods: n(a.pods),
            rounds: Some(a.rounds as f64),
            trial_s: Some(a.trial.as_secs_f64()),
            router_xdp: t.hook.as_ref().map(|h| f64::from(u8::from(h == "xdp"))),
        },
    }
}

/// `bench cni`'s result file.
pub struct BenchCni;

/// Its figure: each measure of each contender over the bridge chain's.
pub const VS_BRIDGE_FIGURE: &str = "vs-bridge";

/// The measures against `bridge`: (label, value, min, max, goal as text,
/// higher is better, unit).
type Measure = (
    &'static str,
    fn(&CniValues) -> Option<(f64, f64, f64)>,
    &'static str,
    bool,
    &'static str,
);

const MEASURES: [Measure; 5] = [
    (
        "TCP Gbit/s",
        |v| Some((v.tcp_gbit_s?, v.tcp_gbit_s_min?, v.tcp_gbit_s_max?)),
        ">= 1.0x",
        true,
        "Gbit/s",
    ),
    (
        "TCP CPU per Gbit/s",
        |v| {
            Some((
                v.tcp_cpu_per_gbit?,
                v.tcp_cpu_per_gbit_min?,
                v.tcp_cpu_per_gbit_max?,
            ))
        },
        "<= 1.0x",
        false,
        "cores",
    ),
    (
        "UDP 64 B kpps",
        |v| Some((v.udp_kpps?, v.udp_kpps_min?, v.udp_kpps_max?)),
        ">= 2x (XDP)",
        true,
        "kpps",
    ),
    (
        "ADD p99",
        |v| Some((v.add_p99_ms?, v.add_p99_ms?, v.add_p99_ms?)),
        "<= 1.2x",
        false,
        "ms",
    ),
    (
        "DEL p99",
        |v| Some((v.del_p99_ms?, v.del_p99_ms?, v.del_p99_ms?)),
        "-",
        false,
        "ms",
    ),
];

/// Whether ratio `r` of measure `label` meets the issue's goal.
fn meets(label: &str, r: f64, xdp: bool) -> &'static str {
    let ok = match label {
        "TCP Gbit/s" => r >= 1.0,
        "TCP CPU per Gbit/s" => r <= 1.0,
        "UDP 64 B kpps" if !xdp => return "tc: goal n/a",
        "UDP 64 B kpps" => r >= 2.0,
        "ADD p99" => r <= 1.2,
        _ => return "",
    };
    if ok {
        "met"
    } else {
        "missed"
    }
}

fn baseline(r: &ResultFile<CniValues>) -> Option<&CniValues> {
    r.runs
        .iter()
        .find(|x| x.label == Contender::Bridge.as_str())
        .map(|x| &x.values)
}

impl Report for BenchCni {
    const KIND: &'static str = "bench-cni";
    type Values = CniValues;

    fn table(r: &ResultFile<CniValues>) -> String {
        use std::fmt::Write;
        let mut t = String::new();
        let f = |x: Option<f64>, p: usize| match x {
            Some(x) if x.is_finite() => format!("{x:.p$}"),
            _ => "-".into(),
        };
        let _ = writeln!(
            t,
            "{:<22} {:>18} {:>16} {:>19} {:>20} {:>13} {:>7}",
            "contender",
            "TCP Gbit/s",
            "CPU/Gbit/s",
            "UDP 64 B kpps",
            "ADD p50/p99/max ms",
            "DEL p50/p99",
            "leaked"
        );
        for run in &r.runs {
            let v = &run.values;
            let _ = writeln!(
                t,
                "{:<22} {:>18} {:>16} {:>19} {:>20} {:>13} {:>7}",
                run.label,
                format!(
                    "{} ({}..{})",
                    f(v.tcp_gbit_s, 2),
                    f(v.tcp_gbit_s_min, 2),
                    f(v.tcp_gbit_s_max, 2)
                ),
                format!(
                    "{} ({}..{})",
                    f(v.tcp_cpu_per_gbit, 2),
                    f(v.tcp_cpu_per_gbit_min, 2),
                    f(v.tcp_cpu_per_gbit_max, 2)
                ),
                format!(
                    "{} ({}..{})",
                    f(v.udp_kpps, 0),
                    f(v.udp_kpps_min, 0),
                    f(v.udp_kpps_max, 0)
                ),
                format!(
                    "{}/{}/{}",
                    f(v.add_p50_ms, 1),
                    f(v.add_p99_ms, 1),
                    f(v.add_max_ms, 1)
                ),
                format!("{}/{}", f(v.del_p50_ms, 1), f(v.del_p99_ms, 1)),
                f(v.leaked, 0),
            );
        }
        if let Some(base) = baseline(r) {
            let _ = writeln!(t, "\nagainst bridge (issue 26's goals):");
            let _ = write!(t, "{:<22}", "contender");
            for (label, _, goal, _, _) in MEASURES {
                let _ = write!(t, " {:>24}", format!("{label} {goal}"));
            }
            let _ = writeln!(t, " {:>12}", "leaks 0");
            for run in r.runs.iter().filter(|x| x.label != "bridge") {
                let v = &run.values;
                let xdp = v.router_xdp == Some(1.0);
                let _ = write!(t, "{:<22}", run.label);
                for (label, get, _, _, _) in MEASURES {
                    let cell = match (get(v), get(base)) {
                        (Some((x, _, _)), Some((b, _, _))) if b > 0.0 => {
                            let ratio = x / b;
                            let m = if run.label == "ptp" {
                                ""
                            } else {
                                meets(label, ratio, xdp)
                            };
                            format!("{ratio:.2}x {m}")
                        }
                        _ => "-".into(),
                    };
                    let _ = write!(t, " {cell:>24}");
                }
                let leaks = v.leaked.unwrap_or(f64::NAN);
                let _ = writeln!(
                    t,
                    " {:>12}",
                    if leaks == 0.0 {
                        "0 met".to_string()
                    } else {
                        format!("{leaks} missed")
                    }
                );
            }
        }
        let hooks: Vec<String> = r
            .runs
            .iter()
            .filter_map(|x| {
                let at = if x.values.router_xdp? == 1.0 {
                    "XDP"
                } else {
                    "tc"
                };
                Some(format!("{}: router at {at}", x.label))
            })
            .collect();
        if let Some(v) = r.runs.first().map(|x| &x.values) {
            let _ = writeln!(
                t,
                "\n{} pods added and deleted one by one per contender and round (cnitool), {} rounds, {} s trials; medians (min..max) over the rounds; leaks summed over the rounds.",
                f(v.pods, 0),
                f(v.rounds, 0),
                f(v.trial_s, 0)
            );
        }
        let sender_bound: Vec<&str> = r
            .runs
            .iter()
            .filter(|x| {
                let v = &x.values;
                v.udp_kpps
                    .zip(v.udp_sent_kpps)
                    .is_some_and(|(d, s)| d >= 0.99 * s)
            })
            .map(|x| x.label.as_str())
            .collect();
        if !sender_bound.is_empty() {
            let _ = writeln!(
                t,
                "UDP delivered all the one sendmmsg sender sent for {}: there the sender is the limit, not the path.",
                sender_bound.join(", ")
            );
        }
        if !hooks.is_empty() {
            let _ = writeln!(
                t,
                "{}. The UDP goal (>= 2x) is for the XDP path; at tc it is shown, not judged.",
                hooks.join(", ")
            );
        }
        t
    }

    fn figures(r: &ResultFile<CniValues>) -> Vec<Figure> {
        let Some(base) = baseline(r) else {
            return Vec::new();
        };
        let groups = MEASURES
            .iter()
            .filter_map(|(label, get, goal, _, unit)| {
                let (b, _, _) = get(base)?;
                if b <= 0.0 || !b.is_finite() {
                    return None;
                }
                let bars = r
                    .runs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, run)| {
                        let (m, lo, hi) = get(&run.values)?;
                        Some(Bar {
                            contender: i,
                            median: m / b,
                            min: lo / b,
                            max: hi / b,
                            note: match *unit {
                                "cores" => format!("{m:.2}"),
                                "Gbit/s" => format!("{m:.1}"),
                                _ => format!("{m:.0}"),
                            },
                        })
                    })
                    .collect();
                let label = match *unit {
                    "ms" => format!("{label} ms"),
                    "cores" => format!("{label} (cores)"),
                    _ => label.to_string(),
                };
                Some(BarGroup {
                    label: match *goal {
                        "-" => label,
                        g => format!("{label}, goal {g}"),
                    },
                    bars,
                })
            })
            .collect();
        vec![Figure {
            name: VS_BRIDGE_FIGURE,
            chart: Chart::Bars {
                title: "CNI chains on one node: each measure over the bridge chain's".into(),
                y_desc: "contender / bridge".into(),
                legend: r.runs.iter().map(|x| x.label.clone()).collect(),
                groups,
            },
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contenders_parse_and_name_distinct_networks() {
        let all: Vec<Contender> = ["bridge", "bridge+peregrine", "peregrine", "ptp"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert!("macvlan".parse::<Contender>().is_err());
        for x in &all {
            for y in &all {
                if x != y {
                    // No network's cache entries look like another's.
                    assert!(!format!("{}-", y.net()).starts_with(&format!("{}-", x.net())));
                }
            }
        }
    }

    #[test]
    fn leaks_count_only_new_objects() {
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        let before = Objects {
            links: set(&["lo", "pgbcbr0"]),
            leases: set(&["198.19.10.2"]),
            ..Default::default()
        };
        let after = Objects {
            links: set(&["lo", "pgbcbr0", "veth1"]),
            leases: set(&["198.19.10.2"]),
            pods: set(&["c/eth0"]),
            ..Default::default()
        };
        let l = Leaks::between(&before, &after);
        assert_eq!((l.veths, l.leases, l.pods, l.total()), (1, 0, 1, 2));
    }

    #[test]
    fn a_64_byte_frame() {
        assert_eq!(UDP_PAYLOAD, 18);
        assert!(UDP_PAYLOAD >= iopath::payload_limits(false).0);
    }
}
