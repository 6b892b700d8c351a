//! One AF_XDP socket: bound to one RX queue with its UMEM (its own or shared
//! with the queue's other sockets), its socket options (busy polling) and
//! what ends a batch (kicking TX, returning frames, waking the kernel).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex};

use s2n_quic_xdp::if_xdp::{Address, RxTxDescriptor, UmemDescriptor, XdpFlags};
use s2n_quic_xdp::ring::{Completion, Fill, Rx, Tx};
use s2n_quic_xdp::socket::Fd;
use s2n_quic_xdp::umem::Umem;
use s2n_quic_xdp::{syscall, umem};

use crate::config::{BindMode, BusyPoll, XskConfig, ZeroCopy};
use crate::error::{sys_err, Result, XskError};
use crate::umem::FramePool;

pub struct Xsk {
    pub(crate) fd: Fd,
    pub(crate) umem: Umem,
    pub(crate) pool: Arc<Mutex<FramePool>>,
    pub(crate) rx: Rx,
    pub(crate) tx: Tx,
    /// Descriptors of the batch being sent (kept to reuse its allocation).
    pub(crate) out: Vec<RxTxDescriptor>,
    /// Frames of the batch going back to the pool.
    pub(crate) back: Vec<UmemDescriptor>,
    pub(crate) mode: BindMode,
    pub(crate) cfg: XskConfig,
    /// Whether this socket registered the UMEM (the first of its queue).
    owns_umem: bool,
    /// Frames one sendto() sends in copy mode: the kernel's 32, or the
    /// whole TX ring where XDP_MAX_TX_SKB_BUDGET is known (Linux >= 6.17).
    pub(crate) tx_budget: u32,
    pub iface: String,
    pub queue: u32,
}

/// Reads one socket's XDP_STATISTICS (see `Xsk::stats_reader`).
#[derive(Clone)]
pub struct XskStatsReader {
    fd: Fd,
    iface: String,
    queue: u32,
    owns_umem: bool,
}

impl XskStatsReader {
    pub fn read(&self) -> Result<s2n_quic_xdp::if_xdp::Statistics> {
        syscall::statistics(&self.fd).map_err(sys_err(
            &self.iface,
            self.queue,
            "reading statistics",
        ))
    }

    /// Whether the socket registered its queue's UMEM: the fill ring's
    /// counter (rx_fill_ring_empty_descriptors) belongs to the UMEM, so
    /// sockets sharing it all report the same count; sum it over owners.
    pub fn owns_umem(&self) -> bool {
        self.owns_umem
    }
}

fn set_busy_poll(fd: &Fd, bp: Option<BusyPoll>) -> std::io::Result<()> {
    let Some(bp) = bp else { return Ok(()) };
    let set = |opt: libc::c_int, v: libc::c_int| {
        peregrine_io::sockopt::set(fd, libc::SOL_SOCKET, opt, &v)
    };
    set(libc::SO_PREFER_BUSY_POLL, i32::from(bp.prefer))?;
    set(libc::SO_BUSY_POLL, bp.usecs as libc::c_int)?;
    set(libc::SO_BUSY_POLL_BUDGET, bp.budget as libc::c_int)
}

/// SOL_XDP option (Linux 6.17, uapi if_xdp.h): how many frames one
/// sendto() may send in copy mode, between 32 (the old fixed budget) and
/// the TX ring's size.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;
/// The copy-mode budget of kernels without that option.
const TX_BATCH_DEFAULT: u32 = 32;

/// Lets one sendto() send the whole TX ring in copy mode instead of 32
/// frames: fewer system calls per batch of replies. Needs the TX ring
/// created first; older kernels answer ENOPROTOOPT and keep 32.
fn raise_tx_budget(fd: &Fd, ring: u32) -> u32 {
    let set = peregrine_io::sockopt::set(fd, libc::SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &ring);
    if set.is_ok() {
        ring
    } else {
        TX_BATCH_DEFAULT
    }
}

/// Why the kernel refused to register a UMEM of `bytes`: ENOBUFS is the
/// locked-memory limit (the kernel charges the UMEM's pages to it unless
/// the process has CAP_IPC_LOCK), named with its value; anything else as
/// the system call said.
fn umem_refused(iface: &str, queue: u32, bytes: u64, e: std::io::Error) -> XskError {
    if e.raw_os_error() != Some(libc::ENOBUFS) {
        return sys_err(iface, queue, "registering the UMEM")(e);
    }
    let limit = match peregrine_host::limits::locked_memory() {
        Ok(None) => "unlimited".to_string(),
        Ok(Some(soft)) => format!("{} KiB", soft / 1024),
        Err(_) => "unknown".to_string(),
    };
    XskError::Limit {
        iface: iface.to_string(),
        queue,
        what: format!(
            "registering the UMEM ({} KiB) went over the locked-memory limit ({limit}, RLIMIT_MEMLOCK); raise it (ulimit -l) or run with CAP_IPC_LOCK",
            bytes / 1024
        ),
    }
}

/// Why the UMEM of `bytes` could not be mapped: ENOMEM under an
/// address-space limit (`ulimit -v`) is that limit, named with its value
/// and the size asked; ENOMEM without one is the system's memory; anything
/// else as the system call said.
fn umem_unmapped(iface: &str, queue: u32, bytes: u64, e: std::io::Error) -> XskError {
    if e.raw_os_error() != Some(libc::ENOMEM) {
        return sys_err(iface, queue, "allocating the UMEM")(e);
    }
    let what = match peregrine_host::limits::address_space() {
        Some(limit) => format!(
            "allocating the UMEM ({} KiB) went over the address-space limit ({} KiB, RLIMIT_AS); raise it (ulimit -v)",
            bytes / 1024,
            limit / 1024
        ),
        None => format!(
            "allocating the UMEM ({} KiB): the system has no memory for it (no RLIMIT_AS is set); ask for fewer frames",
            bytes / 1024
        ),
    };
    XskError::Limit {
        iface: iface.to_string(),
        queue,
        what,
    }
}

fn ifindex(iface: &str, queue: u32) -> Result<u32> {
    let name =
        std::ffi::CString::new(iface).map_err(|_| XskError::UnknownInterface(iface.into()))?;
    syscall::if_nametoindex(&name).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) | Some(libc::EINVAL) => XskError::UnknownInterface(iface.into()),
        // glibc looks names up through a socket of its own; when it
        // cannot open one it answers ENOENT, not why.
        _ if std::fs::File::open("/").is_err_and(|f| f.raw_os_error() == Some(libc::EMFILE)) => {
            sys_err(iface, queue, "looking the interface up")(std::io::Error::from_raw_os_error(
                libc::EMFILE,
            ))
        }
        _ => sys_err(iface, queue, "looking the interface up")(e),
    })
}

impl Xsk {
    /// Opens a socket on `iface` (in the calling thread's namespace), RX
    /// queue `queue`, with a UMEM of its own.
    pub fn open(iface: &str, queue: u32, cfg: XskConfig) -> Result<Xsk> {
        cfg.validate()?;
        let sys = |what| sys_err(iface, queue, what);
        let ifindex = ifindex(iface, queue)?;
        let bytes = u64::from(cfg.frame_size) * u64::from(cfg.frames);
        let umem = umem::Builder {
            frame_size: cfg.frame_size,
            frame_count: cfg.frames,
            ..Default::default()
        }
        .build()
        .map_err(|e| umem_unmapped(iface, queue, bytes, e))?;
        let fd = Fd::open().map_err(sys("opening the socket (needs CAP_NET_RAW)"))?;
        fd.attach_umem(&umem)
            .map_err(|e| umem_refused(iface, queue, bytes, e))?;
        let offsets = syscall::offsets(&fd).map_err(sys("reading ring offsets"))?;
        let fill =
            Fill::new(fd.clone(), &offsets, cfg.ring * 2).map_err(sys("creating the fill ring"))?;
        let comp = Completion::new(fd.clone(), &offsets, cfg.ring * 2)
            .map_err(sys("creating the completion ring"))?;
        let rx = Rx::new(fd.clone(), &offsets, cfg.ring).map_err(sys("creating the RX ring"))?;
        let tx = Tx::new(fd.clone(), &offsets, cfg.ring).map_err(sys("creating the TX ring"))?;
        let tx_budget = raise_tx_budget(&fd, cfg.ring);

        let wake = if cfg.need_wakeup {
            XdpFlags::USE_NEED_WAKEUP
        } else {
            XdpFlags::empty()
        };
        // EBUSY while the queue's previous socket (a process that just
        // exited, say) is still being torn down: the kernel releases its
        // buffer pool from a deferred work item, after close() returned.
        // Retried for up to a second; a queue a live socket holds stays busy.
        let attempt = |flags: XdpFlags| {
            let give_up = std::time::Instant::now() + std::time::Duration::from_secs(1);
            loop {
                let mut addr = Address {
                    flags: flags | wake,
                    ifindex,
                    queue_id: queue,
                    ..Default::default()
                };
                match syscall::bind(&fd, &mut addr) {
                    Err(e)
                        if e.raw_os_error() == Some(libc::EBUSY)
                            && std::time::Instant::now() < give_up =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(10))
                    }
                    r => return r,
                }
            }
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
            tx_budget,
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
        let tx_budget = raise_tx_budget(&fd, self.cfg.ring);
        let mut addr = Address {
            ifindex: ifindex(iface, queue)?,
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
            tx_budget,
            iface: iface.into(),
            queue,
        })
    }

    /// Opens `count` sockets (at least one) on `iface` queue `queue`: the
    /// first registers the UMEM, the others share it, as the kernel allows
    /// only one UMEM per queue.
    pub fn open_queue(iface: &str, queue: u32, count: u32, cfg: XskConfig) -> Result<Vec<Xsk>> {
        let first = Xsk::open(iface, queue, cfg)?;
        let mut sockets = Vec::with_capacity(count.max(1) as usize);
        for _ in 1..count {
            sockets.push(first.open_shared()?);
        }
        sockets.insert(0, first);
        Ok(sockets)
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

    pub(crate) fn lock_pool(&self) -> std::sync::MutexGuard<'_, FramePool> {
        // A worker that panicked mid-batch leaves counts, not broken rings.
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// After a batch: kick TX while anything waits (in copy mode only a
    /// sendto() moves frames out, and one that found the socket busy would
    /// leave a reply stranded until the next request), then return frames
    /// to the pool and the fill ring.
    pub(crate) fn finish_batch(&mut self) {
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

    /// The kernel's drop counters for this socket.
    pub fn kernel_stats(&self) -> Result<s2n_quic_xdp::if_xdp::Statistics> {
        self.stats_reader().read()
    }

    /// A handle that reads this socket's drop counters from another thread
    /// (the socket itself belongs to its worker); it keeps the socket open.
    pub fn stats_reader(&self) -> XskStatsReader {
        XskStatsReader {
            fd: self.fd.clone(),
            iface: self.iface.clone(),
            queue: self.queue,
            owns_umem: self.owns_umem,
        }
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
