//! `peregrine faas serve`: the function invoker with its backends.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use peregrine_faas::baseline::SocketServer;
use peregrine_faas::invoker::{AfXdpInvoker, Counters, InvokerConfig};
use peregrine_faas::Registry;
use peregrine_lab::{lab, netns, signals};

#[derive(Subcommand)]
pub enum FaasCmd {
    /// Serve functions on UDP ports until Ctrl-C or --duration.
    Serve(ServeArgs),
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
}

pub fn run(cmd: FaasCmd) -> Result<()> {
    let FaasCmd::Serve(a) = cmd;
    let registry = Registry::parse(&a.functions).map_err(anyhow::Error::msg)?;
    let ns = match (&a.lab, &a.host) {
        (Some(l), Some(h)) => {
            if lab::state(l)?.topology.host(h).is_none() {
                bail!("lab {l} has no host {h:?}");
            }
            Some(lab::ns_name(l, h))
        }
        _ => None,
    };
    if a.threads == 0 || a.queues == 0 {
        bail!("--threads and --queues must be at least 1");
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cpus: Vec<usize> = (0..ncpu).collect();
    let names: Vec<String> = registry
        .iter()
        .map(|(p, _, f)| format!("{p}={}", f.name()))
        .collect();
    let server = match a.backend.as_str() {
        "afxdp" => {
            if a.threads % a.queues != 0 {
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
                "serving {} with {} recvmmsg/sendmmsg thread(s)",
                names.join(" "),
                a.threads
            );
            Server::Sockets(s)
        }
        "socket" => {
            if a.threads != 1 {
                bail!("the socket backend is one thread (the source's simple server); use mmsg for more");
            }
            let s = netns::run_in_opt(ns.as_deref(), || SocketServer::simple(registry))??;
            eprintln!(
                "serving {} with one recvfrom/sendto thread",
                names.join(" ")
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
        "seconds": start.elapsed().as_secs_f64(),
        "requests": get(&c.requests),
        "replies": get(&c.replies),
        "malformed": get(&c.malformed),
        "unknown_port": get(&c.unknown_port),
        "failed": get(&c.failed),
        "too_large": get(&c.too_large),
        "per_function": names.iter().zip(c.per_function.iter()).map(|(n, v)| (n.clone(), get(v))).collect::<std::collections::BTreeMap<_, _>>(),
    });
    if a.json {
        println!("{out}");
    } else {
        println!("{}", serde_json::to_string_pretty(&out)?);
    }
    Ok(())
}
