//! Big-endian fields at fixed byte ranges, shared by the header views.
use std::ops::Range;

/// A header field: its byte range from the start of the header.
pub type Field = Range<usize>;

#[inline]
pub(crate) fn get_u16(data: &[u8], f: Field) -> u16 {
    u16::from_be_bytes(data[f].try_into().expect("2-byte field"))
}

#[inline]
pub(crate) fn set_u16(data: &mut [u8], f: Field, v: u16) {
    data[f].copy_from_slice(&v.to_be_bytes());
}
