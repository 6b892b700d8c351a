//! Shared by the faas crate's privileged tests (default_offloads,
//! unanswered, wasm_serving): client sockets of both families, and raw
//! sockets that send crafted datagrams and frames from outside the server.
#![allow(unsafe_code)]
// this module holds unsafe code; each block says why it is sound
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use peregrine_host::netns;

/// A client's UDP socket in namespace `ns` for each family (bound to
/// 198.18.0.1 and 2001:db8::1), each with the server's address it talks to
/// (198.18.0.2, 2001:db8::2).
pub fn clients_in(ns: &str) -> Vec<(UdpSocket, IpAddr)> {
    [
        ("198.18.0.1:0", "198.18.0.2"),
        ("[2001:db8::1]:0", "2001:db8::2"),
    ]
    .into_iter()
    .map(|(bind, server)| {
        let bind: SocketAddr = bind.parse().unwrap();
        let sock = netns::run_in(ns, || UdpSocket::bind(bind))
            .unwrap()
            .unwrap();
        (sock, server.parse().unwrap())
    })
    .collect()
}

/// A raw socket(2) of `domain`, `ty` and `protocol`, owned.
pub fn raw_socket(domain: i32, ty: i32, protocol: i32) -> OwnedFd {
    // Safety: plain socket(2); the fd is owned by the OwnedFd at once.
    let raw = unsafe { libc::socket(domain, ty, protocol) };
    assert!(raw >= 0, "raw socket: {}", std::io::Error::last_os_error());
    // Safety: `raw` is a fresh descriptor nobody else owns.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

/// A socket address type sendto(2) takes as it is (plain data).
pub trait SockAddr {}
impl SockAddr for libc::sockaddr_in {}
impl SockAddr for libc::sockaddr_ll {}

/// Sends `buf` from `fd` to `to`; panics unless all of it went.
pub fn send_all<A: SockAddr>(fd: &OwnedFd, buf: &[u8], to: &A) {
    // Safety: `buf` and `to` live across the call and the lengths are
    // theirs; `to` is a socket address (`SockAddr`).
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (to as *const A).cast(),
            std::mem::size_of::<A>() as libc::socklen_t,
        )
    };
    assert_eq!(n, buf.len() as isize, "{}", std::io::Error::last_os_error());
}
