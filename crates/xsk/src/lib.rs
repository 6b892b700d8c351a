//! AF_XDP sockets for peregrine, built on the primitives of `s2n-quic-xdp`
//! (UMEM, the four rings, the syscalls). One `Xsk` is one socket bound to one
//! RX queue with its own UMEM: half the frames feed the fill ring, the rest
//! are free for transmission; received frames can be answered in place.
use std::os::fd::{AsRawFd, RawFd};

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

pub struct Xsk {
    fd: Fd,
    umem: Umem,
    fill: Fill,
    comp: Completion,
    rx: Rx,
    tx: Tx,
    /// Frames owned by user space, ready for the fill ring or for sending.
    free: Vec<UmemDescriptor>,
    /// Frames handed to the TX ring and not yet completed by the kernel.
    in_flight: u32,
    /// Answers of the batch being processed (kept to reuse its allocation).
    out: Vec<RxTxDescriptor>,
    mode: BindMode,
    cfg: XskConfig,
    pub iface: String,
    pub queue: u32,
}

/// Counters of a socket (from the kernel and our own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskCounts {
    pub rx: u64,
    pub tx: u64,
}

impl Xsk {
    /// Opens a socket on `iface` (in the calling thread's namespace), RX
    /// queue `queue`.
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
        let sys = |what: &'static str| {
            let iface = iface.to_string();
            move |source: std::io::Error| XskError::Sys {
                iface,
                queue,
                what,
                source,
            }
        };
        let name =
            std::ffi::CString::new(iface).map_err(|_| XskError::UnknownInterface(iface.into()))?;
        let ifindex =
            syscall::if_nametoindex(&name).map_err(|_| XskError::UnknownInterface(iface.into()))?;
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
        let free: Vec<UmemDescriptor> = umem.frames().collect();
        let mut s = Xsk {
            fd,
            umem,
            fill,
            comp,
            rx,
            tx,
            free,
            in_flight: 0,
            out: Vec::with_capacity(cfg.ring as usize),
            mode,
            cfg,
            iface: iface.into(),
            queue,
        };
        s.refill();
        Ok(s)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    pub fn mode(&self) -> BindMode {
        self.mode
    }

    /// Memory this socket holds: UMEM plus its four rings.
    pub fn memory_bytes(&self) -> usize {
        let desc = std::mem::size_of::<RxTxDescriptor>();
        let udesc = std::mem::size_of::<UmemDescriptor>();
        self.umem.len() + 2 * self.cfg.ring as usize * desc + 4 * self.cfg.ring as usize * udesc
    }

    /// Moves free frames to the fill ring, keeping half the UMEM for sending.
    fn refill(&mut self) {
        let keep = (self.cfg.frames / 2) as usize;
        if self.free.len() <= keep {
            return;
        }
        let want = (self.free.len() - keep) as u32;
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
        self.in_flight = self.in_flight.saturating_sub(n);
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
        self.reclaim();
        let n = self.rx.acquire(1).min(max);
        let mut sent = 0u32;
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
                        _ => self.free.push(UmemDescriptor::from(*d)),
                    }
                }
            }
            self.rx.release(n);
            if !out.is_empty() {
                let mut room = self.tx.acquire(out.len() as u32) as usize;
                if room < out.len() {
                    // Make room: let the kernel send what waits, take back
                    // what it finished.
                    self.kick_tx();
                    self.reclaim();
                    room = self.tx.acquire(out.len() as u32) as usize;
                }
                let (a, b) = self.tx.data();
                for (slot, d) in a.iter_mut().chain(b.iter_mut()).zip(out.iter()).take(room) {
                    *slot = *d;
                    sent += 1;
                }
                // What the TX ring had no room for goes back to receiving.
                self.free.extend(
                    out.iter()
                        .skip(sent as usize)
                        .map(|d| UmemDescriptor::from(*d)),
                );
                self.tx.release(sent);
            }
            self.out = out;
        }
        self.in_flight += sent;
        // Kick the kernel while anything waits in the TX ring: in copy mode
        // only a sendto() moves frames out, and one that found the socket busy
        // (EAGAIN) would otherwise leave a reply stranded until the next
        // request arrives.
        if self.in_flight > 0 && (!self.cfg.need_wakeup || self.tx.needs_wakeup()) {
            self.kick_tx();
        }
        self.refill();
        if self.cfg.need_wakeup && self.fill.needs_wakeup() {
            let _ = syscall::busy_poll(&self.fd);
        }
        Ok((n, sent))
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
