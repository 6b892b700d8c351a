//! Internet checksum (RFC 1071) helpers.
use std::net::IpAddr;

/// Adds `data` as big-endian 16-bit words to a running 32-bit+ sum (an odd
/// last byte is padded with zero).
///
/// Eight bytes at a time in native order: the ones'-complement sum does not
/// depend on byte order except for a final swap (RFC 1071, section 2(B)),
/// and two 32-bit halves per step cannot overflow the u64 below 2^31 steps.
/// This is the invoker's hottest loop (every request and reply is summed).
pub fn sum_words(acc: u64, data: &[u8]) -> u64 {
    let mut s = 0u64;
    let mut words = data.chunks_exact(8);
    for c in &mut words {
        let w = u64::from_ne_bytes(c.try_into().expect("8 bytes"));
        s += (w & 0xffff_ffff) + (w >> 32);
    }
    let mut pairs = words.remainder().chunks_exact(2);
    for c in &mut pairs {
        s += u64::from(u16::from_ne_bytes([c[0], c[1]]));
    }
    if let [last] = pairs.remainder() {
        s += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    acc + u64::from(u16::from_be(s as u16))
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

    /// The word-at-a-time sum equals the plain definition for every length
    /// and alignment.
    #[test]
    fn fast_sum_matches_the_definition() {
        let slow = |data: &[u8]| {
            let mut acc = 0u64;
            for c in data.chunks(2) {
                acc += u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0));
            }
            finish(acc)
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..1600)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for start in 0..9 {
            for len in (0..200).chain([1399, 1400, 1472, 1500]) {
                let d = &data[start..start + len];
                assert_eq!(finish(sum_words(0, d)), slow(d), "start {start} len {len}");
            }
        }
        assert_eq!(checksum(&[0xff; 64]), slow(&[0xff; 64]));
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0x12]), checksum(&[0x12, 0x00]));
    }
}
