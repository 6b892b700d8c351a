//! The stack of one interface: its XDP steering, one AF_XDP socket per RX
//! queue, the bound sockets, next hops and counters, and the service
//! thread (netlink work, waking, draining RX rings no socket is reading).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::collections::{HashMap, VecDeque};
use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, Weak};
use std::task::Waker;
use std::time::{Duration, Instant};

use peregrine_bpf::stack::{unspecified_like, SteerProgram, SteerStats};
use peregrine_bpf::{XdpMode, XdpProgram};
use peregrine_dataplane::RouterAwareLink;
use peregrine_host::netdev::rx_queues_here;
use peregrine_host::netns::with_sysfs_here;
use peregrine_host::nl::{watch_here, LinkInfo, NetlinkHere, NlEvent, NlWatch};
use peregrine_io::RecvMeta;
use peregrine_wire::{ip, MacAddr, UdpFrameSpec, UDP_HLEN};
use peregrine_xsk::{Verdict, Xsk, XskConfig, XskStatistics};

use crate::counters::{Counters, StackCounters};
use crate::error::{Result, StackError};
use crate::neigh::{Held, NextHops, Route};
use crate::rx::classify;

/// How a stack is set up.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// The interface (in the calling thread's network namespace).
    pub iface: String,
    /// RX queues to serve (None: every RX queue the interface has).
    pub queues: Option<u32>,
    /// The AF_XDP sockets' UMEM and rings.
    pub xsk: XskConfig,
    /// Most frames one RX or TX batch moves.
    pub batch: u32,
    /// Datagrams a socket's receive queue holds before it drops.
    pub socket_queue: usize,
    /// Datagrams held per destination while its next hop resolves.
    pub hold: usize,
    /// How long a held datagram waits for its next hop.
    pub resolve_timeout: Duration,
    /// Native (driver) XDP by default; generic for devices without it.
    pub xdp_mode: XdpMode,
}

impl StackConfig {
    pub fn new(iface: &str) -> StackConfig {
        StackConfig {
            iface: iface.into(),
            queues: None,
            xsk: XskConfig::default(),
            batch: 64,
            socket_queue: 4096,
            hold: 64,
            resolve_timeout: Duration::from_secs(3),
            xdp_mode: XdpMode::Native,
        }
    }
}

/// The XDP side's counters: the steering program's and the AF_XDP
/// sockets' (summed over queues).
#[derive(Debug, Clone, Copy, Default)]
pub struct XdpCounters {
    pub steer: SteerStats,
    pub xsk: XskStatistics,
}

/// A datagram waiting in a socket's receive queue.
pub(crate) struct Queued {
    pub(crate) from: SocketAddr,
    pub(crate) data: Vec<u8>,
}

pub(crate) struct SockQueue {
    pub(crate) datagrams: VecDeque<Queued>,
    /// Buffers of datagrams already read, reused.
    pub(crate) spare: Vec<Vec<u8>>,
    pub(crate) waker: Option<Waker>,
}

/// What the stack and a socket share: its receive queue.
pub(crate) struct SocketShared {
    pub(crate) local: SocketAddr,
    pub(crate) queue: Mutex<SockQueue>,
    pub(crate) arrived: Condvar,
}

impl SocketShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, SockQueue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a drain puts datagrams for the socket that runs it: straight
/// into the caller's buffers (one copy, UMEM to caller).
pub(crate) struct Direct<'a, 'b> {
    pub(crate) me: &'a SocketShared,
    pub(crate) bufs: &'a mut [IoSliceMut<'b>],
    pub(crate) meta: &'a mut [RecvMeta],
    pub(crate) got: usize,
}

pub(crate) struct Inner {
    pub(crate) iface: String,
    pub(crate) ifindex: u32,
    pub(crate) link: Mutex<LinkInfo>,
    pub(crate) prog: SteerProgram,
    pub(crate) queues: Vec<Mutex<Xsk>>,
    fds: Vec<RawFd>,
    pub(crate) bindings: RwLock<HashMap<SocketAddr, Arc<SocketShared>>>,
    pub(crate) next_hops: Mutex<NextHops>,
    pub(crate) nl: Mutex<NetlinkHere>,
    pub(crate) counters: Counters,
    events: Mutex<Vec<NlEvent>>,
    pub(crate) send_waiters: Mutex<Vec<Waker>>,
    pub(crate) cfg: StackConfig,
    stop: AtomicBool,
}

/// A mutex's guard; a holder that panicked leaves counts and queues, not
/// broken invariants, so poisoning is ignored.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether every socket of `bindings` (there is one at least) has an async
/// reader waiting.
fn all_readers_waiting(bindings: &HashMap<SocketAddr, Arc<SocketShared>>) -> bool {
    !bindings.is_empty() && bindings.values().all(|s| s.lock().waker.is_some())
}

/// The stack of one interface. Dropping it stops the service thread and
/// detaches the program (sockets still open keep the maps, not the hook).
pub struct Stack {
    pub(crate) inner: Arc<Inner>,
    service: Option<std::thread::JoinHandle<()>>,
    _watch: NlWatch,
    /// The steering program; a tc router facing the interface delivers
    /// through the veth while it runs (see `RouterAwareLink`).
    _link: RouterAwareLink,
}

impl Stack {
    /// Opens the stack on `cfg.iface` in the calling thread's namespace.
    pub fn open(cfg: StackConfig) -> Result<Stack> {
        let iface = cfg.iface.clone();
        let ifindex = peregrine_bpf::link::ifindex(&iface)?;
        let nl = NetlinkHere::open()?;
        let link = nl.link_info(ifindex)?;
        let queues = match cfg.queues {
            Some(q) => q,
            // The namespace's own sysfs: the calling thread may have
            // entered the namespace without its mounts.
            None => with_sysfs_here(|| rx_queues_here(&iface))?.max(1),
        };
        if queues == 0 || queues > peregrine_bpf::stack::MAX_QUEUES {
            return Err(StackError::Config(format!(
                "{queues} queues on {iface}: 1 to {}",
                peregrine_bpf::stack::MAX_QUEUES
            )));
        }
        let prog = SteerProgram::load()?;
        let mut xsks = Vec::new();
        let mut fds = Vec::new();
        for q in 0..queues {
            let x = Xsk::open(&iface, q, cfg.xsk)?;
            prog.register_socket(q, x.fd())?;
            fds.push(x.fd());
            xsks.push(Mutex::new(x));
        }
        let inner = Arc::new(Inner {
            iface: iface.clone(),
            ifindex,
            link: Mutex::new(link),
            prog,
            queues: xsks,
            fds,
            bindings: RwLock::new(HashMap::new()),
            next_hops: Mutex::new(NextHops::default()),
            nl: Mutex::new(nl),
            counters: Counters::default(),
            events: Mutex::new(Vec::new()),
            send_waiters: Mutex::new(Vec::new()),
            cfg,
            stop: AtomicBool::new(false),
        });
        // Subscribed before the table is read: no change falls between.
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        let watch = watch_here(move |ev| {
            if let Some(i) = weak.upgrade() {
                lock(&i.events).push(ev);
            }
        })?;
        for n in lock(&inner.nl).neighbours(ifindex)? {
            lock(&inner.next_hops).neighbour(&n);
        }
        let attached = RouterAwareLink::new(inner.prog.attach(&iface, inner.cfg.xdp_mode)?, None);
        let svc = inner.clone();
        let service = std::thread::Builder::new()
            .name(format!("stack-{iface}"))
            .spawn(move || svc.serve())
            .map_err(|e| {
                StackError::Config(peregrine_host::limits::thread_refused(
                    "starting the stack's thread",
                    &e,
                ))
            })?;
        Ok(Stack {
            inner,
            service: Some(service),
            _watch: watch,
            _link: attached,
        })
    }

    pub fn iface(&self) -> &str {
        &self.inner.iface
    }

    /// The interface's MAC address and MTU as last read.
    pub fn link(&self) -> LinkInfo {
        *lock(&self.inner.link)
    }

    pub fn queues(&self) -> u32 {
        self.inner.queues.len() as u32
    }

    pub fn counters(&self) -> StackCounters {
        self.inner.counters.snapshot()
    }

    /// The steering program's and the AF_XDP sockets' counters.
    pub fn xdp_counters(&self) -> Result<XdpCounters> {
        let mut c = XdpCounters {
            steer: self.inner.prog.stats()?,
            ..Default::default()
        };
        for q in &self.inner.queues {
            let s = lock(q).kernel_stats()?;
            c.xsk.rx_dropped += s.rx_dropped;
            c.xsk.rx_invalid_descriptors += s.rx_invalid_descriptors;
            c.xsk.tx_invalid_descriptors += s.tx_invalid_descriptors;
            c.xsk.rx_ring_full += s.rx_ring_full;
            c.xsk.rx_fill_ring_empty_descriptors += s.rx_fill_ring_empty_descriptors;
            c.xsk.tx_ring_empty_descriptors += s.tx_ring_empty_descriptors;
        }
        Ok(c)
    }

    /// Every counter in one line, for a final report: the stack's own,
    /// then the steering program's and the sockets' (`steer_fragments`: a
    /// first fragment for a binding, dropped; `steer_no_socket`: passed
    /// to the kernel for want of a socket on its queue).
    pub fn summary(&self) -> String {
        let mut line = self.counters().to_string();
        match self.xdp_counters() {
            Ok(x) => {
                let (s, k) = (x.steer, x.xsk);
                line += &format!(
                    " steer_redirected={} steer_no_socket={} steer_fragments={} \
                     xsk_rx_dropped={} xsk_rx_ring_full={} xsk_rx_fill_ring_empty={} \
                     xsk_rx_invalid={} xsk_tx_invalid={}",
                    s.redirected,
                    s.no_socket,
                    s.fragments,
                    k.rx_dropped,
                    k.rx_ring_full,
                    k.rx_fill_ring_empty_descriptors,
                    k.rx_invalid_descriptors,
                    k.tx_invalid_descriptors
                );
            }
            Err(e) => line += &format!(" (the XDP counters could not be read: {e})"),
        }
        line
    }

    /// The MAC the stack sends to for next hop `ip`, as it knows it now
    /// (None: unknown or unusable).
    pub fn neighbour_mac(&self, ip: IpAddr) -> Option<MacAddr> {
        lock(&self.inner.next_hops).mac_of(ip)
    }

    /// The steering program, for BPF_PROG_RUN fixtures with real sockets.
    pub fn program(&self) -> &SteerProgram {
        &self.inner.prog
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
    }
}

impl Inner {
    /// Takes up to one batch from queue `q`'s RX ring: each datagram goes
    /// to its socket (`direct`'s caller first, while its buffers last),
    /// each other frame to its drop counter. Returns the frames taken.
    pub(crate) fn drain(&self, xsk: &mut Xsk, mut direct: Option<&mut Direct<'_, '_>>) -> u32 {
        let ours = lock(&self.link).mac;
        let bindings = self.bindings.read().unwrap_or_else(|p| p.into_inner());
        let c = &self.counters;
        let (taken, _) = xsk
            .process(self.cfg.batch, |frame, len| {
                let frame = &frame[..len];
                let inc = match classify(frame, ours) {
                    Ok(i) => i,
                    Err(d) => {
                        Counters::add(d.counter(c), 1);
                        return Verdict::Drop;
                    }
                };
                let sock = bindings.get(&inc.dst).or_else(|| {
                    bindings.get(&SocketAddr::new(
                        unspecified_like(inc.dst.ip()),
                        inc.dst.port(),
                    ))
                });
                let Some(sock) = sock else {
                    Counters::add(&c.rx_no_socket, 1);
                    return Verdict::Drop;
                };
                let payload = &frame[inc.payload];
                if let Some(d) = direct.as_deref_mut() {
                    // Straight to the caller only while its queue is empty:
                    // what another drain queued for it came first.
                    if std::ptr::eq(d.me, &**sock)
                        && d.got < d.bufs.len().min(d.meta.len())
                        && sock.lock().datagrams.is_empty()
                    {
                        let buf = &mut d.bufs[d.got];
                        let n = payload.len().min(buf.len());
                        buf[..n].copy_from_slice(&payload[..n]);
                        d.meta[d.got] = RecvMeta {
                            len: n,
                            source: Some(inc.src),
                            stride: 0,
                        };
                        d.got += 1;
                        Counters::add(&c.rx_datagrams, 1);
                        Counters::add(&c.rx_bytes, payload.len() as u64);
                        return Verdict::Drop;
                    }
                }
                self.enqueue(sock, inc.src, payload);
                Verdict::Drop
            })
            .unwrap_or((0, 0));
        taken
    }

    fn enqueue(&self, sock: &SocketShared, from: SocketAddr, payload: &[u8]) {
        let c = &self.counters;
        let mut q = sock.lock();
        if q.datagrams.len() >= self.cfg.socket_queue {
            Counters::add(&c.rx_socket_full, 1);
            return;
        }
        let mut data = q.spare.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(payload);
        // Counted before the reader can see it: a reader's count of what
        // it got never runs ahead of the stack's.
        Counters::add(&c.rx_datagrams, 1);
        Counters::add(&c.rx_bytes, payload.len() as u64);
        q.datagrams.push_back(Queued { from, data });
        let w = q.waker.take();
        drop(q);
        sock.arrived.notify_all();
        if let Some(w) = w {
            w.wake();
        }
    }

    /// The TX queue a socket sends on: sockets spread over the queues.
    pub(crate) fn tx_queue_for(&self, local: SocketAddr) -> usize {
        (local.port() as usize) % self.queues.len()
    }

    /// Builds and queues `frames` (destination MAC, source, destination,
    /// payload) on `xsk`'s TX ring; returns how many went.
    pub(crate) fn transmit(
        &self,
        xsk: &mut Xsk,
        frames: &[(MacAddr, SocketAddr, SocketAddr, &[u8])],
    ) -> usize {
        let src_mac = lock(&self.link).mac;
        let mut next = frames.iter();
        let mut bytes = 0u64;
        let sent = xsk
            .transmit(frames.len() as u32, |buf| {
                let Some((dst_mac, from, to, payload)) = next.next() else {
                    return 0;
                };
                let spec = UdpFrameSpec {
                    src_mac,
                    dst_mac: *dst_mac,
                    src_ip: from.ip(),
                    dst_ip: to.ip(),
                    src_port: from.port(),
                    dst_port: to.port(),
                    ttl: 64,
                    frame_len: 0,
                }
                .sized_for(payload.len());
                match spec.write_into(buf, payload) {
                    Ok(()) => {
                        bytes += payload.len() as u64;
                        spec.frame_len
                    }
                    Err(_) => 0,
                }
            })
            .unwrap_or(0) as usize;
        Counters::add(&self.counters.tx_datagrams, sent as u64);
        Counters::add(&self.counters.tx_bytes, bytes);
        if sent < frames.len() {
            Counters::add(&self.counters.tx_ring_full, (frames.len() - sent) as u64);
        }
        sent
    }

    /// The largest UDP payload to `dst`: the interface's MTU less the IP
    /// and UDP headers, and what one UMEM frame holds.
    pub(crate) fn max_payload(&self, dst: IpAddr) -> usize {
        let mtu = lock(&self.link).mtu as usize;
        let hl = ip::header_len_for(dst) + UDP_HLEN;
        let umem = self.cfg.xsk.frame_size as usize - peregrine_wire::ETH_HLEN - hl;
        mtu.saturating_sub(hl).min(umem)
    }

    /// The service thread: waits for frames on every queue and gets them
    /// to their sockets, follows netlink events, resolves next hops for
    /// held datagrams and sends them, expires the ones that waited too
    /// long, and wakes senders waiting for room.
    ///
    /// When every bound socket has an async reader waiting (a waker
    /// registered by `poll_recv`), frames are not drained here but handed
    /// off: the readers are woken and drain the ring themselves, straight
    /// into their buffers (no second copy through a socket queue, no lock
    /// handed between threads per batch). The queue then leaves the poll
    /// set (its POLLIN stays up until they drain; on a copy-mode socket
    /// every poll() also drives TX, against the senders' own kicks) until
    /// the readers wait again, or drains here after `HAND_OFF_LIMIT` if
    /// they do not.
    fn serve(self: Arc<Self>) {
        /// How long handed-off frames may wait for their readers.
        const HAND_OFF_LIMIT: Duration = Duration::from_millis(2);
        let mut fds: Vec<libc::pollfd> = self
            .fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let mut handed: Vec<Option<Instant>> = vec![None; fds.len()];
        while !self.stop.load(Ordering::Relaxed) {
            for (i, p) in fds.iter_mut().enumerate() {
                // poll() skips negative descriptors.
                p.fd = if handed[i].is_some() { -1 } else { self.fds[i] };
                p.revents = 0;
            }
            let timeout = if handed.iter().any(Option::is_some) {
                1
            } else {
                5
            };
            // Safety: `fds` is a valid array of pollfd for the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n > 0 {
                for (q, p) in fds.iter().enumerate() {
                    if p.revents & libc::POLLIN != 0 {
                        if self.hand_off() {
                            handed[q] = Some(Instant::now());
                        } else {
                            self.drain_all(q);
                        }
                    }
                }
            }
            for (q, h) in handed.iter_mut().enumerate() {
                let Some(at) = *h else { continue };
                if self.readers_waiting() {
                    // They drained and found the ring empty: poll again.
                    *h = None;
                } else if at.elapsed() >= HAND_OFF_LIMIT {
                    self.drain_all(q);
                    *h = None;
                }
            }
            self.follow_events();
            self.resolve();
            for w in lock(&self.send_waiters).drain(..) {
                w.wake();
            }
        }
    }

    /// Drains queue `q`'s RX ring into its sockets until it is empty.
    fn drain_all(&self, q: usize) {
        let mut x = lock(&self.queues[q]);
        while self.drain(&mut x, None) > 0 {}
    }

    /// Whether every bound socket (there is one at least) has an async
    /// reader waiting.
    fn readers_waiting(&self) -> bool {
        all_readers_waiting(&self.bindings.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Wakes every bound socket's waiting reader when all of them wait;
    /// whether it did.
    fn hand_off(&self) -> bool {
        let b = self.bindings.read().unwrap_or_else(|p| p.into_inner());
        if !all_readers_waiting(&b) {
            return false;
        }
        // Taken one socket at a time; one an enqueue woke meanwhile has
        // no waker left to take, and is awake already.
        let wakers: Vec<Waker> = b.values().filter_map(|s| s.lock().waker.take()).collect();
        drop(b);
        for w in wakers {
            w.wake();
        }
        true
    }

    fn follow_events(&self) {
        let events = std::mem::take(&mut *lock(&self.events));
        let mut relink = false;
        for ev in events {
            match ev {
                NlEvent::Neighbour(n) if n.ifindex == self.ifindex => {
                    lock(&self.next_hops).neighbour(&n)
                }
                NlEvent::NeighbourGone { ifindex, ip } if ifindex == self.ifindex => {
                    lock(&self.next_hops).neighbour_gone(ip)
                }
                NlEvent::RoutesChanged => lock(&self.next_hops).forget_routes(),
                NlEvent::LinkChanged { ifindex } if ifindex == self.ifindex => relink = true,
                _ => {}
            }
        }
        if relink {
            if let Ok(l) = lock(&self.nl).link_info(self.ifindex) {
                *lock(&self.link) = l;
            }
        }
    }

    /// Routes for held datagrams' destinations, the kernel asked to
    /// resolve their next hops, and whatever is ready sent.
    fn resolve(&self) {
        let now = Instant::now();
        let unrouted = lock(&self.next_hops).unrouted();
        for dst in unrouted {
            let r = match lock(&self.nl).route_to(dst) {
                Ok(r) if r.oif == self.ifindex => Route::Via {
                    via: r.gateway.unwrap_or(dst),
                    src: r.prefsrc,
                },
                _ => Route::Elsewhere,
            };
            lock(&self.next_hops).set_route(dst, r);
        }
        let ask = lock(&self.next_hops).due_asks(now);
        for ip in ask {
            // A refusal (e.g. an address the kernel will not resolve on
            // this link) leaves the datagrams to expire, counted.
            let _ = lock(&self.nl).resolve_neighbour(self.ifindex, ip);
        }
        let (ready, expired) = {
            let mut h = lock(&self.next_hops);
            let ready = h.ready(now);
            (ready, h.expire(now, self.cfg.resolve_timeout))
        };
        Counters::add(&self.counters.tx_no_neighbour, expired as u64);
        for (dst_ip, mac, src, held) in ready {
            let frames: Vec<(MacAddr, SocketAddr, SocketAddr, &[u8])> = held
                .iter()
                .map(|h: &Held| {
                    let from = source_for(h.from, src);
                    let to = SocketAddr::new(dst_ip, h.to_port);
                    (mac, from, to, h.payload.as_slice())
                })
                .collect();
            let q = frames.first().map(|f| self.tx_queue_for(f.1)).unwrap_or(0);
            let mut x = lock(&self.queues[q]);
            self.transmit(&mut x, &frames);
        }
    }
}

/// The source address of a datagram from a socket bound to `local`: its
/// own address, or for a socket bound to the unspecified address the one
/// the kernel's route picks.
pub(crate) fn source_for(local: SocketAddr, route_src: Option<IpAddr>) -> SocketAddr {
    match route_src {
        Some(ip) if local.ip().is_unspecified() => SocketAddr::new(ip, local.port()),
        _ => local,
    }
}
