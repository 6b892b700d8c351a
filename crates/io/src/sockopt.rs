//! Socket options nix has no type for (busy polling, `SO_MEMINFO`,
//! `SO_NETNS_COOKIE`, `SOL_XDP`, `SOL_PACKET` rings and statistics,
//! `IPV6_MTU`): one safe pair of calls for all of them, on plain C values.
//! Options nix does have go through `nix::sys::socket::sockopt`.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::os::fd::AsRawFd;

/// A value an option is read into or set from: plain data of a fixed size.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes, zeros included, must be
/// a valid value (the kernel writes any bytes it likes into one).
pub unsafe trait OptionValue: Copy {}

// Safety: integers and arrays of them are valid for every bit pattern.
unsafe impl OptionValue for libc::c_int {}
// Safety: as above.
unsafe impl OptionValue for libc::c_uint {}
// Safety: as above.
unsafe impl OptionValue for u64 {}
// Safety: as above.
unsafe impl<const N: usize> OptionValue for [u32; N] {}
// Safety: libc's if_packet structs are all u32 fields.
unsafe impl OptionValue for libc::tpacket_req {}
// Safety: as above.
unsafe impl OptionValue for libc::tpacket_req3 {}
// Safety: as above.
unsafe impl OptionValue for libc::tpacket_stats_v3 {}

/// `setsockopt(fd, level, name, value)`.
pub fn set<T: OptionValue>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    // Safety: `value` points at a live T whose size is passed; the kernel
    // only reads it. A stale fd makes the call fail, nothing more.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `getsockopt(fd, level, name)` into a T (bytes the kernel did not write
/// stay zero).
pub fn get<T: OptionValue>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> std::io::Result<T> {
    // Safety: zeros are a valid T (OptionValue's contract).
    let mut value: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // Safety: `value` and `len` are valid for writes; the kernel writes at
    // most `len` bytes, any of which make a valid T (OptionValue).
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut T).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is set is read back (SO_RCVBUF: the kernel doubles it).
    #[test]
    fn set_then_get() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set(&s, libc::SOL_SOCKET, libc::SO_RCVBUF, &(64 << 10)).unwrap();
        let got: libc::c_int = get(&s, libc::SOL_SOCKET, libc::SO_RCVBUF).unwrap();
        assert_eq!(got, 128 << 10);
        let e = get::<libc::c_int>(&s, libc::SOL_SOCKET, -1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOPROTOOPT));
    }
}
