//! IPv4 header (RFC 791): a zero-copy view and its parsed form. Options are
//! accepted and skipped (IHL above 5); fragments are refused by
//! `Repr::parse`, as on every path of ours (the BPF programs pass them to the
//! kernel to reassemble).
use std::net::Ipv4Addr;

use crate::bytes::{get_bytes, get_u16, set_u16};
use crate::checksum;
use crate::error::{FrameError, Layer, Result};
use crate::view::header_view;

/// Flag and offset bits of the 16-bit flags/fragment offset field (RFC 791).
const FLAG_DONT_FRAG: u16 = 0x4000;
const FLAG_MORE_FRAGS: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

header_view! {
    /// A view of an IPv4 packet at the start of `buffer` (which may run on past
    /// the packet: Ethernet padding).
    Packet, Layer::Ipv4, kernel = ipv4, header_len = OPTIONS, ip_version = 4
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Version 4; header length at least 20 and inside the buffer; total
    /// length at least the header length and inside the buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.ip_len_checked()?;
        let hl = self.header_len();
        if hl < HEADER_LEN {
            return Err(FrameError::Malformed(Layer::Ipv4, "header length below 20"));
        }
        if len < hl {
            return Err(FrameError::Truncated(Layer::Ipv4));
        }
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(FrameError::Malformed(
                Layer::Ipv4,
                "total length below header length",
            ));
        }
        if total > len {
            return Err(FrameError::Truncated(Layer::Ipv4));
        }
        Ok(())
    }

    /// Header length in bytes, options included: the first byte's low
    /// nibble (its high one is the version), in 32-bit words.
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }

    /// Header and payload, in bytes.
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Flags (3 high bits: reserved, don't fragment, more fragments) and
    /// fragment offset in 8-byte units (13 bits).
    fn flg_off(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::FLG_OFF)
    }

    pub fn dont_frag(&self) -> bool {
        self.flg_off() & FLAG_DONT_FRAG != 0
    }

    pub fn more_frags(&self) -> bool {
        self.flg_off() & FLAG_MORE_FRAGS != 0
    }

    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (self.flg_off() & FRAG_OFFSET_MASK) << 3
    }

    /// Part of a fragmented datagram: more fragments follow, or an offset.
    pub fn is_fragment(&self) -> bool {
        self.flg_off() & (FLAG_MORE_FRAGS | FRAG_OFFSET_MASK) != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(get_bytes::<4>(self.buffer.as_ref(), field::SRC_ADDR))
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(get_bytes::<4>(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The options (empty without).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// Whether the header checksum verifies (options included).
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }

    /// From the end of the header to the total length (Ethernet padding
    /// after it left out).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Header length in bytes (a multiple of 4; options are the caller's).
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | ((len / 4) as u8 & 0x0f);
    }

    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }

    pub fn set_total_len(&mut self, len: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    pub fn set_ident(&mut self, id: u16) {
        set_u16(self.buffer.as_mut(), field::IDENT, id);
    }

    fn set_flg_off_bits(&mut self, mask: u16, bits: u16) {
        let v = (self.flg_off() & !mask) | (bits & mask);
        set_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }

    pub fn set_dont_frag(&mut self, on: bool) {
        self.set_flg_off_bits(FLAG_DONT_FRAG, if on { FLAG_DONT_FRAG } else { 0 });
    }

    pub fn set_more_frags(&mut self, on: bool) {
        self.set_flg_off_bits(FLAG_MORE_FRAGS, if on { FLAG_MORE_FRAGS } else { 0 });
    }

    /// Fragment offset in bytes (a multiple of 8).
    pub fn set_frag_offset(&mut self, bytes: u16) {
        self.set_flg_off_bits(FRAG_OFFSET_MASK, bytes >> 3);
    }

    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    pub fn set_checksum(&mut self, c: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..total]
    }
}

/// What an unfragmented IPv4 header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_addr: Ipv4Addr,
    pub dst_addr: Ipv4Addr,
    pub protocol: u8,
    /// Payload bytes after the header (options not counted).
    pub payload_len: usize,
    pub ttl: u8,
}

impl Repr {
    /// Checks `packet` whole (as `new_checked`, then the header checksum;
    /// fragments are refused) and reads it.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(FrameError::BadChecksum(Layer::Ipv4));
        }
        if packet.is_fragment() {
            return Err(FrameError::Malformed(Layer::Ipv4, "fragment"));
        }
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - packet.header_len(),
            ttl: packet.ttl(),
        })
    }

    /// Header bytes `emit` writes (no options).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Header and payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes a 20-byte header, don't-fragment set (never fragmented on our
    /// paths), with its checksum. `packet` holds at least `header_len()`
    /// bytes; the payload is the caller's.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.buffer.as_mut()[field::VER_IHL] = 0x40 | (HEADER_LEN / 4) as u8;
        packet.set_dscp_ecn(0);
        packet.set_total_len(self.buffer_len() as u16);
        packet.set_ident(0);
        set_u16(packet.buffer.as_mut(), field::FLG_OFF, FLAG_DONT_FRAG);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Round trips and truncations of both versions: crate::ip's tests.

    #[test]
    fn options_fragments_and_bad_lengths() {
        let r = Repr {
            src_addr: Ipv4Addr::new(198, 18, 0, 1),
            dst_addr: Ipv4Addr::new(198, 19, 0, 1),
            protocol: crate::ipproto::UDP,
            payload_len: 12,
            ttl: 64,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        // Four NOP option bytes: the header grows, the payload stays.
        buf.splice(HEADER_LEN..HEADER_LEN, [1u8; 4]);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_header_len(24);
        p.set_total_len(36);
        p.fill_checksum();
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.options(), &[1; 4]);
        assert_eq!(Repr::parse(&p).unwrap(), r);

        let mut f = buf.clone();
        let mut p = Packet::new_unchecked(&mut f[..]);
        p.set_more_frags(true);
        p.set_frag_offset(8);
        p.fill_checksum();
        assert!(p.more_frags() && p.frag_offset() == 8 && p.dont_frag());
        assert_eq!(
            Repr::parse(&p),
            Err(FrameError::Malformed(Layer::Ipv4, "fragment"))
        );

        let mut f = buf.clone();
        Packet::new_unchecked(&mut f[..]).set_checksum(0x1234);
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&f[..])),
            Err(FrameError::BadChecksum(Layer::Ipv4))
        );

        let mut f = buf.clone();
        Packet::new_unchecked(&mut f[..]).set_header_len(16);
        assert!(matches!(
            Packet::new_checked(&f[..]),
            Err(FrameError::Malformed(Layer::Ipv4, _))
        ));
        let mut f = buf.clone();
        Packet::new_unchecked(&mut f[..]).set_total_len(23);
        assert!(matches!(
            Packet::new_checked(&f[..]),
            Err(FrameError::Malformed(Layer::Ipv4, _))
        ));
        let mut f = buf.clone();
        Packet::new_unchecked(&mut f[..]).set_version(6);
        assert!(matches!(
            Packet::new_checked(&f[..]),
            Err(FrameError::Malformed(Layer::Ipv4, _))
        ));
    }
}
