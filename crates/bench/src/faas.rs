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

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Result};
use peregrine_faas::wasm::{WasmFunction, WasmLimits};
use peregrine_faas::{Backend as FaasBackend, Registry, ServeConfig, Server};
use peregrine_host::nl::Netlink;
use peregrine_host::{signals, snmp};
use peregrine_lab::measure::{summarize, CpuSnapshot};
use peregrine_lab::openloop::{self, request_frame_size, OpenLoopConfig, OpenLoopProgress};
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{
    DropCount, Limiter, Placement, ResultFile, Run, RunKey, RunParams, Trial,
};
use peregrine_lab::trial::{classify, rfc2544_search, SearchParams};
use peregrine_lab::{Endpoint, Lab, Lifetime};

mod report;
pub use report::BenchFaas;

use crate::common::{
    builtin_topology, command_line, cpu_count, duration, warn_shortfall, RateSetting, ResultOutput,
};
use crate::report::Report;

/// `peregrine bench faas`.
/// The backends `bench faas` compares unless told (`--configs`).
const CONFIGS: &str = "socket:1,mmsg:1,afxdp:1,afxdp-wasm:1,mmsg:2,afxdp:2";

#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-faas")))]
pub struct FaasBenchConfig {
    /// Length of each trial (1.5, 1.5s, 500ms).
    #[arg(long, default_value = "1.5s", value_parser = duration)]
    pub duration: Duration,
    /// Request payload sizes, bytes.
    #[arg(long, value_delimiter = ',', default_value = "200,600,800,1000,1400")]
    pub sizes: Vec<usize>,
    /// Backends and worker configurations (BACKEND:THREADS, threads =
    /// queues; BACKEND-wasm:THREADS runs reverse as WebAssembly).
    #[arg(long, value_delimiter = ',', default_value = CONFIGS)]
    pub configs: Vec<String>,
    /// Highest share of requests left unanswered at the throughput found.
    #[arg(long, default_value_t = 0.001)]
    pub loss: f64,
    /// Requests/s offered in the saturation trial (the search's first):
    /// above every server's capacity here, below what would overload the
    /// generator's own core (unpaced, it would also starve the servers'
    /// receive work that veth runs there).
    #[arg(long, default_value = "3M")]
    pub saturate: RateSetting,
    /// Request rate at which latency is compared (every backend sustains it).
    #[arg(long, default_value = "100k")]
    pub latency_rate: RateSetting,
    /// Where the client receives and checks replies: sender (veth's
    /// default: on the server's CPU that sent them), rps (RPS to the
    /// generator's CPU) or napi (the client veth's threaded NAPI pinned to
    /// the generator's CPU, as on a separate client host).
    #[arg(long, default_value = "sender")]
    pub client_receive: ClientReceive,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// Where the client's receive of the replies (and the tcx check) runs, the
/// same for every backend of a run.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum ClientReceive {
    /// veth's default: on the CPU that sent the reply, the server's.
    #[default]
    Sender,
    /// RPS on the client interface to the generator's CPU.
    Rps,
    /// The client interface's own threaded NAPI (GRO on, TSO off at the
    /// server's end) pinned to the generator's CPU, as a separate client
    /// host would receive.
    Napi,
}

impl ClientReceive {
    pub fn note(self) -> &'static str {
        match self {
            ClientReceive::Sender => "veth runs the server's kernel receive on the client's sending CPU and the client's reply receive and checks on the server's sending CPU (veth default)",
            ClientReceive::Rps => "veth runs the server's kernel receive on the client's sending CPU; the client's reply receive and checks are steered by RPS on the client's veth to the generator's CPU",
            ClientReceive::Napi => "veth runs the server's kernel receive on the client's sending CPU; the client's reply receive and checks run in the client veth's threaded NAPI (GRO on; TSO off on the server's veth, so veth hands AF_XDP's replies to that NAPI too) pinned to the generator's CPU, as on a separate client host",
        }
    }
}

impl std::str::FromStr for ClientReceive {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sender" => Ok(ClientReceive::Sender),
            "rps" => Ok(ClientReceive::Rps),
            "napi" => Ok(ClientReceive::Napi),
            _ => Err(format!("{s:?}: expected sender, rps or napi")),
        }
    }
}

/// A backend with its workers (one RX queue per worker), running the
/// built-in reverse or the same logic as WebAssembly (reverse.wat).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FaasContender {
    pub backend: FaasBackend,
    pub threads: u32,
    pub wasm: bool,
}

impl FaasContender {
    /// "afxdp 1T1Q" or "afxdp wasm 1T1Q": the name in labels, tables and
    /// plot legends.
    pub fn label(self) -> String {
        let t = self.threads;
        let wasm = if self.wasm { " wasm" } else { "" };
        format!("{}{wasm} {t}T{t}Q", self.backend.as_str())
    }

    /// The function served: reverse, built in or as WebAssembly.
    fn registry(self) -> Result<Registry> {
        if !self.wasm {
            return Registry::parse(FUNCTION).map_err(anyhow::Error::msg);
        }
        let f = WasmFunction::new("reverse", REVERSE_WAT, WasmLimits::default())
            .map_err(anyhow::Error::msg)?;
        let mut r = Registry::default();
        r.add(1232, std::sync::Arc::new(f))
            .map_err(anyhow::Error::msg)?;
        Ok(r)
    }
}

/// The WebAssembly rows' function: the shipped reverse example, built into
/// the binary so the bench does not depend on where it runs.
const REVERSE_WAT: &[u8] = include_bytes!("../../../examples/functions/reverse.wat");

impl std::str::FromStr for FaasContender {
    type Err = String;

    /// "BACKEND:THREADS" (threads default 1): socket:1, mmsg:N, afxdp:N;
    /// "BACKEND-wasm:THREADS" runs the function as WebAssembly.
    fn from_str(c: &str) -> std::result::Result<Self, String> {
        let (b, t) = c.split_once(':').unwrap_or((c, "1"));
        let (b, wasm) = match b.strip_suffix("-wasm") {
            Some(b) => (b, true),
            None => (b, false),
        };
        let threads: u32 = t
            .parse()
            .map_err(|_| format!("--configs {c:?}: threads must be a number"))?;
        let backend = match b {
            "socket" => FaasBackend::Socket,
            "mmsg" => FaasBackend::Mmsg,
            "afxdp" => FaasBackend::Afxdp,
            _ => {
                return Err(format!(
                    "--configs {c:?}: expected socket:1, mmsg:N or afxdp:N (BACKEND-wasm:N for WebAssembly)"
                ))
            }
        };
        if threads == 0 || (backend == FaasBackend::Socket && threads != 1) {
            return Err(format!(
                "--configs {c:?}: expected socket:1, mmsg:N or afxdp:N (BACKEND-wasm:N for WebAssembly)"
            ));
        }
        Ok(FaasContender {
            backend,
            threads,
            wasm,
        })
    }
}

const FUNCTION: &str = "1232=reverse";

/// Every counter a request or its reply can be lost at, read before and
/// after each trial so its missing requests are put where they were lost:
/// the server's own reasons (the AF_XDP socket's ring drops among them),
/// the kernel's for full UDP receive buffers in the server's namespace,
/// and both veth ends (requests at the server's receive ring, replies at
/// the client's). Loss none of them saw is the server's.
struct LossCounters<'a> {
    server: &'a Server,
    server_ns: String,
    client_ns: String,
    nl: Mutex<Netlink>,
}

impl<'a> LossCounters<'a> {
    fn new(server: &'a Server, server_ns: &str, client_ns: &str) -> Result<LossCounters<'a>> {
        Ok(LossCounters {
            server,
            server_ns: server_ns.into(),
            client_ns: client_ns.into(),
            nl: Mutex::new(Netlink::new()?),
        })
    }

    /// Every counter now: where, whose limit it shows, its value.
    fn read(&self) -> Result<Vec<(String, Limiter, u64)>> {
        self.server.sync_counters();
        let counters = self.server.counters();
        let mut all: Vec<(String, Limiter, u64)> = counters
            .drop_reasons()
            .iter()
            // Why the socket's rx_dropped grew, not a loss of its own.
            .filter(|(name, _)| *name != "xsk_rx_fill_ring_empty_descs")
            .map(|(name, c)| {
                (
                    format!("server: {name}"),
                    Limiter::Dut,
                    c.load(Ordering::Relaxed),
                )
            })
            .collect();
        if self.server.backend() != FaasBackend::Afxdp {
            all.push((
                format!("UdpRcvbufErrors in {} (socket buffer full)", self.server_ns),
                Limiter::Dut,
                snmp::udp_receive_buffer_errors(&self.server_ns)?,
            ));
        }
        let mut nl = self.nl.lock().unwrap_or_else(|e| e.into_inner());
        let server = nl.link_counters(&self.server_ns, "eth0")?;
        let client = nl.link_counters(&self.client_ns, "eth0")?;
        // veth counts a failed redirect into the AF_XDP socket as its own
        // receive drop too: those are the socket's, counted above.
        let xsk = &counters.xsk;
        let redirect_failed =
            xsk.rx_dropped.load(Ordering::Relaxed) + xsk.rx_ring_full.load(Ordering::Relaxed);
        all.push((
            format!("rx_dropped of {}:eth0 (requests)", self.server_ns),
            Limiter::Dut,
            server.rx_dropped.saturating_sub(redirect_failed),
        ));
        all.push((
            format!("tx_dropped of {}:eth0 (replies)", self.server_ns),
            Limiter::Sink,
            server.tx_dropped,
        ));
        all.push((
            format!("rx_dropped of {}:eth0 (replies)", self.client_ns),
            Limiter::Sink,
            client.rx_dropped,
        ));
        Ok(all)
    }

    /// What grew between two reads, non-zero ones only.
    fn counted(
        &self,
        before: &[(String, Limiter, u64)],
        after: &[(String, Limiter, u64)],
    ) -> Vec<DropCount> {
        before
            .iter()
            .zip(after)
            .filter(|(b, a)| a.2 > b.2)
            .map(|(b, a)| DropCount {
                at: a.0.clone(),
                role: a.1,
                packets: a.2 - b.2,
            })
            .collect()
    }
}

/// One open-loop trial as a result-file trial (requests are the offered
/// packets, correct replies the delivered ones).
fn trial(
    cfg: &OpenLoopConfig,
    losses: &LossCounters,
    phase: &str,
    rate: Rate,
    label: &str,
    loss_tolerance: f64,
) -> Result<Trial> {
    let frame = request_frame_size(&cfg.frame, cfg.size) as f64;
    let mut c = cfg.clone();
    c.rate = rate;
    let cpu0 = CpuSnapshot::take();
    let before = losses.read()?;
    let r = openloop::run(&c, &OpenLoopProgress::default())?;
    let cpu = CpuSnapshot::take().usage_since(&cpu0);
    let drops = losses.counted(&before, &losses.read()?);
    if r.wrong > 0 {
        bail!("{label}: {} wrong replies ({:?})", r.wrong, r.checks);
    }
    let secs = r.seconds.max(1e-9);
    let offered = r.requests as f64 / secs;
    let delivered = r.replies as f64 / secs;
    let at: Vec<String> = drops
        .iter()
        .map(|d| format!("{} {}", d.at, d.packets))
        .collect();
    eprintln!(
        "  {label} {phase:>7}: offered {:>9.0}/s answered {:>9.0}/s missing {:.4}{}",
        offered,
        delivered,
        r.missing as f64 / r.requests.max(1) as f64,
        if at.is_empty() {
            String::new()
        } else {
            format!(" (dropped: {})", at.join(", "))
        }
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
            &drops,
            Limiter::Dut,
        )),
        drops,
        wrong: Some(r.wrong),
        repeated: 0,
    })
    .inspect(|t| warn_shortfall(label, t))
}

/// How an invoker run measures: the saturation trial, then an RFC 2544
/// search for the highest request rate answered with at most `loss`
/// missing, then one trial at the latency rate.
#[derive(Clone, Debug)]
pub struct InvokerTrials {
    /// Length of each trial.
    pub duration: Duration,
    /// Highest share of requests left unanswered at the throughput found.
    pub loss: f64,
    /// Requests/s offered in the saturation trial (the search's first).
    pub saturate: RateSetting,
    /// Request rate at which latency is measured.
    pub latency_rate: RateSetting,
    /// Where the client receives and checks the replies.
    pub client_receive: ClientReceive,
}

/// One contender serving `size`-byte requests on a fresh `pair` lab named
/// `lab_name` (client a, server b; removed before returning), measured
/// with `t`.
pub fn invoker_run(
    lab_name: &str,
    contender: FaasContender,
    size: usize,
    t: &InvokerTrials,
) -> Result<Run> {
    let ncpu = cpu_count();
    let FaasContender {
        backend, threads, ..
    } = contender;
    signals::check()?;
    if threads as usize > ncpu {
        bail!(
            "{}:{threads}: this machine has {ncpu} CPUs",
            backend.as_str()
        );
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
    let mut topo = builtin_topology("pair", lab_name)?;
    topo.links[0].queues = threads;
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let registry = contender.registry()?;
    // Held for the measurement; dropping it stops the server.
    // AF_XDP: one worker per queue, rings as deep as the mmsg
    // server's 8 MiB socket buffer (32 MiB of UMEM; the source
    // used 256 MiB).
    let server = peregrine_faas::serve(ServeConfig {
        ns: Some(lab.ns("b")),
        queues: if backend == FaasBackend::Afxdp {
            threads
        } else {
            1
        },
        threads,
        cpus: server_cpus.clone(),
        xsk: peregrine_xsk::XskConfig {
            frames: 16384,
            ring: 4096,
            ..Default::default()
        },
        ..ServeConfig::new(backend, "eth0", registry.clone())
    })?;
    let memory = server.memory_bytes();
    let losses = LossCounters::new(&server, &lab.ns("b"), &lab.ns("a"))?;
    let label = RunKey {
        contender: contender.label(),
        scenario: format!("{size} B"),
        round: None,
    }
    .label();
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
    cfg.duration = t.duration;
    cfg.cpus = client_cpus.clone();
    cfg.flows = 64;
    cfg.check_on_client_cpus = t.client_receive == ClientReceive::Rps;
    cfg.receive_in_client_napi = t.client_receive == ClientReceive::Napi;
    let frame = request_frame_size(&cfg.frame, size) as f64;
    let search = SearchParams {
        loss_tolerance: t.loss,
        resolution_pps: 10_000.0,
        trial: t.duration,
        max_trials: 10,
        start: Rate::Pps(t.saturate.pps(frame)),
    };
    let (summary, mut trials) = rfc2544_search(search, frame, |phase, rate| {
        trial(&cfg, &losses, phase, rate, &label, t.loss)
            .map_err(|e| peregrine_lab::LabError::Other(format!("{e:#}")))
    })?;
    trials.push(trial(
        &cfg,
        &losses,
        "latency",
        Rate::Pps(t.latency_rate.pps(frame)),
        &label,
        t.loss,
    )?);
    drop(losses);
    drop(server);
    let mem = format!(
        ", server memory {} KiB (UMEM and rings, or socket buffers)",
        memory / 1024
    );
    let params = RunParams {
        backend: backend.as_str().into(),
        ip: "ipv4".into(),
        frame_size: peregrine_wire::udp_frame_size(false, size).to_string(),
        mean_frame_bytes: frame,
        flows: cfg.flows,
        threads: threads as usize,
        sink: format!(
            "open-loop requests to function reverse ({}), every reply checked at the client (tcx); server on CPU {server_cpus:?}{mem}",
            if contender.wasm { "WebAssembly, reverse.wat" } else { "built-in" }
        ),
        sent: true,
    };
    let placement = Placement {
        generator_cpus: client_cpus.clone(),
        dut_cpus: server_cpus.clone(),
        sink_cpus: client_cpus.clone(),
        notes: vec![
            format!(
                "the server's workers are pinned; {}",
                t.client_receive.note()
            ),
            lab.topo.offloads_note(),
        ],
    };
    drop(lab);
    Ok(Run {
        label,
        params,
        trials,
        rfc2544: Some(summary),
        placement: Some(placement),
        ..Default::default()
    })
}

/// Runs every contender at every request size, each on a fresh lab.
pub fn bench_faas(a: FaasBenchConfig) -> Result<()> {
    // Errors of --configs are exit status 1, as they always were.
    let contenders = a
        .configs
        .iter()
        .map(|c| c.parse::<FaasContender>().map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    if !(0.0..0.5).contains(&a.loss) {
        bail!("--loss {}: expected a ratio in [0, 0.5)", a.loss);
    }
    let mut runs = Vec::new();
    // Where each (contender, size) run is in `runs`, for the ratios.
    let mut run_of: Vec<(FaasContender, usize, usize)> = Vec::new();
    let t = InvokerTrials {
        duration: a.duration,
        loss: a.loss,
        saturate: a.saturate,
        latency_rate: a.latency_rate,
        client_receive: a.client_receive,
    };
    for &size in &a.sizes {
        for &contender in &contenders {
            run_of.push((contender, size, runs.len()));
            runs.push(invoker_run("benchfaas", contender, size, &t)?);
        }
    }
    let result = ResultFile::new(BenchFaas::KIND, command_line(), runs);
    if !a.output.json {
        let find_as = |backend: FaasBackend, wasm: bool, size: usize| {
            let c = FaasContender {
                backend,
                threads: 1,
                wasm,
            };
            run_of
                .iter()
                .find(|&&(k, s, _)| k == c && s == size)
                .map(|&(_, _, i)| &result.runs[i])
        };
        let find = |backend: FaasBackend, size: usize| find_as(backend, false, size);
        for &size in &a.sizes {
            let tput = |b: FaasBackend| {
                find(b, size)
                    .and_then(|r| r.rfc2544.as_ref())
                    .map(|s| s.throughput_pps)
                    .unwrap_or(0.0)
            };
            let sat = |b: FaasBackend| {
                find(b, size)
                    .and_then(|r| r.trials.iter().find(|t| t.phase == "saturate"))
                    .map(|t| t.delivered_pps)
                    .unwrap_or(0.0)
            };
            let p50 = |b: FaasBackend| {
                find(b, size)
                    .and_then(|r| r.trials.iter().find(|t| t.phase == "latency"))
                    .and_then(|t| t.latency.as_ref())
                    .map(|l| l.p50_ns as f64 / 1e3)
                    .unwrap_or(f64::NAN)
            };
            use FaasBackend::{Afxdp, Mmsg, Socket};
            // A ratio needs both sides in this run: "n/a" where one did not run.
            let ratio = |num: f64, den: f64| {
                if num > 0.0 && den > 0.0 {
                    format!("{:.2}x", num / den)
                } else {
                    "n/a".to_string()
                }
            };
            let (s, x) = (sat(Afxdp), tput(Afxdp));
            if find(Afxdp, size).is_some()
                && (find(Mmsg, size).is_some() || find(Socket, size).is_some())
            {
                println!(
                    "ratio  {size} B, one worker: saturated afxdp {s:.0} req/s = {} mmsg, {} socket; RFC 2544 afxdp {x:.0} req/s = {} mmsg, {} socket; p50 at {}: afxdp {:.1} us, mmsg {:.1} us, socket {:.1} us",
                    ratio(s, sat(Mmsg)),
                    ratio(s, sat(Socket)),
                    ratio(x, tput(Mmsg)),
                    ratio(x, tput(Socket)),
                    a.latency_rate,
                    p50(Afxdp),
                    p50(Mmsg),
                    p50(Socket),
                );
            }
            // WebAssembly beside native, where both ran (same logic).
            for b in [Afxdp, Mmsg, Socket] {
                let (Some(w), Some(n)) = (find_as(b, true, size), find_as(b, false, size)) else {
                    continue;
                };
                let sat = |r: &Run| {
                    r.trials
                        .iter()
                        .find(|t| t.phase == "saturate")
                        .map_or(0.0, |t| t.delivered_pps)
                };
                let tput = |r: &Run| r.rfc2544.as_ref().map_or(0.0, |s| s.throughput_pps);
                let lat = |r: &Run| {
                    r.trials
                        .iter()
                        .find(|t| t.phase == "latency")
                        .and_then(|t| t.latency.as_ref())
                        .map_or((f64::NAN, f64::NAN), |l| {
                            (l.p50_ns as f64 / 1e3, l.p99_ns as f64 / 1e3)
                        })
                };
                let ((wp50, wp99), (np50, np99)) = (lat(w), lat(n));
                println!(
                    "ratio  {size} B, one worker, {}: WebAssembly reverse / native reverse: saturated {:.0} / {:.0} req/s = {:.2}x; RFC 2544 {:.0} / {:.0} req/s = {:.2}x; p50 {wp50:.1} / {np50:.1} us, p99 {wp99:.1} / {np99:.1} us",
                    b.as_str(),
                    sat(w),
                    sat(n),
                    sat(w) / sat(n).max(1.0),
                    tput(w),
                    tput(n),
                    tput(w) / tput(n).max(1.0),
                );
            }
        }
    }
    a.output.write::<BenchFaas>(&result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_receive_parses_and_is_noted() {
        assert_eq!("sender".parse(), Ok(ClientReceive::Sender));
        assert_eq!("rps".parse(), Ok(ClientReceive::Rps));
        assert_eq!("napi".parse(), Ok(ClientReceive::Napi));
        assert!("gro".parse::<ClientReceive>().is_err());
        assert_eq!(ClientReceive::default(), ClientReceive::Sender);
        assert!(ClientReceive::Napi.note().contains("threaded NAPI"));
    }

    #[test]
    fn contenders_parse_and_label() {
        let c: FaasContender = "afxdp:2".parse().unwrap();
        assert_eq!(
            c,
            FaasContender {
                backend: FaasBackend::Afxdp,
                threads: 2,
                wasm: false,
            }
        );
        assert_eq!(c.label(), "afxdp 2T2Q");
        let w: FaasContender = "afxdp-wasm:1".parse().unwrap();
        assert!(w.wasm && w.label() == "afxdp wasm 1T1Q");
        assert_eq!(
            w.registry().unwrap().get(1232).unwrap().function.name(),
            "reverse"
        );
        assert_eq!("socket".parse::<FaasContender>().unwrap().threads, 1);
        for bad in [
            "socket:2",
            "mmsg:0",
            "mmsg:x",
            "dpdk:1",
            "dpdk-wasm:1",
            "afxdp-wasm:0",
        ] {
            assert!(bad.parse::<FaasContender>().is_err(), "{bad}");
        }
    }
}
