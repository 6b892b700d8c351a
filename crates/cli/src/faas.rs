//! `peregrine faas serve`: the function invoker with its backends.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use peregrine_faas::baseline::SocketServer;
use peregrine_faas::invoker::{AfXdpInvoker, Counters, InvokerConfig};
use peregrine_faas::openloop::{request_frame_size, OpenLoopConfig, OpenLoopProgress};
use peregrine_faas::Registry;
use peregrine_lab::{lab, netns, signals};

#[derive(Subcommand)]
pub enum FaasCmd {
    /// Serve functions on UDP ports until Ctrl-C or --duration.
    Serve(ServeArgs),
    /// Load: closed loop (connections), or open loop at --rate; every reply
    /// checked, latency histogram.
    Load(LoadArgs),
}

#[derive(Args)]
pub struct LoadArgs {
    /// Server address.
    #[arg(long)]
    pub to: std::net::IpAddr,
    /// PORT=FUNCTION,... as the server runs them (replies are checked
    /// against these functions run here).
    #[arg(long)]
    pub functions: String,
    /// Concurrent connections, one outstanding request each.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Request payload bytes.
    #[arg(long, default_value_t = 200)]
    pub size: usize,
    /// Lab and host to send from (default: this namespace).
    #[arg(long, requires = "host")]
    pub lab: Option<String>,
    #[arg(long, requires = "lab")]
    pub host: Option<String>,
    /// Open loop: send requests at this rate (e.g. 500k, 1M, 200000) from
    /// the live-frame generator, whatever the server answers; replies are
    /// checked in XDP on --iface (functions echo and reverse).
    #[arg(long)]
    pub rate: Option<String>,
    /// Open loop: the client's interface.
    #[arg(long, default_value = "eth0")]
    pub iface: String,
    /// Open loop: source ports the requests come from.
    #[arg(long, default_value_t = 16)]
    pub flows: u32,
    /// Open loop: generator threads (pinned to CPUs 0..N).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Open loop: check replies on the generator's CPUs (RPS) rather than on
    /// the CPU that sent them (the server's, on veth).
    #[arg(long)]
    pub check_on_client_cpus: bool,
    /// Serve Prometheus metrics here while running (e.g. 127.0.0.1:9464).
    #[arg(long)]
    pub metrics: Option<std::net::SocketAddr>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Interface the requests arrive on (afxdp backend).
    #[arg(long, default_value = "eth0")]
    pub iface: String,
    /// PORT=FUNCTION,...; built-ins: reverse, echo, upper, sha256.
    #[arg(long)]
    pub functions: String,
    /// RX queues served (afxdp).
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Worker threads in all.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// afxdp | mmsg | socket
    #[arg(long, default_value = "afxdp")]
    pub backend: String,
    /// Lab and host to serve in (default: this namespace).
    #[arg(long, requires = "host")]
    pub lab: Option<String>,
    #[arg(long, requires = "lab")]
    pub host: Option<String>,
    /// Stop after this many seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    /// AF_XDP: UMEM frames per socket (2 KiB each; half receive, half send).
    #[arg(long, default_value_t = 4096)]
    pub frames: u32,
    /// AF_XDP: entries of the RX and TX rings (fill and completion: twice).
    #[arg(long, default_value_t = 1024)]
    pub ring: u32,
    /// AF_XDP: busy-poll the queue from the workers (SO_PREFER_BUSY_POLL,
    /// SO_BUSY_POLL=USECS, SO_BUSY_POLL_BUDGET=64). Pays off where the
    /// queue's NAPI may run on the worker's core (a NIC; not veth).
    #[arg(long, value_name = "USECS")]
    pub busy_poll: Option<u32>,
    /// AF_XDP: attach the dispatcher in native (driver) or generic (skb)
    /// mode; sockets on a generic program run in skb mode.
    #[arg(long, default_value = "native")]
    pub xdp_mode: peregrine_bpf::XdpMode,
    /// CPUs the workers are pinned to, in turn (default: all).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Print the final counters as JSON.
    #[arg(long)]
    pub json: bool,
}

enum Server {
    AfXdp(Box<AfXdpInvoker>),
    Sockets(SocketServer),
}

impl Server {
    fn counters(&self) -> &Counters {
        match self {
            Server::AfXdp(i) => &i.counters,
            Server::Sockets(s) => &s.counters,
        }
    }
    fn memory_bytes(&self) -> usize {
        match self {
            Server::AfXdp(i) => i.memory_bytes,
            Server::Sockets(s) => s.memory_bytes,
        }
    }
}

pub fn run(cmd: FaasCmd) -> Result<()> {
    match cmd {
        FaasCmd::Serve(a) => serve(a),
        FaasCmd::Load(a) => load(a),
    }
}

fn lab_ns(lab: &Option<String>, host: &Option<String>) -> Result<Option<String>> {
    match (lab, host) {
        (Some(l), Some(h)) => {
            if lab::state(l)?.topology.host(h).is_none() {
                bail!("lab {l} has no host {h:?}");
            }
            Ok(Some(lab::ns_name(l, h)))
        }
        _ => Ok(None),
    }
}

fn load(a: LoadArgs) -> Result<()> {
    use peregrine_faas::load::{LoadConfig, LoadMetrics};
    if !peregrine_lab::topology::allowed_address(a.to) {
        bail!(
            "address {} is outside 198.18.0.0/15 and 2001:db8::/32; load goes only to lab ranges",
            a.to
        );
    }
    if !(a.duration > 0.0 && a.duration <= 3600.0) {
        bail!("--duration {}: expected seconds in (0, 3600]", a.duration);
    }
    let registry = Registry::parse(&a.functions).map_err(anyhow::Error::msg)?;
    if a.rate.is_some() {
        return open_load(&a, &registry);
    }
    let ns = lab_ns(&a.lab, &a.host)?;
    let metrics = LoadMetrics::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = a
        .metrics
        .map(|addr| metrics.serve(addr, stop.clone()))
        .transpose()?;
    let cfg = LoadConfig {
        server: a.to,
        connections: a.connections,
        duration: Duration::from_secs_f64(a.duration),
        size: a.size,
        timeout: Duration::from_secs(1),
    };
    let r = netns::run_in_opt(ns.as_deref(), || {
        peregrine_faas::load::run(&registry, &cfg, &metrics)
    })??;
    stop.store(true, Ordering::Relaxed);
    if let Some(s) = server {
        let _ = s.join();
    }
    let lat = peregrine_lab::measure::summarize(&r.latency);
    let out = serde_json::json!({
        "seconds": r.seconds,
        "connections": a.connections,
        "size": a.size,
        "requests": r.requests,
        "responses": r.responses,
        "wrong": r.wrong,
        "missing": r.missing,
        "requests_per_s": r.responses as f64 / r.seconds.max(1e-9),
        "latency": lat,
    });
    print_load(&out, a.json, r.wrong)
}

fn open_load(a: &LoadArgs, registry: &Registry) -> Result<()> {
    let (Some(lab), Some(host)) = (&a.lab, &a.host) else {
        bail!("open-loop load (--rate) sends from a lab host: give --lab and --host");
    };
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if a.threads == 0 || a.threads > ncpu {
        bail!("--threads {}: expected 1..={ncpu}", a.threads);
    }
    let from = peregrine_lab::Endpoint {
        host: host.clone(),
        iface: a.iface.clone(),
    };
    let topo = lab::state(lab)?.topology;
    let mut cfg = OpenLoopConfig::for_lab(&topo, &from, a.to, registry, a.size)?;
    let frame_bytes = request_frame_size(&cfg.frame, a.size) as f64;
    cfg.rate = crate::bench::parse_rate(a.rate.as_deref().unwrap_or("0"), frame_bytes)?;
    cfg.duration = Duration::from_secs_f64(a.duration);
    cfg.flows = a.flows;
    cfg.cpus = (0..a.threads).collect();
    cfg.check_on_client_cpus = a.check_on_client_cpus;
    let progress = OpenLoopProgress::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Prometheus while it runs: requests, correct and wrong replies (the
    // latencies and the missing are known when the run ends, in the report).
    let metrics = peregrine_faas::load::LoadMetrics::new();
    let server = a
        .metrics
        .map(|addr| metrics.serve(addr, stop.clone()))
        .transpose()?;
    let r = std::thread::scope(|s| {
        if !a.json {
            s.spawn(|| peregrine_faas::openloop::watch(&progress, &stop, "load"));
        }
        if a.metrics.is_some() {
            s.spawn(|| {
                let (mut req, mut ok, mut bad) = (0, 0, 0);
                loop {
                    let done = stop.load(Ordering::Relaxed);
                    let r = progress.requests.load(Ordering::Relaxed);
                    let o = progress.replies.load(Ordering::Relaxed);
                    let b = progress.wrong.load(Ordering::Relaxed);
                    metrics.requests.inc_by(r.saturating_sub(req));
                    metrics.responses.inc_by(o.saturating_sub(ok));
                    metrics.wrong.inc_by(b.saturating_sub(bad));
                    (req, ok, bad) = (r.max(req), o.max(ok), b.max(bad));
                    if done {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
        let r = peregrine_faas::openloop::run(&cfg, &progress);
        stop.store(true, Ordering::Relaxed);
        r
    });
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            if let Some(t) = server {
                let _ = t.join();
            }
            return Err(e.into());
        }
    };
    if let Some(t) = server {
        let _ = t.join();
    }
    let lat = peregrine_lab::measure::summarize(&r.latency);
    let c = &r.checks;
    let out = serde_json::json!({
        "mode": "open",
        "seconds": r.seconds,
        "size": a.size,
        "flows": a.flows,
        "requests": r.requests,
        "responses": r.replies,
        "wrong": r.wrong,
        "missing": r.missing,
        "requests_per_s": r.requests as f64 / r.seconds.max(1e-9),
        "responses_per_s": r.replies as f64 / r.seconds.max(1e-9),
        "wrong_by_check": {
            "length": c.bad_length, "payload": c.bad_payload,
            "checksum": c.bad_checksum, "truncated": c.truncated,
        },
        "latency": lat,
    });
    print_load(&out, a.json, r.wrong)
}

/// Prints a load report (JSON or pretty) and fails if any reply was wrong.
fn print_load(out: &serde_json::Value, json: bool, wrong: u64) -> Result<()> {
    if json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(out)?);
    }
    if wrong > 0 {
        bail!("{wrong} wrong replies");
    }
    Ok(())
}

fn serve(a: ServeArgs) -> Result<()> {
    let registry = Registry::parse(&a.functions).map_err(anyhow::Error::msg)?;
    let ns = lab_ns(&a.lab, &a.host)?;
    if a.threads == 0 || a.queues == 0 {
        bail!("--threads and --queues must be at least 1");
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if let Some(c) = a.cpus.iter().find(|&&c| c >= ncpu) {
        bail!("--cpus: cpu {c} does not exist (this machine has {ncpu})");
    }
    let cpus: Vec<usize> = if a.cpus.is_empty() {
        (0..ncpu).collect()
    } else {
        a.cpus.clone()
    };
    let names: Vec<String> = registry
        .iter()
        .map(|(p, _, f)| format!("{p}={}", f.name()))
        .collect();
    let server = match a.backend.as_str() {
        "afxdp" => {
            if !a.threads.is_multiple_of(a.queues) {
                bail!(
                    "--threads ({}) must be a multiple of --queues ({})",
                    a.threads,
                    a.queues
                );
            }
            let cfg = InvokerConfig {
                queues: a.queues,
                workers: a.threads / a.queues,
                cpus,
                xdp_mode: a.xdp_mode,
                xsk: peregrine_xsk::XskConfig {
                    frames: a.frames,
                    ring: a.ring,
                    busy_poll: a.busy_poll.map(|usecs| peregrine_xsk::BusyPoll {
                        usecs,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let inv = AfXdpInvoker::start(ns.as_deref(), &a.iface, registry, cfg)?;
            eprintln!(
                "serving {} on {} with AF_XDP ({}, {} queue(s) x {} worker(s), {} KiB of UMEM and rings)",
                names.join(" "),
                a.iface,
                inv.mode,
                a.queues,
                a.threads / a.queues,
                inv.memory_bytes / 1024
            );
            Server::AfXdp(Box::new(inv))
        }
        "mmsg" => {
            let s = netns::run_in_opt(ns.as_deref(), || {
                SocketServer::mmsg(registry, a.threads as usize, &cpus)
            })??;
            eprintln!(
                "serving {} with {} recvmmsg/sendmmsg thread(s), up to {} KiB of buffers",
                names.join(" "),
                a.threads,
                s.memory_bytes / 1024
            );
            Server::Sockets(s)
        }
        "socket" => {
            if a.threads != 1 {
                bail!("the socket backend is one thread (the source's simple server); use mmsg for more");
            }
            let s = netns::run_in_opt(ns.as_deref(), || SocketServer::simple(registry))??;
            eprintln!(
                "serving {} with one recvfrom/sendto thread, up to {} KiB of buffers",
                names.join(" "),
                s.memory_bytes / 1024
            );
            Server::Sockets(s)
        }
        b => bail!("unknown backend {b:?}: expected afxdp, mmsg or socket"),
    };
    let start = Instant::now();
    let end = a.duration.map(Duration::from_secs_f64);
    let mut last = 0;
    while !signals::stop_requested() && end.is_none_or(|d| start.elapsed() < d) {
        signals::sleep(Duration::from_secs(1));
        let now = server.counters().replies.load(Ordering::Relaxed);
        if !a.json {
            eprintln!(
                "  {:>6.1}s: {} replies/s",
                start.elapsed().as_secs_f64(),
                now - last
            );
        }
        last = now;
    }
    let c = server.counters();
    let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    let out = serde_json::json!({
        "backend": a.backend,
        "memory_bytes": server.memory_bytes(),
        "seconds": start.elapsed().as_secs_f64(),
        "requests": get(&c.requests),
        "replies": get(&c.replies),
        "malformed": get(&c.malformed),
        "unknown_port": get(&c.unknown_port),
        "failed": get(&c.failed),
        "too_large": get(&c.too_large),
        "tx_ring_full": get(&c.tx_ring_full),
        "per_function": names.iter().zip(c.per_function.iter()).map(|(n, v)| (n.clone(), get(v))).collect::<std::collections::BTreeMap<_, _>>(),
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
