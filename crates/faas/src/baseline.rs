//! The source's baselines, with the same functions: `socket` (one thread,
//! recvmsg/sendto) and `mmsg` (threads with SO_REUSEPORT sockets,
//! recvmmsg/sendmmsg with MSG_WAITFORONE). Both bind dual-stack ([::]).
//!
//! The kernel drops frames for other hosts and martian sources before any
//! socket, but a socket bound to [::] also receives broadcasts and the
//! multicast groups the interface joined (224.0.0.1, ff02::1), and
//! datagrams from source port 0: each datagram's destination comes with it
//! (IP_PKTINFO, IPV6_PKTINFO) and those are counted and not answered, as the
//! AF_XDP invoker does (see `addrs`).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{
    getsockopt, recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, RecvMsg, SockaddrIn6,
    SockaddrStorage,
};
use peregrine_io::{DatagramIo, Transmit, UdpBatch};

use crate::addrs::{group_address, invalid_source, Refusal};
use crate::functions::{Deployed, Registry};
use crate::invoker::{Counters, InvokerError};
use crate::live::{Live, LiveView, Routes};
use peregrine_host::netns;

/// Control message room for one datagram's destination (either family).
fn pktinfo_space() -> Vec<u8> {
    nix::cmsg_space!(libc::in6_pktinfo, libc::in_pktinfo)
}

/// A datagram's destination as IP_PKTINFO or IPV6_PKTINFO give it.
enum Dst {
    /// The header's destination and the local address the kernel would
    /// answer from (network order).
    V4 {
        addr: u32,
        spec_dst: u32,
    },
    V6([u8; 16]),
}

/// Whether a datagram received on a dual-stack socket may be answered (see
/// `addrs::LocalAddrs::check` for the AF_XDP side): its source, and its
/// destinations as IP_PKTINFO/IPV6_PKTINFO tell them. For IPv4 the kernel
/// gives both the header's destination and the local address it would
/// answer from: they differ exactly when the destination is a broadcast or
/// multicast address.
fn refusal(from: Option<SocketAddr>, dsts: &[Dst]) -> Result<SocketAddr, Refusal> {
    let from = from.ok_or(Refusal::BadSource)?;
    for d in dsts {
        let not_unicast = match *d {
            Dst::V4 { addr, spec_dst } => {
                group_address(IpAddr::from(u32::from_be(addr).to_be_bytes())) || addr != spec_dst
            }
            Dst::V6(a) => group_address(IpAddr::from(a)),
        };
        if not_unicast {
            return Err(Refusal::NotUnicast);
        }
    }
    // A local client may use loopback; from the wire the kernel drops it.
    if invalid_source(from.ip().to_canonical(), false) {
        return Err(Refusal::BadSource);
    }
    if from.port() == 0 {
        return Err(Refusal::SourcePortZero);
    }
    Ok(from)
}

/// `refusal` of a message nix received. Control messages cut short (never,
/// with `pktinfo_space`) leave the destination unknown: not answered.
fn refusal_of(msg: &RecvMsg<'_, '_, SockaddrStorage>) -> Result<SocketAddr, Refusal> {
    let from = msg
        .address
        .as_ref()
        .and_then(SockaddrStorage::as_sockaddr_in6)
        .map(|a: &SockaddrIn6| SocketAddr::V6((*a).into()));
    let cmsgs = msg.cmsgs().map_err(|_| Refusal::NotUnicast)?;
    let dsts: Vec<Dst> = cmsgs
        .filter_map(|c| match c {
            ControlMessageOwned::Ipv4PacketInfo(i) => Some(Dst::V4 {
                addr: i.ipi_addr.s_addr,
                spec_dst: i.ipi_spec_dst.s_addr,
            }),
            ControlMessageOwned::Ipv6PacketInfo(i) => Some(Dst::V6(i.ipi6_addr.s6_addr)),
            _ => None,
        })
        .collect();
    refusal(from, &dsts)
}

/// recvmmsg with each datagram's source and destinations, on buffers set
/// up once. (nix's recvmmsg leaves each header's control length as the
/// last call shrank it, so an IPv4 datagram after an IPv6 one had its
/// IP_PKTINFO cut off; here every call starts from the full length.)
struct PktinfoBatch {
    headers: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_in6>,
    control: Vec<u8>,
    slot: usize,
}

// Safety: the raw pointers in `headers` point into this value's own heap
// vectors (never resized after `new`) or, during `recv`, at its caller's
// buffer; nothing else shares them.
unsafe impl Send for PktinfoBatch {}

/// Control bytes per message: room for IPV6_PKTINFO and IP_PKTINFO.
const CONTROL: usize = 128;

impl PktinfoBatch {
    fn new(batch: usize, slot: usize) -> PktinfoBatch {
        PktinfoBatch {
            // Safety: mmsghdr and sockaddr_in6 are plain data; zeroed is valid.
            headers: vec![unsafe { std::mem::zeroed() }; batch],
            iovecs: vec![
                libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0
                };
                batch
            ],
            // Safety: as above.
            names: vec![unsafe { std::mem::zeroed() }; batch],
            control: vec![0; batch * CONTROL],
            slot,
        }
    }

    /// Receives up to a batch into `buf` (slot `i` at `i * slot`); returns,
    /// per datagram, its length and whether it may be answered.
    fn recv(
        &mut self,
        fd: i32,
        buf: &mut [u8],
        out: &mut Vec<(usize, Taken)>,
    ) -> std::io::Result<()> {
        let n = self.headers.len().min(buf.len() / self.slot);
        for i in 0..n {
            self.iovecs[i] = libc::iovec {
                iov_base: buf[i * self.slot..].as_mut_ptr().cast(),
                iov_len: self.slot,
            };
            let h = &mut self.headers[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_in6).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            h.msg_iov = &mut self.iovecs[i];
            h.msg_iovlen = 1;
            h.msg_control = self.control[i * CONTROL..].as_mut_ptr().cast();
            h.msg_controllen = CONTROL;
            h.msg_flags = 0;
        }
        // Safety: every header points at live buffers of the lengths given
        // (names, iovecs into `buf`, control), all outliving the call.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                self.headers.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for (h, a) in self.headers.iter().zip(&self.names).take(got as usize) {
            let m = &h.msg_hdr;
            let from = (a.sin6_family == libc::AF_INET6 as libc::sa_family_t).then(|| {
                SocketAddr::from((
                    std::net::Ipv6Addr::from(a.sin6_addr.s6_addr),
                    u16::from_be(a.sin6_port),
                ))
            });
            let mut dsts = Vec::new();
            let cut = m.msg_flags & libc::MSG_CTRUNC != 0;
            // Safety: `m` is a header the kernel filled, its control buffer
            // and length as the kernel left them; CMSG_* walk only that.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(m);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    match ((*c).cmsg_level, (*c).cmsg_type) {
                        (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                            let i = std::ptr::read_unaligned(data.cast::<libc::in_pktinfo>());
                            dsts.push(Dst::V4 {
                                addr: i.ipi_addr.s_addr,
                                spec_dst: i.ipi_spec_dst.s_addr,
                            });
                        }
                        (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                            let i = std::ptr::read_unaligned(data.cast::<libc::in6_pktinfo>());
                            dsts.push(Dst::V6(i.ipi6_addr.s6_addr));
                        }
                        _ => {}
                    }
                    c = libc::CMSG_NXTHDR(m, c);
                }
            }
            let taken = if m.msg_flags & libc::MSG_TRUNC != 0 {
                // Larger than a slot: answering its first bytes would be a
                // wrong reply.
                Taken::TooLarge
            } else if cut {
                Taken::Refused(Refusal::NotUnicast)
            } else {
                refusal(from, &dsts).map_or_else(Taken::Refused, Taken::Answer)
            };
            out.push(((h.msg_len as usize).min(self.slot), taken));
        }
        Ok(())
    }
}

/// What the mmsg server makes of one received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Taken {
    /// To be answered, to this source.
    Answer(SocketAddr),
    /// Not answered, for this reason.
    Refused(Refusal),
    /// Longer than a receive slot (cut short by the kernel): not answered.
    TooLarge,
}

/// Counts a reply the kernel refused to send: to a broadcast destination
/// (EACCES without SO_BROADCAST: the request came from a subnet's
/// broadcast address, which the kernel does not drop as a martian on
/// input) it is `bad_source`, as the AF_XDP invoker counts the same
/// request; any other error, a reply made but not sent.
fn unsent(c: &Counters, e: &std::io::Error) {
    let counter = match e.raw_os_error() {
        Some(libc::EACCES) => &c.bad_source,
        _ => &c.tx_ring_full,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Batch of the mmsg baseline (the source used 1024).
pub const MMSG_BATCH: usize = 1024;

fn udp_socket(port: u16, reuse_port: bool) -> Result<UdpSocket, InvokerError> {
    let fail = |e: nix::Error| InvokerError::Config(format!("UDP socket for port {port}: {e}"));
    let fd = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet6,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(fail)?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &false).map_err(fail)?;
    // Each datagram's destination, for `refusal` (IPv4 ones arrive v4-mapped
    // on this dual-stack socket and carry IP_PKTINFO).
    setsockopt(&fd, sockopt::Ipv4PacketInfo, &true).map_err(fail)?;
    setsockopt(&fd, sockopt::Ipv6RecvPacketInfo, &true).map_err(fail)?;
    if reuse_port {
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(fail)?;
    }
    // A deep receive buffer, as a tuned server has (forced past rmem_max
    // when root; plain otherwise): bursts must not be lost for want of room.
    peregrine_io::deep_receive_buffer(&fd, 8 << 20);
    let any = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, port, 0, 0);
    nix::sys::socket::bind(fd.as_raw_fd(), &nix::sys::socket::SockaddrIn6::from(any))
        .map_err(|e| InvokerError::Config(format!("binding UDP port {port}: {e}")))?;
    let sock = UdpSocket::from(fd);
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| InvokerError::Config(format!("UDP port {port}: {e}")))?;
    Ok(sock)
}

fn answer(d: &Deployed, req: &[u8], out: &mut Vec<u8>, c: &Counters) -> bool {
    c.requests.fetch_add(1, Ordering::Relaxed);
    out.clear();
    if d.call(req, out).is_err() {
        c.failed.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    // `replies` is counted once the kernel took the reply.
    if let Some(p) = c.per_function.get(d.id as usize) {
        p.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// How a socket server's threads are organised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One thread serving every port (takes live changes).
    Simple,
    /// A thread per port and SO_REUSEPORT socket (fixed functions).
    Mmsg,
}

/// A running baseline server; stops and joins its threads on drop.
pub struct SocketServer {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub counters: Arc<Counters>,
    /// What the server may hold: its threads' buffers plus the kernel's
    /// receive buffer limit of every socket (SO_RCVBUF as granted).
    pub memory_bytes: usize,
    /// The functions served (changed while serving: `Routes`).
    pub live: Arc<Live>,
    kind: Kind,
    /// The network namespace the sockets were made in: a deployed port's
    /// socket is made there too.
    netns: std::fs::File,
}

/// The receive buffer the kernel granted `sock` (bytes of skb truesize).
fn rcvbuf(sock: &UdpSocket) -> usize {
    getsockopt(sock, sockopt::RcvBuf).unwrap_or(0)
}

/// The calling thread's network namespace.
fn this_netns() -> Result<std::fs::File, InvokerError> {
    std::fs::File::open("/proc/thread-self/ns/net")
        .map_err(|e| InvokerError::Config(format!("opening this network namespace: {e}")))
}

/// Datagrams the simple server takes from one port's socket before it
/// turns to the next: a flood on one port must not starve the others
/// (their requests would wait for as long as the flood lasts).
const TURN: usize = 32;

/// Answers at most `most` of what waits on `d`'s socket (fewer when it has
/// nothing more).
fn serve_socket(d: &Deployed, bufs: &mut SimpleBuffers, c: &Counters, most: usize) {
    let Some(s) = &d.socket else { return };
    for _ in 0..most {
        let mut iov = [IoSliceMut::new(&mut bufs.rx)];
        let Ok(msg) = recvmsg::<SockaddrStorage>(
            s.as_raw_fd(),
            &mut iov,
            Some(&mut bufs.cmsg),
            MsgFlags::MSG_DONTWAIT,
        ) else {
            break;
        };
        let (n, checked) = (msg.bytes, refusal_of(&msg));
        let from = match checked {
            Ok(from) => from,
            Err(why) => {
                c.requests.fetch_add(1, Ordering::Relaxed);
                c.refused(why);
                continue;
            }
        };
        if answer(d, &bufs.rx[..n], &mut bufs.out, c) {
            match s.send_to(&bufs.out, from) {
                Ok(_) => c.replies.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    unsent(c, &e);
                    0
                }
            };
        }
    }
}

/// The simple server's buffers: a datagram, its control messages, a reply.
struct SimpleBuffers {
    rx: Vec<u8>,
    cmsg: Vec<u8>,
    out: Vec<u8>,
}

/// poll(2) entries for every socket of `r`.
fn poll_fds(r: &Registry) -> Vec<libc::pollfd> {
    r.entries()
        .filter_map(|(_, d)| d.socket.as_ref())
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect()
}

/// The simple server's thread: every port's socket in turn (`TURN`
/// datagrams each), picking up changes to the registry between rounds. A
/// socket whose port was taken off is read dry (with the function it had)
/// before it is closed.
fn simple_loop(mut view: LiveView, c: &Counters, stop: &AtomicBool) {
    let mut bufs = SimpleBuffers {
        rx: vec![0u8; 65536],
        cmsg: pktinfo_space(),
        out: Vec::with_capacity(2048),
    };
    let mut fds = poll_fds(&view.registry);
    while !stop.load(Ordering::Relaxed) {
        // Safety: `fds` is a valid array of pollfd for the call (empty:
        // a 20 ms sleep).
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 20) };
        if let Some(old) = view.refresh() {
            for (port, d) in old.entries() {
                let kept = view.registry.get(port).and_then(|n| n.socket.as_ref());
                let same = matches!((kept, &d.socket), (Some(a), Some(b)) if Arc::ptr_eq(a, b));
                if !same {
                    // Read dry: the socket closes with this round.
                    serve_socket(d, &mut bufs, c, usize::MAX);
                }
            }
            fds = poll_fds(&view.registry);
        }
        // A turn each; what is left waits for the next round (poll
        // returns at once while a socket holds datagrams).
        for (_, d) in view.registry.entries() {
            serve_socket(d, &mut bufs, c, TURN);
        }
        view.drained();
    }
}

impl SocketServer {
    /// One thread, one socket per function, recvfrom/sendto. The sockets are
    /// made in the caller's namespace.
    pub fn simple(registry: Registry) -> Result<SocketServer, InvokerError> {
        Self::simple_pinned(registry, None)
    }

    /// As `simple`, the thread pinned to `cpu`.
    pub fn simple_on(registry: Registry, cpu: usize) -> Result<SocketServer, InvokerError> {
        Self::simple_pinned(registry, Some(cpu))
    }

    fn simple_pinned(
        mut registry: Registry,
        cpu: Option<usize>,
    ) -> Result<SocketServer, InvokerError> {
        let counters = Arc::new(Counters::for_live());
        let ports: Vec<u16> = registry.iter().map(|(p, _, _)| p).collect();
        // One 64 KiB receive buffer and a reply buffer, plus the sockets.
        let mut memory_bytes = 65536 + 2048;
        for port in ports {
            let s = udp_socket(port, false)?;
            memory_bytes += rcvbuf(&s);
            registry.set_socket(port, s).map_err(InvokerError::Config)?;
        }
        let live = Live::new(registry);
        let stop = Arc::new(AtomicBool::new(false));
        let (st, c, view) = (stop.clone(), counters.clone(), live.view());
        let t = std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                let _ = peregrine_host::cpu::pin_to_cpu(cpu);
            }
            simple_loop(view, &c, &st);
        });
        Ok(SocketServer {
            stop,
            threads: vec![t],
            counters,
            memory_bytes,
            live,
            kind: Kind::Simple,
            netns: this_netns()?,
        })
    }

    /// `threads` threads, each with its own SO_REUSEPORT socket per function,
    /// recvmmsg (MSG_WAITFORONE) and sendmmsg in batches.
    pub fn mmsg(
        registry: Registry,
        threads: usize,
        cpus: &[usize],
    ) -> Result<SocketServer, InvokerError> {
        let counters = Arc::new(Counters::for_live());
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        let mut memory_bytes = 0;
        for t in 0..threads.max(1) {
            for (port, d) in registry.entries() {
                let sock = udp_socket(port, true)?;
                // recvmmsg and sendmmsg buffers of MMSG_BATCH 2 KiB slots each.
                memory_bytes += 2 * MMSG_BATCH * 2048 + rcvbuf(&sock);
                let (st, c, d) = (stop.clone(), counters.clone(), d.clone());
                let cpu = (!cpus.is_empty()).then(|| cpus[t % cpus.len()]);
                handles.push(std::thread::spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = peregrine_host::cpu::pin_to_cpu(cpu);
                    }
                    mmsg_loop(sock, &d, &c, &st);
                }));
            }
        }
        Ok(SocketServer {
            stop,
            threads: handles,
            counters,
            memory_bytes,
            live: Live::new(registry),
            kind: Kind::Mmsg,
            netns: this_netns()?,
        })
    }
}

impl Routes for SocketServer {
    fn changeable(&self) -> Result<(), String> {
        match self.kind {
            Kind::Simple => Ok(()),
            Kind::Mmsg => Err(
                "the mmsg backend serves a fixed set of functions: serve with --backend afxdp or socket to deploy"
                    .into(),
            ),
        }
    }

    fn open(&self, port: u16) -> Result<Option<UdpSocket>, String> {
        let s = netns::run_in_file(&self.netns, || udp_socket(port, false))
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(Some(s))
    }

    /// The socket is the route: bound in `open`, served once published.
    fn route(&self, _port: u16, _id: u32) -> Result<(), String> {
        Ok(())
    }

    /// Closed when the worker lets go of it, after reading it dry.
    fn unroute(&self, _port: u16) -> Result<(), String> {
        Ok(())
    }
}

fn mmsg_loop(sock: UdpSocket, d: &Deployed, c: &Counters, stop: &AtomicBool) {
    const SLOT: usize = 2048;
    let fd = sock.as_raw_fd();
    let mut io = UdpBatch::new(sock, MMSG_BATCH);
    // recvmmsg with each datagram's destination (peregrine_io's batches
    // carry no control messages), then sendmmsg through `io`.
    let mut batch = PktinfoBatch::new(MMSG_BATCH, SLOT);
    let mut rx = vec![0u8; MMSG_BATCH * SLOT];
    let mut got: Vec<(usize, Taken)> = Vec::with_capacity(MMSG_BATCH);
    let mut tx = vec![0u8; MMSG_BATCH * SLOT];
    let mut replies: Vec<(usize, usize, Option<SocketAddr>)> = Vec::with_capacity(MMSG_BATCH);
    let mut out = Vec::with_capacity(SLOT);
    while !stop.load(Ordering::Relaxed) {
        got.clear();
        // SO_RCVTIMEO bounds the wait for the first datagram.
        if batch.recv(fd, &mut rx, &mut got).is_err() || got.is_empty() {
            continue;
        }
        replies.clear();
        for (i, (n, taken)) in got.iter().enumerate() {
            let from = match *taken {
                Taken::Answer(from) => from,
                Taken::Refused(why) => {
                    c.requests.fetch_add(1, Ordering::Relaxed);
                    c.refused(why);
                    continue;
                }
                Taken::TooLarge => {
                    c.requests.fetch_add(1, Ordering::Relaxed);
                    c.too_large.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            let req = &rx[i * SLOT..i * SLOT + n];
            if answer(d, req, &mut out, c) {
                if out.len() > SLOT {
                    c.too_large.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                tx[i * SLOT..i * SLOT + out.len()].copy_from_slice(&out);
                replies.push((i, out.len(), Some(from)));
            }
        }
        let transmits: Vec<Transmit> = replies
            .iter()
            .map(|&(i, len, to)| Transmit {
                destination: to,
                source: None,
                contents: &tx[i * SLOT..i * SLOT + len],
            })
            .collect();
        // sendmmsg stops at the first reply the kernel refuses: that one
        // is counted and the rest sent after it.
        let mut done = 0;
        while done < transmits.len() {
            match io.send(&transmits[done..]) {
                Ok(0) => {
                    let left = (transmits.len() - done) as u64;
                    c.tx_ring_full.fetch_add(left, Ordering::Relaxed);
                    break;
                }
                Ok(sent) => {
                    c.replies.fetch_add(sent as u64, Ordering::Relaxed);
                    done += sent;
                }
                Err(e) => {
                    unsent(c, &e);
                    done += 1;
                }
            }
        }
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
