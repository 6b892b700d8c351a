//! Internet checksum (RFC 1071) helpers.
use std::net::IpAddr;

/// Adds `data` as big-endian 16-bit words to a running 32-bit+ sum.
pub fn sum_words(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds a running sum into the 16-bit ones'-complement checksum.
pub fn finish(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// Checksum of a plain buffer (the IPv4 header).
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum_words(0, data))
}

/// Sum of the IPv4/IPv6 pseudo-header for a transport segment.
pub fn pseudo_header_sum(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u64 {
    let mut acc = 0;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            acc = sum_words(acc, &s.octets());
            acc = sum_words(acc, &d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            acc = sum_words(acc, &s.octets());
            acc = sum_words(acc, &d.octets());
        }
        _ => panic!("pseudo header with mixed address families"),
    }
    acc + u64::from(proto) + len as u64
}

/// UDP checksum of `segment` (header with its checksum field included as it
/// is). Returns the value to store: a computed zero is sent as 0xffff.
pub fn udp_checksum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let acc = pseudo_header_sum(src, dst, crate::ipproto::UDP, segment.len());
    match finish(sum_words(acc, segment)) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3 example words: 0001 f203 f4f5 f6f7 -> sum ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0x12]), checksum(&[0x12, 0x00]));
    }
}
