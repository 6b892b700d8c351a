//! Datagram I/O in batches: one trait, `DatagramIo`, that a kernel UDP
//! socket, a PACKET_MMAP ring or an AF_XDP socket can each implement, so the
//! benchmarks and a UDP/IP stack above them do not care which one moves the
//! datagrams. Shaped like quinn-udp's: a batch of `Transmit`s goes out in one
//! call, a batch comes in into the caller's buffers with a `RecvMeta` each.
//!
//! - `udp`: kernel UDP sockets with sendmmsg/recvmmsg (`UdpBatch`), or one
//!   send/recv per datagram (`std::net::UdpSocket`);
//! - `packet_mmap`: AF_PACKET TX and RX rings shared with the kernel, and
//!   both behind the trait (`MmapDatagrams`);
//! - `frames`: UDP datagrams in Ethernet frames, built and classified for
//!   the transports that move whole frames (PACKET_MMAP, AF_XDP);
//! - `recv_batch`: reusable buffers a batch is received into;
//! - `addr`: socket addresses to and from the kernel's sockaddr;
//! - `sockopt`: socket options nix has no type for, one safe get and set.
use std::io::IoSliceMut;
use std::net::SocketAddr;

mod addr;
pub mod frames;
pub mod packet_mmap;
mod recv_batch;
pub mod sockopt;
mod udp;

pub use recv_batch::RecvBatch;
pub use udp::{deep_receive_buffer, receive_drops, set_udp_gro, set_udp_gso, UdpBatch};

/// One datagram to send.
#[derive(Debug, Clone, Copy)]
pub struct Transmit<'a> {
    /// Where to: None sends to the peer a connected socket has (which spares
    /// the kernel a route lookup per datagram).
    pub destination: Option<SocketAddr>,
    /// From where, for transports that build whole frames (PACKET_MMAP,
    /// AF_XDP; a generator's flows): None is the transport's own address
    /// and port. Sockets (the kernel's, the stack's) send from theirs.
    pub source: Option<SocketAddr>,
    pub contents: &'a [u8],
}

impl<'a> Transmit<'a> {
    /// `contents` to `destination` (None: a connected socket's peer) from
    /// the transport's own address.
    pub fn to(destination: Option<SocketAddr>, contents: &'a [u8]) -> Transmit<'a> {
        Transmit {
            destination,
            source: None,
            contents,
        }
    }
}

/// What came with one received datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes of the datagram in its buffer.
    pub len: usize,
    /// Who sent it, if the transport says.
    pub source: Option<SocketAddr>,
    /// Bytes of each datagram when the transport coalesced several into
    /// the buffer (UDP GRO): `len / stride` of them, the last maybe
    /// shorter. Zero when it did not.
    pub stride: usize,
}

/// Batched datagram send and receive.
pub trait DatagramIo {
    /// Most datagrams one call moves.
    fn max_batch(&self) -> usize;

    /// Sends the first datagrams of `transmits` (up to `max_batch`) in one
    /// go; returns how many the transport took.
    fn send(&mut self, transmits: &[Transmit<'_>]) -> std::io::Result<usize>;

    /// Receives up to `min(bufs.len(), meta.len(), max_batch)` datagrams,
    /// datagram `i` into `bufs[i]` described by `meta[i]`; returns how many.
    /// Waits for the first one as the transport is set up to (blocking,
    /// with a timeout, or not at all), not for the rest.
    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize>;
}
