//! A UDP/IP stack on AF_XDP: UDP sockets, IPv4 and IPv6, on one interface.
//!
//! - `Stack::open` attaches `bpf/stack/steer.bpf.c` at the interface's XDP
//!   hook and opens one AF_XDP socket per RX queue (`peregrine_xsk`). The
//!   program sends datagrams for bound addresses and ports to the socket of
//!   their RX queue and everything else to the kernel, which keeps answering
//!   ARP, ND and ping.
//! - `Stack::bind` gives a `UdpSocket`: `send_to`/`recv_from`, batched
//!   `send_batch`/`recv_batch` (io's `Transmit`/`RecvMeta`, and io's
//!   `DatagramIo`), and readiness for async runtimes (`poll_recv`,
//!   `poll_send_ready`: plain wakers, no runtime of its own).
//! - Frames are checked and built by `peregrine_wire` (`rx`): checksums
//!   computed in software on TX, verified on RX, the partial checksum of
//!   local senders accepted. Every drop has a counter (`counters`).
//! - Next hops (`neigh`) come from the kernel: its route to a destination
//!   and its neighbour table, followed through netlink events; a missing
//!   neighbour is resolved by the kernel itself (NTF_USE), the datagrams
//!   for it held meanwhile. A service thread does the netlink work, wakes
//!   waiting sockets and drains RX rings nobody else is reading.
mod counters;
mod error;
mod neigh;
pub mod rx;
mod socket;
mod stack;

pub use counters::StackCounters;
pub use error::{Result, StackError};
pub use socket::UdpSocket;
pub use stack::{Stack, StackConfig, XdpCounters};
