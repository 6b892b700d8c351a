//! `peregrine bench faas`: the invoker's backends side by side in one run,
//! per request size and worker configuration, as in the source's Tables 6
//! and 7 and its latency figure. Load is open loop (live-frame requests,
//! every reply checked in the client's kernel, see `faas::openloop`), so the
//! figures are the server's and not a client's (on veth the server's core
//! also receives and checks its replies: the same cost per reply for every
//! backend, see `OpenLoopConfig::check_on_client_cpus`). Throughput twice:
//! answered per second when offered more than any server here can take
//! (`--saturate`, the search's first trial), and the RFC 2544 search for the highest request
//! rate answered with at most `--loss` missing. Latency is measured at one
//! fixed rate every backend sustains.
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use peregrine_faas::baseline::SocketServer;
use peregrine_faas::invoker::{AfXdpInvoker, InvokerConfig};
use peregrine_faas::Registry;
use peregrine_host::netns;
use peregrine_host::signals;
use peregrine_lab::measure::{summarize, CpuSnapshot};
use peregrine_lab::openloop::{self, request_frame_size, OpenLoopConfig, OpenLoopProgress};
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{Limiter, Placement, ResultFile, Run, RunParams, Trial};
use peregrine_lab::trial::{classify, rfc2544_search, SearchParams};
use peregrine_lab::{Endpoint, Lab, Lifetime};

use crate::bench::{builtin_topology, command_line, warn_shortfall, write_outputs};
use crate::units::{DurationArg, RateArg};

#[derive(Args, Clone)]
pub struct BenchFaasArgs {
    /// Length of each trial (1.5, 1.5s, 500ms).
    #[arg(long, default_value = "1.5s")]
    pub duration: DurationArg,
    /// Request payload sizes, bytes.
    #[arg(long, value_delimiter = ',', default_value = "200,600,800,1000,1400")]
    pub sizes: Vec<usize>,
    /// Backends and worker configurations (BACKEND:THREADS, threads = queues).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "socket:1,mmsg:1,afxdp:1,mmsg:2,afxdp:2"
    )]
    pub configs: Vec<String>,
    /// Highest share of requests left unanswered at the throughput found.
    #[arg(long, default_value_t = 0.001)]
    pub loss: f64,
    /// Requests/s offered in the saturation trial (the search's first):
    /// above every server's capacity here, below what would overload the
    /// generator's own core (unpaced, it would also starve the servers'
    /// receive work that veth runs there).
    #[arg(long, default_value = "3M")]
    pub saturate: RateArg,
    /// Request rate at which latency is compared (every backend sustains it).
    #[arg(long, default_value = "100k")]
    pub latency_rate: RateArg,
    /// Directory for the result file and plots.
    #[arg(long, default_value = crate::bench::DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-faas")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

const FUNCTION: &str = "1232=reverse";

/// One open-loop trial as a result-file trial (requests are the offered
/// packets, correct replies the delivered ones).
fn trial(
    cfg: &OpenLoopConfig,
    phase: &str,
    rate: Rate,
    label: &str,
    loss_tolerance: f64,
) -> Result<Trial> {
    let frame = request_frame_size(&cfg.frame, cfg.size) as f64;
    let mut c = cfg.clone();
    c.rate = rate;
    let cpu0 = CpuSnapshot::take();
    let r = openloop::run(&c, &OpenLoopProgress::default())?;
    let cpu = CpuSnapshot::take().usage_since(&cpu0);
    if r.wrong > 0 {
        bail!("{label}: {} wrong replies ({:?})", r.wrong, r.checks);
    }
    let secs = r.seconds.max(1e-9);
    let offered = r.requests as f64 / secs;
    let delivered = r.replies as f64 / secs;
    eprintln!(
        "  {label} {phase:>7}: offered {:>9.0}/s answered {:>9.0}/s missing {:.4}",
        offered,
        delivered,
        r.missing as f64 / r.requests.max(1) as f64
    );
    Ok(Trial {
        phase: phase.into(),
        requested_pps: rate.pps(),
        duration_s: r.seconds,
        offered_packets: r.requests,
        delivered_packets: r.replies,
        offered_pps: offered,
        delivered_pps: delivered,
        offered_bps: offered * frame * 8.0,
        delivered_bps: delivered * frame * 8.0,
        loss_ratio: r.missing as f64 / r.requests.max(1) as f64,
        cpu,
        latency: summarize(&r.latency),
        windows: vec![],
        // Requests the server never answered: its limit (the client's
        // reply checks count every reply that arrives).
        limited_by: Some(classify(
            rate.pps(),
            offered,
            r.missing,
            r.missing as f64 / r.requests.max(1) as f64,
            loss_tolerance,
            &[],
            Limiter::Dut,
        )),
        drops: vec![],
        wrong: Some(r.wrong),
    })
    .inspect(|t| warn_shortfall(label, t))
}

fn parse_config(c: &str) -> Result<(String, u32)> {
    let (b, t) = c.split_once(':').unwrap_or((c, "1"));
    let threads: u32 = t
        .parse()
        .map_err(|_| anyhow::anyhow!("--configs {c:?}: threads must be a number"))?;
    if !matches!(b, "socket" | "mmsg" | "afxdp") || threads == 0 || (b == "socket" && threads != 1)
    {
        bail!("--configs {c:?}: expected socket:1, mmsg:N or afxdp:N");
    }
    Ok((b.to_string(), threads))
}

pub fn bench_faas(a: BenchFaasArgs) -> Result<()> {
    let dur: std::time::Duration = a.duration.into();
    if !(0.0..0.5).contains(&a.loss) {
        bail!("--loss {}: expected a ratio in [0, 0.5)", a.loss);
    }
    let configs = a
        .configs
        .iter()
        .map(|c| parse_config(c))
        .collect::<Result<Vec<_>>>()?;
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut runs = Vec::new();
    for &size in &a.sizes {
        for (backend, threads) in &configs {
            let threads = *threads;
            signals::check()?;
            if threads as usize > ncpu {
                bail!("{backend}:{threads}: this machine has {ncpu} CPUs");
            }
            // One worker: the server on the last CPU, the client (generator,
            // reply checks) on the first. More: both share all CPUs, one
            // veth queue per worker (veth picks the queue by sending CPU).
            let server_cpus: Vec<usize> = if threads == 1 {
                vec![ncpu - 1]
            } else {
                (0..threads as usize).collect()
            };
            let client_cpus: Vec<usize> = if threads == 1 {
                vec![0]
            } else {
                (0..threads as usize).collect()
            };
            let mut topo = builtin_topology("pair", "benchfaas")?;
            topo.links[0].queues = threads;
            let lab = Lab::up(topo, Lifetime::Ephemeral)?;
            let registry = Registry::parse(FUNCTION).map_err(anyhow::Error::msg)?;
            let memory;
            // Held for the measurement; dropping it stops the server.
            let server: Box<dyn std::any::Any> = match backend.as_str() {
                "afxdp" => {
                    // Rings as deep as the mmsg server's 8 MiB socket buffer
                    // (32 MiB of UMEM; the source used 256 MiB).
                    let cfg = InvokerConfig {
                        queues: threads,
                        workers: 1,
                        cpus: server_cpus.clone(),
                        xsk: peregrine_xsk::XskConfig {
                            frames: 16384,
                            ring: 4096,
                            ..Default::default()
                        },
                        ..Default::default()
                    };
                    let inv =
                        AfXdpInvoker::start(Some(&lab.ns("b")), "eth0", registry.clone(), cfg)?;
                    memory = inv.memory_bytes;
                    Box::new(inv)
                }
                "mmsg" => {
                    let s = netns::run_in(&lab.ns("b"), || {
                        SocketServer::mmsg(registry.clone(), threads as usize, &server_cpus)
                    })??;
                    memory = s.memory_bytes;
                    Box::new(s)
                }
                _ => {
                    let s = netns::run_in(&lab.ns("b"), || {
                        SocketServer::simple_on(registry.clone(), server_cpus[0])
                    })??;
                    memory = s.memory_bytes;
                    Box::new(s)
                }
            };
            let label = format!("{backend} {threads}T{threads}Q | {size} B");
            eprintln!("{label}");
            let from = Endpoint {
                host: "a".into(),
                iface: "eth0".into(),
            };
            let mut cfg = OpenLoopConfig::for_lab(
                lab.topology(),
                &from,
                "198.18.0.2".parse()?,
                &registry,
                size,
            )?;
            cfg.duration = dur;
            cfg.cpus = client_cpus.clone();
            cfg.flows = 64;
            let frame = request_frame_size(&cfg.frame, size) as f64;
            let search = SearchParams {
                loss_tolerance: a.loss,
                resolution_pps: 10_000.0,
                trial: dur,
                max_trials: 10,
                start: Rate::Pps(a.saturate.pps(frame)),
            };
            let (summary, mut trials) = rfc2544_search(search, frame, |phase, rate| {
                trial(&cfg, phase, rate, &label, a.loss)
                    .map_err(|e| peregrine_lab::LabError::Other(format!("{e:#}")))
            })?;
            trials.push(trial(
                &cfg,
                "latency",
                Rate::Pps(a.latency_rate.pps(frame)),
                &label,
                a.loss,
            )?);
            drop(server);
            let mem = format!(
                ", server memory {} KiB (UMEM and rings, or socket buffers)",
                memory / 1024
            );
            let params = RunParams {
                backend: backend.clone(),
                ip: "ipv4".into(),
                frame_size: (size + 46).to_string(),
                mean_frame_bytes: frame,
                flows: cfg.flows,
                threads: threads as usize,
                sink: format!(
                    "open-loop requests to function reverse, every reply checked at the client (tcx); server on CPU {server_cpus:?}{mem}"
                ),
                sent: true,
            };
            let placement = Placement {
                generator_cpus: client_cpus.clone(),
                dut_cpus: server_cpus.clone(),
                sink_cpus: client_cpus.clone(),
                notes: vec![
                    "the server's workers are pinned; veth runs the server's kernel receive on the client's sending CPU and the client's reply checks on the server's sending CPU".into(),
                    "lab veths with TX checksum offload off (the lab sets it)".into(),
                ],
            };
            runs.push(Run {
                label,
                params,
                trials,
                rfc2544: Some(summary),
                placement: Some(placement),
            });
            drop(lab);
        }
    }
    let result = ResultFile::new("bench-faas", command_line(), runs);
    if !a.json {
        let find = |b: &str, size: usize| {
            result
                .runs
                .iter()
                .find(|r| r.label == format!("{b} | {size} B"))
        };
        for &size in &a.sizes {
            let tput = |b: &str| {
                find(b, size)
                    .and_then(|r| r.rfc2544.as_ref())
                    .map(|s| s.throughput_pps)
                    .unwrap_or(0.0)
            };
            let sat = |b: &str| {
                find(b, size)
                    .and_then(|r| r.trials.iter().find(|t| t.phase == "saturate"))
                    .map(|t| t.delivered_pps)
                    .unwrap_or(0.0)
            };
            let p50 = |b: &str| {
                find(b, size)
                    .and_then(|r| r.trials.iter().find(|t| t.phase == "latency"))
                    .and_then(|t| t.latency.as_ref())
                    .map(|l| l.p50_ns as f64 / 1e3)
                    .unwrap_or(f64::NAN)
            };
            let (s, x) = (sat("afxdp 1T1Q"), tput("afxdp 1T1Q"));
            println!(
                "ratio  {size} B, one worker: saturated afxdp {s:.0} req/s = {:.2}x mmsg, {:.2}x socket; RFC 2544 afxdp {x:.0} req/s = {:.2}x mmsg, {:.2}x socket; p50 at {}: afxdp {:.1} us, mmsg {:.1} us, socket {:.1} us",
                s / sat("mmsg 1T1Q").max(1.0),
                s / sat("socket 1T1Q").max(1.0),
                x / tput("mmsg 1T1Q").max(1.0),
                x / tput("socket 1T1Q").max(1.0),
                a.latency_rate,
                p50("afxdp 1T1Q"),
                p50("mmsg 1T1Q"),
                p50("socket 1T1Q"),
            );
        }
    }
    write_outputs(&result, &a.out, &a.name, a.json)
}
