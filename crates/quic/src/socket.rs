//! quinn's `AsyncUdpSocket` on a stack socket.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use peregrine_io::{RecvMeta, Transmit};
use peregrine_stack::UdpSocket;
use quinn::{AsyncUdpSocket, UdpPoller};

/// Most datagrams one quinn transmit may carry (GSO-style segments, sent
/// as one stack batch), and most received per poll.
const BATCH: usize = 32;

/// Segments quinn puts in one transmit at most (its MAX_TRANSMIT_SEGMENTS):
/// more is never asked of a socket.
pub const QUINN_MAX_SEGMENTS: usize = 10;

/// A stack socket as quinn's UDP socket.
pub struct StackSocket {
    sock: UdpSocket,
    tx_segments: usize,
}

impl StackSocket {
    /// Takes transmits of as many datagrams as quinn builds.
    pub fn new(sock: UdpSocket) -> StackSocket {
        StackSocket {
            sock,
            tx_segments: QUINN_MAX_SEGMENTS,
        }
    }

    /// Tells quinn to build transmits of at most `n` datagrams (1 to
    /// `QUINN_MAX_SEGMENTS`), each sent as one TX batch: one AF_XDP kick per
    /// transmit, so `n` is the TX batch size.
    pub fn with_tx_segments(mut self, n: usize) -> StackSocket {
        self.tx_segments = n.clamp(1, QUINN_MAX_SEGMENTS);
        self
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }
}

impl From<UdpSocket> for StackSocket {
    fn from(sock: UdpSocket) -> StackSocket {
        StackSocket::new(sock)
    }
}

impl fmt::Debug for StackSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackSocket")
            .field("local", &self.sock.local_addr())
            .finish()
    }
}

/// A quinn endpoint on stack socket `sock` (a server when `server` is
/// given), driven by the tokio runtime the caller is in.
pub fn endpoint_on_stack(
    sock: impl Into<StackSocket>,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        server,
        Arc::new(sock.into()),
        Arc::new(quinn::TokioRuntime),
    )
}

/// What a kernel UDP socket under quinn may use of the kernel's offloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelOffload {
    /// GSO on send (quinn's transmits of up to 10 datagrams in one
    /// sendmsg) and GRO on receive, as quinn sets them up.
    GsoGro,
    /// One datagram per sendmsg and UDP_GRO off: plain kernel UDP, what a
    /// QUIC implementation without segmentation offload does (the seed's
    /// "kernel UDP").
    Off,
}

/// A quinn endpoint on kernel UDP socket `sock`, driven by the caller's
/// tokio runtime.
pub fn endpoint_on_kernel(
    sock: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
    offload: KernelOffload,
) -> io::Result<quinn::Endpoint> {
    let rt = Arc::new(quinn::TokioRuntime);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
    let sock = quinn::Runtime::wrap_udp_socket(&*rt, sock)?;
    let sock = match offload {
        KernelOffload::GsoGro => sock,
        KernelOffload::Off => {
            // quinn-udp turned UDP_GRO on while wrapping; off again, the
            // kernel hands over one datagram per receive.
            // Safety: `fd` is the socket `sock` owns, open while it lives.
            let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            peregrine_io::set_udp_gro(&fd, false)?;
            Arc::new(Unsegmented(sock))
        }
    };
    quinn::Endpoint::new_with_abstract_socket(quinn::EndpointConfig::default(), server, sock, rt)
}

/// A kernel socket quinn sees as taking and giving one datagram per call.
#[derive(Debug)]
struct Unsegmented(Arc<dyn AsyncUdpSocket>);

impl AsyncUdpSocket for Unsegmented {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.0.clone().create_io_poller()
    }
    fn try_send(&self, t: &quinn::udp::Transmit) -> io::Result<()> {
        self.0.try_send(t)
    }
    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
    fn max_transmit_segments(&self) -> usize {
        1
    }
    fn max_receive_segments(&self) -> usize {
        1
    }
    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

/// Waits for TX room on the stack socket's queue.
struct Poller {
    sock: Arc<StackSocket>,
}

impl fmt::Debug for Poller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StackSocket poller")
    }
}

impl UdpPoller for Poller {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        self.sock.sock.poll_send_ready(cx).map(Ok)
    }
}

impl AsyncUdpSocket for StackSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Poller { sock: self })
    }

    /// Sends the transmit's datagrams (its `segment_size` pieces) as stack
    /// batches. quinn resends a transmit that returns WouldBlock, so that
    /// is only returned when nothing went; once part went, the rest gets a
    /// short wait for ring room and is otherwise left to QUIC's loss
    /// recovery (counted by the stack as `tx_ring_full`).
    fn try_send(&self, t: &quinn::udp::Transmit) -> io::Result<()> {
        let seg = t.segment_size.unwrap_or(t.contents.len()).max(1);
        let mut list = [Transmit {
            destination: Some(t.destination),
            source: None,
            contents: &[],
        }; BATCH];
        let mut n = 0;
        for c in t.contents.chunks(seg).take(BATCH) {
            list[n].contents = c;
            n += 1;
        }
        if t.contents.is_empty() {
            n = 1;
        }
        let mut sent = 0;
        let deadline = Instant::now() + Duration::from_millis(2);
        while sent < n {
            match self.sock.send_batch(&list[sent..n]) {
                Ok(k) => sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if sent == 0 {
                        return Err(e);
                    }
                    if Instant::now() >= deadline {
                        break;
                    }
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let max = bufs.len().min(meta.len()).min(BATCH);
        let mut ours = [RecvMeta::default(); BATCH];
        let n = match self.sock.poll_recv(cx, &mut bufs[..max], &mut ours[..max]) {
            Poll::Ready(Ok(n)) => n,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        };
        let local = self.sock.local_addr().ip();
        for (m, o) in meta.iter_mut().zip(&ours[..n]) {
            *m = quinn::udp::RecvMeta {
                addr: o.source.unwrap_or(SocketAddr::new(local, 0)),
                len: o.len,
                stride: o.len,
                ecn: None,
                dst_ip: (!local.is_unspecified()).then_some(local),
            };
        }
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.sock.local_addr())
    }

    fn max_transmit_segments(&self) -> usize {
        self.tx_segments
    }

    fn max_receive_segments(&self) -> usize {
        1
    }

    /// The stack never fragments (it refuses datagrams above the MTU).
    fn may_fragment(&self) -> bool {
        false
    }
}
