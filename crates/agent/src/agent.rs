//! The agent's loop: read the declaration, reconcile, and reconcile again
//! on every reason to (the file changed, SIGHUP, a link or address came or
//! went, a control request, a service exited, and once a second for what
//! no event reports, such as a tcx program detached by hand).
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use peregrine_host::{netns, signals};

use crate::check;
use crate::compose;
use crate::control::{self, Incoming, Reply, Request};
use crate::decl::{self, ArgCheck, NodeDecl};
use crate::podreq;
use crate::pods::{self, Registry};
use crate::reconcile::{self, Pass};
use crate::services::Supervisor;
use crate::state::{self, Owned};
use crate::status::{Order, QosStatus, RouterStatus, Status};

pub struct Options {
    /// node.toml, or a directory of `*.toml`.
    pub config: PathBuf,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics: Option<SocketAddr>,
    /// The binary the services run (`peregrine`).
    pub exe: PathBuf,
    /// Checks a service's arguments as its command would.
    pub check: Arc<ArgCheck>,
}

/// Why the loop woke.
enum Event {
    Control(Incoming),
    Kernel,
    File,
}

struct Agent {
    opts: Options,
    decl: NodeDecl,
    owned: Owned,
    /// The pods the CNI plugin handed over (`pods`).
    pods: Registry,
    dir: PathBuf,
    sup: Supervisor,
    shared: Arc<Mutex<Status>>,
    /// The other nodes from the API server (`kube::poll`).
    nodes: Arc<Mutex<crate::kube::Discovered>>,
}

/// Runs the agent until SIGINT or SIGTERM. The node's data plane and
/// services stay as they are when it stops (a new agent adopts them).
pub fn run(opts: Options) -> Result<(), Vec<String>> {
    let decl = check::read(&opts.config, &*opts.check)?;
    let one = |e: String| vec![e];
    let dir = state::run_dir();
    std::fs::create_dir_all(&dir).map_err(|e| one(format!("creating {}: {e}", dir.display())))?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    }
    let cookie = netns::cookie().map_err(|e| one(e.to_string()))?;
    let mut owned = Owned::load(&dir, cookie);
    owned.pid = std::process::id();
    let pods = Registry::load(&dir, cookie);
    let (tx, rx) = mpsc::channel::<Event>();
    let (ctl_tx, ctl_rx) = mpsc::channel::<Incoming>();
    control::listen(&state::socket_path(), ctl_tx).map_err(one)?;
    forward(ctl_rx, tx.clone());
    let ktx = tx.clone();
    let _nl = peregrine_host::nl::watch_here(move |_| {
        let _ = ktx.send(Event::Kernel);
    })
    .map_err(|e| one(format!("watching the kernel's links: {e}")))?;
    watch_file(&opts.config, tx.clone()).map_err(one)?;
    signals::install();
    signals::reload_on_hup();
    let shared = Arc::new(Mutex::new(Status {
        pid: std::process::id(),
        netns_cookie: cookie,
        config: opts.config.display().to_string(),
        ..Status::default()
    }));
    let stop = Arc::new(AtomicBool::new(false));
    if let Some(addr) = opts.metrics {
        crate::metrics::serve(addr, stop.clone(), shared.clone()).map_err(one)?;
    }
    peer_delivery(stop.clone(), shared.clone());
    let nodes = Arc::new(Mutex::new(crate::kube::Discovered {
        source: decl.cluster.as_ref().and_then(|c| c.kubernetes.clone()),
        ..Default::default()
    }));
    crate::kube::poll(nodes.clone(), stop.clone());
    let sup = Supervisor::new(opts.exe.clone(), dir.clone());
    let mut a = Agent {
        opts,
        decl,
        owned,
        pods,
        dir,
        sup,
        shared,
        nodes,
    };
    tracing::info!(config = %a.opts.config.display(), "agent started");
    a.reconcile("start");
    let mut last_full = Instant::now();
    while !signals::stop_requested() {
        let ev = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => Some(ev),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut why: Option<&str> = None;
        let mut file = false;
        let mut requests = Vec::new();
        for ev in ev.into_iter().chain(rx.try_iter()) {
            match ev {
                Event::Kernel => why = why.or(Some("kernel event")),
                Event::File => file = true,
                Event::Control(r) => requests.push(r),
            }
        }
        if signals::take_reload() {
            file = true;
        }
        if file {
            a.reload();
        }
        for (req, reply) in requests {
            let r = a.handle(req);
            let _ = reply.send(r);
        }
        let restarted = a.sup.tick(&mut a.owned);
        if !restarted.is_empty() {
            for l in &restarted {
                tracing::warn!("{l}");
            }
            a.note_changes(&restarted);
            a.save();
        }
        if let Some(w) = why {
            a.reconcile(w);
            last_full = Instant::now();
        } else if last_full.elapsed() >= Duration::from_secs(1) {
            a.reconcile("periodic");
            last_full = Instant::now();
        }
    }
    stop.store(true, Ordering::Relaxed);
    a.save();
    let _ = std::fs::remove_file(state::socket_path());
    tracing::info!("agent stopped; the data plane and services keep running");
    Ok(())
}

/// Recomputes the router ports' peer delivery once a second, beside the
/// loop: peers live in other namespaces, whose XDP changes send no event
/// here, and 100 ports take tens of milliseconds that a port appearing
/// should not wait for. Joining ports compute their own.
fn peer_delivery(stop: Arc<AtomicBool>, shared: Arc<Mutex<Status>>) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) && !signals::stop_requested() {
            let changed = crate::peer::refresh();
            if !changed.is_empty() {
                for l in &changed {
                    tracing::info!("{l}");
                }
                let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                s.changes.extend(changed);
            }
            signals::sleep(Duration::from_secs(1));
        }
    });
}

/// Hands control requests to the loop's channel.
fn forward(rx: Receiver<Incoming>, tx: Sender<Event>) {
    std::thread::spawn(move || {
        for r in rx {
            if tx.send(Event::Control(r)).is_err() {
                break;
            }
        }
    });
}

/// Sends `Event::File` whenever the declaration (the file, or a `*.toml`
/// of the directory) is written, created, moved or removed.
fn watch_file(path: &Path, tx: Sender<Event>) -> Result<(), String> {
    use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
    let (dir, name) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let d = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        (d, path.file_name().map(|n| n.to_os_string()))
    };
    let ino = Inotify::init(InitFlags::IN_CLOEXEC).map_err(|e| format!("inotify: {e}"))?;
    ino.add_watch(
        &dir,
        F::IN_CLOSE_WRITE | F::IN_MOVED_TO | F::IN_CREATE | F::IN_DELETE | F::IN_MOVED_FROM,
    )
    .map_err(|e| format!("watching {}: {e}", dir.display()))?;
    std::thread::Builder::new()
        .name("agent-inotify".into())
        .spawn(move || {
            while let Ok(evs) = ino.read_events() {
                let hit = evs.iter().any(|e| match (&name, &e.name) {
                    (Some(n), Some(en)) => n == en,
                    (None, Some(en)) => en.to_string_lossy().ends_with(".toml"),
                    _ => false,
                });
                if hit && tx.send(Event::File).is_err() {
                    break;
                }
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(())
}

impl Agent {
    fn save(&mut self) {
        self.owned.pid = std::process::id();
        if let Err(e) = self.owned.save(&self.dir) {
            tracing::error!("saving {}: {e}", self.dir.display());
        }
    }

    fn note_changes(&self, lines: &[String]) {
        let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        s.changes.extend(lines.iter().cloned());
        let n = s.changes.len();
        if n > 50 {
            s.changes.drain(..n - 50);
        }
    }

    /// Writes the schedulers' rules files their `qos serve` children read.
    fn write_qos_files(&self) -> Vec<String> {
        let mut errs = Vec::new();
        for q in self.decl.qos.iter().filter(|q| q.scheduler()) {
            let p = Supervisor::qos_file(&self.dir, &q.iface);
            if std::fs::read_to_string(&p).ok().as_deref() != Some(q.file.as_str()) {
                if let Err(e) = std::fs::write(&p, &q.file) {
                    errs.push(format!("qos {}: writing {}: {e}", q.iface, p.display()));
                }
            }
        }
        errs
    }

    /// The declaration with the pods (`pods::effective`) and the nodes the
    /// API server listed (`cluster::with_found`): what a pass brings the
    /// data plane to.
    fn effective(&self) -> NodeDecl {
        self.effective_and_skipped().0
    }

    /// Takes a new declaration; the Node objects are listed from where it
    /// says (or no longer).
    fn set_decl(&mut self, d: NodeDecl) {
        let source = d.cluster.as_ref().and_then(|c| c.kubernetes.clone());
        let mut n = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if n.source != source {
            // Another server's nodes are not this one's.
            n.nodes.clear();
            n.error = None;
        }
        n.source = source;
        drop(n);
        self.decl = d;
    }

    /// `effective`, and why Node objects were left out (one line each).
    fn effective_and_skipped(&self) -> (NodeDecl, Vec<String>) {
        let mut d = pods::effective(&self.decl, &self.pods);
        let mut skipped = Vec::new();
        if let Some(c) = d.cluster.as_mut() {
            if c.kubernetes.is_some() {
                let found = self
                    .nodes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .nodes
                    .clone();
                let (merged, s) = crate::cluster::with_found(c, &found);
                *c = merged;
                skipped = s;
            }
        }
        (d, skipped)
    }

    fn reconcile(&mut self, why: &str) -> Pass {
        let t = Instant::now();
        let (decl, skipped) = self.effective_and_skipped();
        let mut pass: Pass = reconcile::dataplane(&decl, &mut self.owned);
        pass.errors.extend(skipped);
        pass.errors.extend(self.write_qos_files());
        let t1 = Instant::now();
        pass.changed
            .extend(self.sup.sync(&self.decl.services, &mut self.owned));
        pass.phases
            .push(("services".into(), t1.elapsed().as_secs_f64()));
        let secs = t.elapsed().as_secs_f64();
        for l in &pass.changed {
            tracing::info!(reason = why, "{l}");
        }
        // An error the last pass had too is logged once (a pass runs every
        // second); `status` shows every one.
        let before = self
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .errors
            .clone();
        for l in pass.errors.iter().filter(|l| !before.contains(l)) {
            tracing::error!(reason = why, "{l}");
        }
        if !pass.changed.is_empty() || why == "start" {
            self.save();
        }
        self.note_changes(&pass.changed);
        let status = self.status_now(&pass, secs);
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = status;
        pass
    }

    fn status_now(&self, pass: &Pass, secs: f64) -> Status {
        let prev = self
            .shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut decl = self.effective();
        let view = crate::reconcile::RouterView::read();
        let live_ports = view.ports;
        // A router left on `auto` is shown at the hook it picked.
        if let (Some(r), Some(kind)) = (decl.router.as_mut(), view.hook) {
            if r.hook == peregrine_dataplane::HookChoice::Auto {
                r.hook = peregrine_dataplane::HookChoice::Given(match kind {
                    "tc" => peregrine_bpf::Hook::TC,
                    _ => peregrine_bpf::Hook::Xdp(r.mode.unwrap_or_default()),
                });
            }
        }
        let router = decl.router.as_ref().map(|r| {
            let ports = live_ports.clone();
            RouterStatus {
                hook: view.hook.unwrap_or("-").to_string(),
                declared: r.ports.clone(),
                ports,
            }
        });
        let qos = decl
            .qos
            .iter()
            .map(|q| QosStatus {
                iface: q.iface.clone(),
                hook: q.hook().to_string(),
                rules: q.cfg.rules.len(),
                scheduler: q.scheduler(),
                live: crate::reconcile::policer_live(&q.iface, self.owned.netns_cookie),
            })
            .collect();
        let order = compose::ifaces(&decl)
            .into_iter()
            .map(|i| Order {
                stages: compose::stages_on(&decl, &i)
                    .into_iter()
                    .map(|s| format!("{} ({})", s.what, s.hook))
                    .collect(),
                iface: i,
            })
            .collect();
        let services = self.sup.status();
        Status {
            pid: std::process::id(),
            netns_cookie: self.owned.netns_cookie,
            config: self.opts.config.display().to_string(),
            ready: pass.errors.is_empty() && pass.waiting.is_empty() && self.sup.all_up(),
            reconciles: prev.reconciles + 1,
            repairs: prev.repairs + pass.repairs,
            errors: pass.errors.clone(),
            waiting: pass.waiting.clone(),
            changes: prev.changes,
            router,
            qos,
            order,
            services,
            pods: pods::status(&self.pods, &live_ports),
            last_reconcile_seconds: secs,
            last_reconcile_phases: pass.phases.clone(),
            kubernetes: decl
                .cluster
                .as_ref()
                .and_then(|c| c.kubernetes.as_ref())
                .map(|_| self.nodes.lock().unwrap_or_else(|e| e.into_inner()).clone()),
        }
    }

    /// Re-reads the declaration; a bad one is logged, line by line, and
    /// the running state kept.
    fn reload(&mut self) {
        match check::read(&self.opts.config, &*self.opts.check) {
            Ok(d) => {
                if d != self.decl {
                    tracing::info!("declaration changed: reconciling");
                    self.set_decl(d);
                    let _ = self.reconcile("declaration changed");
                }
            }
            Err(errs) => {
                for e in &errs {
                    tracing::error!("declaration refused, running state kept: {e}");
                }
                let mut s = self.shared.lock().unwrap_or_else(|e| e.into_inner());
                s.errors = errs;
            }
        }
    }

    /// Where `apply` writes `name`: over the file, or into the directory.
    fn target(&self, name: &str) -> Result<PathBuf, String> {
        if self.opts.config.is_dir() {
            let base = Path::new(name)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !base.ends_with(".toml") {
                return Err(format!(
                    "{name}: the agent reads *.toml files from its directory; name the file *.toml"
                ));
            }
            Ok(self.opts.config.join(base))
        } else {
            Ok(self.opts.config.clone())
        }
    }

    /// The whole declaration with `text` as `name` (the other files of a
    /// directory kept).
    fn with(&self, name: &str, text: &str) -> Result<NodeDecl, Vec<String>> {
        let target = self.target(name).map_err(|e| vec![e])?;
        let mut files = Vec::new();
        if self.opts.config.is_dir() {
            for f in decl::files_of(&self.opts.config)? {
                if f != target {
                    let t = std::fs::read_to_string(&f)
                        .map_err(|e| vec![format!("{}: {e}", f.display())])?;
                    files.push((f.display().to_string(), t));
                }
            }
        }
        files.push((name.to_string(), text.to_string()));
        check::parse_many(&files, &*self.opts.check)
    }

    fn handle(&mut self, req: Request) -> Reply {
        match req {
            Request::Status => {
                let s = self
                    .shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                Reply {
                    ok: true,
                    lines: Vec::new(),
                    status: serde_json::to_value(s).ok(),
                }
            }
            Request::Diff { name, text } => match self.with(&name, &text) {
                Ok(d) => Reply {
                    ok: true,
                    lines: crate::diff::diff(&self.decl, &d),
                    status: None,
                },
                Err(lines) => Reply {
                    ok: false,
                    lines,
                    status: None,
                },
            },
            req @ (Request::PodAdd { .. }
            | Request::PodDel { .. }
            | Request::PodCheck { .. }
            | Request::PodGc { .. }) => podreq::handle(self, req),
            Request::Apply { name, text } => {
                let d = match self.with(&name, &text) {
                    Ok(d) => d,
                    Err(lines) => {
                        for l in &lines {
                            tracing::error!("apply refused, running state kept: {l}");
                        }
                        return Reply {
                            ok: false,
                            lines,
                            status: None,
                        };
                    }
                };
                let lines = crate::diff::diff(&self.decl, &d);
                let target = match self.target(&name) {
                    Ok(t) => t,
                    Err(e) => {
                        return Reply {
                            ok: false,
                            lines: vec![e],
                            status: None,
                        }
                    }
                };
                let tmp = target.with_extension("toml.tmp");
                if let Err(e) =
                    std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, &target))
                {
                    return Reply {
                        ok: false,
                        lines: vec![format!("writing {}: {e}", target.display())],
                        status: None,
                    };
                }
                self.set_decl(d);
                let _ = self.reconcile("apply");
                let s = self
                    .shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let mut out = lines;
                out.extend(s.errors.iter().map(|e| format!("error: {e}")));
                out.extend(s.waiting.iter().map(|e| format!("waiting: {e}")));
                Reply {
                    ok: s.errors.is_empty(),
                    lines: out,
                    status: None,
                }
            }
        }
    }
}

/// The pod requests' view of the agent (`podreq::handle`).
impl podreq::Host for Agent {
    fn declared(&self) -> &NodeDecl {
        &self.decl
    }
    fn registry(&mut self) -> &mut Registry {
        &mut self.pods
    }
    fn reconcile_now(&mut self, why: &str) -> Pass {
        self.reconcile(why)
    }
    fn netns_cookie(&self) -> u64 {
        self.owned.netns_cookie
    }
}
