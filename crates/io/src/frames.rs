//! UDP datagrams in Ethernet frames, for the transports that move whole
//! frames (PACKET_MMAP here, AF_XDP in peregrine-xsk): what a received frame
//! holds for a local address and port. Frames are built and parsed by
//! `peregrine_wire`.
use std::io::IoSliceMut;
use std::net::SocketAddr;

use peregrine_wire::{parse_udp_frame, UdpFrame, UdpFrameSpec};

use crate::{RecvMeta, Transmit};

/// Builds `t`'s frame into `buf` on `local`'s side (MACs, address, port,
/// TTL; `t.source` replaces address and port): its length, or what the
/// transmit lacks (a destination of the local address's IP family, or a
/// frame that fits `buf`).
pub fn write_frame(
    local: &UdpFrameSpec,
    t: &Transmit<'_>,
    buf: &mut [u8],
) -> Result<usize, &'static str> {
    let family = "a destination of the local address's IP family";
    let to = t.destination.ok_or(family)?;
    let (src_ip, src_port) = t
        .source
        .map_or((local.src_ip, local.src_port), |s| (s.ip(), s.port()));
    if to.is_ipv4() != local.src_ip.is_ipv4() || src_ip.is_ipv4() != local.src_ip.is_ipv4() {
        return Err(family);
    }
    let spec = UdpFrameSpec {
        src_ip,
        src_port,
        dst_ip: to.ip(),
        dst_port: to.port(),
        frame_len: local.header_len() + t.contents.len(),
        ..local.clone()
    };
    match spec.write_into(buf, t.contents) {
        Ok(()) => Ok(spec.frame_len),
        Err(_) => Err("a datagram that fits one frame"),
    }
}

/// What a received frame is to a receiver on `local`.
#[derive(Debug)]
pub enum FrameFor<'a> {
    /// A checked UDP datagram to `local` (any address of the family when
    /// `local`'s is unspecified).
    Ours(UdpFrame<'a>),
    /// A frame naming `local`'s port where an untagged IPv4 or IPv6 UDP
    /// header would, that fails the checks (lengths, checksums): damaged.
    Damaged,
    /// Other traffic.
    Other,
}

/// Classifies `frame` for a receiver on `local`. Frames from a local
/// kernel sender at default offloads hold a partial UDP checksum; the
/// parser accepts exactly that.
pub fn frame_for(frame: &[u8], local: SocketAddr) -> FrameFor<'_> {
    match parse_udp_frame(frame) {
        Ok(u)
            if u.dst_port == local.port()
                && (local.ip().is_unspecified() || u.dst_ip == local.ip()) =>
        {
            FrameFor::Ours(u)
        }
        Ok(_) => FrameFor::Other,
        Err(_) if names_port(frame, local.port()) => FrameFor::Damaged,
        Err(_) => FrameFor::Other,
    }
}

/// A receive batch filled from raw frames: each datagram for `local` is
/// copied into the next buffer, damaged frames for its port are counted,
/// other traffic is passed over.
pub struct Delivery<'a, 'b> {
    local: SocketAddr,
    bufs: &'a mut [IoSliceMut<'b>],
    meta: &'a mut [RecvMeta],
    /// Datagrams delivered into `bufs[..got]`.
    pub got: usize,
    /// Frames for our port that failed the checks.
    pub damaged: u64,
}

impl<'a, 'b> Delivery<'a, 'b> {
    pub fn new(
        local: SocketAddr,
        bufs: &'a mut [IoSliceMut<'b>],
        meta: &'a mut [RecvMeta],
    ) -> Delivery<'a, 'b> {
        Delivery {
            local,
            bufs,
            meta,
            got: 0,
            damaged: 0,
        }
    }

    /// Takes one received frame (nothing once every buffer is used).
    pub fn frame(&mut self, frame: &[u8]) {
        match frame_for(frame, self.local) {
            FrameFor::Ours(u) if self.got < self.bufs.len().min(self.meta.len()) => {
                let buf = &mut self.bufs[self.got];
                let n = u.payload.len().min(buf.len());
                buf[..n].copy_from_slice(&u.payload[..n]);
                self.meta[self.got] = RecvMeta {
                    len: n,
                    source: Some(SocketAddr::new(u.src_ip, u.src_port)),
                    stride: 0,
                };
                self.got += 1;
            }
            FrameFor::Damaged => self.damaged += 1,
            _ => {}
        }
    }
}

/// Whether an unparsable frame still names UDP port `port` where an
/// untagged IPv4 or IPv6 UDP header would hold it.
fn names_port(frame: &[u8], port: u16) -> bool {
    let at = match frame.get(12..14) {
        Some([0x08, 0x00]) if frame.get(23) == Some(&17) => 14 + usize::from(frame[14] & 0xf) * 4,
        Some([0x86, 0xdd]) if frame.get(20) == Some(&17) => 54,
        _ => return false,
    };
    frame.get(at + 2..at + 4) == Some(&port.to_be_bytes()[..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_wire::{MacAddr, UdpFrameSpec};

    #[test]
    fn ours_damaged_and_other() {
        let spec = UdpFrameSpec {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: "198.18.0.1".parse().unwrap(),
            dst_ip: "198.18.0.2".parse().unwrap(),
            src_port: 40000,
            dst_port: 5001,
            ttl: 64,
            frame_len: 0,
        }
        .sized_for(20);
        let mut f = spec.build(&[9; 20]).unwrap();
        let local: SocketAddr = "198.18.0.2:5001".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:5001".parse().unwrap();
        let other: SocketAddr = "198.18.0.2:5002".parse().unwrap();
        for l in [local, any] {
            match frame_for(&f, l) {
                FrameFor::Ours(u) => assert_eq!(u.payload, &[9; 20]),
                x => panic!("{x:?}"),
            }
        }
        assert!(matches!(frame_for(&f, other), FrameFor::Other));
        let last = f.len() - 1;
        f[last] ^= 1;
        assert!(matches!(frame_for(&f, local), FrameFor::Damaged));
        assert!(matches!(frame_for(&f, other), FrameFor::Other));
    }
}
