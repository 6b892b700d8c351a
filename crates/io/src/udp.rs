//! Kernel UDP sockets moving datagrams in batches with sendmmsg and recvmmsg
//! (MSG_WAITFORONE: the first datagram is waited for as the socket says,
//! the rest of the batch is whatever is already queued).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{getsockopt, setsockopt, sockopt};

use crate::{addr, DatagramIo, RecvMeta, Transmit};

/// A UDP socket with the message headers of one batch, set up once: header
/// `i` always points at iovec `i`; each call points the iovecs at the
/// caller's buffers and the names at what it needs.
pub struct UdpBatch {
    socket: UdpSocket,
    headers: Vec<libc::mmsghdr>,
    iovecs: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    /// Room for each received message's control data (the UDP GRO
    /// segment size); u64s for cmsghdr's alignment.
    controls: Vec<[u64; 8]>,
}

// Safety: the raw pointers in `headers` and `iovecs` point into this value's
// own heap vectors (never resized, so they do not move with it) or at the
// caller's buffers during a call only; nothing else shares them.
unsafe impl Send for UdpBatch {}

impl UdpBatch {
    /// Wraps `socket` (bound, connected or not, blocking or not as the
    /// caller set it) for batches of up to `batch` datagrams.
    pub fn new(socket: UdpSocket, batch: usize) -> UdpBatch {
        let batch = batch.max(1);
        let empty_iovec = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iovecs = vec![empty_iovec; batch];
        // Safety: sockaddr_storage is plain data; zeroed is valid.
        let names = vec![unsafe { std::mem::zeroed::<libc::sockaddr_storage>() }; batch];
        let headers = iovecs
            .iter_mut()
            .map(|v| {
                // Safety: mmsghdr is plain data; zeroed is a valid empty header.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        UdpBatch {
            socket,
            headers,
            iovecs,
            names,
            controls: vec![[0; 8]; batch],
        }
    }

    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Header, iovec and name of each message slot, for a call to fill.
    fn slots(
        &mut self,
    ) -> impl Iterator<
        Item = (
            &mut libc::msghdr,
            &mut libc::iovec,
            &mut libc::sockaddr_storage,
        ),
    > {
        let parts = self.headers.iter_mut().zip(&mut self.iovecs);
        parts
            .zip(&mut self.names)
            .map(|((m, v), name)| (&mut m.msg_hdr, v, name))
    }
}

/// What a sendmmsg or recvmmsg returned: messages moved, or the error.
fn count(r: libc::c_int) -> std::io::Result<usize> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

impl DatagramIo for UdpBatch {
    fn max_batch(&self) -> usize {
        self.headers.len()
    }

    fn send(&mut self, transmits: &[Transmit<'_>]) -> std::io::Result<usize> {
        let n = transmits.len().min(self.headers.len());
        if n == 0 {
            return Ok(0);
        }
        for ((m, v, name), t) in self.slots().zip(transmits) {
            // sendmmsg only reads the buffer; iovec has one pointer type.
            v.iov_base = t.contents.as_ptr().cast_mut().cast();
            v.iov_len = t.contents.len();
            (m.msg_control, m.msg_controllen) = (std::ptr::null_mut(), 0);
            (m.msg_name, m.msg_namelen) = match t.destination {
                Some(to) => {
                    let len = addr::to_raw(to, name);
                    ((name as *mut libc::sockaddr_storage).cast(), len)
                }
                None => (std::ptr::null_mut(), 0),
            };
        }
        // Safety: headers 0..n point at iovecs and names of this value and at
        // the contents of `transmits`, all alive and unmoved for the call.
        let r = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                n as u32,
                0,
            )
        };
        count(r)
    }

    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(self.headers.len());
        if n == 0 {
            return Ok(0);
        }
        for ((m, v, name), buf) in self.slots().zip(bufs.iter_mut()) {
            v.iov_base = buf.as_mut_ptr().cast();
            v.iov_len = buf.len();
            m.msg_name = (name as *mut libc::sockaddr_storage).cast();
            m.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
        }
        for (m, c) in self.headers.iter_mut().zip(&mut self.controls) {
            m.msg_hdr.msg_control = c.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = std::mem::size_of_val(c);
        }
        // Safety: headers 0..n point at iovecs and names of this value and at
        // the buffers of `bufs`, all alive and unmoved for the call.
        let r = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                n as u32,
                libc::MSG_WAITFORONE,
                std::ptr::null_mut(),
            )
        };
        let got = count(r)?;
        for ((m, name), out) in self.headers.iter().zip(&self.names).zip(meta).take(got) {
            *out = RecvMeta {
                len: m.msg_len as usize,
                source: addr::from_raw(name, m.msg_hdr.msg_namelen),
                stride: gro_segment(&m.msg_hdr),
            };
        }
        Ok(got)
    }
}

/// The plain path: one send(2) or recv(2) per call, one datagram each
/// (the baseline the batched paths are measured against).
impl DatagramIo for UdpSocket {
    fn max_batch(&self) -> usize {
        1
    }

    fn send(&mut self, transmits: &[Transmit<'_>]) -> std::io::Result<usize> {
        let Some(t) = transmits.first() else {
            return Ok(0);
        };
        match t.destination {
            Some(to) => self.send_to(t.contents, to)?,
            None => UdpSocket::send(self, t.contents)?,
        };
        Ok(1)
    }

    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        let (Some(buf), Some(m)) = (bufs.first_mut(), meta.first_mut()) else {
            return Ok(0);
        };
        let (len, from) = self.recv_from(buf)?;
        *m = RecvMeta {
            len,
            source: Some(from),
            stride: 0,
        };
        Ok(1)
    }
}

/// The UDP GRO segment size the kernel put in a received message's
/// control data, or 0 when it coalesced nothing.
fn gro_segment(m: &libc::msghdr) -> usize {
    // Safety: `m` is a header recvmmsg filled; the CMSG macros walk its
    // control buffer within msg_controllen, which the kernel set.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return size.max(0) as usize;
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    0
}

/// Sends every datagram of `segment` bytes or more as UDP GSO segments of
/// that size (UDP_SEGMENT): one send of a buffer of k segments leaves as
/// k datagrams, split by the stack (or the device) after the socket layer.
/// 0 turns it off.
pub fn set_udp_gso(socket: &impl AsFd, segment: u16) -> std::io::Result<()> {
    setsockopt(socket, sockopt::UdpGsoSegment, &libc::c_int::from(segment)).map_err(Into::into)
}

/// Lets the stack coalesce received datagrams of one flow into one buffer
/// (UDP_GRO); each received message then says its segment size
/// (`RecvMeta::stride`).
pub fn set_udp_gro(socket: &impl AsFd, on: bool) -> std::io::Result<()> {
    setsockopt(socket, sockopt::UdpGroSegment, &on).map_err(Into::into)
}

/// Gives `socket` a receive buffer of `bytes`: forced past `rmem_max` where
/// the caller may (CAP_NET_ADMIN), as a tuned server has; otherwise as much
/// as `rmem_max` allows. A burst must not be lost for want of room while the
/// receiving thread waits for a CPU. Returns the buffer the kernel granted.
pub fn deep_receive_buffer(socket: &impl AsFd, bytes: usize) -> usize {
    let want = bytes.min(i32::MAX as usize);
    if setsockopt(socket, sockopt::RcvBufForce, &want).is_err() {
        let _ = setsockopt(socket, sockopt::RcvBuf, &want);
    }
    getsockopt(socket, sockopt::RcvBuf).unwrap_or(0)
}

/// Datagrams the kernel dropped at `socket` (receive buffer full, or a bad
/// UDP checksum found on delivery): `SK_MEMINFO_DROPS` of `SO_MEMINFO`.
pub fn receive_drops(socket: &impl AsRawFd) -> std::io::Result<u64> {
    // <linux/sock_diag.h>: SK_MEMINFO_VARS is 9 since Linux 4.x, DROPS
    // the last; asm-generic/socket.h: SO_MEMINFO 55 (libc lacks it here).
    const SO_MEMINFO: libc::c_int = 55;
    let info: [u32; 9] = crate::sockopt::get(socket, libc::SOL_SOCKET, SO_MEMINFO)?;
    Ok(u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Duration;

    /// A batch sent to a socket on loopback arrives whole, in order, with
    /// its lengths and the sender's address, in a RecvBatch.
    fn round_trip(local: &str) {
        let rx = UdpSocket::bind(local).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = rx.local_addr().unwrap();
        let tx = UdpSocket::bind(local).unwrap();
        let from = tx.local_addr().unwrap();
        let (mut tx, mut rx) = (UdpBatch::new(tx, 8), UdpBatch::new(rx, 8));

        let payloads: Vec<Vec<u8>> = (1..=5u8).map(|i| vec![i; 100 * i as usize]).collect();
        let transmits: Vec<Transmit> = payloads
            .iter()
            .map(|p| Transmit {
                destination: Some(to),
                source: None,
                contents: p,
            })
            .collect();
        assert_eq!(tx.send(&transmits).unwrap(), 5);

        let mut batch = crate::RecvBatch::new(8, 2048);
        let mut got = Vec::new();
        while got.len() < 5 {
            batch.recv(&mut rx).unwrap();
            got.extend(batch.iter().map(|(buf, m)| (buf.to_vec(), m)));
        }
        for (p, (buf, meta)) in payloads.iter().zip(&got) {
            assert_eq!(meta.len, p.len());
            assert_eq!(buf, p);
            assert_eq!(meta.source, Some::<SocketAddr>(from));
        }
    }

    #[test]
    fn loopback_v4() {
        round_trip("127.0.0.1:0");
    }

    #[test]
    fn loopback_v6() {
        round_trip("[::1]:0");
    }

    /// A connected socket sends without naming the destination.
    #[test]
    fn connected_send() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut tx = UdpBatch::new(tx, 4);
        let t = Transmit {
            destination: None,
            source: None,
            contents: b"peregrine",
        };
        assert_eq!(tx.send(&[t, t]).unwrap(), 2);
        let mut buf = [0u8; 64];
        for _ in 0..2 {
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"peregrine");
        }
    }

    /// A buffer of k segments sent with UDP GSO arrives as k datagrams of
    /// the segment size, whether the receiver takes them one by one or
    /// coalesced with UDP GRO (then `stride` says how to split them).
    #[test]
    fn gso_segments_arrive_whole_with_and_without_gro() {
        for gro in [false, true] {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            set_udp_gro(&rx, gro).unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            tx.connect(rx.local_addr().unwrap()).unwrap();
            set_udp_gso(&tx, 100).unwrap();
            let buf: Vec<u8> = (0..1000u32).map(|i| (i / 100) as u8).collect();
            let mut tx = UdpBatch::new(tx, 2);
            let t = Transmit {
                destination: None,
                source: None,
                contents: &buf,
            };
            assert_eq!(tx.send(&[t]).unwrap(), 1);
            let mut rx = UdpBatch::new(rx, 16);
            let mut batch = crate::RecvBatch::new(16, 65536);
            let mut segments: Vec<Vec<u8>> = Vec::new();
            while segments.len() < 10 {
                batch.recv(&mut rx).unwrap();
                for (b, m) in batch.iter() {
                    let stride = if m.stride > 0 { m.stride } else { b.len() };
                    segments.extend(b.chunks(stride).map(<[u8]>::to_vec));
                }
            }
            for (i, seg) in segments.iter().enumerate() {
                assert_eq!(seg, &vec![i as u8; 100], "gro {gro}: segment {i}");
            }
        }
    }

    /// What the kernel drops at a full socket is counted, one for one: a
    /// receiver that never reads gets more than its buffer holds.
    #[test]
    fn drops_at_a_full_socket_are_counted() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // The smallest buffer the kernel grants (it doubles and floors it).
        let _ = deep_receive_buffer(&rx, 1);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        assert_eq!(receive_drops(&rx).unwrap(), 0);
        const SENT: u64 = 2_000;
        for _ in 0..SENT {
            tx.send(&[7u8; 64]).unwrap();
        }
        rx.set_nonblocking(true).unwrap();
        let mut queued = 0u64;
        let mut buf = [0u8; 128];
        while rx.recv(&mut buf).is_ok() {
            queued += 1;
        }
        let drops = receive_drops(&rx).unwrap();
        assert!(queued > 0 && drops > 0, "queued {queued}, dropped {drops}");
        assert_eq!(queued + drops, SENT);
    }
}
