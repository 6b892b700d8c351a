//! Serving functions, whatever the backend: a [`ServeConfig`] in, a running
//! [`Server`] out (its live registry changed through `deploy`/`undeploy` or
//! its control socket, its counters read as [`ServeStats`]), and a final
//! [`ServeReport`] when it stops. The one place the backend is chosen:
//! `faas serve`, `bench faas` and the agent all start servers here.
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use peregrine_bpf::XdpMode;
use peregrine_host::{netns, signals};
use peregrine_metrics::MetricsError;
use peregrine_units::{si, Table};
use peregrine_xsk::XskConfig;
use serde_json::{json, Value};

use crate::baseline::SocketServer;
use crate::control::{self, ControlSocket, Incoming, Request};
use crate::functions::Deployed;
use crate::invoker::{AfXdpInvoker, Counters, InvokerConfig, InvokerError};
use crate::live::{Deployment, Live, Routes};
use crate::{Function, Registry};

/// How requests reach the functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP sockets behind the XDP dispatcher.
    Afxdp,
    /// Sockets with recvmmsg/sendmmsg, one per thread (SO_REUSEPORT).
    Mmsg,
    /// One thread with recvfrom/sendto (the source's simple server).
    Socket,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Afxdp => "afxdp",
            Backend::Mmsg => "mmsg",
            Backend::Socket => "socket",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "afxdp" => Ok(Backend::Afxdp),
            "mmsg" => Ok(Backend::Mmsg),
            "socket" => Ok(Backend::Socket),
            _ => Err(format!("{s:?}: expected afxdp, mmsg or socket")),
        }
    }
}

/// What a server is started with.
#[derive(Clone)]
pub struct ServeConfig {
    pub backend: Backend,
    /// Network namespace to serve in (None: the caller's).
    pub ns: Option<String>,
    /// Interface the requests arrive on (afxdp).
    pub iface: String,
    pub functions: Registry,
    /// RX queues served (afxdp; the others take 1).
    pub queues: u32,
    /// Worker threads in all (afxdp: `threads / queues` per queue).
    pub threads: u32,
    /// CPUs the workers are pinned to, in turn (empty: afxdp and mmsg use
    /// every CPU, socket stays unpinned).
    pub cpus: Vec<usize>,
    /// AF_XDP sockets: frames, rings, busy polling (afxdp only).
    pub xsk: XskConfig,
    /// How the dispatcher is attached (afxdp).
    pub xdp_mode: XdpMode,
    /// Open the namespace's control socket (`faas deploy|undeploy|list`);
    /// its requests are applied by [`Server::control`].
    pub control: bool,
}

impl ServeConfig {
    /// One worker on one queue of `iface`, no control socket.
    pub fn new(backend: Backend, iface: &str, functions: Registry) -> ServeConfig {
        ServeConfig {
            backend,
            ns: None,
            iface: iface.to_string(),
            functions,
            queues: 1,
            threads: 1,
            cpus: vec![],
            xsk: XskConfig::default(),
            xdp_mode: XdpMode::Native,
            control: false,
        }
    }
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A setting the caller chose that cannot work (which one, and why).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Invoker(#[from] InvokerError),
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    /// The control socket (another server in this namespace, most often).
    #[error("{0}")]
    Control(String),
}

enum Running {
    AfXdp(Box<AfXdpInvoker>),
    Sockets(SocketServer),
}

/// A running server; dropping it (or [`Server::stop`]) stops it.
pub struct Server {
    /// First, so no control request arrives while the backend stops.
    control: Option<(ControlSocket, mpsc::Receiver<Incoming>)>,
    running: Running,
    backend: Backend,
    iface: String,
    queues: u32,
    threads: u32,
    started: Instant,
}

/// A control request the server applied, and its answer.
pub struct Applied {
    pub request: Request,
    pub answer: Value,
}

/// The counters now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeStats {
    pub requests: u64,
    pub replies: u64,
    /// Every drop reason with its count, in `Counters::drop_reasons` order.
    pub drops: Vec<(&'static str, u64)>,
    /// What each function served now ("PORT=NAME") answered.
    pub per_function: Vec<(String, u64)>,
}

/// What a server did, when it stopped.
#[derive(Clone, Debug)]
pub struct ServeReport {
    pub backend: Backend,
    pub memory_bytes: usize,
    pub seconds: f64,
    pub stats: ServeStats,
    /// The functions served at the end, as `control::list` gives them.
    pub functions: Value,
}

impl ServeReport {
    /// The report as `faas serve --json` prints it.
    pub fn to_json(&self) -> Value {
        let s = &self.stats;
        let mut out = json!({
            "backend": self.backend.as_str(),
            "memory_bytes": self.memory_bytes,
            "seconds": self.seconds,
            "requests": s.requests,
            "replies": s.replies,
            "per_function": s.per_function.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "functions": self.functions["functions"].clone(),
        });
        for (reason, v) in &s.drops {
            out[*reason] = (*v).into();
        }
        out
    }
}

/// The report as `faas serve` prints it for people: the backend, the
/// counters and their rates, the functions served at the end and what each
/// function answered.
impl std::fmt::Display for ServeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kib = self.memory_bytes / 1024;
        let (backend, secs) = (self.backend.as_str(), self.seconds);
        writeln!(f, "{backend} backend, {secs:.1} s, {kib} KiB of buffers")?;
        let rate = |v: u64| si(v as f64 / secs.max(1e-9));
        let mut t = Table::new(&["counter", "count", "per second"]);
        let s = &self.stats;
        let counts = [("requests", s.requests), ("replies", s.replies)];
        for (k, v) in counts.iter().chain(s.drops.iter()) {
            t.row(vec![k.to_string(), v.to_string(), rate(*v)]);
        }
        f.write_str(&t.render())?;
        writeln!(f, "functions served at the end:")?;
        f.write_str(&control::functions_table(&self.functions))?;
        let mut t = Table::new(&["function", "answered", "per second"]);
        for (n, v) in &s.per_function {
            t.row(vec![n.clone(), v.to_string(), rate(*v)]);
        }
        f.write_str(&t.render())
    }
}

/// Checks `cfg` against itself and this machine, before anything starts.
fn check(cfg: &ServeConfig, ncpu: usize) -> Result<(), ServeError> {
    let invalid = |m: String| Err(ServeError::Invalid(m));
    if cfg.threads == 0 {
        return invalid("--threads 0: expected at least 1 worker thread".into());
    }
    if cfg.queues == 0 {
        return invalid("--queues 0: expected at least 1 RX queue".into());
    }
    if let Some(c) = cfg.cpus.iter().find(|&&c| c >= ncpu) {
        return invalid(format!(
            "--cpus: CPU {c} does not exist (this machine has CPUs 0..={})",
            ncpu - 1
        ));
    }
    match cfg.backend {
        Backend::Afxdp => {
            let ns = cfg.ns.as_deref();
            if netns::run_in_opt(ns, || peregrine_bpf::link::ifindex(&cfg.iface))?.is_err() {
                return invalid(format!(
                    "--iface {}: no such interface in {}",
                    cfg.iface,
                    ns.map_or("this namespace".to_string(), |n| format!("namespace {n}"))
                ));
            }
            // Ring and frame sizes, before anything is attached.
            if let Err(e) = cfg.xsk.validate() {
                return invalid(e.to_string());
            }
            if !cfg.threads.is_multiple_of(cfg.queues) {
                return invalid(format!(
                    "--threads ({}) must be a multiple of --queues ({}): each queue gets the same number of workers",
                    cfg.threads, cfg.queues
                ));
            }
        }
        other => {
            for (flag, set) in [
                ("--queues", cfg.queues != 1),
                ("--busy-poll", cfg.xsk.busy_poll.is_some()),
            ] {
                if set {
                    return invalid(format!(
                        "{flag} applies to the afxdp backend, not {}",
                        other.as_str()
                    ));
                }
            }
            if other == Backend::Socket && cfg.threads != 1 {
                return invalid(format!("--threads {}: the socket backend is one thread (the source's simple server); use --backend mmsg for more", cfg.threads));
            }
        }
    }
    Ok(())
}

/// Starts serving `cfg.functions` on the chosen backend.
pub fn serve(cfg: ServeConfig) -> Result<Server, ServeError> {
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    check(&cfg, ncpu)?;
    let ns = cfg.ns.as_deref();
    // Deploys, undeploys and lists arrive here (one server per namespace):
    // taken before anything is attached, so a second server changes nothing.
    let control = if cfg.control {
        let (to_serve, incoming) = mpsc::channel();
        let c =
            ControlSocket::start(&control::path_in(ns)?, to_serve).map_err(ServeError::Control)?;
        Some((c, incoming))
    } else {
        None
    };
    let all_cpus = || {
        if cfg.cpus.is_empty() {
            (0..ncpu).collect()
        } else {
            cfg.cpus.clone()
        }
    };
    let registry = cfg.functions;
    let running = match cfg.backend {
        Backend::Afxdp => {
            let icfg = InvokerConfig {
                queues: cfg.queues,
                workers: cfg.threads / cfg.queues,
                cpus: all_cpus(),
                xdp_mode: cfg.xdp_mode,
                xsk: cfg.xsk,
                ..Default::default()
            };
            let inv = AfXdpInvoker::start(ns, &cfg.iface, registry, icfg)?;
            Running::AfXdp(Box::new(inv))
        }
        Backend::Mmsg => Running::Sockets(netns::run_in_opt(ns, || {
            SocketServer::mmsg(registry, cfg.threads as usize, &all_cpus())
        })??),
        Backend::Socket => Running::Sockets(netns::run_in_opt(ns, || match cfg.cpus.first() {
            Some(&cpu) => SocketServer::simple_on(registry, cpu),
            None => SocketServer::simple(registry),
        })??),
    };
    Ok(Server {
        control,
        running,
        backend: cfg.backend,
        iface: cfg.iface,
        queues: cfg.queues,
        threads: cfg.threads,
        started: Instant::now(),
    })
}

impl Server {
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The functions served, as workers take them up.
    pub fn live(&self) -> &Arc<Live> {
        match &self.running {
            Running::AfXdp(i) => &i.live,
            Running::Sockets(s) => &s.live,
        }
    }

    /// The backend's counters, shared (e.g. with a metrics exporter).
    pub fn counters(&self) -> &Arc<Counters> {
        match &self.running {
            Running::AfXdp(i) => &i.counters,
            Running::Sockets(s) => &s.counters,
        }
    }

    fn routes(&self) -> &dyn Routes {
        match &self.running {
            Running::AfXdp(i) => i.as_ref(),
            Running::Sockets(s) => s,
        }
    }

    /// UMEM and rings (afxdp), or buffers and socket receive buffers.
    pub fn memory_bytes(&self) -> usize {
        match &self.running {
            Running::AfXdp(i) => i.memory_bytes,
            Running::Sockets(s) => s.memory_bytes,
        }
    }

    /// The control socket's path, when the server has one.
    pub fn control_path(&self) -> Option<&Path> {
        self.control.as_ref().map(|(c, _)| c.path())
    }

    /// What started: functions, interface, backend, workers and memory.
    pub fn summary(&self) -> String {
        let names: Vec<String> = self
            .live()
            .current()
            .entries()
            .map(|(p, d)| format!("{p}={}", d.function.name()))
            .collect();
        let (names, kib) = (names.join(" "), self.memory_bytes() / 1024);
        match &self.running {
            Running::AfXdp(inv) => format!(
                "serving {names} on {} with AF_XDP ({}, {} queue(s) x {} worker(s), {kib} KiB of UMEM and rings)",
                self.iface,
                inv.mode,
                self.queues,
                self.threads / self.queues,
            ),
            Running::Sockets(_) if self.backend == Backend::Mmsg => format!(
                "serving {names} with {} recvmmsg/sendmmsg thread(s), up to {kib} KiB of buffers",
                self.threads
            ),
            Running::Sockets(_) => {
                format!("serving {names} with one recvfrom/sendto thread, up to {kib} KiB of buffers")
            }
        }
    }

    /// Copies the kernel's counters (AF_XDP rings, fragments) into
    /// `counters` now; the socket backends count everything themselves.
    pub fn sync_counters(&self) {
        if let Running::AfXdp(inv) = &self.running {
            inv.sync_counters();
        }
    }

    /// The counters now (the kernel's as last synced).
    pub fn stats(&self) -> ServeStats {
        let c = self.counters();
        let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
        ServeStats {
            requests: get(&c.requests),
            replies: get(&c.replies),
            drops: c
                .drop_reasons()
                .into_iter()
                .map(|(r, v)| (r, get(v)))
                .collect(),
            per_function: self
                .live()
                .current()
                .entries()
                .map(|(p, d)| (format!("{p}={}", d.function.name()), d.answered()))
                .collect(),
        }
    }

    /// Puts `f` on `port` (replacing what is there) once every worker runs
    /// it; on error nothing changed.
    pub fn deploy(&self, port: u16, f: Arc<dyn Function>) -> Result<Deployment, String> {
        self.live().deploy(self.routes(), port, f)
    }

    /// Takes the function off `port` once what it holds is answered.
    pub fn undeploy(&self, port: u16) -> Result<Arc<Deployed>, String> {
        self.live().undeploy(self.routes(), port)
    }

    /// Waits up to `within` for a request on the control socket and applies
    /// it; None when none came (or the server has no control socket).
    pub fn control(&self, within: Duration) -> Option<Applied> {
        let Some((_, incoming)) = &self.control else {
            std::thread::sleep(within);
            return None;
        };
        let inc = incoming.recv_timeout(within).ok()?;
        let answer = control::apply(&inc.request, &inc.module, self.live(), self.routes());
        let _ = inc.answer.send(answer.clone());
        Some(Applied {
            request: inc.request,
            answer,
        })
    }

    /// Serves until Ctrl-C or `limit`, applying control requests as they
    /// come; with `progress`, says on stderr what each changed and the
    /// replies of every second.
    pub fn serve_for(&self, limit: Option<Duration>, progress: bool) {
        let start = Instant::now();
        let mut last = 0;
        while !signals::stop_requested() && limit.is_none_or(|d| start.elapsed() < d) {
            let tick = Instant::now();
            let left = limit.map_or(Duration::from_secs(1), |d| {
                d.saturating_sub(start.elapsed())
                    .min(Duration::from_secs(1))
            });
            while tick.elapsed() < left && !signals::stop_requested() {
                let slice = (left - tick.elapsed()).min(Duration::from_millis(100));
                if let Some(done) = self.control(slice) {
                    if progress && !matches!(done.request, Request::List) {
                        eprintln!("  control: {}", done.answer);
                    }
                }
            }
            let now = self.stats().replies;
            if progress {
                eprintln!(
                    "  {:>6.1}s: {} replies/s",
                    start.elapsed().as_secs_f64(),
                    now - last
                );
            }
            last = now;
        }
    }

    /// Serves until Ctrl-C or `limit` (as `serve_for`), its counters served
    /// to Prometheus at `metrics` meanwhile (with `progress`, where it
    /// serves them and its control socket are said first on stderr); the
    /// final report.
    pub fn run(
        self,
        limit: Option<Duration>,
        progress: bool,
        metrics: Option<SocketAddr>,
    ) -> Result<ServeReport, MetricsError> {
        let stop = Arc::new(AtomicBool::new(false));
        let exposition = match metrics {
            Some(addr) => {
                let (c, live) = (self.counters().clone(), self.live().clone());
                let backend = self.backend.as_str();
                let t = crate::metrics::serve(c, live, backend, addr, stop.clone())?;
                if progress {
                    eprintln!("metrics on http://{addr}/metrics");
                }
                Some(t)
            }
            None => None,
        };
        if let (true, Some(p)) = (progress, self.control_path()) {
            eprintln!("control socket {}", p.display());
        }
        self.serve_for(limit, progress);
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = exposition {
            let _ = t.join();
        }
        Ok(self.stop())
    }

    /// Stops taking control requests, reads the final counters and stops.
    pub fn stop(mut self) -> ServeReport {
        self.control = None;
        // The kernel's counters as they are now, not up to 100 ms ago.
        self.sync_counters();
        ServeReport {
            backend: self.backend,
            memory_bytes: self.memory_bytes(),
            seconds: self.started.elapsed().as_secs_f64(),
            stats: self.stats(),
            functions: control::list(self.live()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(cfg: &ServeConfig) -> String {
        match check(cfg, 2) {
            Err(ServeError::Invalid(m)) => m,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn backends_parse_and_name_themselves() {
        for b in [Backend::Afxdp, Backend::Mmsg, Backend::Socket] {
            assert_eq!(b.as_str().parse::<Backend>(), Ok(b));
        }
        assert!("dpdk".parse::<Backend>().is_err());
    }

    #[test]
    fn settings_that_cannot_work_are_refused_before_anything_starts() {
        let r = Registry::parse("1232=reverse").unwrap();
        let mut c = ServeConfig::new(Backend::Socket, "eth0", r);
        assert_eq!(check(&c, 2).ok(), Some(()));
        c.threads = 2;
        assert!(refused(&c).contains("the socket backend is one thread"));
        c.backend = Backend::Mmsg;
        assert_eq!(check(&c, 2).ok(), Some(()));
        c.queues = 2;
        assert_eq!(
            refused(&c),
            "--queues applies to the afxdp backend, not mmsg"
        );
        c.queues = 1;
        c.xsk.busy_poll = Some(peregrine_xsk::BusyPoll::default());
        assert_eq!(
            refused(&c),
            "--busy-poll applies to the afxdp backend, not mmsg"
        );
        c.xsk.busy_poll = None;
        c.cpus = vec![0, 2];
        assert_eq!(
            refused(&c),
            "--cpus: CPU 2 does not exist (this machine has CPUs 0..=1)"
        );
        c.cpus = vec![];
        c.threads = 0;
        assert!(refused(&c).starts_with("--threads 0"));
        c.threads = 1;
        c.queues = 0;
        assert!(refused(&c).starts_with("--queues 0"));
        let mut a = ServeConfig::new(Backend::Afxdp, "pg-no-such-iface", Registry::default());
        assert!(refused(&a).starts_with("--iface pg-no-such-iface: no such interface"));
        a.iface = "lo".into();
        a.threads = 3;
        a.queues = 2;
        assert!(refused(&a).contains("must be a multiple of --queues"));
    }
}
