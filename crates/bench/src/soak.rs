//! `peregrine bench soak`: one lab node under mixed load at a share of
//! its saturation for a long time (issue 28 item 3). The lab is
//! gen-dut-sink with two port pairs. On the invoker's path the DUT routes
//! with peregrine's tc router (in0, out0), policed on its ingress in0
//! (tc); on the QUIC path it routes with the router at XDP (in1, out1).
//! The sink runs `faas serve` (AF_XDP on eth0: built-in reverse and
//! sha256, and reverse as WebAssembly deployed into it) and `quic serve`
//! (kernel UDP on eth1). The generator sends UDP requests from kernel
//! sockets to each function, every reply checked, and downloads a body
//! over HTTP/3 (`quic get`) again and again. First every client runs flat
//! out for a few seconds (against servers of their own); the soak then
//! runs each at `--load` percent of what it carried. Every few seconds it
//! samples each long-running peregrine process's resident memory and open
//! file descriptors, the policer's and the routers' map entries and the
//! soak's pins; after warm-up each series must stay within the tolerance
//! of its first value. At the end every request must be answered
//! correctly or counted as dropped at a named place of its path.
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use peregrine_bpf::router::FibMode;
use peregrine_bpf::xdp::XdpMode;
use peregrine_dataplane::Dataplane;
use peregrine_faas::Registry;
use peregrine_host::{netns, signals};
use peregrine_lab::plot::{Chart, Figure, Series};
use peregrine_lab::results::{DropCount, Limiter, ResultFile, Run, RunParams, Values};
use peregrine_lab::topology::Topology;
use peregrine_lab::trial::{DropPoint, DropProbes};
use peregrine_lab::{Lab, Lifetime};
use peregrine_qos::attach as policer;
use peregrine_qos::config::RuleFields;
use serde::{Deserialize, Serialize};

use crate::agent::rss_mb;
use crate::common::{command_line, duration, ResultOutput};
use crate::report::Report;
use crate::tcp::{finish, Reaped};

/// `peregrine bench soak`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-soak")))]
pub struct SoakBenchConfig {
    /// How long the load runs (30m, 2m, 90s).
    #[arg(long, default_value = "30m", value_parser = duration)]
    pub duration: Duration,
    /// Time between samples (default: 5 s, 2 s for runs under 10 minutes).
    #[arg(long, value_parser = duration)]
    pub interval: Option<Duration>,
    /// UDP requests per second sent to each of the three functions
    /// (default: --load percent of what each carried flat out).
    #[arg(long)]
    pub rate: Option<u32>,
    /// Time between the starts of two HTTP/3 downloads (default: one
    /// download's time flat out over --load; 2 s with --rate).
    #[arg(long, value_parser = duration)]
    pub quic_every: Option<Duration>,
    /// The soak's load, percent of each path's saturation (measured for
    /// 5 s before the soak).
    #[arg(long, default_value_t = 70.0)]
    pub load: f64,
    /// The policer's rate for the invoker's requests during the soak
    /// (drop on exceed; default: 10Gbit, far above the load). Lower, it
    /// shows drops being counted.
    #[arg(long)]
    pub police: Option<String>,
    /// Most a sampled series may move from its first value after warm-up,
    /// percent.
    #[arg(long, default_value_t = 5.0)]
    pub tolerance: f64,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// A series sampled over time or a component's balance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SoakValues {
    /// (seconds since the load started, value) of a sampled series.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<(f64, f64)>,
    /// Samples up to this time are warm-up.
    #[serde(rename = "warm-up s", default, skip_serializing_if = "Option::is_none")]
    pub warmup_s: Option<f64>,
    /// The series' floor (its lowest sample) in the first of the windows
    /// after warm-up, the largest move of a later window's floor from it
    /// (what is judged: memory held at rest grows with a leak, while a
    /// sample taken mid-download is only a busy moment), and the largest
    /// move of any single sample from it (shown).
    #[serde(rename = "baseline", default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    #[serde(
        rename = "floor dev %",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub floor_dev_pct: Option<f64>,
    #[serde(rename = "max dev %", default, skip_serializing_if = "Option::is_none")]
    pub max_dev_pct: Option<f64>,
    #[serde(rename = "limit %", default, skip_serializing_if = "Option::is_none")]
    pub limit_pct: Option<f64>,
    /// A balance: what was sent, answered correctly, answered wrong, never
    /// answered, counted as dropped (by place, `drops`), and the rest.
    #[serde(rename = "sent", default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    #[serde(rename = "ok", default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<u64>,
    #[serde(rename = "wrong", default, skip_serializing_if = "Option::is_none")]
    pub wrong: Option<u64>,
    #[serde(rename = "missing", default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<u64>,
    #[serde(
        rename = "counted drops",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub counted: Option<u64>,
    #[serde(
        rename = "unattributed",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub unattributed: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub drops: BTreeMap<String, u64>,
}

impl Values for SoakValues {
    fn is_empty(&self) -> bool {
        *self == SoakValues::default()
    }
}

/// The sink's address on the invoker's path.
const SERVER: &str = "198.18.2.2";
/// The sink's address on the QUIC path.
const QUIC_SERVER: &str = "198.18.4.2";
const QUIC_PORT: u16 = 4433;
/// The body each download fetches.
const BODY_BYTES: u64 = 1 << 20;
/// The functions `faas serve` starts with; WASM_PORT is deployed after.
const FUNCTIONS: &str = "1232=reverse,1233=sha256";
const WASM_PORT: u16 = 1300;
/// What the client expects of each port (the WebAssembly one is reverse).
const EXPECTED: &str = "1232=reverse,1233=sha256,1300=reverse";
const REVERSE_WAT: &[u8] = include_bytes!("../../../examples/functions/reverse.wat");
/// Request payload bytes.
const REQUEST_BYTES: usize = 200;

/// Run labels: a series is "SERIES_PREFIX<what>", a balance
/// "BALANCE_PREFIX<what>".
pub const SERIES_PREFIX: &str = "series: ";
pub const BALANCE_PREFIX: &str = "balance: ";

/// A long-running peregrine process of the soak, its output to a log.
struct Proc {
    what: &'static str,
    child: Reaped,
}

impl Proc {
    fn start(ns: &str, exe: &Path, args: &[&str], log: &Path, what: &'static str) -> Result<Proc> {
        let log = std::fs::File::create(log)?;
        let child = netns::command(ns, &exe.to_string_lossy())?
            .args(args)
            .env("PEREGRINE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        Ok(Proc {
            what,
            child: Reaped(child),
        })
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Asks it to stop (SIGINT, as Ctrl-C) and returns the JSON report it
    /// prints.
    fn stop(self) -> Result<serde_json::Value> {
        signals::interrupt(self.pid()).with_context(|| format!("interrupting {}", self.what))?;
        let what = self.what;
        let out = finish(self.child, Duration::from_secs(15), what)?;
        serde_json::from_str(out.trim()).with_context(|| format!("{what} printed no JSON: {out}"))
    }
}

/// Open file descriptors of `pid`.
fn fds(pid: u32) -> Result<f64> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as f64)
}

/// Files and directories under `dir`, recursively (bounded depth).
fn count_pins(dir: &Path, depth: u32) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        n += 1;
        if depth > 0 && e.file_type().is_ok_and(|t| t.is_dir()) {
            n += count_pins(&e.path(), depth - 1);
        }
    }
    n
}

/// One UDP client's tally.
#[derive(Debug, Default, Clone)]
struct Tally {
    sent: u64,
    ok: u64,
    wrong: u64,
    /// Replies the client's own socket dropped (its receive buffer full).
    socket_drops: u64,
}

/// Sends `rate` requests/s to `port` from `sock` until `stop`, checking
/// each reply against `registry`'s function for the port; then waits up
/// to 2 s for the last replies.
fn udp_client(
    sock: UdpSocket,
    port: u16,
    rate: u32,
    registry: Arc<Registry>,
    stop: Arc<AtomicBool>,
) -> Result<Tally> {
    let f = registry
        .get(port)
        .with_context(|| format!("no function for port {port}"))?
        .clone();
    let to: SocketAddr = format!("{SERVER}:{port}").parse()?;
    sock.set_read_timeout(Some(Duration::from_millis(2)))?;
    let mut outstanding: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut t = Tally::default();
    let mut buf = vec![0u8; 2048];
    let mut req = vec![0u8; REQUEST_BYTES];
    let start = Instant::now();
    let mut recv = |t: &mut Tally, outstanding: &mut HashMap<Vec<u8>, u64>| {
        while let Ok(n) = sock.recv(&mut buf) {
            if outstanding.remove(&buf[..n]).is_some() {
                t.ok += 1;
            } else {
                t.wrong += 1;
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        // At most 64 at once: a stalled sender catches up gently.
        let mut burst = 0;
        while t.sent < due && burst < 64 {
            let seq = t.sent;
            req[..8].copy_from_slice(&seq.to_le_bytes());
            req[8..10].copy_from_slice(&port.to_le_bytes());
            for (i, b) in req[10..].iter_mut().enumerate() {
                *b = (seq as usize).wrapping_mul(31).wrapping_add(i) as u8;
            }
            let mut want = Vec::new();
            f.call(&req, &mut want).map_err(anyhow::Error::msg)?;
            // Payloads differ by their sequence number, so do replies
            // (for sha256 almost surely): the outstanding set is keyed by
            // the expected reply.
            outstanding.insert(want, seq);
            match sock.send_to(&req, to) {
                Ok(_) => {}
                // A full socket buffer here is the client's: retried.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    outstanding.retain(|_, s| *s != seq);
                    break;
                }
                Err(e) => return Err(e.into()),
            }
            t.sent += 1;
            burst += 1;
        }
        recv(&mut t, &mut outstanding);
    }
    let end = Instant::now() + Duration::from_secs(2);
    while !outstanding.is_empty() && Instant::now() < end {
        recv(&mut t, &mut outstanding);
    }
    t.socket_drops = peregrine_io::receive_drops(&sock)?;
    Ok(t)
}

/// Downloads tally: started, complete and correct, failed.
#[derive(Debug, Default, Clone)]
struct Downloads {
    started: u64,
    ok: u64,
    failed: u64,
    last_error: Option<String>,
    /// Time spent in the downloads that completed.
    busy: Duration,
}

/// `quic get` of the body from namespace `ns` every `every` until `stop`.
fn quic_client(ns: &str, exe: &Path, every: Duration, stop: Arc<AtomicBool>) -> Downloads {
    let mut d = Downloads::default();
    let url = format!("https://{QUIC_SERVER}:{QUIC_PORT}/file");
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        d.started += 1;
        let r = (|| -> Result<()> {
            let child = netns::command(ns, &exe.to_string_lossy())?
                .args([
                    "quic",
                    "get",
                    &url,
                    "--io",
                    "kernel",
                    "--insecure",
                    "--json",
                ])
                .args(["--timeout", "30s"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .context("starting quic get")?;
            let out = finish(Reaped(child), Duration::from_secs(40), "quic get")?;
            let v: serde_json::Value = serde_json::from_str(out.trim())
                .with_context(|| format!("quic get printed no JSON: {out}"))?;
            if v["status"] != 200 || v["bytes"] != BODY_BYTES {
                bail!("the download came back wrong: {v}");
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                d.ok += 1;
                d.busy += t0.elapsed();
            }
            Err(e) => {
                d.failed += 1;
                d.last_error = Some(format!("{e:#}"));
            }
        }
        while t0.elapsed() < every && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    d
}

/// A sampled series: its name and (t, value) points.
struct Sampled {
    name: String,
    points: Vec<(f64, f64)>,
}

/// The soak's lab: gen-dut-sink with a second port pair. The invoker's
/// path (gen eth0, dut in0 -> out0, sink eth0) runs the tc router and the
/// policer; the QUIC path (gen eth1, dut in1 -> out1, sink eth1) runs the
/// router at XDP (one interface cannot run both a tc policer and an XDP
/// router: peregrine refuses that pair). Neighbours are static, so no ARP
/// crosses either path. The invoker's path keeps veth's default offloads.
const TOPOLOGY: &str = r#"
name = "soak"

[[host]]
name = "gen"
addr = { eth0 = ["198.18.1.1/24"], eth1 = ["198.18.3.1/24"] }
mac = { eth0 = "02:50:00:00:01:01", eth1 = "02:50:00:00:03:01" }
route = [
  { to = "198.18.2.0/24", via = "198.18.1.2" },
  { to = "198.18.4.0/24", via = "198.18.3.2" },
]
neigh = [
  { dev = "eth0", ip = "198.18.1.2", mac = "02:50:00:00:01:02" },
  { dev = "eth1", ip = "198.18.3.2", mac = "02:50:00:00:03:02" },
]

[[host]]
name = "dut"
addr = { in0 = ["198.18.1.2/24"], out0 = ["198.18.2.1/24"], in1 = ["198.18.3.2/24"], out1 = ["198.18.4.1/24"] }
mac = { in0 = "02:50:00:00:01:02", out0 = "02:50:00:00:02:01", in1 = "02:50:00:00:03:02", out1 = "02:50:00:00:04:01" }
sysctl = { "net.ipv4.conf.all.forwarding" = "1" }
neigh = [
  { dev = "in0", ip = "198.18.1.1", mac = "02:50:00:00:01:01" },
  { dev = "out0", ip = "198.18.2.2", mac = "02:50:00:00:02:02" },
  { dev = "in1", ip = "198.18.3.1", mac = "02:50:00:00:03:01" },
  { dev = "out1", ip = "198.18.4.2", mac = "02:50:00:00:04:02" },
]

[[host]]
name = "sink"
addr = { eth0 = ["198.18.2.2/24"], eth1 = ["198.18.4.2/24"] }
mac = { eth0 = "02:50:00:00:02:02", eth1 = "02:50:00:00:04:02" }
route = [
  { to = "198.18.1.0/24", via = "198.18.2.1" },
  { to = "198.18.3.0/24", via = "198.18.4.1" },
]
neigh = [
  { dev = "eth0", ip = "198.18.2.1", mac = "02:50:00:00:02:01" },
  { dev = "eth1", ip = "198.18.4.1", mac = "02:50:00:00:04:01" },
]

[[link]]
a = "gen:eth0"
b = "dut:in0"

[[link]]
a = "dut:out0"
b = "sink:eth0"

# The XDP router redirects what kernel sockets send: with TX checksum
# offload or GSO on the sending end such frames keep a partial checksum or
# stay one GSO packet, and the receiver drops them (the router warns so at
# attach and says to turn both off on its ports' peers, as here).
[[link]]
a = "gen:eth1"
b = "dut:in1"
offloads = { tx = false, gso = false }

[[link]]
a = "dut:out1"
b = "sink:eth1"
offloads = { tx = false, gso = false }
"#;

/// Where a frame of the invoker's path can be refused by a veth, one
/// counter per direction of each pair (a refusal that moves both ends'
/// counters is read at one of them; see `DropCounter`):
/// - gen eth0 -> dut in0, and dut in0 -> gen eth0, and sink eth0 -> dut
///   out0: skbs into a receiver without XDP go through its backlog, whose
///   overflow counts as the receiver's rx_dropped (and the sender's
///   tx_dropped): the receiver's;
/// - dut out0 -> sink eth0 (the tc router's redirect into the invoker's
///   XDP hook): a full XDP ring refuses the skb at the sender
///   (tx_dropped only), and the receiver's NAPI counts its own drops
///   (rx_dropped): both. A request the invoker's dispatcher could not put
///   on a full AF_XDP ring is one of the latter (its XDP redirect failed)
///   and the invoker's `xsk_rx_ring_full` too: counted once, under the
///   invoker's reason (`RING_FULL`).
fn invoker_path(lab: &Lab) -> Result<DropProbes> {
    let (gen, dut, sink) = (lab.ns("gen"), lab.ns("dut"), lab.ns("sink"));
    Ok(DropProbes::new(
        vec![
            DropPoint::rx(&dut, "in0", Limiter::Dut),
            DropPoint::tx(&dut, "out0", Limiter::Dut),
            DropPoint::rx(&sink, "eth0", Limiter::Sink).overlapped_by(RING_FULL),
            DropPoint::rx(&dut, "out0", Limiter::Dut),
            DropPoint::rx(&gen, "eth0", Limiter::Generator),
        ],
        Limiter::Unattributed,
    )?)
}

/// The invoker's full AF_XDP ring, as the soak names the invoker's
/// counters ("invoker: " and the name in its report).
const RING_FULL: &str = "invoker: xsk_rx_ring_full";

/// The QUIC path's veth drops, one counter per direction: skbs into the
/// XDP router's ports are refused at the sender (gen eth1, sink eth1:
/// tx_dropped), frames the router redirects out at the receiver (sink
/// eth1, gen eth1: rx_dropped; the router's port counts them as its
/// tx_dropped too).
fn quic_path(lab: &Lab) -> Result<DropProbes> {
    let (gen, sink) = (lab.ns("gen"), lab.ns("sink"));
    Ok(DropProbes::new(
        vec![
            DropPoint::tx(&gen, "eth1", Limiter::Generator),
            DropPoint::rx(&sink, "eth1", Limiter::Sink),
            DropPoint::tx(&sink, "eth1", Limiter::Sink),
            DropPoint::rx(&gen, "eth1", Limiter::Generator),
        ],
        Limiter::Unattributed,
    )?)
}

/// The named drop counts of `drops`, keyed by place.
fn by_place(drops: Vec<DropCount>) -> BTreeMap<String, u64> {
    drops.into_iter().map(|d| (d.at, d.packets)).collect()
}

/// The policer's exceed count on dut in0.
fn policer_exceed(dut: &str) -> Result<u64> {
    let st = netns::run_in(dut, || policer::stats("in0"))??;
    Ok(st.rules.iter().map(|(_, c)| c.exceed_packets).sum())
}

/// UdpRcvbufErrors of the generator's and the sink's namespaces.
fn udp_errors(lab: &Lab) -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for host in ["gen", "sink"] {
        m.insert(
            format!("UdpRcvbufErrors in {host}"),
            peregrine_host::snmp::udp_receive_buffer_errors(&lab.ns(host))?,
        );
    }
    Ok(m)
}

/// A router's counters by port and action: (drops by "router PORT:
/// ACTION", frames forwarded, frames passed to the kernel by "PORT:
/// ACTION").
struct RouterCounts {
    drops: BTreeMap<String, u64>,
    forwarded: u64,
    passed: BTreeMap<String, u64>,
}

fn router_counts(dp: &Dataplane) -> Result<RouterCounts> {
    let mut c = RouterCounts {
        drops: BTreeMap::new(),
        forwarded: 0,
        passed: BTreeMap::new(),
    };
    for (port, _, st) in dp.port_stats()? {
        for a in 0..peregrine_bpf::router::ACTIONS {
            let name = peregrine_bpf::router::action_name(a);
            let n = st.packets[a];
            if name == "forward" {
                c.forwarded += n;
            } else if name.starts_with("drop") {
                *c.drops.entry(format!("router {port}: {name}")).or_default() += n;
            } else if name.starts_with("pass") {
                *c.passed
                    .entry(format!("router {port}: {name}"))
                    .or_default() += n;
            }
        }
    }
    Ok(c)
}

fn since(before: &BTreeMap<String, u64>, after: BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .into_iter()
        .map(|(k, v)| {
            let b = before.get(&k).copied().unwrap_or(0);
            (k, v.saturating_sub(b))
        })
        .filter(|(_, v)| *v > 0)
        .collect()
}

fn run(label: String, values: SoakValues) -> Run<SoakValues> {
    Run {
        label,
        params: RunParams {
            backend: "soak".into(),
            ..Default::default()
        },
        values,
        ..Default::default()
    }
}

/// Runs the soak; the result file, table and plot. Fails (after writing
/// them) when a series moved more than the tolerance or a balance does
/// not hold.
pub fn bench_soak(a: SoakBenchConfig) -> Result<()> {
    peregrine_host::caps::require_bpf("bench soak")?;
    let exe = std::env::current_exe()?;
    let secs = a.duration.as_secs_f64();
    if secs < 10.0 {
        bad_setting!("--duration {secs} s: at least 10 s");
    }
    if a.rate.is_some_and(|r| r == 0 || r > 100_000) {
        bad_setting!(
            "--rate {}: expected 1..=100000 requests/s",
            a.rate.unwrap_or(0)
        );
    }
    if !(1.0..=100.0).contains(&a.load) {
        bad_setting!("--load {}: expected 1..=100 percent", a.load);
    }
    let interval = a.interval.unwrap_or(if secs < 600.0 {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(5)
    });
    if interval.is_zero() || interval.as_secs_f64() * 2.0 > secs {
        bad_setting!("--interval: expected more than 0 and at most half of --duration");
    }
    let warmup = (secs * 0.2).max(interval.as_secs_f64());
    let lab = Lab::up(Topology::from_toml(TOPOLOGY)?, Lifetime::Ephemeral)?;
    let tmp = std::env::temp_dir().join(format!("peregrine-bench-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let result = soak(&a, &exe, &lab, &tmp, interval, warmup);
    if result.is_err() {
        eprintln!(
            "peregrine: bench soak: the servers' logs are in {}",
            tmp.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let (runs, failures) = result?;
    drop(lab);
    let file = ResultFile::new(BenchSoak::KIND, command_line(), runs);
    a.output.write::<BenchSoak>(&file)?;
    if let Some(f) = failures.first() {
        bail!("{f}");
    }
    Ok(())
}

type Failures = Vec<String>;

/// `faas serve` (the three functions, the WebAssembly one deployed) and
/// `quic serve` on the sink.
struct Servers {
    faas: Proc,
    quic: Proc,
}

impl Servers {
    fn start(sink: &str, exe: &Path, tmp: &Path, round: &str) -> Result<Servers> {
        let faas = Proc::start(
            sink,
            exe,
            &[
                "faas",
                "serve",
                "--iface",
                "eth0",
                "--functions",
                FUNCTIONS,
                "--backend",
                "afxdp",
                "--json",
            ],
            &tmp.join(format!("faas-serve-{round}.log")),
            "faas serve",
        )?;
        deploy_wasm(sink, exe, tmp)?;
        let body = format!("file={BODY_BYTES}");
        let listen = format!("{QUIC_SERVER}:{QUIC_PORT}");
        let quic = Proc::start(
            sink,
            exe,
            &[
                "quic", "serve", "--listen", &listen, "--io", "kernel", "--memory", &body, "--json",
            ],
            &tmp.join(format!("quic-serve-{round}.log")),
            "quic serve",
        )?;
        Ok(Servers { faas, quic })
    }

    fn stop(self) -> Result<(serde_json::Value, serde_json::Value)> {
        let faas = self.faas.stop();
        let quic = self.quic.stop();
        Ok((faas?, quic?))
    }
}

/// The load: a UDP client per function port and the download loop, from
/// the generator, until `stop`.
struct Load {
    stop: Arc<AtomicBool>,
    clients: Vec<(u16, std::thread::JoinHandle<Result<Tally>>)>,
    quic: std::thread::JoinHandle<Downloads>,
}

impl Load {
    fn start(gen: &str, exe: &Path, rates: &[(u16, u32)], quic_every: Duration) -> Result<Load> {
        let registry = Arc::new(Registry::parse(EXPECTED).map_err(anyhow::Error::msg)?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for &(port, rate) in rates {
            let sock = netns::run_in(gen, || UdpSocket::bind("0.0.0.0:0"))??;
            let (r, s) = (registry.clone(), stop.clone());
            clients.push((
                port,
                std::thread::spawn(move || udp_client(sock, port, rate, r, s)),
            ));
        }
        let quic = {
            let (ns, exe, s) = (gen.to_string(), exe.to_path_buf(), stop.clone());
            std::thread::spawn(move || quic_client(&ns, &exe, quic_every, s))
        };
        Ok(Load {
            stop,
            clients,
            quic,
        })
    }

    /// Stops the load and waits for every client (each waits up to 2 s
    /// for its last replies): the tallies by port and the downloads. Every
    /// thread is joined before an error of one is returned.
    fn finish(self) -> Result<(Vec<(u16, Tally)>, Downloads)> {
        self.stop.store(true, Ordering::Relaxed);
        let tallies: Vec<(u16, Result<Tally>)> = self
            .clients
            .into_iter()
            .map(|(port, h)| {
                let t = h
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the UDP client panicked")));
                (port, t)
            })
            .collect();
        let downloads = self
            .quic
            .join()
            .map_err(|_| anyhow::anyhow!("the quic client panicked"));
        let tallies = tallies
            .into_iter()
            .map(|(port, t)| Ok((port, t.with_context(|| format!("client of port {port}"))?)))
            .collect::<Result<Vec<_>>>()?;
        Ok((tallies, downloads?))
    }
}

/// What the paths carried flat out, measured before the soak: correct
/// replies per second per function port, and the mean time of one
/// download, with the UDP clients and the downloads running together
/// unpaced for `CALIBRATION`.
#[derive(Debug)]
struct Saturation {
    replies_per_s: Vec<(u16, f64)>,
    download_s: f64,
}

/// How long the paths run flat out to find their saturation.
const CALIBRATION: Duration = Duration::from_secs(5);

fn calibrate(gen: &str, exe: &Path) -> Result<Saturation> {
    let ports = [1232u16, 1233, WASM_PORT];
    let unpaced: Vec<(u16, u32)> = ports.iter().map(|&p| (p, u32::MAX)).collect();
    let load = Load::start(gen, exe, &unpaced, Duration::ZERO)?;
    let t0 = Instant::now();
    while t0.elapsed() < CALIBRATION {
        signals::check()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = t0.elapsed().as_secs_f64();
    let (tallies, downloads) = load.finish()?;
    if downloads.ok == 0 {
        bail!(
            "calibration: no download completed in {secs:.0} s{}",
            downloads
                .last_error
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        );
    }
    let replies_per_s = tallies
        .iter()
        .map(|(p, t)| (*p, t.ok as f64 / secs))
        .collect::<Vec<_>>();
    if let Some((p, _)) = replies_per_s.iter().find(|(_, r)| *r < 1.0) {
        bail!("calibration: port {p} answered nothing flat out");
    }
    Ok(Saturation {
        replies_per_s,
        download_s: downloads.busy.as_secs_f64() / downloads.ok as f64,
    })
}

fn soak(
    a: &SoakBenchConfig,
    exe: &Path,
    lab: &Lab,
    tmp: &Path,
    interval: Duration,
    warmup: f64,
) -> Result<(Vec<Run<SoakValues>>, Failures)> {
    let (gen, dut, sink) = (lab.ns("gen"), lab.ns("dut"), lab.ns("sink"));
    // The policer first (tcx runs it before the router attached after):
    // one rule for the sink's address on the invoker's path, far above
    // the load until the soak starts, then at --police if given.
    let police = |rate: &str| -> Result<()> {
        let rule = RuleFields {
            dst: Some(format!("{SERVER}/32")),
            rate: Some(rate.to_string()),
            ..Default::default()
        }
        .to_rule(0, &[])
        .map_err(|e| anyhow::anyhow!("--police {rate}: {e}"))?;
        netns::run_in(&dut, || {
            policer::apply("in0", peregrine_bpf::Hook::TC, &[rule])
        })??;
        Ok(())
    };
    police("10Gbit")?;
    let _policer = Detach(dut.clone());
    // The routers next, before the services, as users bring a node up
    // (network first). At tc the router delivers into the sink's
    // namespace with bpf_redirect_peer until the invoker's AF_XDP program
    // comes onto the sink's eth0, which switches the port to the veth
    // (this router is held here, unpinned: found by its program). At XDP
    // the router's ports' peers get a pass-through program, without which
    // veth refuses redirected frames.
    let router_tc = Dataplane::router(
        Some(&dut),
        &["in0".to_string(), "out0".to_string()],
        peregrine_bpf::Hook::TC,
        FibMode::Full,
        false,
    )?;
    let mut router_xdp = Dataplane::router(
        Some(&dut),
        &["in1".to_string(), "out1".to_string()],
        peregrine_bpf::Hook::Xdp(XdpMode::Native),
        FibMode::Full,
        false,
    )?;
    router_xdp.prepare_peers(lab.topology(), "dut")?;
    let out0 = router_tc
        .ports
        .iter()
        .find(|(n, _)| n == "out0")
        .map(|(_, l)| l.ifindex())
        .context("the tc router has no port out0")?;

    // Saturation, with servers of their own (so the soak's servers count
    // the soak's requests only).
    let (rates, quic_every, saturation) = match a.rate {
        Some(r) => (
            vec![(1232u16, r), (1233, r), (WASM_PORT, r)],
            a.quic_every.unwrap_or(Duration::from_secs(2)),
            None,
        ),
        None => {
            let servers = Servers::start(&sink, exe, tmp, "calibration")?;
            let sat = calibrate(&gen, exe);
            servers.stop()?;
            let sat = sat?;
            let share = a.load / 100.0;
            let rates = sat
                .replies_per_s
                .iter()
                .map(|&(p, r)| (p, ((r * share) as u32).max(1)))
                .collect::<Vec<_>>();
            let every = a
                .quic_every
                .unwrap_or(Duration::from_secs_f64(sat.download_s / share));
            eprintln!(
                "soak: flat out for {:.0} s: {} correct replies/s, a download in {:.2} s; the soak runs at {}%",
                CALIBRATION.as_secs_f64(),
                sat.replies_per_s
                    .iter()
                    .map(|(p, r)| format!("port {p} {r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                sat.download_s,
                a.load
            );
            (rates, every, Some(sat))
        }
    };
    if let Some(rate) = &a.police {
        police(rate)?;
    }
    let servers = Servers::start(&sink, exe, tmp, "soak")?;
    eprintln!("soak: invoker path: tc router on dut in0, out0 and tc policer on dut in0; QUIC path: router at XDP on dut in1, out1");
    eprintln!(
        "soak: faas serve (afxdp: reverse, sha256, reverse as WebAssembly) and quic serve on sink; {} requests/s, a {} KiB download every {:.2} s, for {:.0} s",
        rates
            .iter()
            .map(|(p, r)| format!("port {p} {r}"))
            .collect::<Vec<_>>()
            .join(", "),
        BODY_BYTES / 1024,
        quic_every.as_secs_f64(),
        a.duration.as_secs_f64()
    );
    let invoker_probes = invoker_path(lab)?;
    let quic_probes = quic_path(lab)?;
    let invoker0 = invoker_probes.snapshot()?;
    let quic0 = quic_probes.snapshot()?;
    let exceed0 = policer_exceed(&dut)?;
    let udp0 = udp_errors(lab)?;
    let tc0 = router_counts(&router_tc)?;
    let xdp0 = router_counts(&router_xdp)?;
    let load = Load::start(&gen, exe, &rates, quic_every)?;
    // Sampling, until the duration is up (or Ctrl-C).
    let procs = [
        ("faas serve", servers.faas.pid()),
        ("quic serve", servers.quic.pid()),
    ];
    let policer_pins = netns::run_in(&dut, || policer::dir_here("in0"))??;
    let lab_pins = lab.pin_dir()?;
    let mut series: Vec<Sampled> = Vec::new();
    let mut peer_delivered = 0u32;
    let t0 = Instant::now();
    let mut next = Duration::ZERO;
    let sampled = (|| -> Result<()> {
        while t0.elapsed() < a.duration {
            if signals::stop_requested() {
                bail!("interrupted");
            }
            if t0.elapsed() < next {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            next += interval;
            let t = t0.elapsed().as_secs_f64();
            let mut row: Vec<(String, f64)> = Vec::new();
            for (what, pid) in procs {
                row.push((format!("rss MB: {what}"), rss_mb(pid)?));
                row.push((format!("fds: {what}"), fds(pid)?));
            }
            row.push((
                "pins: policer (dut in0)".into(),
                count_pins(&policer_pins, 4) as f64,
            ));
            row.push(("pins: lab".into(), count_pins(&lab_pins, 4) as f64));
            let rules = netns::run_in(&dut, || -> Result<usize> {
                Ok(policer::maps_here("in0")?.rules()?.len())
            })??;
            row.push(("map entries: policer rules".into(), rules as f64));
            for (what, r) in [("tc", &router_tc), ("xdp", &router_xdp)] {
                row.push((
                    format!("map entries: router ports ({what})"),
                    r.port_stats()?.len() as f64,
                ));
            }
            // While the invoker serves, the tc router must hand out0's
            // frames to the veth (the invoker's XDP hook), not past it.
            peer_delivered += u32::from(router_tc.router.peer_delivery(out0)?);
            for (name, v) in row {
                match series.iter_mut().find(|s| s.name == name) {
                    Some(s) => s.points.push((t, v)),
                    None => series.push(Sampled {
                        name,
                        points: vec![(t, v)],
                    }),
                }
            }
        }
        Ok(())
    })();
    let finished = load.finish();
    sampled?;
    let (tallies, downloads) = finished?;
    let (faas_report, quic_report) = servers.stop()?;
    let invoker1 = invoker_probes.snapshot()?;
    let quic_veth = by_place(quic_probes.since(&quic0)?);
    let exceed = policer_exceed(&dut)? - exceed0;
    let udp = since(&udp0, udp_errors(lab)?);
    let (tc1, xdp1) = (router_counts(&router_tc)?, router_counts(&router_xdp)?);
    drop(router_tc);
    drop(router_xdp);

    let mut runs = Vec::new();
    let mut failures = Vec::new();
    if let Some(sat) = &saturation {
        runs.push(run(
            format!("{BALANCE_PREFIX}saturation (replies/s flat out; download s)"),
            SoakValues {
                drops: sat
                    .replies_per_s
                    .iter()
                    .map(|(p, r)| (format!("port {p}: replies/s"), *r as u64))
                    .chain([("download: ms".to_string(), (sat.download_s * 1e3) as u64)])
                    .collect(),
                ..Default::default()
            },
        ));
    }
    for s in series {
        let after: Vec<f64> = s
            .points
            .iter()
            .filter(|(t, _)| *t >= warmup)
            .map(|p| p.1)
            .collect();
        if after.is_empty() {
            failures.push(format!("{}: no sample after warm-up", s.name));
            continue;
        }
        let (base, floor_dev, dev) = flatness(&after);
        if floor_dev > a.tolerance {
            failures.push(format!(
                "series {} grew: its floor moved {floor_dev:.1}% from {base} after warm-up (limit {}%)",
                s.name, a.tolerance
            ));
        }
        runs.push(run(
            format!("{SERIES_PREFIX}{}", s.name),
            SoakValues {
                samples: s.points,
                warmup_s: Some(warmup),
                baseline: Some(base),
                floor_dev_pct: Some(floor_dev),
                max_dev_pct: Some(dev),
                limit_pct: Some(a.tolerance),
                ..Default::default()
            },
        ));
    }
    if peer_delivered > 0 {
        failures.push(format!(
            "the tc router delivered past the invoker's XDP program on out0 in {peer_delivered} samples"
        ));
    }
    // The invoker: every request answered correctly or counted dropped
    // at one place of its path.
    let invoker_drops: BTreeMap<String, u64> = faas_report
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "backend" | "memory_bytes" | "seconds" | "requests" | "replies"
                    )
                })
                // Why the socket's rx_dropped grew, not a loss of its own.
                .filter(|(k, _)| k.as_str() != "xsk_rx_fill_ring_empty_descs")
                .filter_map(|(k, v)| Some((format!("invoker: {k}"), v.as_u64()?)))
                .filter(|(_, v)| *v > 0)
                .collect()
        })
        .unwrap_or_default();
    // The veth counters beside the invoker's own: a request on a full
    // AF_XDP ring once, under the invoker's reason (see `invoker_path`).
    let mut all_drops = by_place(invoker_probes.between(&invoker0, &invoker1, &invoker_drops));
    all_drops.extend(invoker_drops);
    all_drops.extend(since(&tc0.drops, tc1.drops.clone()));
    if exceed > 0 {
        all_drops.insert("policer exceed (in0)".into(), exceed);
    }
    for (port, t) in &tallies {
        if t.socket_drops > 0 {
            all_drops.insert(format!("client socket (port {port})"), t.socket_drops);
        }
    }
    let counted: u64 = all_drops.values().sum();
    let (mut sent, mut ok, mut wrong) = (0, 0, 0);
    for (port, t) in &tallies {
        eprintln!(
            "soak: port {port}: sent {}, correct replies {}, wrong {}",
            t.sent, t.ok, t.wrong
        );
        runs.push(run(
            format!("{BALANCE_PREFIX}invoker port {port}"),
            SoakValues {
                sent: Some(t.sent),
                ok: Some(t.ok),
                wrong: Some(t.wrong),
                missing: Some(t.sent.saturating_sub(t.ok + t.wrong)),
                ..Default::default()
            },
        ));
        sent += t.sent;
        ok += t.ok;
        wrong += t.wrong;
    }
    let missing = sent.saturating_sub(ok + wrong);
    let unattributed = missing.saturating_sub(counted);
    let server_requests = faas_report["requests"].as_u64().unwrap_or(0);
    let server_replies = faas_report["replies"].as_u64().unwrap_or(0);
    runs.push(run(
        format!("{BALANCE_PREFIX}invoker (all ports)"),
        SoakValues {
            sent: Some(sent),
            ok: Some(ok),
            wrong: Some(wrong),
            missing: Some(missing),
            counted: Some(counted),
            unattributed: Some(unattributed),
            drops: all_drops.clone(),
            ..Default::default()
        },
    ));
    runs.push(run(
        format!("{BALANCE_PREFIX}invoker's own counters"),
        SoakValues {
            sent: Some(server_requests),
            ok: Some(server_replies),
            missing: Some(server_requests.saturating_sub(server_replies)),
            ..Default::default()
        },
    ));
    if sent == 0 || ok == 0 {
        failures.push("invoker: no request was answered".into());
    }
    if wrong > 0 {
        failures.push(format!("invoker: {wrong} wrong replies"));
    }
    if unattributed > 0 {
        failures.push(format!(
            "invoker: {unattributed} of {missing} missing replies not counted at any place"
        ));
    }
    if server_replies < ok {
        failures.push(format!(
            "invoker: its counters say {server_replies} replies, the clients got {ok} correct ones"
        ));
    }
    // QUIC: every download complete; the server failed none.
    let served = quic_report["served"].as_u64().unwrap_or(0);
    let qfailed = quic_report["failed"].as_u64().unwrap_or(0);
    let mut quic_drops = quic_veth;
    quic_drops.insert("quic serve: served".to_string(), served);
    quic_drops.extend(since(&xdp0.drops, xdp1.drops.clone()));
    runs.push(run(
        format!("{BALANCE_PREFIX}quic downloads"),
        SoakValues {
            sent: Some(downloads.started),
            ok: Some(downloads.ok),
            wrong: Some(downloads.failed),
            missing: Some(
                downloads
                    .started
                    .saturating_sub(downloads.ok + downloads.failed),
            ),
            counted: Some(qfailed),
            drops: quic_drops,
            ..Default::default()
        },
    ));
    if downloads.ok == 0 || downloads.failed > 0 || qfailed > 0 {
        failures.push(format!(
            "quic: {} of {} downloads failed (server: {qfailed} failed){}",
            downloads.failed,
            downloads.started,
            downloads
                .last_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ));
    }
    // Kernel UDP receive buffers, per namespace (QUIC's and the clients'
    // sockets alike): shown, not part of a balance.
    runs.push(run(
        format!("{BALANCE_PREFIX}kernel UDP (per namespace)"),
        SoakValues {
            counted: Some(udp.values().sum()),
            drops: udp,
            ..Default::default()
        },
    ));
    // The routers and the policer: what they forwarded, passed to the
    // kernel and dropped.
    for (what, before, after) in [("tc", &tc0, &tc1), ("xdp", &xdp0, &xdp1)] {
        let mut d = since(&before.drops, after.drops.clone());
        let passed = since(&before.passed, after.passed.clone());
        d.extend(passed);
        if what == "tc" && exceed > 0 {
            d.insert("policer exceed (in0)".into(), exceed);
        }
        runs.push(run(
            format!("{BALANCE_PREFIX}router at {what} (forwarded; drops and passes)"),
            SoakValues {
                ok: Some(after.forwarded - before.forwarded),
                counted: Some(d.values().sum()),
                drops: d,
                ..Default::default()
            },
        ));
    }
    Ok((runs, failures))
}

/// Windows a series after warm-up is cut into to find its floor.
const WINDOWS: usize = 10;

/// How flat `after` (a series' samples after warm-up, at least one) is:
/// its first window's floor, the largest move of a later window's floor
/// from it, and the largest move of one sample from it, both in percent.
/// Up to `WINDOWS` windows of at least 3 samples each.
fn flatness(after: &[f64]) -> (f64, f64, f64) {
    let windows = (after.len() / 3).clamp(1, WINDOWS);
    let size = after.len().div_ceil(windows);
    let floors: Vec<f64> = after
        .chunks(size)
        .map(|w| w.iter().copied().fold(f64::INFINITY, f64::min))
        .collect();
    let base = floors[0];
    let pct = |v: f64| {
        if base == 0.0 {
            if v == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (v - base).abs() / base * 100.0
        }
    };
    let floor_dev = floors.iter().map(|&f| pct(f)).fold(0.0, f64::max);
    let dev = after.iter().map(|&v| pct(v)).fold(0.0, f64::max);
    (base, floor_dev, dev)
}

/// Removes the policer on in0 of namespace `.0` when dropped.
struct Detach(String);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = netns::run_in(&self.0, || policer::detach("in0"));
    }
}

/// Deploys reverse as WebAssembly on WASM_PORT of the `faas serve` in
/// `ns`, retried while the server starts (at most 30 s, each try at most
/// 10 s).
fn deploy_wasm(ns: &str, exe: &Path, tmp: &Path) -> Result<()> {
    let wat = tmp.join("reverse.wat");
    std::fs::write(&wat, REVERSE_WAT)?;
    let log = tmp.join("faas-deploy.log");
    let t0 = Instant::now();
    let port = WASM_PORT.to_string();
    loop {
        signals::check()?;
        let child = netns::command(ns, &exe.to_string_lossy())?
            .args(["faas", "deploy", "--port", &port, "--wasm"])
            .arg(&wat)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("running faas deploy")?;
        let err = match finish(Reaped(child), Duration::from_secs(10), "faas deploy") {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if t0.elapsed() > Duration::from_secs(30) {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            bail!("faas deploy --port {port}: {err:#} {}", said.trim());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `bench soak`'s result file.
pub struct BenchSoak;

/// Its figure: the sampled series over time.
pub const SERIES_FIGURE: &str = "series";

impl Report for BenchSoak {
    const KIND: &'static str = "bench-soak";
    type Values = SoakValues;

    fn table(r: &ResultFile<SoakValues>) -> String {
        use std::fmt::Write;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:<34} {:>8} {:>10} {:>10} {:>10} {:>10} {:>9}",
            "series (after warm-up)", "samples", "baseline", "min", "max", "floor dev", "max dev"
        );
        for run in &r.runs {
            let Some(name) = run.label.strip_prefix(SERIES_PREFIX) else {
                continue;
            };
            let v = &run.values;
            let after: Vec<f64> = v
                .samples
                .iter()
                .filter(|(t, _)| *t >= v.warmup_s.unwrap_or(0.0))
                .map(|p| p.1)
                .collect();
            let min = after.iter().copied().fold(f64::INFINITY, f64::min);
            let max = after.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let _ = writeln!(
                t,
                "{name:<34} {:>8} {:>10.1} {min:>10.1} {max:>10.1} {:>9.2}% {:>8.2}%",
                v.samples.len(),
                v.baseline.unwrap_or(f64::NAN),
                v.floor_dev_pct.unwrap_or(f64::NAN),
                v.max_dev_pct.unwrap_or(f64::NAN),
            );
        }
        let _ = writeln!(
            t,
            "\n{:<34} {:>9} {:>9} {:>7} {:>8} {:>8} {:>13}",
            "balance", "sent", "ok", "wrong", "missing", "counted", "unattributed"
        );
        let num = |x: Option<u64>| x.map_or("-".to_string(), |x| x.to_string());
        for run in &r.runs {
            let Some(name) = run.label.strip_prefix(BALANCE_PREFIX) else {
                continue;
            };
            let v = &run.values;
            let _ = writeln!(
                t,
                "{name:<34} {:>9} {:>9} {:>7} {:>8} {:>8} {:>13}",
                num(v.sent),
                num(v.ok),
                num(v.wrong),
                num(v.missing),
                num(v.counted),
                num(v.unattributed)
            );
            for (k, n) in &v.drops {
                let _ = writeln!(t, "    {k}: {n}");
            }
        }
        t
    }

    fn figures(r: &ResultFile<SoakValues>) -> Vec<Figure> {
        let panel = |prefix: &str| -> Series {
            r.runs
                .iter()
                .filter_map(|run| {
                    let name = run.label.strip_prefix(SERIES_PREFIX)?;
                    let what = name.strip_prefix(prefix)?;
                    Some((what.to_string(), run.values.samples.clone()))
                })
                .collect()
        };
        let panels = [
            ("resident memory, MB", "rss MB: "),
            ("open file descriptors", "fds: "),
            ("pins and map entries", ""),
        ]
        .into_iter()
        .map(|(title, prefix)| {
            let s = if prefix.is_empty() {
                let mut s = panel("pins: ");
                s.extend(panel("map entries: "));
                s
            } else {
                panel(prefix)
            };
            (title.to_string(), s)
        })
        .collect();
        vec![Figure {
            name: SERIES_FIGURE,
            chart: Chart::Panels {
                title: "peregrine soak: sampled series over time".into(),
                axes: ("seconds".into(), "value".into()),
                panels,
            },
        }]
    }
}
