//! `peregrine bench soak`: one lab node under mixed, paced load for a long
//! time (issue 28 item 3). The gen-dut-sink lab: the DUT routes with
//! peregrine's tc router (in0, out0), policed on its ingress in0 (tc); the
//! sink runs `faas serve` (AF_XDP, built-in reverse and sha256, and
//! reverse as WebAssembly deployed into it) and `quic serve` (kernel UDP);
//! the generator host sends UDP requests from kernel sockets to each
//! function at a fixed rate, every reply checked, and downloads a body
//! over HTTP/3 (`quic get`) again and again. Every few seconds it samples
//! each long-running peregrine process's resident memory and open file
//! descriptors, the policer's and the router's map entries and the pins
//! under peregrine's bpffs root; after warm-up each series must stay
//! within the tolerance of its first value. At the end every request must
//! be answered correctly or counted as dropped at a named place.
//!
//! The rates are fixed and moderate (`--rate` per function, a download
//! every `--quic-every`), not yet 70% of each component's saturation.
use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use peregrine_bpf::policer::{Exceed, Match, Rate as PolicerRate, Rule};
use peregrine_bpf::router::FibMode;
use peregrine_dataplane::Dataplane;
use peregrine_faas::Registry;
use peregrine_host::nl::Netlink;
use peregrine_host::{netns, signals};
use peregrine_lab::plot::{Chart, Figure, Series};
use peregrine_lab::results::{ResultFile, Run, RunParams, Values};
use peregrine_lab::{Lab, Lifetime};
use peregrine_qos::attach as policer;
use serde::{Deserialize, Serialize};

use crate::agent::rss_mb;
use crate::common::{builtin_topology, command_line, duration, ResultOutput};
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
    /// UDP requests per second sent to each of the three functions.
    #[arg(long, default_value_t = 500)]
    pub rate: u32,
    /// Time between the starts of two HTTP/3 downloads.
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub quic_every: Duration,
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
    /// The first value after warm-up, and the largest move from it.
    #[serde(rename = "baseline", default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
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

const LAB: &str = "soak";
/// The sink's address (the generator gets a route to it through the DUT).
const SERVER: &str = "198.18.2.2";
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
}

/// `quic get` of the body from namespace `ns` every `every` until `stop`.
fn quic_client(ns: &str, exe: &Path, every: Duration, stop: Arc<AtomicBool>) -> Downloads {
    let mut d = Downloads::default();
    let url = format!("https://{SERVER}:{QUIC_PORT}/file");
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
            Ok(()) => d.ok += 1,
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

/// Drop counters along the requests' and replies' path, by place.
fn path_drops(lab: &Lab, nl: &mut Netlink) -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for (host, iface) in [
        ("gen", "eth0"),
        ("dut", "in0"),
        ("dut", "out0"),
        ("sink", "eth0"),
    ] {
        let c = nl.link_counters(&lab.ns(host), iface)?;
        m.insert(format!("rx_dropped {host}:{iface}"), c.rx_dropped);
        m.insert(format!("tx_dropped {host}:{iface}"), c.tx_dropped);
    }
    let st = netns::run_in(&lab.ns("dut"), || policer::stats("in0"))??;
    m.insert(
        "policer exceed (in0)".into(),
        st.rules.iter().map(|(_, c)| c.exceed_packets).sum(),
    );
    Ok(m)
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

/// Router drops by port and reason (every action but forward and the
/// passes to the kernel).
fn router_drops(dp: &Dataplane) -> Result<(BTreeMap<String, u64>, u64)> {
    let mut m = BTreeMap::new();
    let mut forwarded = 0;
    for (port, _, st) in dp.port_stats()? {
        for a in 0..peregrine_bpf::router::ACTIONS {
            let name = peregrine_bpf::router::action_name(a);
            let n = st.packets[a];
            if name == "forward" {
                forwarded += n;
            } else if name.starts_with("drop") && n > 0 {
                *m.entry(format!("router {port}: {name}")).or_default() += n;
            }
        }
    }
    Ok((m, forwarded))
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
    if a.rate == 0 || a.rate > 100_000 {
        bad_setting!("--rate {}: expected 1..=100000 requests/s", a.rate);
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
    let lab = Lab::up(builtin_topology("gen-dut-sink", LAB)?, Lifetime::Ephemeral)?;
    let (gen, dut, sink) = (lab.ns("gen"), lab.ns("dut"), lab.ns("sink"));
    // gen-dut-sink routes the generator's 198.19.0.0/16 only: the sink's
    // own subnet through the DUT too, for the servers on its eth0.
    Netlink::new()?.add_route(
        &gen,
        "198.18.2.0".parse()?,
        24,
        Some("198.18.1.2".parse()?),
        None,
    )?;
    let tmp = std::env::temp_dir().join(format!("peregrine-bench-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let result = soak(&a, &exe, &lab, (&gen, &dut, &sink), &tmp, interval, warmup);
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

fn soak(
    a: &SoakBenchConfig,
    exe: &Path,
    lab: &Lab,
    (gen, dut, sink): (&str, &str, &str),
    tmp: &Path,
    interval: Duration,
    warmup: f64,
) -> Result<(Vec<Run<SoakValues>>, Failures)> {
    // The policer first (tcx runs it before the router attached after):
    // a rule for the sink's address far above the soak's rates.
    let rule = Rule {
        matches: Match {
            dst: Some(format!("{SERVER}/32").parse().map_err(anyhow::Error::msg)?),
            ..Default::default()
        },
        rate: PolicerRate::Bits(10_000_000_000),
        burst: peregrine_qos::config::default_burst(PolicerRate::Bits(10_000_000_000)),
        exceed: Exceed::Drop,
        priority: 0,
        class: 0,
    };
    netns::run_in(dut, || {
        policer::apply("in0", peregrine_bpf::Hook::TC, &[rule])
    })??;
    let _policer = Detach(dut.to_string());
    // The router next, before the services, as users bring a node up
    // (network first): at tc it delivers into the sink's namespace with
    // bpf_redirect_peer until the invoker's AF_XDP program comes onto the
    // sink's eth0, which switches the port to the veth (this router is
    // held here, unpinned: found by its program).
    let ports = ["in0".to_string(), "out0".to_string()];
    let router = Dataplane::router(
        Some(dut),
        &ports,
        peregrine_bpf::Hook::TC,
        FibMode::Full,
        false,
    )?;
    let faas = Proc::start(
        sink,
        exe,
        &[
            "faas",
            "serve",
            "--functions",
            FUNCTIONS,
            "--backend",
            "afxdp",
            "--json",
        ],
        &tmp.join("faas-serve.log"),
        "faas serve",
    )?;
    let wat = tmp.join("reverse.wat");
    std::fs::write(&wat, REVERSE_WAT)?;
    deploy_wasm(sink, exe, &wat)?;
    let body = format!("file={BODY_BYTES}");
    let listen = format!("{SERVER}:{QUIC_PORT}");
    let quic = Proc::start(
        sink,
        exe,
        &[
            "quic", "serve", "--listen", &listen, "--io", "kernel", "--memory", &body, "--json",
        ],
        &tmp.join("quic-serve.log"),
        "quic serve",
    )?;
    eprintln!("soak: tc router on dut in0, out0; tc policer on dut in0");
    eprintln!(
        "soak: faas serve (afxdp: reverse, sha256, reverse as WebAssembly) and quic serve on sink; {} requests/s per function, a {} KiB download every {:.1} s, for {:.0} s",
        a.rate,
        BODY_BYTES / 1024,
        a.quic_every.as_secs_f64(),
        a.duration.as_secs_f64()
    );
    let mut nl = Netlink::new()?;
    let drops0 = path_drops(lab, &mut nl)?;
    let udp0 = udp_errors(lab)?;
    let (router0, _) = router_drops(&router)?;
    let registry = Arc::new(Registry::parse(EXPECTED).map_err(anyhow::Error::msg)?);
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for port in [1232u16, 1233, WASM_PORT] {
        let sock = netns::run_in(gen, || UdpSocket::bind("0.0.0.0:0"))??;
        let (r, s) = (registry.clone(), stop.clone());
        let rate = a.rate;
        clients.push((
            port,
            std::thread::spawn(move || udp_client(sock, port, rate, r, s)),
        ));
    }
    let quic_thread = {
        let (ns, exe, s, every) = (
            gen.to_string(),
            exe.to_path_buf(),
            stop.clone(),
            a.quic_every,
        );
        std::thread::spawn(move || quic_client(&ns, &exe, every, s))
    };
    // Sampling, until the duration is up (or Ctrl-C).
    let procs = [("faas serve", faas.pid()), ("quic serve", quic.pid())];
    let mut series: Vec<Sampled> = Vec::new();
    let t0 = Instant::now();
    let mut next = Duration::ZERO;
    let sampled = (|| -> Result<()> {
        let pin_root = peregrine_bpf::bpffs::pin_root();
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
            row.push(("pins: bpffs root".into(), count_pins(&pin_root, 6) as f64));
            let rules = netns::run_in(dut, || -> Result<usize> {
                Ok(policer::maps_here("in0")?.rules()?.len())
            })??;
            row.push(("map entries: policer rules".into(), rules as f64));
            row.push((
                "map entries: router ports".into(),
                router.port_stats()?.len() as f64,
            ));
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
    stop.store(true, Ordering::Relaxed);
    let mut tallies = Vec::new();
    for (port, h) in clients {
        let t = h
            .join()
            .map_err(|_| anyhow::anyhow!("a UDP client panicked"))??;
        tallies.push((port, t));
    }
    let downloads = quic_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the quic client panicked"))?;
    sampled?;
    let faas_report = faas.stop()?;
    let quic_report = quic.stop()?;
    let mut drops = since(&drops0, path_drops(lab, &mut nl)?);
    let udp = since(&udp0, udp_errors(lab)?);
    let (router1, forwarded) = router_drops(&router)?;
    drops.extend(since(&router0, router1));
    drop(router);

    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for s in series {
        let after: Vec<f64> = s
            .points
            .iter()
            .filter(|(t, _)| *t >= warmup)
            .map(|p| p.1)
            .collect();
        let Some(&base) = after.first() else {
            failures.push(format!("{}: no sample after warm-up", s.name));
            continue;
        };
        let dev = after
            .iter()
            .map(|v| {
                if base == 0.0 {
                    if *v == 0.0 {
                        0.0
                    } else {
                        f64::INFINITY
                    }
                } else {
                    (v - base).abs() / base * 100.0
                }
            })
            .fold(0.0, f64::max);
        if dev > a.tolerance {
            failures.push(format!(
                "series {} moved {dev:.1}% from {base} after warm-up (limit {}%)",
                s.name, a.tolerance
            ));
        }
        runs.push(run(
            format!("{SERIES_PREFIX}{}", s.name),
            SoakValues {
                samples: s.points,
                warmup_s: Some(warmup),
                baseline: Some(base),
                max_dev_pct: Some(dev),
                limit_pct: Some(a.tolerance),
                ..Default::default()
            },
        ));
    }
    // The invoker: every request answered correctly or counted dropped.
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
    let mut all_drops = drops.clone();
    all_drops.extend(invoker_drops);
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
            drops: [("quic serve: served".to_string(), served)]
                .into_iter()
                .collect(),
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
    // The router and the policer: what they forwarded and dropped.
    let stage_drops: BTreeMap<String, u64> = drops
        .iter()
        .filter(|(k, _)| k.starts_with("router") || k.starts_with("policer"))
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    runs.push(run(
        format!("{BALANCE_PREFIX}router and policer"),
        SoakValues {
            ok: Some(forwarded),
            counted: Some(stage_drops.values().sum()),
            drops: stage_drops,
            ..Default::default()
        },
    ));
    Ok((runs, failures))
}

/// Removes the policer on in0 of namespace `.0` when dropped.
struct Detach(String);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = netns::run_in(&self.0, || policer::detach("in0"));
    }
}

/// Deploys reverse as WebAssembly on WASM_PORT of the `faas serve` in
/// `ns`, retried while the server starts (at most 30 s).
fn deploy_wasm(ns: &str, exe: &Path, wat: &Path) -> Result<()> {
    let t0 = Instant::now();
    let port = WASM_PORT.to_string();
    loop {
        signals::check()?;
        let out = netns::command(ns, &exe.to_string_lossy())?
            .args(["faas", "deploy", "--port", &port, "--wasm"])
            .arg(wat)
            .output()
            .context("running faas deploy")?;
        if out.status.success() {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            bail!(
                "faas deploy --port {port}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
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
            "{:<34} {:>8} {:>10} {:>10} {:>10} {:>9}",
            "series (after warm-up)", "samples", "baseline", "min", "max", "max dev"
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
                "{name:<34} {:>8} {:>10.1} {min:>10.1} {max:>10.1} {:>8.2}%",
                v.samples.len(),
                v.baseline.unwrap_or(f64::NAN),
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
