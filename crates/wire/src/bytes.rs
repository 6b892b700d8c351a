//! Big-endian fields at fixed byte ranges, shared by the header views.
use std::ops::Range;

/// A header field: its byte range from the start of the header.
pub type Field = Range<usize>;

/// The `N` bytes of field `f`, whatever they hold (a number, an address).
#[inline]
pub(crate) fn get_bytes<const N: usize>(data: &[u8], f: Field) -> [u8; N] {
    data[f].try_into().expect("a field of its type's length")
}

#[inline]
pub(crate) fn get_u16(data: &[u8], f: Field) -> u16 {
    u16::from_be_bytes(get_bytes(data, f))
}

#[inline]
pub(crate) fn set_u16(data: &mut [u8], f: Field, v: u16) {
    data[f].copy_from_slice(&v.to_be_bytes());
}
