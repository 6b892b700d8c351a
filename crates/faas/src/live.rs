//! Functions deployed into a running server. The registry the workers
//! serve is versioned: a change publishes a new `Registry` and each worker
//! picks it up between batches (`LiveView::refresh`) and says which
//! version it runs. A change is acknowledged only once every worker runs
//! it, so a request a worker takes after the acknowledgement is answered by
//! the new version.
//!
//! - deploy on a free port: the registry with the function is published and
//!   taken up by every worker, then the port is routed to the workers
//!   (XDP dispatch map; socket backends open their socket first);
//! - redeploy (replace): the new registry is published and taken up; the
//!   port's route is unchanged, so no request in flight is lost: each is
//!   answered by the version its worker runs when it takes it;
//! - undeploy: the port is unrouted first (new requests go to the kernel),
//!   the workers answer what they already hold (an AF_XDP worker reports an
//!   empty receive ring, a socket worker reads its socket dry), and only
//!   then is the function taken out.
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::functions::{Deployed, Function, Registry};

/// How long a change waits for every worker to take it up.
pub const TAKE_UP: Duration = Duration::from_secs(2);

/// One worker's report: the registry version it runs, and the last version
/// after which it found its receive queue empty.
#[derive(Default)]
struct WorkerMark {
    runs: AtomicU64,
    drained: AtomicU64,
}

/// The registry a server's workers serve, versioned.
pub struct Live {
    current: RwLock<Arc<Registry>>,
    version: AtomicU64,
    workers: Mutex<Vec<Arc<WorkerMark>>>,
    /// One more than the highest function id ever published.
    ids_used: AtomicU32,
    /// One change at a time.
    changing: Mutex<()>,
}

/// A worker's copy of the registry; `refresh` between batches.
pub struct LiveView {
    live: Arc<Live>,
    mark: Arc<WorkerMark>,
    version: u64,
    pub registry: Arc<Registry>,
}

impl LiveView {
    /// Takes up the current registry if it changed; returns the one it
    /// replaced, if any (socket workers drain what that one served).
    pub fn refresh(&mut self) -> Option<Arc<Registry>> {
        let v = self.live.version.load(Ordering::Acquire);
        if v == self.version {
            return None;
        }
        let next = self.live.current();
        let old = std::mem::replace(&mut self.registry, next);
        self.version = v;
        self.mark.runs.store(v, Ordering::Release);
        Some(old)
    }

    /// Says the worker found its queue empty (or emptied it) after taking
    /// up its version.
    pub fn drained(&self) {
        if self.mark.drained.load(Ordering::Relaxed) != self.version {
            self.mark.drained.store(self.version, Ordering::Release);
        }
    }
}

/// What a backend does for a change besides the registry.
pub trait Routes {
    /// Whether this server takes changes at all (a one-line reason if not).
    fn changeable(&self) -> Result<(), String> {
        Ok(())
    }
    /// Before a function goes on a free port: a socket backend binds the
    /// port (the reason it cannot is the deploy's refusal); None otherwise.
    fn open(&self, port: u16) -> Result<Option<UdpSocket>, String>;
    /// Sends `port`'s requests to the workers, as function `id`.
    fn route(&self, port: u16, id: u32) -> Result<(), String>;
    /// Stops sending `port`'s requests to the workers.
    fn unroute(&self, port: u16) -> Result<(), String>;
}

/// What a deploy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub id: u32,
    pub generation: u64,
    /// The port had a function, now replaced.
    pub replaced: Option<String>,
    /// Registry version every worker runs.
    pub version: u64,
}

impl Live {
    pub fn new(registry: Registry) -> Arc<Live> {
        Arc::new(Live {
            ids_used: AtomicU32::new(ids_used(&registry)),
            current: RwLock::new(Arc::new(registry)),
            version: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            changing: Mutex::new(()),
        })
    }

    pub fn current(&self) -> Arc<Registry> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Function ids 0..this may have been used while serving.
    pub fn ids_used(&self) -> u32 {
        self.ids_used.load(Ordering::Relaxed)
    }

    /// A view for a new worker, running the current version.
    pub fn view(self: &Arc<Live>) -> LiveView {
        let version = self.version.load(Ordering::Acquire);
        let mark = Arc::new(WorkerMark {
            runs: AtomicU64::new(version),
            drained: AtomicU64::new(0),
        });
        self.workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(mark.clone());
        LiveView {
            live: self.clone(),
            mark,
            version,
            registry: self.current(),
        }
    }

    /// Publishes `r` (or the current registry again) as a new version.
    fn publish(&self, r: Option<Registry>) -> u64 {
        let mut cur = self.current.write().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = r {
            self.ids_used.fetch_max(ids_used(&r), Ordering::Relaxed);
            *cur = Arc::new(r);
        }
        self.version.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Waits until every worker runs version `v` (and, with `drained`,
    /// found its queue empty after taking it up).
    fn wait(&self, v: u64, drained: bool) -> Result<(), String> {
        let marks = self
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let until = Instant::now() + TAKE_UP;
        loop {
            let behind = marks
                .iter()
                .filter(|m| {
                    m.runs.load(Ordering::Acquire) < v
                        || (drained && m.drained.load(Ordering::Acquire) < v)
                })
                .count();
            if behind == 0 {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "{behind} of {} worker(s) did not take up the change within {TAKE_UP:?}",
                    marks.len()
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Puts `f` on `port`: a new deployment, or the replacement of the one
    /// there. Acknowledged (Ok) once every worker runs it; on error nothing
    /// changed.
    pub fn deploy(
        &self,
        routes: &dyn Routes,
        port: u16,
        f: Arc<dyn Function>,
    ) -> Result<Deployment, String> {
        routes.changeable()?;
        let _one = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = (*self.current()).clone();
        if let Some(old) = next.get(port).map(|d| d.function.name().to_string()) {
            let id = next.replace(port, f).expect("the port has a function");
            let generation = next.get(port).expect("just put").generation;
            let version = self.publish(Some(next));
            self.wait(version, false)?;
            return Ok(Deployment {
                id,
                generation,
                replaced: Some(old),
                version,
            });
        }
        let socket = routes.open(port)?;
        let id = next.add(port, f)?;
        if let Some(s) = socket {
            next.set_socket(port, s)?;
        }
        let generation = next.get(port).expect("just added").generation;
        let before = self.current();
        let version = self.publish(Some(next));
        // Workers know the function before any request for it reaches them.
        let routed = self
            .wait(version, false)
            .and_then(|()| routes.route(port, id));
        if let Err(e) = routed {
            let _ = routes.unroute(port);
            self.publish(Some((*before).clone()));
            return Err(e);
        }
        Ok(Deployment {
            id,
            generation,
            replaced: None,
            version,
        })
    }

    /// Takes the function off `port` once its workers have answered what
    /// they hold for it; returns it.
    pub fn undeploy(&self, routes: &dyn Routes, port: u16) -> Result<Arc<Deployed>, String> {
        routes.changeable()?;
        let _one = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let cur = self.current();
        if cur.get(port).is_none() {
            return Err(format!("port {port} has no function"));
        }
        routes.unroute(port)?;
        // A request the dispatcher steered just before it was unrouted is
        // on its way to a receive ring for a few microseconds more.
        std::thread::sleep(Duration::from_millis(1));
        let v = self.publish(None);
        // A worker that never finds its queue short (saturated) has had
        // TAKE_UP to answer what it held; the function goes either way, so
        // that an unrouted port is never left half undeployed.
        let _ = self.wait(v, true);
        let mut next = (*cur).clone();
        let gone = next.remove(port).expect("checked above");
        let v = self.publish(Some(next));
        self.wait(v, false)?;
        Ok(gone)
    }
}

/// One more than the highest id in `r`.
fn ids_used(r: &Registry) -> u32 {
    r.iter().map(|(_, id, _)| id + 1).max().unwrap_or(0)
}
