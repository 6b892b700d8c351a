//! AF_XDP sockets for peregrine, built on the primitives of `s2n-quic-xdp`
//! (UMEM, the four rings, the syscalls). One `Xsk` is one socket bound to one
//! RX queue with its own UMEM (or one shared with the queue's other sockets):
//! half the frames feed the fill ring, the rest are free for transmission;
//! received frames can be answered in place. One module per kernel concept:
//!
//! - `config`: sizes, zero-copy, wake-up and busy-poll wishes;
//! - `umem`: the UMEM's frames with the fill and completion rings;
//! - `socket`: bind (own or shared UMEM), socket options, end of a batch;
//! - `rx`: the RX ring, frames handled in place;
//! - `tx`: the TX ring, new frames and kicks;
//! - `worker`: the pinned busy-polling thread loop the invoker and the AF_XDP
//!   sink share;
//! - `datagram`: AF_XDP behind the `peregrine_io::DatagramIo` trait, UDP/IP
//!   framed by `peregrine_wire`.

mod config;
mod datagram;
mod error;
mod rx;
mod socket;
mod tx;
mod umem;
mod worker;

pub use config::{BindMode, BusyPoll, XskConfig, ZeroCopy};
pub use datagram::XskDatagrams;
pub use error::{Result, XskError};
pub use rx::Verdict;
pub use s2n_quic_xdp::if_xdp::Statistics as XskStatistics;
pub use socket::{Xsk, XskStatsReader};
pub use worker::{FrameHandler, Workers};
