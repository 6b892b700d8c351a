//! The source's baselines, with the same functions: `socket` (one thread,
//! recvfrom/sendto) and `mmsg` (threads with SO_REUSEPORT sockets,
//! recvmmsg/sendmmsg with MSG_WAITFORONE). Both bind dual-stack ([::]).
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use peregrine_io::{DatagramIo, RecvBatch, Transmit, UdpBatch};

use crate::functions::{Function, Registry};
use crate::invoker::{Counters, InvokerError};

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
    if reuse_port {
        setsockopt(&fd, sockopt::ReusePort, &true).map_err(fail)?;
    }
    // A deep receive buffer, as a tuned server has (forced past rmem_max
    // when root; plain otherwise): bursts must not be lost for want of room.
    if setsockopt(&fd, sockopt::RcvBufForce, &(8 << 20)).is_err() {
        let _ = setsockopt(&fd, sockopt::RcvBuf, &(8 << 20));
    }
    let any = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, port, 0, 0);
    nix::sys::socket::bind(fd.as_raw_fd(), &nix::sys::socket::SockaddrIn6::from(any))
        .map_err(|e| InvokerError::Config(format!("binding UDP port {port}: {e}")))?;
    let sock = UdpSocket::from(fd);
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| InvokerError::Config(format!("UDP port {port}: {e}")))?;
    Ok(sock)
}

fn answer(f: &dyn Function, id: u32, req: &[u8], out: &mut Vec<u8>, c: &Counters) -> bool {
    c.requests.fetch_add(1, Ordering::Relaxed);
    out.clear();
    if f.call(req, out).is_err() {
        c.failed.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    c.replies.fetch_add(1, Ordering::Relaxed);
    if let Some(p) = c.per_function.get(id as usize) {
        p.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// A running baseline server; stops and joins its threads on drop.
pub struct SocketServer {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub counters: Arc<Counters>,
    /// What the server may hold: its threads' buffers plus the kernel's
    /// receive buffer limit of every socket (SO_RCVBUF as granted).
    pub memory_bytes: usize,
}

/// The receive buffer the kernel granted `sock` (bytes of skb truesize).
fn rcvbuf(sock: &UdpSocket) -> usize {
    getsockopt(sock, sockopt::RcvBuf).unwrap_or(0)
}

impl SocketServer {
    fn counters(registry: &Registry) -> Arc<Counters> {
        Arc::new(Counters {
            per_function: (0..registry.len()).map(|_| Default::default()).collect(),
            ..Default::default()
        })
    }

    /// One thread, one socket per function, recvfrom/sendto. The sockets are
    /// made in the caller's namespace.
    pub fn simple(registry: Registry) -> Result<SocketServer, InvokerError> {
        Self::simple_pinned(registry, None)
    }

    /// As `simple`, the thread pinned to `cpu`.
    pub fn simple_on(registry: Registry, cpu: usize) -> Result<SocketServer, InvokerError> {
        Self::simple_pinned(registry, Some(cpu))
    }

    fn simple_pinned(registry: Registry, cpu: Option<usize>) -> Result<SocketServer, InvokerError> {
        let counters = Self::counters(&registry);
        let socks: Vec<(UdpSocket, u32, Arc<dyn Function>)> = registry
            .iter()
            .map(|(port, id, f)| Ok((udp_socket(port, false)?, id, f.clone())))
            .collect::<Result<_, InvokerError>>()?;
        // One 64 KiB receive buffer and a reply buffer, plus the sockets.
        let memory_bytes = 65536 + 2048 + socks.iter().map(|(s, _, _)| rcvbuf(s)).sum::<usize>();
        for (s, _, _) in &socks {
            s.set_nonblocking(true)
                .map_err(|e| InvokerError::Config(e.to_string()))?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (st, c) = (stop.clone(), counters.clone());
        let t = std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                let _ = peregrine_host::cpu::pin_to_cpu(cpu);
            }
            let mut buf = vec![0u8; 65536];
            let mut out = Vec::with_capacity(2048);
            let mut fds: Vec<libc::pollfd> = socks
                .iter()
                .map(|(s, _, _)| libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            while !st.load(Ordering::Relaxed) {
                // Safety: `fds` is a valid array of pollfd for the call.
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
                for (s, id, f) in &socks {
                    while let Ok((n, from)) = s.recv_from(&mut buf) {
                        if answer(f.as_ref(), *id, &buf[..n], &mut out, &c) {
                            let _ = s.send_to(&out, from);
                        }
                    }
                }
            }
        });
        Ok(SocketServer {
            stop,
            threads: vec![t],
            counters,
            memory_bytes,
        })
    }

    /// `threads` threads, each with its own SO_REUSEPORT socket per function,
    /// recvmmsg (MSG_WAITFORONE) and sendmmsg in batches.
    pub fn mmsg(
        registry: Registry,
        threads: usize,
        cpus: &[usize],
    ) -> Result<SocketServer, InvokerError> {
        let counters = Self::counters(&registry);
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        let mut memory_bytes = 0;
        for t in 0..threads.max(1) {
            for (port, id, f) in registry.iter() {
                let sock = udp_socket(port, true)?;
                // recvmmsg and sendmmsg buffers of MMSG_BATCH 2 KiB slots each.
                memory_bytes += 2 * MMSG_BATCH * 2048 + rcvbuf(&sock);
                let (st, c, f) = (stop.clone(), counters.clone(), f.clone());
                let cpu = (!cpus.is_empty()).then(|| cpus[t % cpus.len()]);
                handles.push(std::thread::spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = peregrine_host::cpu::pin_to_cpu(cpu);
                    }
                    mmsg_loop(sock, id, f.as_ref(), &c, &st);
                }));
            }
        }
        Ok(SocketServer {
            stop,
            threads: handles,
            counters,
            memory_bytes,
        })
    }
}

fn mmsg_loop(sock: UdpSocket, id: u32, f: &dyn Function, c: &Counters, stop: &AtomicBool) {
    const SLOT: usize = 2048;
    let mut io = UdpBatch::new(sock, MMSG_BATCH);
    let mut rx = RecvBatch::new(MMSG_BATCH, SLOT);
    let mut tx = vec![0u8; MMSG_BATCH * SLOT];
    let mut replies: Vec<(usize, usize, Option<SocketAddr>)> = Vec::with_capacity(MMSG_BATCH);
    let mut out = Vec::with_capacity(SLOT);
    while !stop.load(Ordering::Relaxed) {
        // SO_RCVTIMEO bounds the wait for the first datagram.
        if !matches!(rx.recv(&mut io), Ok(n) if n > 0) {
            continue;
        }
        replies.clear();
        for (i, (req, meta)) in rx.iter().enumerate() {
            if answer(f, id, req, &mut out, c) && out.len() <= SLOT {
                tx[i * SLOT..i * SLOT + out.len()].copy_from_slice(&out);
                replies.push((i, out.len(), meta.source));
            }
        }
        let transmits: Vec<Transmit> = replies
            .iter()
            .map(|&(i, len, to)| Transmit {
                destination: to,
                contents: &tx[i * SLOT..i * SLOT + len],
            })
            .collect();
        let mut done = 0;
        while done < transmits.len() {
            match io.send(&transmits[done..]) {
                Ok(sent) if sent > 0 => done += sent,
                _ => break,
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
