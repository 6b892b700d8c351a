//! PACKET_MMAP: AF_PACKET sockets whose frames live in a ring shared with
//! the kernel, one module per kernel concept:
//!
//! - `tx_ring`: a TPACKET_V2 TX ring; frames built in place by the caller,
//!   flushed with one `send()` per batch;
//! - `rx_ring`: a TPACKET_V3 RX block ring; blocks handed over whole, the
//!   kernel's `PACKET_STATISTICS` (drops when no block was free) summed;
//! - `datagrams`: both behind `DatagramIo` (`MmapDatagrams`), UDP frames
//!   built and parsed by `peregrine_wire`.
//!
//! Kernel structs and constants are libc's `linux/if_packet.h` bindings
//! (generated from and checked against the kernel headers by libc's ctest),
//! never mirrored here.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

mod datagrams;
mod rx_ring;
mod tx_ring;

pub use datagrams::MmapDatagrams;
pub use rx_ring::{RingStats, RxRing, RxRingConfig};
pub use tx_ring::{TxRing, TxRingConfig};

/// The interface index of `iface` in the calling thread's namespace.
fn ifindex(iface: &str) -> std::io::Result<u32> {
    let name = CString::new(iface).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // Safety: `name` is a NUL-terminated string alive for the call.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no interface {iface:?} in this network namespace"),
        )),
        i => Ok(i),
    }
}

/// A raw AF_PACKET socket taking `protocol` (host order; 0: none, for a
/// socket that only sends).
fn packet_socket(protocol: u16) -> std::io::Result<OwnedFd> {
    // Safety: plain socket(2) call; the result is checked before use.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::c_int::from(protocol.to_be()),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: `fd` is a descriptor we just opened and own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setsockopt(SOL_PACKET, opt, value)`.
fn set_packet_opt<T: crate::sockopt::OptionValue>(
    fd: &OwnedFd,
    opt: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    crate::sockopt::set(fd, libc::SOL_PACKET, opt, value)
}

/// Binds `fd` to interface `ifindex` for `protocol` (host order).
fn bind_to(fd: &OwnedFd, ifindex: u32, protocol: u16) -> std::io::Result<()> {
    // Safety: sockaddr_ll is plain data; zeroed is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = protocol.to_be();
    sll.sll_ifindex = ifindex as i32;
    // Safety: `sll` is a valid sockaddr_ll of the size passed.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A ring mapped from a packet socket; unmapped on drop.
struct Mapped {
    base: *mut u8,
    len: usize,
}

// Safety: the mapping is owned by this value alone; the kernel's side of it
// is synchronised through the status words, read and written atomically.
unsafe impl Send for Mapped {}

impl Mapped {
    fn new(fd: &OwnedFd, len: usize) -> std::io::Result<Mapped> {
        // Safety: mapping a ring the socket has set up, of its exact size;
        // the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Mapped {
            base: p.cast(),
            len,
        })
    }

    /// The status word at `offset` (a u32 at the start of a frame or
    /// block header), for atomic access shared with the kernel.
    fn status(&self, offset: usize) -> &std::sync::atomic::AtomicU32 {
        assert!(offset + 4 <= self.len && offset.is_multiple_of(4));
        // Safety: in bounds and aligned (checked); the mapping lives as
        // long as `self`; the kernel accesses this word atomically too.
        unsafe { &*self.base.add(offset).cast::<std::sync::atomic::AtomicU32>() }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // Safety: unmapping exactly what `new` mapped, once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}
