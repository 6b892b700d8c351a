//! `peregrine bench faas`: the invoker's backends side by side in one run,
//! per request size and worker configuration, as in the source's Tables 6
//! and 7: requests/s, Mbit/s, latency percentiles, CPU.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use peregrine_faas::baseline::SocketServer;
use peregrine_faas::invoker::{AfXdpInvoker, InvokerConfig};
use peregrine_faas::load::{LoadConfig, LoadMetrics};
use peregrine_faas::Registry;
use peregrine_lab::measure::{summarize, CpuSnapshot};
use peregrine_lab::results::{ResultFile, Run, RunParams, Trial};
use peregrine_lab::{netns, signals, Lab, Lifetime};

use crate::bench::{builtin_topology, command_line, secs, write_outputs};

#[derive(Args, Clone)]
pub struct BenchFaasArgs {
    /// Seconds of load per configuration.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Request payload sizes, bytes.
    #[arg(long, value_delimiter = ',', default_value = "200,600,1000,1400")]
    pub sizes: Vec<usize>,
    /// Closed-loop client connections.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    #[arg(long, default_value = "docs/results")]
    pub out: PathBuf,
    #[arg(long, default_value = "bench-faas")]
    pub name: String,
    #[arg(long)]
    pub json: bool,
}

const FUNCTION: &str = "1232=reverse";

pub fn bench_faas(a: BenchFaasArgs) -> Result<()> {
    let dur = secs(a.duration, "--duration")?;
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cpus: Vec<usize> = (0..ncpu).collect();
    let mut runs = Vec::new();
    for &size in &a.sizes {
        for (backend, threads) in [
            ("socket", 1u32),
            ("mmsg", 1),
            ("afxdp", 1),
            ("mmsg", 2),
            ("afxdp", 2),
        ] {
            signals::check()?;
            // As many veth queues as workers: an AF_XDP socket only sees its
            // own queue's requests (1T1Q and 2T2Q, as in the source).
            let mut topo = builtin_topology("pair", "benchfaas")?;
            topo.links[0].queues = threads;
            let lab = Lab::up(topo, Lifetime::Ephemeral)?;
            let registry = Registry::parse(FUNCTION).map_err(anyhow::Error::msg)?;
            // Held for the measurement; dropping it stops the server.
            let server: Box<dyn std::any::Any> = match backend {
                "afxdp" => {
                    let cfg = InvokerConfig {
                        queues: threads,
                        workers: 1,
                        cpus: cpus.clone(),
                        ..Default::default()
                    };
                    Box::new(AfXdpInvoker::start(
                        Some(&lab.ns("b")),
                        "eth0",
                        registry.clone(),
                        cfg,
                    )?)
                }
                "mmsg" => Box::new(netns::run_in(&lab.ns("b"), || {
                    SocketServer::mmsg(registry.clone(), threads as usize, &cpus)
                })??),
                _ => Box::new(netns::run_in(&lab.ns("b"), || {
                    SocketServer::simple(registry.clone())
                })??),
            };
            let label = format!("{backend} {threads}T{threads}Q | {size} B");
            eprintln!("{label}");
            let cfg = LoadConfig {
                server: "198.18.0.2".parse()?,
                connections: a.connections,
                duration: dur,
                size,
                timeout: Duration::from_secs(1),
            };
            let metrics = LoadMetrics::new();
            let cpu0 = CpuSnapshot::take();
            let r = netns::run_in(&lab.ns("a"), || {
                peregrine_faas::load::run(&registry, &cfg, &metrics)
            })??;
            let cpu = CpuSnapshot::take().usage_since(&cpu0);
            drop(server);
            if r.wrong > 0 {
                anyhow::bail!("{label}: {} wrong replies", r.wrong);
            }
            // Bits of the request frames on the wire (Ethernet with FCS).
            let frame = (size + 42 + 4) as f64;
            let rps = r.responses as f64 / r.seconds.max(1e-9);
            let trial = Trial {
                phase: "max".into(),
                requested_pps: None,
                duration_s: r.seconds,
                offered_packets: r.requests,
                delivered_packets: r.responses,
                offered_pps: r.requests as f64 / r.seconds.max(1e-9),
                delivered_pps: rps,
                offered_bps: r.requests as f64 / r.seconds.max(1e-9) * frame * 8.0,
                delivered_bps: rps * frame * 8.0,
                loss_ratio: if r.requests == 0 {
                    0.0
                } else {
                    r.missing as f64 / r.requests as f64
                },
                cpu,
                latency: summarize(&r.latency),
                windows: vec![],
            };
            eprintln!(
                "  {:.0} requests/s, p50 {:.1} us",
                rps,
                trial
                    .latency
                    .as_ref()
                    .map(|l| l.p50_ns as f64 / 1e3)
                    .unwrap_or(0.0)
            );
            let params = RunParams {
                backend: backend.into(),
                ip: "ipv4".into(),
                frame_size: (size + 46).to_string(),
                mean_frame_bytes: frame,
                flows: a.connections as u32,
                threads: threads as usize,
                sink: format!(
                    "faas load client, {} connections, function reverse",
                    a.connections
                ),
            };
            runs.push(Run {
                label,
                params,
                trials: vec![trial],
                rfc2544: None,
            });
            drop(lab);
        }
    }
    let result = ResultFile::new("bench-faas", command_line(), runs);
    if !a.json {
        for size in &a.sizes {
            let rps = |b: &str| {
                result
                    .runs
                    .iter()
                    .find(|r| r.label == format!("{b} | {size} B"))
                    .map(|r| r.trials[0].delivered_pps)
                    .unwrap_or(0.0)
            };
            let x = rps("afxdp 1T1Q");
            println!(
                "ratio  {size} B, one worker: afxdp {:.0} req/s = {:.2}x mmsg, {:.2}x socket",
                x,
                x / rps("mmsg 1T1Q").max(1.0),
                x / rps("socket 1T1Q").max(1.0)
            );
        }
    }
    write_outputs(&result, &a.out, &a.name, a.json)
}
