//! `peregrine faas serve|load|deploy|undeploy|list`: arguments into
//! `peregrine_faas::ServeConfig` and `peregrine_lab::faasload`'s config,
//! the control socket's requests, and the reports printed.
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use peregrine_faas::control::{self, Request};
use peregrine_faas::{Registry, ServeConfig};
use peregrine_lab::faasload::DEFAULT_MAX_LOSS;

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

impl From<Backend> for peregrine_faas::Backend {
    fn from(b: Backend) -> Self {
        match b {
            Backend::Afxdp => peregrine_faas::Backend::Afxdp,
            Backend::Mmsg => peregrine_faas::Backend::Mmsg,
            Backend::Socket => peregrine_faas::Backend::Socket,
        }
    }
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
    #[arg(long, value_name = "FRACTION", default_value_t = DEFAULT_MAX_LOSS, value_parser = crate::units::fraction)]
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
    /// CPU time a call may use, e.g. 200us, 10ms (stopped no sooner, at
    /// most about 200 us later below 10 ms).
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

pub fn run(cmd: FaasCmd) -> Result<()> {
    match cmd {
        FaasCmd::Serve(a) => serve(a),
        FaasCmd::Load(a) => load(a),
        FaasCmd::Deploy(a) => deploy(a),
        FaasCmd::Undeploy(a) => undeploy(a),
        FaasCmd::List(a) => list(a),
    }
}

/// Sends `req` (and `module`) to the server in `scope`'s namespace and
/// prints its answer; a refusal is an error about `what`.
fn ask(scope: &Scope, req: Request, module: &[u8], json: bool, what: String) -> Result<()> {
    let path = control::path_in(scope.ns()?.as_deref())?;
    let v = control::request(&path, &req, module).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    if json {
        println!("{v}");
    } else {
        print!("{}", control::describe(&req, &v));
    }
    Ok(())
}

fn deploy(a: DeployArgs) -> Result<()> {
    let name = a.name.as_deref();
    let (req, module) =
        match control::deploy_request(a.port, &a.wasm, name, a.memory.0, a.timeout.0) {
            Ok(r) => r,
            Err(e) => usage!("{e}"),
        };
    let what = format!("deploy {} on port {}", a.wasm.display(), a.port);
    ask(&a.scope, req, &module, a.json, what)
}

fn undeploy(a: UndeployArgs) -> Result<()> {
    let req = Request::Undeploy { port: a.port };
    ask(
        &a.scope,
        req,
        &[],
        a.json,
        format!("undeploy port {}", a.port),
    )
}

fn list(a: ListArgs) -> Result<()> {
    ask(&a.scope, Request::List, &[], a.json, "list".into())
}

/// The functions a command was given, or a usage error naming the problem.
fn functions(spec: &str) -> Result<Registry> {
    match Registry::parse(spec) {
        Ok(r) if r.is_empty() => usage!("--functions {spec:?}: no PORT=FUNCTION given"),
        Ok(r) => Ok(r),
        Err(e) => usage!("--functions: {e}"),
    }
}

fn load(a: LoadArgs) -> Result<()> {
    use peregrine_lab::faasload::{FaasLoadConfig, LoadMode};
    let mode = match a.rate {
        None => LoadMode::Closed {
            connections: a.connections,
        },
        Some(rate) => LoadMode::Open {
            rate,
            iface: a.iface.clone(),
            flows: a.flows,
            threads: a.threads,
            check_on_client_cpus: a.check_on_client_cpus,
        },
    };
    let cfg = FaasLoadConfig {
        to: a.to,
        functions: functions(&a.functions)?,
        duration: a.duration,
        size: a.size,
        from: a
            .scope
            .ns()?
            .and(a.scope.lab.clone().zip(a.scope.host.clone())),
        mode,
        max_loss: a.max_loss,
        metrics: a.metrics,
        progress: !a.json,
        command: peregrine_bench::command_line(),
    };
    let r = match peregrine_lab::faasload::run(&cfg) {
        Ok(r) => r,
        Err(peregrine_lab::LabError::Invalid(m)) => usage!("{m}"),
        Err(e) => return Err(e.into()),
    };
    print_load(&r.summary, &r.result, a.json)?;
    r.judge().map_err(anyhow::Error::msg)
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

fn serve(a: ServeArgs) -> Result<()> {
    crate::agent::refuse_beside_agent("function service", a.scope.ns()?.as_deref())?;
    let cfg = ServeConfig {
        backend: a.backend.into(),
        ns: a.scope.ns()?,
        iface: a.iface.clone(),
        functions: functions(&a.functions)?,
        queues: a.queues,
        threads: a.threads,
        cpus: a.cpus.clone(),
        xsk: peregrine_xsk::XskConfig {
            frames: a.frames,
            ring: a.ring,
            busy_poll: a.busy_poll.map(|usecs| peregrine_xsk::BusyPoll {
                usecs,
                ..Default::default()
            }),
            ..Default::default()
        },
        xdp_mode: a.xdp_mode,
        control: true,
    };
    let server = peregrine_faas::serve(cfg)?;
    eprintln!("{}", server.summary());
    let r = server.run(a.duration.map(Duration::from), !a.json, a.metrics)?;
    if a.json {
        println!("{}", r.to_json());
    } else {
        print!("{r}");
    }
    Ok(())
}
