//! Socket addresses to and from the kernel's `sockaddr_storage`.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Writes `addr` into `out`; returns the length the kernel is to read.
pub(crate) fn to_raw(addr: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // Safety: sockaddr_storage is large enough and aligned for any
            // sockaddr, sockaddr_in included.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // Safety: as above, for sockaddr_in6.
            unsafe { std::ptr::write((out as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads the address the kernel wrote into `raw` (`len` bytes of it).
pub(crate) fn from_raw(raw: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match raw.ss_family as libc::c_int {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // Safety: the kernel wrote a sockaddr_in here (family and length
            // say so); sockaddr_storage is aligned for it.
            let sin =
                unsafe { &*(raw as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // Safety: as above, for sockaddr_in6.
            let sin6 =
                unsafe { &*(raw as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(SocketAddrV6::new(ip, port, sin6.sin6_flowinfo, sin6.sin6_scope_id).into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_survive_the_round_trip() {
        for a in [
            "192.0.2.7:4791",
            "[2001:db8::1]:53",
            "[::ffff:10.0.0.1]:9",
            "[fe80::1%3]:1",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            // Safety: sockaddr_storage is plain data; zeroed is valid.
            let mut raw: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let len = to_raw(a, &mut raw);
            assert_eq!(from_raw(&raw, len), Some(a));
        }
    }
}
