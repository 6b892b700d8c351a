//! `faas load` assembled: a [`FaasLoadConfig`] in (closed loop on kernel
//! UDP sockets, or open loop from the live-frame generator at a rate), its
//! settings checked, metrics served and progress shown while it runs, and a
//! [`FaasLoadReport`] out: the figures, the `peregrine.result/1` file and
//! the verdict ([`FaasLoadReport::judge`]).
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_faas::Registry;
use peregrine_host::netns;
use peregrine_units::{si, ByteSize, DurationArg, RateSetting};
use serde_json::{json, Value};

use crate::error::LabError;
use crate::load::{LoadConfig, LoadMetrics};
use crate::openloop::{request_frame_size, OpenLoopConfig, OpenLoopProgress};
use crate::results::{Latency, Limiter, ResultFile, Run, RunParams, Trial};

/// Default of `max_loss`: the share of requests that may go unanswered.
pub const DEFAULT_MAX_LOSS: f64 = 0.001;

/// How requests are sent.
#[derive(Clone, Debug)]
pub enum LoadMode {
    /// Kernel UDP sockets, one outstanding request each, every reply
    /// compared with the function run here.
    Closed { connections: usize },
    /// The live-frame generator at `rate` from a lab host's `iface`, every
    /// reply checked in the kernel (functions echo and reverse).
    Open {
        rate: RateSetting,
        iface: String,
        /// Source ports the requests come from.
        flows: u32,
        /// Generator threads, pinned to CPUs 0..threads.
        threads: usize,
        /// Check replies on the generator's CPUs (RPS).
        check_on_client_cpus: bool,
    },
}

/// A load run.
#[derive(Clone)]
pub struct FaasLoadConfig {
    /// The server (198.18.0.0/15 or 2001:db8::/32).
    pub to: IpAddr,
    /// The functions the server runs, as PORT=FUNCTION.
    pub functions: Registry,
    pub duration: DurationArg,
    /// Request payload bytes.
    pub size: ByteSize,
    /// The lab host to send from (None: this namespace; the open loop needs one).
    pub from: Option<(String, String)>,
    pub mode: LoadMode,
    /// Highest share of requests that may go unanswered.
    pub max_loss: f64,
    /// Serve Prometheus metrics here while running.
    pub metrics: Option<SocketAddr>,
    /// Say what runs and its progress on stderr.
    pub progress: bool,
    /// The command line recorded in the result file.
    pub command: String,
}

/// What a load run found.
#[derive(Clone, Debug)]
pub struct FaasLoadReport {
    /// Closed ("closed") or open ("open") loop and its figures, for people
    /// (`faas load`'s table source).
    pub summary: Value,
    /// The run as a `peregrine.result/1` file.
    pub result: ResultFile,
    pub requests: u64,
    pub responses: u64,
    pub wrong: u64,
    pub missing: u64,
    /// The first error sending a request (closed loop).
    pub send_error: Option<String>,
    /// Sent from a lab host rather than this namespace.
    pub from_lab: bool,
    to: IpAddr,
    max_loss: f64,
}

fn invalid<T>(m: String) -> Result<T, LabError> {
    Err(LabError::Invalid(m))
}

/// Runs the load `cfg` describes; `LabError::Invalid` names a setting of
/// the caller's that cannot work.
pub fn run(cfg: &FaasLoadConfig) -> Result<FaasLoadReport, LabError> {
    if !crate::topology::allowed_address(cfg.to) {
        return invalid(format!(
            "--to {}: outside 198.18.0.0/15 and 2001:db8::/32; load goes only to lab ranges",
            cfg.to
        ));
    }
    if cfg.duration.0 > Duration::from_secs(3600) {
        return invalid(format!(
            "--duration {}: at most 1h for a load run",
            cfg.duration
        ));
    }
    if let LoadMode::Closed { connections } = cfg.mode {
        if connections == 0 || connections > 4096 {
            return invalid(format!("--connections {connections}: expected 1..=4096"));
        }
    }
    let ns = cfg
        .from
        .as_ref()
        .map(|(lab, host)| crate::lab::ns_name(lab, host));
    // The invoker answers requests of one frame: a larger one would go out
    // as IP fragments, which it counts and drops (`fragments`).
    let (max, why) = netns::run_in_opt(ns.as_deref(), || crate::load::max_request_payload(cfg.to))?;
    if cfg.size.0 == 0 || cfg.size.0 > max as u64 {
        return invalid(format!(
            "--size {}: expected 1..={max} payload bytes: a request must fit one frame ({why}, less IP and UDP headers)",
            cfg.size
        ));
    }
    match &cfg.mode {
        LoadMode::Closed { connections } => closed(cfg, *connections, ns.as_deref()),
        LoadMode::Open { .. } => open(cfg),
    }
}

fn closed(
    cfg: &FaasLoadConfig,
    connections: usize,
    ns: Option<&str>,
) -> Result<FaasLoadReport, LabError> {
    let metrics = LoadMetrics::new();
    let stop = Arc::new(AtomicBool::new(false));
    let server = cfg
        .metrics
        .map(|addr| metrics.serve(addr, stop.clone()))
        .transpose()?;
    let lcfg = LoadConfig {
        server: cfg.to,
        connections,
        duration: cfg.duration.0,
        size: cfg.size.0 as usize,
        timeout: Duration::from_secs(1),
    };
    if cfg.progress {
        eprintln!(
            "closed loop: {} connection(s) to {} for {}, {} B requests",
            connections, cfg.to, cfg.duration, cfg.size
        );
    }
    let r = std::thread::scope(|s| {
        if cfg.progress {
            s.spawn(|| closed_progress(&metrics, &stop));
        }
        let r = netns::run_in_opt(ns, || crate::load::run(&cfg.functions, &lcfg, &metrics));
        stop.store(true, Ordering::Relaxed);
        r
    })?;
    if let Some(s) = server {
        let _ = s.join();
    }
    let r = r?;
    let lat = crate::measure::summarize(&r.latency);
    let summary = json!({
        "mode": "closed",
        "seconds": r.seconds,
        "connections": connections,
        "size": cfg.size.0,
        "requests": r.requests,
        "responses": r.responses,
        "wrong": r.wrong,
        "missing": r.missing,
        "requests_per_s": r.responses as f64 / r.seconds.max(1e-9),
        "max_loss": cfg.max_loss,
        "latency": lat,
    });
    let how = format!("closed loop, {connections} connection(s), kernel UDP sockets");
    let mut report = FaasLoadReport {
        summary,
        result: ResultFile::new("faas-load", cfg.command.clone(), vec![]),
        requests: r.requests,
        responses: r.responses,
        wrong: r.wrong,
        missing: r.missing,
        send_error: r.send_error.clone(),
        from_lab: ns.is_some(),
        to: cfg.to,
        max_loss: cfg.max_loss,
    };
    let run = report.run(cfg, None, r.seconds, lat, how);
    report.result.runs.push(run);
    Ok(report)
}

/// Prints the closed loop's requests and replies per second to stderr
/// until `stop`.
fn closed_progress(m: &LoadMetrics, stop: &AtomicBool) {
    let start = Instant::now();
    let (mut req, mut ok) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let tick = Instant::now();
        while tick.elapsed() < Duration::from_secs(1) && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (r, o) = (m.requests.get(), m.responses.get());
        eprintln!(
            "  load {:>5.1}s: {} requests/s, {} replies/s, {} wrong, {} missing so far",
            start.elapsed().as_secs_f64(),
            si((r - req) as f64),
            si((o - ok) as f64),
            m.wrong.get(),
            m.missing.get()
        );
        (req, ok) = (r, o);
    }
}

fn open(cfg: &FaasLoadConfig) -> Result<FaasLoadReport, LabError> {
    let LoadMode::Open {
        rate,
        iface,
        flows,
        threads,
        check_on_client_cpus,
    } = &cfg.mode
    else {
        unreachable!("open() runs the open loop");
    };
    let Some((lab, host)) = &cfg.from else {
        return invalid(
            "open-loop load (--rate) sends from a lab host: give --lab and --host".into(),
        );
    };
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if *threads == 0 || *threads > ncpu {
        return invalid(format!(
            "--threads {threads}: expected 1..={ncpu} (one generator thread per CPU)"
        ));
    }
    if *flows == 0 {
        return invalid("--flows 0: expected at least 1 source port".into());
    }
    let from = crate::Endpoint {
        host: host.clone(),
        iface: iface.clone(),
    };
    let topo = crate::lab::state(lab)?.topology;
    let size = cfg.size.0 as usize;
    let mut ol = OpenLoopConfig::for_lab(&topo, &from, cfg.to, &cfg.functions, size)?;
    let frame_bytes = request_frame_size(&ol.frame, size) as f64;
    let pps = rate.pps(frame_bytes);
    if !(pps.is_finite() && pps >= 1.0) {
        return invalid(format!(
            "--rate {rate}: below one request per second for {frame_bytes} B frames"
        ));
    }
    ol.rate = crate::pacing::Rate::Pps(pps);
    ol.duration = cfg.duration.0;
    ol.flows = *flows;
    ol.cpus = (0..*threads).collect();
    ol.check_on_client_cpus = *check_on_client_cpus;
    if cfg.progress {
        eprintln!(
            "open loop: {} requests/s to {}:{} for {}, {} B payload ({} B frames)",
            si(pps),
            cfg.to,
            ol.frame.dst_port,
            cfg.duration,
            cfg.size,
            frame_bytes
        );
    }
    let progress = OpenLoopProgress::default();
    let stop = Arc::new(AtomicBool::new(false));
    // Prometheus while it runs: requests, correct and wrong replies (the
    // latencies and the missing are known when the run ends, in the report).
    let metrics = LoadMetrics::new();
    let server = cfg
        .metrics
        .map(|addr| metrics.serve(addr, stop.clone()))
        .transpose()?;
    let r = std::thread::scope(|s| {
        if cfg.progress {
            s.spawn(|| crate::openloop::watch(&progress, &stop, "load"));
        }
        if cfg.metrics.is_some() {
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
        let r = crate::openloop::run(&ol, &progress);
        stop.store(true, Ordering::Relaxed);
        r
    });
    if let Some(t) = server {
        let _ = t.join();
    }
    let r = r?;
    let lat = crate::measure::summarize(&r.latency);
    let c = &r.checks;
    let offered = r.requests as f64 / r.seconds.max(1e-9);
    // A rate the generator could not offer is said, not hidden in the figures.
    let short = crate::trial::short_of(Some(pps), offered);
    if short {
        eprintln!(
            "peregrine: warning: asked for {} requests/s, offered {} requests/s ({:.1}% short): generator-limited",
            si(pps),
            si(offered),
            (1.0 - offered / pps) * 100.0
        );
    }
    let summary = json!({
        "mode": "open",
        "requested_per_s": pps,
        "generator_limited": short,
        "seconds": r.seconds,
        "size": cfg.size.0,
        "flows": flows,
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
        "max_loss": cfg.max_loss,
        "latency": lat,
    });
    let how = format!(
        "open loop, live-frame requests from {threads} thread(s), every reply checked at tcx ingress"
    );
    let mut report = FaasLoadReport {
        summary,
        result: ResultFile::new("faas-load", cfg.command.clone(), vec![]),
        requests: r.requests,
        responses: r.replies,
        wrong: r.wrong,
        missing: r.missing,
        send_error: None,
        from_lab: true,
        to: cfg.to,
        max_loss: cfg.max_loss,
    };
    let run = report.run(cfg, Some(pps), r.seconds, lat, how);
    report.result.runs.push(run);
    Ok(report)
}

impl FaasLoadReport {
    /// The run as in a `peregrine.result/1` file, like every command that
    /// measures: requests are the offered packets, correct replies the
    /// delivered ones, unanswered requests the loss, wrong replies counted.
    fn run(
        &self,
        cfg: &FaasLoadConfig,
        requested: Option<f64>,
        seconds: f64,
        latency: Option<Latency>,
        how: String,
    ) -> Run {
        let size = cfg.size.0 as usize;
        let secs = seconds.max(1e-9);
        let frame = peregrine_wire::udp_frame_size(false, size) as f64;
        let offered = self.requests as f64 / secs;
        let delivered = self.responses.saturating_sub(self.wrong);
        let loss = self.missing as f64 / self.requests.max(1) as f64;
        let trial = Trial {
            phase: if requested.is_some() { "fixed" } else { "max" }.into(),
            requested_pps: requested,
            duration_s: seconds,
            offered_packets: self.requests,
            delivered_packets: delivered,
            offered_pps: offered,
            delivered_pps: delivered as f64 / secs,
            offered_bps: offered * frame * 8.0,
            delivered_bps: delivered as f64 / secs * frame * 8.0,
            loss_ratio: loss,
            cpu: vec![],
            latency,
            windows: vec![],
            limited_by: Some(crate::trial::classify(
                requested,
                offered,
                self.missing,
                loss,
                cfg.max_loss,
                &[],
                Limiter::Dut,
            )),
            drops: vec![],
            wrong: Some(self.wrong),
            repeated: 0,
        };
        Run {
            label: format!("faas load, {size} B requests"),
            params: RunParams {
                backend: if requested.is_some() { "xdp" } else { "socket" }.into(),
                ip: "ipv4".into(),
                frame_size: (frame as usize).to_string(),
                mean_frame_bytes: frame,
                flows: 0,
                threads: 0,
                sink: how,
                sent: true,
            },
            trials: vec![trial],
            rfc2544: None,
            placement: None,
            ..Default::default()
        }
    }

    /// Whether the run met its purpose; the error says how it did not:
    /// nothing sent, no replies, a wrong reply, or more unanswered than
    /// `max_loss` allows.
    pub fn judge(&self) -> Result<(), String> {
        let to = self.to;
        let hint = if self.from_lab {
            ""
        } else {
            " (sent from this namespace: give --lab and --host to send from a lab host)"
        };
        if self.requests == 0 {
            return Err(match &self.send_error {
                Some(e) => format!("no request could be sent: {e}{hint}"),
                None => "no request was sent (interrupted before the first one?)".into(),
            });
        }
        if self.wrong > 0 {
            return Err(format!(
                "{} of {} replies were wrong",
                self.wrong,
                self.wrong + self.responses
            ));
        }
        if self.responses == 0 {
            return Err(match &self.send_error {
                Some(e) => format!("no replies from {to}: {e}{hint}"),
                None => format!(
                    "no replies from {to}: is `faas serve` running there with these functions?{hint}"
                ),
            });
        }
        let loss = self.missing as f64 / self.requests as f64;
        if loss > self.max_loss {
            return Err(format!(
                "{} of {} requests ({:.3}%) got no reply, above --max-loss {} ({:.3}%)",
                self.missing,
                self.requests,
                loss * 100.0,
                self.max_loss,
                self.max_loss * 100.0
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(to: &str, mode: LoadMode) -> FaasLoadConfig {
        FaasLoadConfig {
            to: to.parse().unwrap(),
            functions: Registry::parse("1232=reverse").unwrap(),
            duration: "1s".parse().unwrap(),
            size: "200".parse().unwrap(),
            from: None,
            mode,
            max_loss: DEFAULT_MAX_LOSS,
            metrics: None,
            progress: false,
            command: "test".into(),
        }
    }

    fn refused(cfg: &FaasLoadConfig) -> String {
        match run(cfg) {
            Err(LabError::Invalid(m)) => m,
            Err(e) => panic!("expected a refusal, got {e}"),
            Ok(_) => panic!("expected a refusal, it ran"),
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused_before_sending() {
        let closed = |connections| LoadMode::Closed { connections };
        assert!(refused(&config("10.0.0.1", closed(1))).contains("outside 198.18.0.0/15"));
        assert_eq!(
            refused(&config("198.18.0.2", closed(0))),
            "--connections 0: expected 1..=4096"
        );
        let mut c = config("198.18.0.2", closed(1));
        c.duration = "2h".parse().unwrap();
        assert!(refused(&c).contains("at most 1h"));
        let open = LoadMode::Open {
            rate: "1k".parse().unwrap(),
            iface: "eth0".into(),
            flows: 16,
            threads: 1,
            check_on_client_cpus: false,
        };
        assert_eq!(
            refused(&config("198.18.0.2", open)),
            "open-loop load (--rate) sends from a lab host: give --lab and --host"
        );
    }

    #[test]
    fn the_verdict_names_what_went_wrong() {
        let mut r = FaasLoadReport {
            summary: Value::Null,
            result: ResultFile::new("faas-load", "test".into(), vec![]),
            requests: 1000,
            responses: 999,
            wrong: 0,
            missing: 1,
            send_error: None,
            from_lab: true,
            to: "198.18.0.2".parse().unwrap(),
            max_loss: DEFAULT_MAX_LOSS,
        };
        assert_eq!(r.judge(), Ok(()));
        r.missing = 2;
        assert!(r.judge().unwrap_err().contains("2 of 1000 requests"));
        r.wrong = 1;
        assert_eq!(r.judge().unwrap_err(), "1 of 1000 replies were wrong");
        (r.wrong, r.responses) = (0, 0);
        assert!(r
            .judge()
            .unwrap_err()
            .starts_with("no replies from 198.18.0.2"));
    }
}
