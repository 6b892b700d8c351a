//! UDP header (RFC 768): a zero-copy view and its parsed form, with the
//! checksum rules of our receive paths.
use std::net::IpAddr;

use crate::bytes::{get_u16, set_u16};
use crate::checksum;
use crate::error::{FrameError, Layer, Result};
use crate::ipproto;
use crate::view::header_view;

header_view! {
    /// A view of a UDP datagram at the start of `buffer` (the IP payload).
    Packet, Layer::Udp, kernel = udp, header_len = PAYLOAD
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// The buffer holds the header; the length field covers at least the
    /// header and at most the buffer.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer_len_checked()?;
        let claimed = usize::from(self.len());
        if claimed < HEADER_LEN {
            return Err(FrameError::Malformed(Layer::Udp, "length below 8"));
        }
        if claimed > len {
            return Err(FrameError::Truncated(Layer::Udp));
        }
        Ok(())
    }

    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field: header and payload.
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The length field's bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..usize::from(self.len())]
    }

    /// Whether the checksum is acceptable between `src` and `dst`: the full
    /// checksum; or exactly the partial pseudo-header value of a
    /// CHECKSUM_PARTIAL frame from a local sender; or zero ("none") on IPv4.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        let stored = self.checksum();
        if stored == 0 {
            // Zero means "no checksum" on IPv4; on IPv6 it is never valid
            // (RFC 8200 8.1), even when the data happens to sum to zero.
            return src.is_ipv4();
        }
        let len = usize::from(self.len());
        let acc = checksum::pseudo_header_sum(src, dst, ipproto::UDP, len);
        // A local sender with TX checksum offload (veth's default) leaves
        // CHECKSUM_PARTIAL frames: the field holds only the folded
        // pseudo-header sum, not complemented, for the NIC to finish. XDP and
        // AF_XDP see it as it is; the kernel's own sockets accept it, so do we.
        stored == !checksum::finish(acc)
            || checksum::finish(checksum::sum_words(acc, &self.buffer.as_ref()[..len])) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, p: u16) {
        set_u16(self.buffer.as_mut(), field::SRC_PORT, p);
    }

    pub fn set_dst_port(&mut self, p: u16) {
        set_u16(self.buffer.as_mut(), field::DST_PORT, p);
    }

    pub fn set_len(&mut self, len: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    pub fn set_checksum(&mut self, c: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM, c);
    }

    /// Computes and stores the full checksum (a computed zero is sent as
    /// 0xffff) over the length field's bytes.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let len = usize::from(self.len());
        let c = checksum::udp_checksum(src, dst, &self.buffer.as_ref()[..len]);
        self.set_checksum(c);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[field::PAYLOAD..len]
    }
}

/// What a UDP header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Bytes after the header.
    pub payload_len: usize,
}

impl Repr {
    /// Checks `packet` (as `new_checked`, then its checksum between `src`
    /// and `dst`, see `Packet::verify_checksum`) and reads it.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>, src: IpAddr, dst: IpAddr) -> Result<Repr> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(FrameError::BadChecksum(Layer::Udp));
        }
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: usize::from(packet.len()) - HEADER_LEN,
        })
    }

    /// Header and payload.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.payload_len
    }

    /// Writes the header, `payload` at the start of the payload (bytes after
    /// it, up to `payload_len`, are left as they are: the caller's padding)
    /// and the checksum over it all. `packet` holds `buffer_len()` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src: IpAddr,
        dst: IpAddr,
        payload: &[u8],
    ) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(self.buffer_len() as u16);
        packet.payload_mut()[..payload.len()].copy_from_slice(payload);
        packet.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addrs() -> impl Strategy<Value = (IpAddr, IpAddr)> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<[u8; 4]>()).prop_map(|(s, d)| (s.into(), d.into())),
            (any::<[u8; 16]>(), any::<[u8; 16]>()).prop_map(|(s, d)| (s.into(), d.into())),
        ]
    }

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(
            (src, dst) in addrs(),
            (src_port, dst_port) in any::<(u16, u16)>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            pad in 0usize..8,
        ) {
            let r = Repr { src_port, dst_port, payload_len: payload.len() + pad };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut Packet::new_unchecked(&mut buf[..]), src, dst, &payload);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p, src, dst).unwrap(), r);
            prop_assert_eq!(&p.payload()[..payload.len()], &payload[..]);
            for cut in 0..buf.len() {
                prop_assert_eq!(Packet::new_checked(&buf[..cut]).unwrap_err(), FrameError::Truncated(Layer::Udp));
            }
        }
    }

    #[test]
    fn length_below_the_header_is_malformed() {
        let mut buf = [0u8; 16];
        Packet::new_unchecked(&mut buf[..]).set_len(7);
        assert_eq!(
            Packet::new_checked(&buf[..]),
            Err(FrameError::Malformed(Layer::Udp, "length below 8"))
        );
    }
}
