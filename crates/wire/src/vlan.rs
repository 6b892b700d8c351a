//! One 802.1Q tag after the Ethernet addresses: TPID 0x8100 (802.1Q) or
//! 0x88a8 (802.1ad, a QinQ outer tag). As in the BPF programs (sink.bpf.c),
//! one tag is parsed through; the ethertype after it must be the payload's.
use crate::bytes::{get_u16, set_u16};
use crate::error::{Layer, Result};
use crate::ethertype;
use crate::view::{ethertype_and_payload, fixed_header_repr, header_view};

/// Byte ranges of the tag's fields, from the end of the tag protocol
/// identifier (which sits in the Ethernet ethertype field).
pub mod field {
    use crate::bytes::Field;
    /// Priority (3 bits), drop eligible (1), VLAN id (12).
    pub const TCI: Field = 0..2;
    /// The ethertype of what follows the tag.
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: usize = 4;
}

/// Whether an Ethernet type field announces a tag.
pub fn is_tag_protocol(ethertype: u16) -> bool {
    ethertype == ethertype::VLAN || ethertype == ethertype::QINQ
}

header_view! {
    /// A view of a tag (TCI and inner ethertype) in `buffer`.
    Tag, Layer::Vlan, header_len = PAYLOAD
}

ethertype_and_payload!(Tag);

impl<T: AsRef<[u8]>> Tag<T> {
    pub fn tci(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TCI)
    }

    /// The 12-bit VLAN id.
    pub fn vlan_id(&self) -> u16 {
        self.tci() & 0x0fff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    pub fn set_tci(&mut self, tci: u16) {
        set_u16(self.buffer.as_mut(), field::TCI, tci);
    }
}

fixed_header_repr! {
    /// The tag's contents.
    Tag {
        tci: u16 => set_tci,
        ethertype: u16 => set_ethertype,
    }
}

/// `frame` with a tag of protocol `tpid` and control information `tci`
/// inserted after its addresses: test fixtures for the tagged paths.
pub fn tagged(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let at = crate::ethernet::field::ETHERTYPE.start;
    let mut t = Vec::with_capacity(frame.len() + HEADER_LEN);
    t.extend_from_slice(&frame[..at]);
    t.extend_from_slice(&tpid.to_be_bytes());
    t.extend_from_slice(&tci.to_be_bytes());
    t.extend_from_slice(&frame[at..]);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrameError;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(tci in any::<u16>(), t in any::<u16>()) {
            let r = Repr { tci, ethertype: t };
            let mut buf = [0u8; HEADER_LEN];
            r.emit(&mut Tag::new_unchecked(&mut buf[..]));
            let tag = Tag::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&tag).unwrap(), r);
            prop_assert_eq!(tag.vlan_id(), tci & 0x0fff);
            for cut in 0..HEADER_LEN {
                prop_assert_eq!(Tag::new_checked(&buf[..cut]).unwrap_err(), FrameError::Truncated(Layer::Vlan));
            }
        }
    }
}
