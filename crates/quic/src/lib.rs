//! QUIC on peregrine's UDP/IP stack: `StackSocket` is quinn 0.11's
//! `AsyncUdpSocket` on a `peregrine_stack::UdpSocket` (a QUIC endpoint's
//! datagrams move through AF_XDP, in the stack's batches), and `tls` sets
//! up the certificates and rustls configurations the endpoints use (a
//! self-signed certificate with its SHA-256 fingerprint when none is
//! given; a client that trusts a CA file, or anything with `insecure`);
//! `app` assembles `quic serve` and `quic get` (config in, handle or
//! report out) on the chosen I/O.
pub mod app;
pub mod http3;
mod socket;
pub mod tls;

pub use socket::{
    endpoint_on_kernel, endpoint_on_stack, KernelOffload, StackSocket, QUINN_MAX_SEGMENTS,
};
