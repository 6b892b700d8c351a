//! IPv6 fixed header (RFC 8200): a zero-copy view and its parsed form.
//! Extension headers are not walked: the next header is what follows the
//! fixed header, and a UDP datagram behind an extension header is refused
//! as not UDP, as the BPF programs (sink, dispatch, replycheck) do.
use std::net::Ipv6Addr;

use crate::bytes::{get_bytes, get_u16, set_u16};
use crate::error::{FrameError, Layer, Result};
use crate::view::header_view;

header_view! {
    /// A view of an IPv6 packet at the start of `buffer` (which may run on past
    /// the packet: Ethernet padding).
    Packet, Layer::Ipv6, kernel = ipv6, header_len = PAYLOAD, ip_version = 6
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The buffer holds the header; version 6; the payload length inside
    /// the buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.ip_len_checked()?;
        if usize::from(self.payload_len()) > len - HEADER_LEN {
            return Err(FrameError::Truncated(Layer::Ipv6));
        }
        Ok(())
    }

    pub fn traffic_class(&self) -> u8 {
        (get_u16(self.buffer.as_ref(), 0..2) >> 4) as u8
    }

    pub fn flow_label(&self) -> u32 {
        u32::from_be_bytes(get_bytes(self.buffer.as_ref(), field::VER_TC_FLOW)) & 0x000f_ffff
    }

    /// Bytes after the fixed header.
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(get_bytes::<16>(self.buffer.as_ref(), field::SRC_ADDR))
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(get_bytes::<16>(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The payload length's bytes after the header (padding left out).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..field::PAYLOAD + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Version, traffic class and flow label at once.
    pub fn set_version_class_flow(&mut self, version: u8, class: u8, flow: u32) {
        let w = u32::from(version) << 28 | u32::from(class) << 20 | (flow & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    pub fn set_payload_len(&mut self, len: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = nh;
    }

    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = field::PAYLOAD + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[field::PAYLOAD..end]
    }
}

/// What an IPv6 fixed header says (traffic class and flow label are not
/// kept: no path of ours sets them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_addr: Ipv6Addr,
    pub dst_addr: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: usize,
    pub hop_limit: u8,
}

impl Repr {
    /// Checks `packet` (as `new_checked`) and reads it.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: usize::from(packet.payload_len()),
            hop_limit: packet.hop_limit(),
        })
    }

    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header (traffic class and flow label zero); the payload is
    /// the caller's.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version_class_flow(6, 0, 0);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Round trips and truncations of both versions: crate::ip's tests.

    proptest! {
        #[test]
        fn version_class_and_flow_share_four_bytes(class in any::<u8>(), flow in any::<u32>()) {
            let mut buf = [0u8; HEADER_LEN];
            let mut p = Packet::new_unchecked(&mut buf[..]);
            p.set_version_class_flow(6, class, flow);
            prop_assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, class, flow & 0xfffff));
        }
    }

    #[test]
    fn wrong_version_is_refused() {
        let mut buf = [0u8; HEADER_LEN];
        Packet::new_unchecked(&mut buf[..]).set_version_class_flow(4, 0, 0);
        assert_eq!(
            Packet::new_checked(&buf[..]),
            Err(FrameError::Malformed(Layer::Ipv6, "version is not 6"))
        );
    }
}
