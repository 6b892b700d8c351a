//! AF_XDP sockets for peregrine, built on the primitives of `s2n-quic-xdp`
//! (UMEM, the four rings, the syscalls). One `Xsk` is one socket bound to one
//! RX queue with its own UMEM: half the frames feed the fill ring, the rest
//! are free for transmission; received frames can be answered in place.
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

use s2n_quic_xdp::if_xdp::{Address, RxTxDescriptor, UmemDescriptor, XdpFlags};
use s2n_quic_xdp::ring::{Completion, Fill, Rx, Tx};
use s2n_quic_xdp::socket::Fd;
use s2n_quic_xdp::umem::Umem;
use s2n_quic_xdp::{syscall, umem};

#[derive(Debug, thiserror::Error)]
pub enum XskError {
    #[error("AF_XDP on {iface} queue {queue}: {what}: {source}")]
    Sys {
        iface: String,
        queue: u32,
        what: &'static str,
        source: std::io::Error,
    },
    #[error("unknown interface {0:?}")]
    UnknownInterface(String),
    #[error("AF_XDP configuration: {0}")]
    Config(String),
}

pub type Result<T, E = XskError> = std::result::Result<T, E>;

/// Zero-copy wish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroCopy {
    /// Zero-copy if the driver has it, copy otherwise.
    #[default]
    Auto,
    Off,
    Required,
}

/// How the socket ended up bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindMode {
    ZeroCopy,
    Copy,
}

impl BindMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BindMode::ZeroCopy => "zero-copy",
            BindMode::Copy => "copy",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct XskConfig {
    /// Bytes per UMEM frame (2048 holds a 1518-byte frame plus headroom).
    pub frame_size: u32,
    /// Frames in the UMEM: half for receiving, half for sending.
    pub frames: u32,
    /// Entries in the RX and TX rings (fill and completion get twice that).
    pub ring: u32,
    pub zero_copy: ZeroCopy,
    /// Let the kernel sleep and be woken (XDP_USE_NEED_WAKEUP): the right
    /// choice when application and driver share a core.
    pub need_wakeup: bool,
    /// Busy polling of the device queue from the socket's calls.
    pub busy_poll: Option<BusyPoll>,
}

/// Socket busy-poll settings (SO_BUSY_POLL, SO_PREFER_BUSY_POLL,
/// SO_BUSY_POLL_BUDGET): the application drives the queue's NAPI from its own
/// calls instead of waiting for interrupts. Only worth it when the queue's
/// NAPI can run on the application's core (not on veth, whose receive runs
/// on the sender's CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// How long one call may poll, microseconds.
    pub usecs: u32,
    /// Packets per poll.
    pub budget: u32,
    /// Keep the device's interrupts off while the application polls.
    pub prefer: bool,
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            usecs: 20,
            budget: 64,
            prefer: true,
        }
    }
}

fn set_busy_poll(fd: &Fd, bp: Option<BusyPoll>) -> std::io::Result<()> {
    let Some(bp) = bp else { return Ok(()) };
    let set = |opt: libc::c_int, v: libc::c_int| {
        // Safety: a valid socket fd and a c_int option value for the call.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    set(libc::SO_PREFER_BUSY_POLL, i32::from(bp.prefer))?;
    set(libc::SO_BUSY_POLL, bp.usecs as libc::c_int)?;
    set(libc::SO_BUSY_POLL_BUDGET, bp.budget as libc::c_int)
}

fn ifindex(iface: &str) -> Result<u32> {
    let name =
        std::ffi::CString::new(iface).map_err(|_| XskError::UnknownInterface(iface.into()))?;
    syscall::if_nametoindex(&name).map_err(|_| XskError::UnknownInterface(iface.into()))
}

impl Default for XskConfig {
    /// 4096 frames of 2 KiB: 8 MiB of UMEM per socket (the source spent
    /// 256 MiB per socket).
    fn default() -> Self {
        XskConfig {
            frame_size: 2048,
            frames: 4096,
            ring: 1024,
            zero_copy: ZeroCopy::Auto,
            need_wakeup: true,
            busy_poll: None,
        }
    }
}

/// What a handler does with a received frame.
pub enum Verdict {
    /// Give the frame back to the kernel for receiving.
    Drop,
    /// Send the frame, changed in place, with this length.
    Transmit(usize),
}

/// The frames of one UMEM and the two rings that move them: fill (to the
/// kernel, for receiving) and completion (back from it after sending).
/// Sockets bound to one queue with a shared UMEM share these, so they sit
/// behind a lock taken once per batch.
struct FramePool {
    fill: Fill,
    comp: Completion,
    /// Frames owned by user space, ready for the fill ring or for sending.
    free: Vec<UmemDescriptor>,
    /// Frames kept out of the fill ring for `transmit` (half the UMEM).
    keep: usize,
}

impl FramePool {
    /// Takes back frames the kernel finished sending.
    fn reclaim(&mut self) {
        let n = self.comp.acquire(1);
        if n == 0 {
            return;
        }
        let (a, b) = self.comp.data();
        self.free
            .extend(a.iter().chain(b.iter()).take(n as usize).copied());
        self.comp.release(n);
    }

    /// Moves free frames to the fill ring, keeping `keep` for sending.
    fn refill(&mut self) {
        if self.free.len() <= self.keep {
            return;
        }
        let want = (self.free.len() - self.keep) as u32;
        let n = self.fill.acquire(want).min(want);
        if n == 0 {
            return;
        }
        let (a, b) = self.fill.data();
        let mut done = 0u32;
        for slot in a.iter_mut().chain(b.iter_mut()).take(n as usize) {
            match self.free.pop() {
                Some(d) => {
                    *slot = d;
                    done += 1;
                }
                None => break,
            }
        }
        self.fill.release(done);
    }
}

pub struct Xsk {
    fd: Fd,
    umem: Umem,
    pool: Arc<Mutex<FramePool>>,
    rx: Rx,
    tx: Tx,
    /// Answers of the batch being processed (kept to reuse its allocation).
    out: Vec<RxTxDescriptor>,
    /// Frames of the batch going back to the pool.
    back: Vec<UmemDescriptor>,
    mode: BindMode,
    cfg: XskConfig,
    /// Whether this socket registered the UMEM (the first of its queue).
    owns_umem: bool,
    pub iface: String,
    pub queue: u32,
}

/// Counters of a socket (from the kernel and our own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskCounts {
    pub rx: u64,
    pub tx: u64,
}

fn sys_err(iface: &str, queue: u32, what: &'static str) -> impl Fn(std::io::Error) -> XskError {
    let iface = iface.to_string();
    move |source| XskError::Sys {
        iface: iface.clone(),
        queue,
        what,
        source,
    }
}

impl Xsk {
    /// Opens a socket on `iface` (in the calling thread's namespace), RX
    /// queue `queue`, with a UMEM of its own.
    pub fn open(iface: &str, queue: u32, cfg: XskConfig) -> Result<Xsk> {
        if !cfg.frame_size.is_power_of_two() || !(2048..=4096).contains(&cfg.frame_size) {
            return Err(XskError::Config(format!(
                "frame size {}: 2048 or 4096",
                cfg.frame_size
            )));
        }
        if !cfg.ring.is_power_of_two() || cfg.frames < 2 * cfg.ring {
            return Err(XskError::Config(format!(
                "ring {} must be a power of two and frames ({}) at least twice the ring",
                cfg.ring, cfg.frames
            )));
        }
        let sys = |what| sys_err(iface, queue, what);
        let ifindex = ifindex(iface)?;
        let umem = umem::Builder {
            frame_size: cfg.frame_size,
            frame_count: cfg.frames,
            ..Default::default()
        }
        .build()
        .map_err(sys("allocating the UMEM"))?;
        let fd = Fd::open().map_err(sys("opening the socket (needs CAP_NET_RAW)"))?;
        fd.attach_umem(&umem).map_err(sys("registering the UMEM"))?;
        let offsets = syscall::offsets(&fd).map_err(sys("reading ring offsets"))?;
        let fill =
            Fill::new(fd.clone(), &offsets, cfg.ring * 2).map_err(sys("creating the fill ring"))?;
        let comp = Completion::new(fd.clone(), &offsets, cfg.ring * 2)
            .map_err(sys("creating the completion ring"))?;
        let rx = Rx::new(fd.clone(), &offsets, cfg.ring).map_err(sys("creating the RX ring"))?;
        let tx = Tx::new(fd.clone(), &offsets, cfg.ring).map_err(sys("creating the TX ring"))?;

        let wake = if cfg.need_wakeup {
            XdpFlags::USE_NEED_WAKEUP
        } else {
            XdpFlags::empty()
        };
        let attempt = |flags: XdpFlags| {
            let mut addr = Address {
                flags: flags | wake,
                ifindex,
                queue_id: queue,
                ..Default::default()
            };
            syscall::bind(&fd, &mut addr)
        };
        let mode = match cfg.zero_copy {
            ZeroCopy::Off => attempt(XdpFlags::COPY)
                .map(|_| BindMode::Copy)
                .map_err(sys("binding (copy mode)"))?,
            ZeroCopy::Required => attempt(XdpFlags::ZEROCOPY)
                .map(|_| BindMode::ZeroCopy)
                .map_err(sys("binding (zero-copy mode)"))?,
            ZeroCopy::Auto => match attempt(XdpFlags::ZEROCOPY) {
                Ok(()) => BindMode::ZeroCopy,
                Err(_) => attempt(XdpFlags::COPY)
                    .map(|_| BindMode::Copy)
                    .map_err(sys("binding (copy mode)"))?,
            },
        };
        set_busy_poll(&fd, cfg.busy_poll).map_err(sys("setting busy polling"))?;
        let pool = FramePool {
            fill,
            comp,
            free: umem.frames().collect(),
            keep: (cfg.frames / 2) as usize,
        };
        let s = Xsk {
            fd,
            umem,
            pool: Arc::new(Mutex::new(pool)),
            rx,
            tx,
            out: Vec::with_capacity(cfg.ring as usize),
            back: Vec::with_capacity(cfg.ring as usize),
            mode,
            cfg,
            owns_umem: true,
            iface: iface.into(),
            queue,
        };
        s.lock_pool().refill();
        Ok(s)
    }

    /// Opens another socket on this socket's interface and queue, sharing its
    /// UMEM, fill and completion rings (XDP_SHARED_UMEM): several workers per
    /// queue, each with its own RX and TX ring. Call from the same namespace.
    pub fn open_shared(&self) -> Result<Xsk> {
        let (iface, queue) = (self.iface.as_str(), self.queue);
        let sys = |what| sys_err(iface, queue, what);
        let fd = Fd::open().map_err(sys("opening the socket (needs CAP_NET_RAW)"))?;
        let offsets = syscall::offsets(&fd).map_err(sys("reading ring offsets"))?;
        let rx =
            Rx::new(fd.clone(), &offsets, self.cfg.ring).map_err(sys("creating the RX ring"))?;
        let tx =
            Tx::new(fd.clone(), &offsets, self.cfg.ring).map_err(sys("creating the TX ring"))?;
        let mut addr = Address {
            ifindex: ifindex(iface)?,
            queue_id: queue,
            ..Default::default()
        };
        // The mode and wake-up setting come from the first socket: the
        // kernel refuses any other flag with a shared UMEM.
        addr.set_shared_umem(&self.fd);
        syscall::bind(&fd, &mut addr).map_err(sys("binding to the shared UMEM"))?;
        set_busy_poll(&fd, self.cfg.busy_poll).map_err(sys("setting busy polling"))?;
        Ok(Xsk {
            fd,
            umem: self.umem.clone(),
            pool: self.pool.clone(),
            rx,
            tx,
            out: Vec::with_capacity(self.cfg.ring as usize),
            back: Vec::with_capacity(self.cfg.ring as usize),
            mode: self.mode,
            cfg: self.cfg,
            owns_umem: false,
            iface: iface.into(),
            queue,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn mode(&self) -> BindMode {
        self.mode
    }

    /// Memory this socket holds: its RX and TX rings, and the UMEM with the
    /// fill and completion rings if it registered them.
    pub fn memory_bytes(&self) -> usize {
        let desc = std::mem::size_of::<RxTxDescriptor>();
        let udesc = std::mem::size_of::<UmemDescriptor>();
        let own = 2 * self.cfg.ring as usize * desc;
        if self.owns_umem {
            own + self.umem.len() + 4 * self.cfg.ring as usize * udesc
        } else {
            own
        }
    }

    fn lock_pool(&self) -> std::sync::MutexGuard<'_, FramePool> {
        // A worker that panicked mid-batch leaves counts, not broken rings.
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Descriptors still waiting in this socket's TX ring.
    fn tx_pending(&mut self) -> u32 {
        let cap = self.tx.capacity() as u32;
        cap - self.tx.acquire(cap).min(cap)
    }

    /// Handles up to `max` received frames with `f(buffer, len)`: the frame
    /// is `buffer[..len]`, and the buffer runs to the end of its UMEM frame so
    /// a reply may be longer. Frames `f` answers are sent in place. Returns
    /// (received, transmitted).
    pub fn process(
        &mut self,
        max: u32,
        mut f: impl FnMut(&mut [u8], usize) -> Verdict,
    ) -> Result<(u32, u32)> {
        let n = self.rx.acquire(1).min(max);
        let mut sent = 0u32;
        self.back.clear();
        if n > 0 {
            let mut out = std::mem::take(&mut self.out);
            out.clear();
            {
                let (a, b) = self.rx.data();
                let frame_size = u64::from(self.cfg.frame_size);
                for d in a.iter().chain(b.iter()).take(n as usize) {
                    // The whole rest of the UMEM frame the packet starts in.
                    let room = RxTxDescriptor {
                        len: (frame_size - d.address % frame_size) as u32,
                        ..*d
                    };
                    // Safety: the kernel handed this descriptor to us; nothing
                    // else refers to its UMEM frame until we return it.
                    let buf = unsafe { self.umem.get_mut(room) };
                    match f(buf, d.len as usize) {
                        Verdict::Transmit(len) if len <= room.len as usize => {
                            let mut t = *d;
                            t.len = len as u32;
                            out.push(t);
                        }
                        _ => self.back.push(UmemDescriptor::from(*d)),
                    }
                }
            }
            self.rx.release(n);
            if !out.is_empty() {
                sent = self.push_tx(&out);
                // What the TX ring had no room for goes back to receiving.
                let rest = out.iter().skip(sent as usize);
                self.back.extend(rest.map(|d| UmemDescriptor::from(*d)));
            }
            self.out = out;
        }
        self.finish_batch();
        Ok((n, sent))
    }

    /// Sends new frames: up to `max` free frames are handed to `build(buf)`,
    /// which writes a frame at the start of `buf` and returns its length (0:
    /// no more). Returns the frames queued for sending.
    pub fn transmit(&mut self, max: u32, mut build: impl FnMut(&mut [u8]) -> usize) -> Result<u32> {
        let mut frames = {
            let mut pool = self.lock_pool();
            pool.reclaim();
            let take = (max as usize).min(pool.free.len());
            let at = pool.free.len() - take;
            pool.free.split_off(at)
        };
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        self.back.clear();
        let frame_size = self.cfg.frame_size;
        while let Some(d) = frames.pop() {
            let room = RxTxDescriptor {
                address: d.address,
                len: frame_size,
                options: Default::default(),
            };
            // Safety: the frame came from the free list; nobody else uses it
            // until it is queued or returned.
            let buf = unsafe { self.umem.get_mut(room) };
            match build(buf) {
                0 => {
                    self.back.push(d);
                    break;
                }
                len => out.push(RxTxDescriptor {
                    len: len.min(frame_size as usize) as u32,
                    ..room
                }),
            }
        }
        self.back.extend(frames);
        let sent = self.push_tx(&out);
        let rest = out.iter().skip(sent as usize);
        self.back.extend(rest.map(|d| UmemDescriptor::from(*d)));
        self.out = out;
        self.finish_batch();
        Ok(sent)
    }

    /// Queues `out` on the TX ring, making room first if it is short.
    fn push_tx(&mut self, out: &[RxTxDescriptor]) -> u32 {
        let mut room = self.tx.acquire(out.len() as u32) as usize;
        if room < out.len() {
            // Let the kernel send what waits, take back what it finished.
            self.kick_tx();
            self.lock_pool().reclaim();
            room = self.tx.acquire(out.len() as u32) as usize;
        }
        let mut sent = 0;
        let (a, b) = self.tx.data();
        for (slot, d) in a.iter_mut().chain(b.iter_mut()).zip(out.iter()).take(room) {
            *slot = *d;
            sent += 1;
        }
        self.tx.release(sent);
        sent
    }

    /// After a batch: kick TX while anything waits (in copy mode only a
    /// sendto() moves frames out, and one that found the socket busy would
    /// leave a reply stranded until the next request), then return frames
    /// to the pool and the fill ring.
    fn finish_batch(&mut self) {
        if self.tx_pending() > 0 && (!self.cfg.need_wakeup || self.tx.needs_wakeup()) {
            self.kick_tx();
        }
        let mut back = std::mem::take(&mut self.back);
        // An empty poll with nothing to give back need not wait for the
        // pool: when another socket of the queue holds it, that one is
        // reclaiming and refilling already (a sole socket always gets it).
        let pool = if back.is_empty() {
            self.pool.try_lock().ok()
        } else {
            Some(self.lock_pool())
        };
        let wake_rx = pool.is_some_and(|mut pool| {
            pool.reclaim();
            pool.free.append(&mut back);
            pool.refill();
            self.cfg.need_wakeup && pool.fill.needs_wakeup()
        });
        self.back = back;
        // Copy mode fills from NAPI by itself: a wake-up call would only
        // cost a syscall per batch.
        if (wake_rx && self.mode == BindMode::ZeroCopy) || self.cfg.busy_poll.is_some() {
            let _ = syscall::busy_poll(&self.fd);
        }
    }

    /// Asks the kernel to send what waits in the TX ring. In copy mode one
    /// sendto() sends at most 32 frames and answers EAGAIN while more wait,
    /// so it is repeated (a bounded number of times): one kick per batch
    /// would leave the ring filling up and replies dropped for want of room.
    fn kick_tx(&self) {
        for _ in 0..=self.cfg.ring / 32 {
            match syscall::wake_tx(&self.fd) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) => {
                    continue
                }
                _ => break,
            }
        }
    }

    /// The kernel's drop counters for this socket.
    pub fn kernel_stats(&self) -> Result<s2n_quic_xdp::if_xdp::Statistics> {
        syscall::statistics(&self.fd).map_err(|source| XskError::Sys {
            iface: self.iface.clone(),
            queue: self.queue,
            what: "reading statistics",
            source,
        })
    }

    /// Waits up to `timeout_ms` for frames to arrive.
    pub fn wait(&self, timeout_ms: i32) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Safety: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, timeout_ms) > 0 }
    }
}
