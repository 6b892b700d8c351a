//! quinn's `AsyncUdpSocket` on a stack socket.
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

/// A stack socket as quinn's UDP socket.
pub struct StackSocket {
    sock: UdpSocket,
}

impl StackSocket {
    pub fn new(sock: UdpSocket) -> StackSocket {
        StackSocket { sock }
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }
}

impl fmt::Debug for StackSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackSocket")
            .field("local", &self.sock.local_addr())
            .finish()
    }
}

/// A quinn endpoint on `sock` (a server when `server` is given), driven by
/// the tokio runtime the caller is in.
pub fn endpoint_on_stack(
    sock: UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new_with_abstract_socket(
        quinn::EndpointConfig::default(),
        server,
        Arc::new(StackSocket::new(sock)),
        Arc::new(quinn::TokioRuntime),
    )
}

/// A quinn endpoint on kernel UDP socket `sock` (GSO and GRO as quinn
/// enables them), driven by the caller's tokio runtime.
pub fn endpoint_on_kernel(
    sock: std::net::UdpSocket,
    server: Option<quinn::ServerConfig>,
) -> io::Result<quinn::Endpoint> {
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        server,
        sock,
        Arc::new(quinn::TokioRuntime),
    )
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
        BATCH
    }

    fn max_receive_segments(&self) -> usize {
        1
    }

    /// The stack never fragments (it refuses datagrams above the MTU).
    fn may_fragment(&self) -> bool {
        false
    }
}
