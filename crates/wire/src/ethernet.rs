//! Ethernet II header: a zero-copy view and its parsed form. The frame check
//! sequence is never in our buffers (see `FCS_LEN`).
use crate::bytes::{get_bytes, get_u16, set_u16};
use crate::error::{Layer, Result};
use crate::view::{ethertype_and_payload, fixed_header_repr, header_view};
use crate::MacAddr;

header_view! {
    /// A view of an Ethernet frame in `buffer`.
    Frame, Layer::Ethernet, kernel = ethernet, header_len = PAYLOAD
}

ethertype_and_payload!(Frame);

impl<T: AsRef<[u8]>> Frame<T> {
    pub fn dst_addr(&self) -> MacAddr {
        MacAddr(get_bytes(self.buffer.as_ref(), field::DESTINATION))
    }

    pub fn src_addr(&self) -> MacAddr {
        MacAddr(get_bytes(self.buffer.as_ref(), field::SOURCE))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a.0);
    }

    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a.0);
    }
}

fixed_header_repr! {
    /// The header's contents.
    Frame {
        src_addr: MacAddr => set_src_addr,
        dst_addr: MacAddr => set_dst_addr,
        ethertype: u16 => set_ethertype,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FrameError;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn emit_then_parse_round_trips(s in any::<[u8; 6]>(), d in any::<[u8; 6]>(), t in any::<u16>(), extra in 0usize..8) {
            let r = Repr { src_addr: MacAddr(s), dst_addr: MacAddr(d), ethertype: t };
            let mut buf = vec![0u8; r.buffer_len() + extra];
            r.emit(&mut Frame::new_unchecked(&mut buf[..]));
            let f = Frame::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&f).unwrap(), r);
            prop_assert_eq!(f.payload().len(), extra);
            for cut in 0..HEADER_LEN {
                prop_assert_eq!(Frame::new_checked(&buf[..cut]).unwrap_err(), FrameError::Truncated(Layer::Ethernet));
            }
        }
    }
}
