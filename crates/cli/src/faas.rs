//! `peregrine faas serve`: the function invoker with its backends.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use peregrine_faas::baseline::SocketServer;
use peregrine_faas::control;
use peregrine_faas::invoker::{AfXdpInvoker, Counters, InvokerConfig};
use peregrine_faas::live::{Live, Routes};
use peregrine_faas::wasm::WasmLimits;
use peregrine_faas::Registry;
use peregrine_host::{netns, signals};
use peregrine_lab::lab;
use peregrine_lab::openloop::{request_frame_size, OpenLoopConfig, OpenLoopProgress};

use crate::scope::Scope;
use crate::table::{ns as fmt_ns, si, Table};
use crate::units::{ByteSize, DurationArg, RateArg};
use crate::usage;

#[derive(Subcommand)]
pub enum FaasCmd {
    /// Serve functions on UDP ports until Ctrl-C or --duration.
    Serve(ServeArgs),
    /// Put a WebAssembly function on a port of the running `faas serve` (in
    /// this namespace, or --lab/--host), replacing the one there; returns
    /// once every worker runs it. A bad module is refused and changes
    /// nothing.
    Deploy(DeployArgs),
    /// Take the function off a port of the running `faas serve`, once the
    /// requests it already holds are answered.
    Undeploy(UndeployArgs),
    /// The running `faas serve`'s functions: name, port, calls, errors,
    /// p50/p99 call time.
    List(ListArgs),
    /// Load: closed loop (connections), or open loop at --rate; every reply
    /// checked, latency histogram. Exits 1 when no reply came back, a reply
    /// was wrong or more than --max-loss of the requests went unanswered.
    Load(LoadArgs),
}

/// Backends of `faas serve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// AF_XDP sockets behind the XDP dispatcher.
    Afxdp,
    /// Sockets with recvmmsg/sendmmsg, one per thread (SO_REUSEPORT).
    Mmsg,
    /// One thread with recvfrom/sendto.
    Socket,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Afxdp => "afxdp",
            Backend::Mmsg => "mmsg",
            Backend::Socket => "socket",
        }
    }
}

/// Default of --max-loss: the share of requests that may go unanswered.
pub const DEFAULT_MAX_LOSS: f64 = 0.001;

fn loss_fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().trim_end_matches('%').parse().map_err(|_| {
        format!("{s:?}: expected a fraction such as 0.001, or a percentage such as 0.1%")
    })?;
    let v = if s.trim().ends_with('%') {
        v / 100.0
    } else {
        v
    };
    if !(0.0..=1.0).contains(&v) {
        return Err(format!(
            "{s:?}: expected a fraction in 0..=1 (or 0%..=100%)"
        ));
    }
    Ok(v)
}

#[derive(Args)]
pub struct LoadArgs {
    /// Server address (198.18.0.0/15 or 2001:db8::/32).
    #[arg(long)]
    pub to: std::net::IpAddr,
    /// PORT=FUNCTION,... as the server runs them (replies are checked
    /// against these functions run here).
    #[arg(long)]
    pub functions: String,
    /// Closed loop: concurrent connections, one outstanding request each.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// How long to send, e.g. 5, 10s, 500ms (see Units in docs/CLI.md).
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub duration: DurationArg,
    /// Request payload bytes, e.g. 200, 1KiB.
    #[arg(long, value_name = "BYTES", default_value = "200")]
    pub size: ByteSize,
    // The lab host to send from.
    #[command(flatten)]
    pub scope: Scope,
    /// Open loop: send requests at this rate (e.g. 500k, 1M, 200000,
    /// 1Mpps, 100Mbps) from the live-frame generator, whatever the server
    /// answers; replies are checked in the kernel on --iface (functions
    /// echo and reverse).
    #[arg(long, value_name = "RATE")]
    pub rate: Option<RateArg>,
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
    /// Fail (exit 1) when more than this share of the requests got no
    /// reply: a fraction (0.001) or a percentage (0.1%).
    #[arg(long, value_name = "FRACTION", default_value_t = DEFAULT_MAX_LOSS, value_parser = loss_fraction)]
    pub max_loss: f64,
    /// Serve Prometheus metrics here while running (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Print the report as one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct DeployArgs {
    /// UDP port the function answers on.
    #[arg(long)]
    pub port: u16,
    /// The module: a .wasm binary or .wat text (the ABI is in
    /// docs/FUNCTIONS.md).
    #[arg(long, value_name = "FILE")]
    pub wasm: std::path::PathBuf,
    /// The function's name (default: the file's stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Most linear memory an instance may have, e.g. 16MiB, 1MiB.
    #[arg(long, value_name = "BYTES", default_value = "16MiB")]
    pub memory: ByteSize,
    /// Longest a call may run, e.g. 200us, 10ms (stopped no sooner, at most
    /// 200 us later below 10 ms).
    #[arg(long, value_name = "DURATION", default_value = "10ms")]
    pub timeout: DurationArg,
    // The lab host whose server to change.
    #[command(flatten)]
    pub scope: Scope,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct UndeployArgs {
    /// UDP port whose function goes.
    #[arg(long)]
    pub port: u16,
    // The lab host whose server to change.
    #[command(flatten)]
    pub scope: Scope,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ListArgs {
    // The lab host whose server to ask.
    #[command(flatten)]
    pub scope: Scope,
    /// Print the functions as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Interface the requests arrive on (afxdp backend).
    #[arg(long, default_value = "eth0")]
    pub iface: String,
    /// PORT=FUNCTION,...; built-ins: reverse, echo, upper, sha256; or
    /// wasm:PATH, a WebAssembly function from a .wasm or .wat file (see
    /// docs/FUNCTIONS.md).
    #[arg(long)]
    pub functions: String,
    /// RX queues served (afxdp).
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Worker threads in all.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// How requests reach the functions.
    #[arg(long, value_enum, default_value_t = Backend::Afxdp)]
    pub backend: Backend,
    // The lab host to serve in.
    #[command(flatten)]
    pub scope: Scope,
    /// Stop after this long, e.g. 10, 10s, 2m (default: until Ctrl-C).
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<DurationArg>,
    /// AF_XDP: UMEM frames per socket (2 KiB each; half receive, half send).
    #[arg(long, default_value_t = 4096)]
    pub frames: u32,
    /// AF_XDP: entries of the RX and TX rings (fill and completion: twice).
    #[arg(long, default_value_t = 1024)]
    pub ring: u32,
    /// AF_XDP: busy-poll the queue from the workers (SO_PREFER_BUSY_POLL,
    /// SO_BUSY_POLL=USECS, SO_BUSY_POLL_BUDGET=64); a bare number is
    /// microseconds (50, 50us, 0.1ms). Pays off where the queue's NAPI may
    /// run on the worker's core (a NIC; not veth).
    #[arg(long, value_name = "USECS", value_parser = crate::units::micros)]
    pub busy_poll: Option<u32>,
    /// AF_XDP: attach the dispatcher in native (driver) or generic (skb)
    /// mode; sockets on a generic program run in skb mode.
    #[arg(long, default_value = "native")]
    pub xdp_mode: peregrine_bpf::XdpMode,
    /// CPUs the workers are pinned to, in turn (default: all).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Serve Prometheus metrics (invoker counters per function and
    /// backend) here while serving, e.g. 127.0.0.1:9465.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Print the final counters as JSON instead of a table (and no
    /// per-second progress).
    #[arg(long)]
    pub json: bool,
}

enum Server {
    AfXdp(Box<AfXdpInvoker>),
    Sockets(SocketServer),
}

impl Server {
    fn live(&self) -> &Live {
        match self {
            Server::AfXdp(i) => &i.live,
            Server::Sockets(s) => &s.live,
        }
    }
    fn live_arc(&self) -> std::sync::Arc<Live> {
        match self {
            Server::AfXdp(i) => i.live.clone(),
            Server::Sockets(s) => s.live.clone(),
        }
    }
    fn routes(&self) -> &dyn Routes {
        match self {
            Server::AfXdp(i) => i.as_ref(),
            Server::Sockets(s) => s,
        }
    }
    fn counters(&self) -> &Counters {
        match self {
            Server::AfXdp(i) => &i.counters,
            Server::Sockets(s) => &s.counters,
        }
    }
    fn counters_arc(&self) -> std::sync::Arc<Counters> {
        match self {
            Server::AfXdp(i) => i.counters.clone(),
            Server::Sockets(s) => s.counters.clone(),
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
        FaasCmd::Deploy(a) => deploy(a),
        FaasCmd::Undeploy(a) => undeploy(a),
        FaasCmd::List(a) => list(a),
    }
}

/// The control socket of the server in `scope`'s namespace.
fn control_path(scope: &Scope) -> Result<std::path::PathBuf> {
    let ns = scope.ns()?;
    let cookie = netns::run_in_opt(ns.as_deref(), netns::cookie)??;
    Ok(control::path_for(cookie))
}

fn deploy(a: DeployArgs) -> Result<()> {
    let shown = a.wasm.display();
    let module = match std::fs::read(&a.wasm) {
        Ok(m) => m,
        Err(e) => usage!("--wasm {shown}: {e}"),
    };
    let name = match &a.name {
        Some(n) => n.clone(),
        None => a
            .wasm
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("wasm")
            .to_string(),
    };
    if let Err(e) = control::check_name(&name) {
        usage!("--name: {e}");
    }
    if let Err(e) = WasmLimits::new(a.memory.0, a.timeout.0) {
        usage!("--memory/--timeout: {e}");
    }
    let req = control::Request::Deploy {
        port: a.port,
        name: name.clone(),
        memory: a.memory.0,
        timeout_ns: a.timeout.0.as_nanos() as u64,
        module_len: module.len(),
    };
    let v = control::request(&control_path(&a.scope)?, &req, &module)
        .map_err(|e| anyhow::anyhow!("deploy {shown} on port {}: {e}", a.port))?;
    if a.json {
        println!("{v}");
    } else {
        match v["replaced"].as_str() {
            Some(old) => println!(
                "port {}: {name} replaces {old}, every worker runs it",
                a.port
            ),
            None => println!("port {}: {name} deployed, every worker runs it", a.port),
        }
    }
    Ok(())
}

fn undeploy(a: UndeployArgs) -> Result<()> {
    let req = control::Request::Undeploy { port: a.port };
    let v = control::request(&control_path(&a.scope)?, &req, &[])
        .map_err(|e| anyhow::anyhow!("undeploy port {}: {e}", a.port))?;
    if a.json {
        println!("{v}");
    } else {
        println!(
            "port {}: {} undeployed",
            a.port,
            v["name"].as_str().unwrap_or("?")
        );
    }
    Ok(())
}

fn list(a: ListArgs) -> Result<()> {
    let v = control::request(&control_path(&a.scope)?, &control::Request::List, &[])
        .map_err(|e| anyhow::anyhow!("list: {e}"))?;
    if a.json {
        println!("{v}");
        return Ok(());
    }
    print_functions(&v);
    Ok(())
}

/// A table of `control::list`'s functions.
fn print_functions(v: &serde_json::Value) {
    let mut t = Table::new(&["port", "name", "kind", "calls", "errors", "p50", "p99"]);
    for f in v["functions"].as_array().into_iter().flatten() {
        let u = |k: &str| f[k].as_u64().map_or("-".to_string(), |n| n.to_string());
        let lat = |k: &str| f[k].as_u64().map_or("-".to_string(), fmt_ns);
        t.row(vec![
            u("port"),
            f["name"].as_str().unwrap_or("?").to_string(),
            f["kind"].as_str().unwrap_or("?").to_string(),
            u("calls"),
            u("errors"),
            lat("p50_ns"),
            lat("p99_ns"),
        ]);
    }
    print!("{}", t.render());
}

/// The functions a command was given, or a usage error naming the problem.
fn functions(spec: &str) -> Result<Registry> {
    match Registry::parse(spec) {
        Ok(r) if r.is_empty() => usage!("--functions {spec:?}: no PORT=FUNCTION given"),
        Ok(r) => Ok(r),
        Err(e) => usage!("--functions: {e}"),
    }
}

/// What a load run reports, closed or open loop.
struct LoadOutcome {
    requests: u64,
    responses: u64,
    wrong: u64,
    missing: u64,
    /// The first error sending a request (closed loop).
    send_error: Option<String>,
    /// Sent from a lab host (--lab/--host) rather than this namespace.
    from_lab: bool,
}

fn load(a: LoadArgs) -> Result<()> {
    use peregrine_lab::load::{LoadConfig, LoadMetrics};
    if !peregrine_lab::topology::allowed_address(a.to) {
        usage!(
            "--to {}: outside 198.18.0.0/15 and 2001:db8::/32; load goes only to lab ranges",
            a.to
        );
    }
    if a.duration.0 > Duration::from_secs(3600) {
        usage!("--duration {}: at most 1h for a load run", a.duration);
    }
    if a.connections == 0 || a.connections > 4096 {
        usage!("--connections {}: expected 1..=4096", a.connections);
    }
    let registry = functions(&a.functions)?;
    let ns = a.scope.ns()?;
    // The invoker answers requests of one frame: a larger one would go out
    // as IP fragments, which it counts and drops (`fragments`).
    let (max, why) = netns::run_in_opt(ns.as_deref(), || {
        peregrine_lab::load::max_request_payload(a.to)
    })?;
    if a.size.0 == 0 || a.size.0 > max as u64 {
        usage!(
            "--size {}: expected 1..={max} payload bytes: a request must fit one frame ({why}, less IP and UDP headers)",
            a.size
        );
    }
    if a.rate.is_some() {
        return open_load(&a, &registry);
    }
    let metrics = LoadMetrics::new();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = a
        .metrics
        .map(|addr| crate::metrics::serve_load(&metrics, addr, stop.clone()))
        .transpose()?;
    let cfg = LoadConfig {
        server: a.to,
        connections: a.connections,
        duration: a.duration.0,
        size: a.size.0 as usize,
        timeout: Duration::from_secs(1),
    };
    if !a.json {
        eprintln!(
            "closed loop: {} connection(s) to {} for {}, {} B requests",
            a.connections, a.to, a.duration, a.size
        );
    }
    let r = std::thread::scope(|s| {
        if !a.json {
            s.spawn(|| closed_progress(&metrics, &stop));
        }
        let r = netns::run_in_opt(ns.as_deref(), || {
            peregrine_lab::load::run(&registry, &cfg, &metrics)
        });
        stop.store(true, Ordering::Relaxed);
        r
    })?;
    if let Some(s) = server {
        let _ = s.join();
    }
    let r = r?;
    let lat = peregrine_lab::measure::summarize(&r.latency);
    let out = serde_json::json!({
        "mode": "closed",
        "seconds": r.seconds,
        "connections": a.connections,
        "size": a.size.0,
        "requests": r.requests,
        "responses": r.responses,
        "wrong": r.wrong,
        "missing": r.missing,
        "requests_per_s": r.responses as f64 / r.seconds.max(1e-9),
        "max_loss": a.max_loss,
        "latency": lat,
    });
    let o = LoadOutcome {
        requests: r.requests,
        responses: r.responses,
        wrong: r.wrong,
        missing: r.missing,
        send_error: r.send_error.clone(),
        from_lab: ns.is_some(),
    };
    let how = format!(
        "closed loop, {} connection(s), kernel UDP sockets",
        a.connections
    );
    report_load(&a, &out, &o, None, r.seconds, lat, how)
}

/// Prints the closed loop's requests and replies per second to stderr
/// until `stop`.
fn closed_progress(m: &peregrine_lab::load::LoadMetrics, stop: &std::sync::atomic::AtomicBool) {
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

fn open_load(a: &LoadArgs, registry: &Registry) -> Result<()> {
    let (Some(lab), Some(host)) = (&a.scope.lab, &a.scope.host) else {
        usage!("open-loop load (--rate) sends from a lab host: give --lab and --host");
    };
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if a.threads == 0 || a.threads > ncpu {
        usage!(
            "--threads {}: expected 1..={ncpu} (one generator thread per CPU)",
            a.threads
        );
    }
    if a.flows == 0 {
        usage!("--flows 0: expected at least 1 source port");
    }
    a.scope.ns()?;
    let from = peregrine_lab::Endpoint {
        host: host.clone(),
        iface: a.iface.clone(),
    };
    let topo = lab::state(lab)?.topology;
    let mut cfg = match OpenLoopConfig::for_lab(&topo, &from, a.to, registry, a.size.0 as usize) {
        Ok(c) => c,
        // Which function or size the open loop cannot take: the caller's choice.
        Err(peregrine_lab::LabError::Invalid(m)) => usage!("{m}"),
        Err(e) => return Err(e.into()),
    };
    let frame_bytes = request_frame_size(&cfg.frame, a.size.0 as usize) as f64;
    let rate = a.rate.expect("open loop has a rate");
    let pps = rate.pps(frame_bytes);
    if !(pps.is_finite() && pps >= 1.0) {
        usage!("--rate {rate}: below one request per second for {frame_bytes} B frames");
    }
    cfg.rate = peregrine_lab::pacing::Rate::Pps(rate.pps(frame_bytes));
    cfg.duration = a.duration.0;
    cfg.flows = a.flows;
    cfg.cpus = (0..a.threads).collect();
    cfg.check_on_client_cpus = a.check_on_client_cpus;
    if !a.json {
        eprintln!(
            "open loop: {} requests/s to {}:{} for {}, {} B payload ({} B frames)",
            si(pps),
            a.to,
            cfg.frame.dst_port,
            a.duration,
            a.size,
            frame_bytes
        );
    }
    let progress = OpenLoopProgress::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Prometheus while it runs: requests, correct and wrong replies (the
    // latencies and the missing are known when the run ends, in the report).
    let metrics = peregrine_lab::load::LoadMetrics::new();
    let server = a
        .metrics
        .map(|addr| crate::metrics::serve_load(&metrics, addr, stop.clone()))
        .transpose()?;
    let r = std::thread::scope(|s| {
        if !a.json {
            s.spawn(|| peregrine_lab::openloop::watch(&progress, &stop, "load"));
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
        let r = peregrine_lab::openloop::run(&cfg, &progress);
        stop.store(true, Ordering::Relaxed);
        r
    });
    if let Some(t) = server {
        let _ = t.join();
    }
    let r = r?;
    let lat = peregrine_lab::measure::summarize(&r.latency);
    let c = &r.checks;
    let offered = r.requests as f64 / r.seconds.max(1e-9);
    // A rate the generator could not offer is said, not hidden in the figures.
    let short = peregrine_lab::trial::short_of(Some(pps), offered);
    if short {
        eprintln!(
            "peregrine: warning: asked for {} requests/s, offered {} requests/s ({:.1}% short): generator-limited",
            si(pps),
            si(offered),
            (1.0 - offered / pps) * 100.0
        );
    }
    let out = serde_json::json!({
        "mode": "open",
        "requested_per_s": pps,
        "generator_limited": short,
        "seconds": r.seconds,
        "size": a.size.0,
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
        "max_loss": a.max_loss,
        "latency": lat,
    });
    let o = LoadOutcome {
        requests: r.requests,
        responses: r.replies,
        wrong: r.wrong,
        missing: r.missing,
        send_error: None,
        from_lab: true,
    };
    let how = format!(
        "open loop, live-frame requests from {} thread(s), every reply checked at tcx ingress",
        a.threads
    );
    report_load(a, &out, &o, Some(pps), r.seconds, lat, how)
}

/// The end of every load run: its result file, printed (`out` is the
/// table's source), then judged.
fn report_load(
    a: &LoadArgs,
    out: &serde_json::Value,
    o: &LoadOutcome,
    requested: Option<f64>,
    seconds: f64,
    latency: Option<peregrine_lab::results::Latency>,
    how: String,
) -> Result<()> {
    let result = load_result(
        o,
        requested,
        seconds,
        a.size.0 as usize,
        latency,
        a.max_loss,
        how,
    );
    print_load(out, &result, a.json)?;
    judge_load(o, a.max_loss, a.to)
}

/// A load run as a `peregrine.result/1` file, like every command that
/// measures: requests are the offered packets, correct replies the
/// delivered ones, unanswered requests the loss, wrong replies counted.
fn load_result(
    o: &LoadOutcome,
    requested: Option<f64>,
    seconds: f64,
    size: usize,
    latency: Option<peregrine_lab::results::Latency>,
    max_loss: f64,
    how: String,
) -> peregrine_lab::results::ResultFile {
    use peregrine_lab::results::{Limiter, ResultFile, Run, RunParams, Trial};
    let secs = seconds.max(1e-9);
    let frame = peregrine_wire::udp_frame_size(false, size) as f64;
    let offered = o.requests as f64 / secs;
    let delivered = o.responses.saturating_sub(o.wrong);
    let loss = o.missing as f64 / o.requests.max(1) as f64;
    let trial = Trial {
        phase: if requested.is_some() { "fixed" } else { "max" }.into(),
        requested_pps: requested,
        duration_s: seconds,
        offered_packets: o.requests,
        delivered_packets: delivered,
        offered_pps: offered,
        delivered_pps: delivered as f64 / secs,
        offered_bps: offered * frame * 8.0,
        delivered_bps: delivered as f64 / secs * frame * 8.0,
        loss_ratio: loss,
        cpu: vec![],
        latency,
        windows: vec![],
        limited_by: Some(peregrine_lab::trial::classify(
            requested,
            offered,
            o.missing,
            loss,
            max_loss,
            &[],
            Limiter::Dut,
        )),
        drops: vec![],
        wrong: Some(o.wrong),
    };
    let run = Run {
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
    };
    ResultFile::new("faas-load", peregrine_bench::command_line(), vec![run])
}

/// Prints a load report: one JSON object, or a table for people.
fn print_load(
    out: &serde_json::Value,
    result: &peregrine_lab::results::ResultFile,
    json: bool,
) -> Result<()> {
    if json {
        println!("{}", result.to_json());
        return Ok(());
    }
    let u = |k: &str| out[k].as_u64().unwrap_or(0);
    let f = |k: &str| out[k].as_f64().unwrap_or(0.0);
    let mut t = Table::new(&["", "count", "per second"]);
    let secs = f("seconds").max(1e-9);
    for k in ["requests", "responses", "wrong", "missing"] {
        t.row(vec![k.into(), u(k).to_string(), si(u(k) as f64 / secs)]);
    }
    println!(
        "{} loop, {:.2} s, {} B payload",
        out["mode"].as_str().unwrap_or("closed"),
        secs,
        u("size")
    );
    print!("{}", t.render());
    if let Some(w) = out.get("wrong_by_check").filter(|_| u("wrong") > 0) {
        println!("wrong replies by check: {w}");
    }
    let l = &out["latency"];
    if l.is_object() {
        let v = |k: &str| fmt_ns(l[k].as_u64().unwrap_or(0));
        let mut t = Table::new(&["latency", "min", "p50", "p90", "p99", "p99.9", "max"]);
        t.row(vec![
            format!("{} samples", l["count"].as_u64().unwrap_or(0)),
            v("min_ns"),
            v("p50_ns"),
            v("p90_ns"),
            v("p99_ns"),
            v("p999_ns"),
            v("max_ns"),
        ]);
        print!("{}", t.render());
    } else {
        println!("latency: no replies");
    }
    Ok(())
}

/// Fails (exit 1) when the run missed its purpose: nothing sent, no
/// replies, a wrong reply, or more unanswered than `max_loss` allows.
fn judge_load(o: &LoadOutcome, max_loss: f64, to: std::net::IpAddr) -> Result<()> {
    let hint = if o.from_lab {
        ""
    } else {
        " (sent from this namespace: give --lab and --host to send from a lab host)"
    };
    if o.requests == 0 {
        match &o.send_error {
            Some(e) => bail!("no request could be sent: {e}{hint}"),
            None => bail!("no request was sent (interrupted before the first one?)"),
        }
    }
    if o.wrong > 0 {
        bail!(
            "{} of {} replies were wrong",
            o.wrong,
            o.wrong + o.responses
        );
    }
    if o.responses == 0 {
        match &o.send_error {
            Some(e) => bail!("no replies from {to}: {e}{hint}"),
            None => bail!(
                "no replies from {to}: is `faas serve` running there with these functions?{hint}"
            ),
        }
    }
    let loss = o.missing as f64 / o.requests as f64;
    if loss > max_loss {
        bail!(
            "{} of {} requests ({:.3}%) got no reply, above --max-loss {} ({:.3}%)",
            o.missing,
            o.requests,
            loss * 100.0,
            max_loss,
            max_loss * 100.0
        );
    }
    Ok(())
}

/// Registers the invoker's counters in `reg` and returns the refresh that
/// copies `c` into them (labels: backend; function and port per function).
fn invoker_metrics(
    reg: &mut peregrine_lab::load::prometheus_client::registry::Registry,
    c: std::sync::Arc<Counters>,
    backend: &'static str,
    live: std::sync::Arc<Live>,
) -> impl FnMut() + Send + 'static {
    use crate::metrics::{set, CounterFamily, Labels};
    let reg = reg.sub_registry_with_prefix("peregrine_faas_invoker");
    let requests = CounterFamily::default();
    let replies = CounterFamily::default();
    let dropped = CounterFamily::default();
    let per_fn = CounterFamily::default();
    reg.register("requests", "Requests received", requests.clone());
    reg.register("replies", "Replies sent", replies.clone());
    let reasons: Vec<&str> = c.drop_reasons().iter().map(|(r, _)| *r).collect();
    reg.register(
        "dropped",
        format!("Requests dropped, by reason ({})", reasons.join(", ")),
        dropped.clone(),
    );
    reg.register(
        "function_replies",
        "Requests answered per function",
        per_fn.clone(),
    );
    move || {
        let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        let b: Labels = vec![("backend".into(), backend.into())];
        set(&requests, &b, get(&c.requests));
        set(&replies, &b, get(&c.replies));
        for (reason, v) in c.drop_reasons() {
            let mut l = b.clone();
            l.push(("reason".into(), reason.into()));
            set(&dropped, &l, get(v));
        }
        // The functions served now (deploys come and go while serving).
        // Each deployment's own count (a redeploy starts again at 0).
        for (port, d) in live.current().entries() {
            let mut l = b.clone();
            l.push(("function".into(), d.function.name().to_string()));
            l.push(("port".into(), port.to_string()));
            set(&per_fn, &l, d.answered());
        }
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    let registry = functions(&a.functions)?;
    let ns = a.scope.ns()?;
    if a.threads == 0 {
        usage!("--threads 0: expected at least 1 worker thread");
    }
    if a.queues == 0 {
        usage!("--queues 0: expected at least 1 RX queue");
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if let Some(c) = a.cpus.iter().find(|&&c| c >= ncpu) {
        usage!(
            "--cpus: CPU {c} does not exist (this machine has CPUs 0..={})",
            ncpu - 1
        );
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
    if a.backend != Backend::Afxdp {
        for (flag, set) in [
            ("--queues", a.queues != 1),
            ("--busy-poll", a.busy_poll.is_some()),
        ] {
            if set {
                usage!(
                    "{flag} applies to the afxdp backend, not {}",
                    a.backend.name()
                );
            }
        }
    }
    if a.backend == Backend::Afxdp
        && netns::run_in_opt(ns.as_deref(), || peregrine_bpf::link::ifindex(&a.iface))?.is_err()
    {
        usage!(
            "--iface {}: no such interface in {}",
            a.iface,
            ns.as_deref()
                .map_or("this namespace".to_string(), |n| format!("namespace {n}"))
        );
    }
    // Deploys, undeploys and lists arrive here (one server per namespace):
    // taken before anything is attached, so a second server changes nothing.
    let cookie = netns::run_in_opt(ns.as_deref(), netns::cookie)??;
    let (to_serve, incoming) = std::sync::mpsc::channel();
    let control = match control::ControlSocket::start(&control::path_for(cookie), to_serve) {
        Ok(c) => c,
        Err(e) => bail!("{e}"),
    };
    let server = match a.backend {
        Backend::Afxdp => {
            if !a.threads.is_multiple_of(a.queues) {
                usage!(
                    "--threads ({}) must be a multiple of --queues ({}): each queue gets the same number of workers",
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
        Backend::Mmsg => {
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
        Backend::Socket => {
            if a.threads != 1 {
                usage!("--threads {}: the socket backend is one thread (the source's simple server); use --backend mmsg for more", a.threads);
            }
            let s = netns::run_in_opt(ns.as_deref(), || SocketServer::simple(registry))??;
            eprintln!(
                "serving {} with one recvfrom/sendto thread, up to {} KiB of buffers",
                names.join(" "),
                s.memory_bytes / 1024
            );
            Server::Sockets(s)
        }
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let exposition = match a.metrics {
        Some(addr) => {
            let mut reg = peregrine_lab::load::prometheus_client::registry::Registry::default();
            let refresh = invoker_metrics(
                &mut reg,
                server.counters_arc(),
                a.backend.name(),
                server.live_arc(),
            );
            let t = peregrine_lab::load::serve_metrics(addr, stop.clone(), reg, refresh)?;
            if !a.json {
                eprintln!("metrics on http://{addr}/metrics");
            }
            Some(t)
        }
        None => None,
    };
    if !a.json {
        eprintln!("control socket {}", control.path().display());
    }
    let start = Instant::now();
    let end = a.duration.map(Duration::from);
    let mut last = 0;
    while !signals::stop_requested() && end.is_none_or(|d| start.elapsed() < d) {
        let tick = Instant::now();
        let left = end.map_or(Duration::from_secs(1), |d| {
            d.saturating_sub(start.elapsed())
                .min(Duration::from_secs(1))
        });
        while tick.elapsed() < left && !signals::stop_requested() {
            let slice = (left - tick.elapsed()).min(Duration::from_millis(100));
            if let Ok(inc) = incoming.recv_timeout(slice) {
                let answer =
                    control::apply(&inc.request, &inc.module, server.live(), server.routes());
                if !a.json && !matches!(inc.request, control::Request::List) {
                    eprintln!("  control: {answer}");
                }
                let _ = inc.answer.send(answer);
            }
        }
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
    stop.store(true, Ordering::Relaxed);
    drop(control);
    if let Some(t) = exposition {
        let _ = t.join();
    }
    if let Server::AfXdp(inv) = &server {
        // The kernel's counters as they are now, not up to 100 ms ago.
        inv.sync_counters();
    }
    let c = server.counters();
    let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
    let seconds = start.elapsed().as_secs_f64();
    // What is served at the end ("PORT=NAME") and what each answered.
    let served: Vec<(String, u64)> = server
        .live()
        .current()
        .entries()
        .map(|(p, d)| (format!("{p}={}", d.function.name()), d.answered()))
        .collect();
    let mut out = serde_json::json!({
        "backend": a.backend.name(),
        "memory_bytes": server.memory_bytes(),
        "seconds": seconds,
        "requests": get(&c.requests),
        "replies": get(&c.replies),
        "per_function": served.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
        "functions": control::list(server.live())["functions"].clone(),
    });
    for (reason, v) in c.drop_reasons() {
        out[reason] = get(v).into();
    }
    if a.json {
        println!("{out}");
        return Ok(());
    }
    println!(
        "{} backend, {:.1} s, {} KiB of buffers",
        a.backend.name(),
        seconds,
        server.memory_bytes() / 1024
    );
    let mut t = Table::new(&["counter", "count", "per second"]);
    let reasons = c.drop_reasons().map(|(r, _)| r);
    for k in ["requests", "replies"].iter().chain(reasons.iter()) {
        let v = out[*k].as_u64().unwrap_or(0);
        t.row(vec![
            k.to_string(),
            v.to_string(),
            si(v as f64 / seconds.max(1e-9)),
        ]);
    }
    print!("{}", t.render());
    println!("functions served at the end:");
    print_functions(&out);
    let mut t = Table::new(&["function", "answered", "per second"]);
    for (n, v) in &served {
        let v = *v;
        t.row(vec![
            n.clone(),
            v.to_string(),
            si(v as f64 / seconds.max(1e-9)),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}
