//! The AF_XDP invoker: `dispatch.bpf.c` sends each function's UDP port to the
//! AF_XDP sockets of the RX queue the request arrived on; pinned worker
//! threads turn each request frame into its reply in place and send it back
//! from the same UMEM frame. Every bad request is counted, never fatal.
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use peregrine_bpf::dispatch::{slot, DispatchProgram, Policy};
use peregrine_bpf::{XdpMode, XdpProgram};
use peregrine_dataplane::RouterAwareLink;
use peregrine_host::netns;
use peregrine_wire::parse_udp_frame;
use peregrine_xsk::{FrameHandler, Verdict, Workers, Xsk, XskConfig, XskStatsReader};

use crate::addrs::{LocalAddrs, Refusal};
use crate::functions::Registry;
use crate::live::{Live, LiveView, Routes};

#[derive(Debug, thiserror::Error)]
pub enum InvokerError {
    #[error(transparent)]
    Bpf(#[from] peregrine_bpf::BpfError),
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    #[error(transparent)]
    Xsk(#[from] peregrine_xsk::XskError),
    #[error("invoker: {0}")]
    Config(String),
    /// A resource limit refused it (the message names the limit).
    #[error("{0}")]
    Limit(String),
}

#[derive(Debug, Clone)]
pub struct InvokerConfig {
    /// RX queues served (0..queues).
    pub queues: u32,
    /// Worker sockets per queue.
    pub workers: u32,
    /// CPUs the workers are pinned to, round robin.
    pub cpus: Vec<usize>,
    pub xsk: XskConfig,
    pub policy: Policy,
    /// How the dispatcher is attached: native (driver) or generic (skb)
    /// XDP; sockets on a generic program run in the kernel's skb mode.
    pub xdp_mode: XdpMode,
}

impl Default for InvokerConfig {
    fn default() -> Self {
        InvokerConfig {
            queues: 1,
            workers: 1,
            cpus: vec![],
            xsk: XskConfig::default(),
            policy: Policy::RoundRobin,
            xdp_mode: XdpMode::Native,
        }
    }
}

/// Invoker counters (all workers).
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub replies: AtomicU64,
    /// Frames that failed parsing (lengths, headers): dropped.
    pub malformed: AtomicU64,
    /// Frames whose IPv4 header or UDP checksum is neither valid nor the
    /// partial pseudo-header value a local sender leaves: dropped.
    pub bad_checksum: AtomicU64,
    /// A port without a function (dispatch and registry disagree): dropped.
    pub unknown_port: AtomicU64,
    /// The function returned an error: dropped.
    pub failed: AtomicU64,
    /// The reply did not fit in the UMEM frame, or the request was longer
    /// than the mmsg backend's 2 KiB receive slot: dropped.
    pub too_large: AtomicU64,
    /// Replies made but not sent: the TX ring stayed full (AF_XDP), or the
    /// kernel refused the send for a reason other than a broadcast
    /// destination (socket backends).
    pub tx_ring_full: AtomicU64,
    /// Sent to a broadcast or multicast MAC or IP address: not answered,
    /// or one request would draw a reply from every server (amplification).
    pub not_unicast: AtomicU64,
    /// Sent to another host's MAC or IP address (AF_XDP sees every frame
    /// on the link; the kernel drops these before any socket).
    pub not_ours: AtomicU64,
    /// From a source no unicast host has (broadcast, multicast,
    /// unspecified, loopback, ours): a reply would be reflected.
    pub bad_source: AtomicU64,
    /// From UDP source port 0: no reply can go there.
    pub source_port_zero: AtomicU64,
    /// First fragments of requests larger than one frame, to a function's
    /// port: counted and dropped by the XDP dispatcher (AF_XDP only).
    pub fragments: AtomicU64,
    /// The AF_XDP sockets' own drop counters (XDP_STATISTICS, summed over
    /// sockets; AF_XDP only): requests the kernel could not hand over.
    pub xsk: XskDrops,
    /// Requests answered, per function id (sent, or counted in tx_ring_full).
    pub per_function: Vec<AtomicU64>,
}

/// The kernel's per-socket AF_XDP counters, summed over the invoker's
/// sockets (copied in by the invoker every 100 ms and on `sync_counters`).
#[derive(Debug, Default)]
pub struct XskDrops {
    /// Dropped for want of a free frame (fill ring empty) and other reasons.
    pub rx_dropped: AtomicU64,
    /// Dropped because the socket's RX ring was full (workers behind).
    pub rx_ring_full: AtomicU64,
    /// Times the kernel found the fill ring empty (per UMEM; in copy mode
    /// each is also in rx_dropped).
    pub rx_fill_ring_empty_descs: AtomicU64,
    /// Replies the kernel refused from the TX ring (invalid descriptors).
    pub tx_invalid_descs: AtomicU64,
}

impl Counters {
    /// Counters with room for every function id a live registry may use.
    pub fn for_live() -> Counters {
        Counters {
            per_function: (0..peregrine_bpf::dispatch::MAX_FUNCS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            ..Default::default()
        }
    }

    /// Every reason a request goes unanswered, with its counter, in the
    /// order `faas serve` shows them (table, JSON and Prometheus alike).
    /// Each request received ends in `replies` or exactly one of the
    /// reasons up to `too_large` (`tx_ring_full`: made but not sent);
    /// `fragments` and the `xsk_` counters never reached a worker.
    pub fn drop_reasons(&self) -> [(&'static str, &AtomicU64); 15] {
        [
            ("malformed", &self.malformed),
            ("bad_checksum", &self.bad_checksum),
            ("not_unicast", &self.not_unicast),
            ("not_ours", &self.not_ours),
            ("bad_source", &self.bad_source),
            ("source_port_zero", &self.source_port_zero),
            ("unknown_port", &self.unknown_port),
            ("failed", &self.failed),
            ("too_large", &self.too_large),
            ("tx_ring_full", &self.tx_ring_full),
            ("fragments", &self.fragments),
            ("xsk_rx_dropped", &self.xsk.rx_dropped),
            ("xsk_rx_ring_full", &self.xsk.rx_ring_full),
            ("xsk_tx_invalid_descs", &self.xsk.tx_invalid_descs),
            // Not a drop of its own (see XskDrops) but why rx_dropped grew.
            (
                "xsk_rx_fill_ring_empty_descs",
                &self.xsk.rx_fill_ring_empty_descs,
            ),
        ]
    }

    /// Counts a refused request under its reason.
    pub fn refused(&self, why: Refusal) {
        let c = match why {
            Refusal::NotUnicast => &self.not_unicast,
            Refusal::NotOurs => &self.not_ours,
            Refusal::BadSource => &self.bad_source,
            Refusal::SourcePortZero => &self.source_port_zero,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

pub struct AfXdpInvoker {
    /// First field, so it stops first: it reads the sockets and the map.
    housekeeping: Housekeeping,
    /// The functions served, changed while serving through `Routes`.
    pub live: Arc<Live>,
    /// Every socket's (queue, worker, fd), for a new function's slots.
    sockets: Vec<(u32, u32, RawFd)>,
    workers_per_queue: u32,
    policy: Policy,
    /// Before the program, so the workers stop before the program goes.
    _workers: Workers,
    pub prog: DispatchProgram,
    /// The dispatcher on the interface; a tc router facing it delivers
    /// through the veth while it runs (see `RouterAwareLink`).
    _link: RouterAwareLink,
    pub counters: Arc<Counters>,
    /// "zero-copy", "copy" (native XDP) or "skb" (generic XDP), as bound.
    pub mode: &'static str,
    /// UMEM and rings of all sockets.
    pub memory_bytes: usize,
}

/// Requests a worker takes from its RX ring at a time.
const BATCH: u32 = 256;

/// Answers one request in `buf[..len]`; the verdict says what to send.
/// Public for the fuzz targets (fuzz/fuzz_targets/invoker_reply.rs), not
/// an API.
#[doc(hidden)]
pub fn handle(
    registry: &Registry,
    local: &LocalAddrs,
    buf: &mut [u8],
    len: usize,
    scratch: &mut Vec<u8>,
    c: &Counters,
) -> Verdict {
    c.requests.fetch_add(1, Ordering::Relaxed);
    // Parsed (and its checksums checked) once; the reply is written from
    // what the parse found.
    let parsed = parse_udp_frame(&buf[..len]);
    // Only what the kernel's own sockets would answer (see addrs).
    if let Err(why) = parsed.as_ref().map_or(Ok(()), |req| local.check(req)) {
        c.refused(why);
        return Verdict::Drop;
    }
    let (id, mut spec) = match parsed {
        Ok(req) => match (registry.get(req.dst_port), req.reply_spec(0)) {
            (Some(d), Ok(spec)) => {
                scratch.clear();
                if d.call(req.payload, scratch).is_err() {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                    return Verdict::Drop;
                }
                (d.id, spec)
            }
            (None, _) => {
                c.unknown_port.fetch_add(1, Ordering::Relaxed);
                return Verdict::Drop;
            }
            (_, Err(_)) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                return Verdict::Drop;
            }
        },
        Err(peregrine_wire::FrameError::BadChecksum(_)) => {
            c.bad_checksum.fetch_add(1, Ordering::Relaxed);
            return Verdict::Drop;
        }
        Err(_) => {
            c.malformed.fetch_add(1, Ordering::Relaxed);
            return Verdict::Drop;
        }
    };
    spec.frame_len += scratch.len();
    match spec.write_into(buf, scratch).map(|()| spec.frame_len) {
        Ok(n) => {
            // `replies` is counted once the TX ring took the frame.
            if let Some(p) = c.per_function.get(id as usize) {
                p.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Transmit(n)
        }
        Err(_) => {
            c.too_large.fetch_add(1, Ordering::Relaxed);
            Verdict::Drop
        }
    }
}

/// The interface's addresses as last read, with a version that moves on
/// every change so workers notice with one atomic load per batch.
struct AddrTable {
    current: RwLock<Arc<LocalAddrs>>,
    version: AtomicU64,
}

impl AddrTable {
    fn get(&self) -> Arc<LocalAddrs> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, l: LocalAddrs) {
        if *self.get() != l {
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(l);
            self.version.fetch_add(1, Ordering::Release);
        }
    }
}

/// One worker's state: its view of the live registry, the shared counters,
/// the interface's addresses, the buffer a function writes its reply into,
/// and the batch's answers.
struct InvokerWorker {
    view: LiveView,
    counters: Arc<Counters>,
    table: Arc<AddrTable>,
    local: Arc<LocalAddrs>,
    version: u64,
    scratch: Vec<u8>,
    /// Replies made in the current batch (sent, or dropped for want of TX room).
    answered: u64,
}

impl FrameHandler for InvokerWorker {
    fn frame(&mut self, buf: &mut [u8], len: usize) -> Verdict {
        let v = handle(
            &self.view.registry,
            &self.local,
            buf,
            len,
            &mut self.scratch,
            &self.counters,
        );
        self.answered += u64::from(matches!(v, Verdict::Transmit(_)));
        v
    }

    fn end_batch(&mut self, _xsk: &Xsk, batch: peregrine_xsk::Result<(u32, u32)>) {
        // A deploy is taken up between batches; a batch short of BATCH
        // after it emptied the ring: nothing steered before an undeploy is
        // left.
        self.view.refresh();
        if matches!(batch, Ok((n, _)) if n < BATCH) {
            self.view.drained();
        }
        let v = self.table.version.load(Ordering::Acquire);
        if v != self.version {
            self.local = self.table.get();
            self.version = v;
        }
        if let Ok((received, sent)) = batch {
            if received > 0 {
                let c = &self.counters;
                c.replies.fetch_add(u64::from(sent), Ordering::Relaxed);
                c.tx_ring_full
                    .fetch_add(self.answered - u64::from(sent), Ordering::Relaxed);
            }
        }
        self.answered = 0;
    }
}

/// What the invoker reads from the kernel besides requests: the addresses
/// of the interface, the dispatcher's fragment counts and the sockets'
/// XDP_STATISTICS.
struct KernelView {
    ns: Option<String>,
    iface: String,
    table: Arc<AddrTable>,
    counters: Arc<Counters>,
    dispatch: peregrine_bpf::dispatch::MapHandle,
    /// Every function id may have been used (deploys come and go).
    live: Arc<Live>,
    sockets: Vec<XskStatsReader>,
}

impl KernelView {
    /// Copies the kernel's counters into `counters` (they are totals, so
    /// stored, not added).
    fn sync_counters(&self) {
        let used = self.live.ids_used();
        let frags: u64 = (0..used)
            .filter_map(|id| peregrine_bpf::dispatch::read_stats(&self.dispatch, id).ok())
            .map(|s| s.fragments)
            .sum();
        self.counters.fragments.store(frags, Ordering::Relaxed);
        let mut t = [0u64; 4];
        for s in &self.sockets {
            if let Ok(st) = s.read() {
                t[0] += st.rx_dropped;
                t[1] += st.rx_ring_full;
                t[2] += st.tx_invalid_descriptors;
                // One fill ring per UMEM: its sharers report the same count.
                if s.owns_umem() {
                    t[3] += st.rx_fill_ring_empty_descriptors;
                }
            }
        }
        let x = &self.counters.xsk;
        x.rx_dropped.store(t[0], Ordering::Relaxed);
        x.rx_ring_full.store(t[1], Ordering::Relaxed);
        x.tx_invalid_descs.store(t[2], Ordering::Relaxed);
        x.rx_fill_ring_empty_descs.store(t[3], Ordering::Relaxed);
    }

    /// Re-reads the interface's addresses (this thread is in its namespace).
    fn reread_addresses(&self) {
        if let Ok(l) = LocalAddrs::read(&self.iface) {
            self.table.set(l);
        }
    }
}

/// A thread that keeps `KernelView`'s copies current: counters every
/// 100 ms, addresses every second. Stopped and joined on drop.
struct Housekeeping {
    view: Arc<KernelView>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// How often the interface's addresses are re-read: an address added to a
/// running server is answered within this long.
pub const ADDRESS_REFRESH: Duration = Duration::from_secs(1);

impl Housekeeping {
    fn start(view: KernelView) -> Result<Housekeeping, InvokerError> {
        let view = Arc::new(view);
        let stop = Arc::new(AtomicBool::new(false));
        let (v, st) = (view.clone(), stop.clone());
        let thread = std::thread::Builder::new().spawn(move || {
            // This thread stays in the server's namespace for its life.
            let _in_ns = match &v.ns {
                Some(n) => match netns::NetnsGuard::enter(n) {
                    Ok(g) => Some(g),
                    Err(_) => return,
                },
                None => None,
            };
            let tick = Duration::from_millis(100);
            let per_refresh = (ADDRESS_REFRESH.as_millis() / tick.as_millis()) as u32;
            let mut n = 0u32;
            while !st.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                v.sync_counters();
                n += 1;
                if n.is_multiple_of(per_refresh) {
                    v.reread_addresses();
                }
            }
        });
        let thread = thread.map_err(|e| {
            InvokerError::Limit(format!(
                "AF_XDP on {}: {}",
                view.iface,
                peregrine_host::limits::thread_refused("starting its housekeeping thread", &e)
            ))
        })?;
        Ok(Housekeeping {
            view,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Housekeeping {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl AfXdpInvoker {
    /// Copies the kernel's counters (fragments, XDP_STATISTICS) into
    /// `counters` now, e.g. before a final report (they are otherwise at
    /// most 100 ms old).
    pub fn sync_counters(&self) {
        self.housekeeping.view.sync_counters();
    }

    /// The interface's addresses as the workers see them.
    pub fn local_addrs(&self) -> LocalAddrs {
        (*self.housekeeping.view.table.get()).clone()
    }

    /// Serves `registry` on `ns:iface` (None: this namespace).
    pub fn start(
        ns: Option<&str>,
        iface: &str,
        registry: Registry,
        cfg: InvokerConfig,
    ) -> Result<AfXdpInvoker, InvokerError> {
        use peregrine_bpf::dispatch::{MAX_QUEUES, MAX_SOCKS};
        if cfg.queues == 0 || cfg.queues > MAX_QUEUES || cfg.workers == 0 || cfg.workers > MAX_SOCKS
        {
            return Err(InvokerError::Config(format!(
                "queues 1..={MAX_QUEUES} and workers per queue 1..={MAX_SOCKS} (got {} and {})",
                cfg.queues, cfg.workers
            )));
        }
        // A request can only reach an AF_XDP socket bound to the queue it
        // arrived on: serving fewer queues than the device has would lose
        // every request hashed to the others.
        let count_rx = || peregrine_host::netdev::rx_queues_here(iface);
        let device_queues = match ns {
            Some(n) => netns::with_sysfs(n, count_rx)?,
            None => count_rx(),
        };
        if device_queues > cfg.queues {
            return Err(InvokerError::Config(format!(
                "{iface} has {device_queues} RX queues; serve all of them (--queues {device_queues}) or reduce them, or requests arriving on the others are lost"
            )));
        }
        // Read at start, then every ADDRESS_REFRESH by the housekeeping
        // thread: requests are answered only to what the interface has now.
        let local =
            netns::run_in_opt(ns, || LocalAddrs::read(iface))?.map_err(InvokerError::Config)?;
        if local.mac.is_none() {
            return Err(InvokerError::Config(format!(
                "{iface} has no Ethernet address: the invoker answers only frames sent to it"
            )));
        }
        let table = Arc::new(AddrTable {
            current: RwLock::new(Arc::new(local)),
            version: AtomicU64::new(0),
        });
        let prog = DispatchProgram::load()?;
        // From here a tc router whose port faces `iface` delivers through
        // the veth (bpf_redirect_peer would skip the dispatcher), and on
        // every way out, errors included, as before.
        let link = netns::run_in_opt(ns, || prog.attach(iface, cfg.xdp_mode))??;
        let link = RouterAwareLink::new(link, ns);
        let counters = Arc::new(Counters::for_live());
        let mut stats = Vec::new();
        let mut fds = Vec::new();
        let live = Live::new(registry);
        let registry = live.current();
        let mut workers = Workers::new();
        let mut mode = "copy";
        let mut memory = 0;
        for q in 0..cfg.queues {
            let sockets =
                netns::run_in_opt(ns, || Xsk::open_queue(iface, q, cfg.workers, cfg.xsk))??;
            for (w, xsk) in (0..cfg.workers).zip(sockets) {
                mode = match cfg.xdp_mode {
                    XdpMode::Generic => "skb",
                    XdpMode::Native => xsk.mode().as_str(),
                };
                memory += xsk.memory_bytes();
                stats.push(xsk.stats_reader());
                fds.push((q, w, xsk.fd()));
                // One socket serves every function on its queue.
                for (_, id, _) in registry.iter() {
                    prog.register_socket(slot(id, q, w), xsk.fd())?;
                }
                let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[workers.len() % cfg.cpus.len()]);
                let handler = InvokerWorker {
                    view: live.view(),
                    counters: counters.clone(),
                    local: table.get(),
                    version: table.version.load(Ordering::Acquire),
                    table: table.clone(),
                    scratch: Vec::with_capacity(2048),
                    answered: 0,
                };
                workers.try_spawn(xsk, cpu, BATCH, handler)?;
            }
        }
        // Workers are up: route the ports to them.
        for (port, id, _) in registry.iter() {
            prog.set_function(id, port, cfg.workers, cfg.policy)?;
        }
        let housekeeping = Housekeeping::start(KernelView {
            ns: ns.map(str::to_string),
            iface: iface.to_string(),
            table,
            counters: counters.clone(),
            dispatch: prog.stats_map()?,
            live: live.clone(),
            sockets: stats,
        })?;
        Ok(AfXdpInvoker {
            housekeeping,
            live,
            sockets: fds,
            workers_per_queue: cfg.workers,
            policy: cfg.policy,
            _workers: workers,
            prog,
            _link: link,
            counters,
            mode,
            memory_bytes: memory,
        })
    }
}

impl Routes for AfXdpInvoker {
    fn open(&self, _port: u16) -> Result<Option<std::net::UdpSocket>, String> {
        Ok(None)
    }

    fn route(&self, port: u16, id: u32) -> Result<(), String> {
        for &(q, w, fd) in &self.sockets {
            self.prog
                .register_socket(slot(id, q, w), fd)
                .map_err(|e| e.to_string())?;
        }
        self.prog
            .set_function(id, port, self.workers_per_queue, self.policy)
            .map_err(|e| e.to_string())
    }

    fn unroute(&self, port: u16) -> Result<(), String> {
        self.prog.remove_port(port).map_err(|e| e.to_string())
    }
}
