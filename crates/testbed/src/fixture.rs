//! peregrine-bpf's BPF_PROG_RUN fixture harness (re-exported whole), plus
//! what the lab's programs' fixtures add: the generator's setup and UDP
//! checksum variants of a frame.
pub use peregrine_bpf::fixture::*;

/// The generator's setup the fixtures use: `flows` flows from 198.18.0.1
/// (IPv6: 2001:db8::1) across a router to 198.19.0.1 (2001:db8:2::2), on
/// `lo` (ifindex 1, which BPF_PROG_RUN reports as ingress without a ctx).
pub fn gen_setup(
    v6: bool,
    sizes: crate::gen::FrameSizes,
    flows: u32,
    stamp: bool,
) -> crate::gen::GenSetup {
    let (s, d) = if v6 {
        ("2001:db8::1", "2001:db8:2::2")
    } else {
        ("198.18.0.1", "198.19.0.1")
    };
    crate::gen::GenSetup {
        spec: frames::spec(s, d),
        sizes,
        flows,
        stamp,
        latency_sample: 1,
        ifindex: 1,
        dry_run: false,
        vary: crate::gen::FlowVary::Source,
    }
}

/// UDP checksum variants of a fixture frame for the programs that check
/// checksums (sink, replycheck): a change to a frame from `fixture::frames`,
/// either family, untagged.
#[cfg(test)]
pub(crate) mod checksums {
    use peregrine_wire::{checksum, ipproto, parse_udp_frame};

    /// Where the UDP checksum is and the partial value a CHECKSUM_PARTIAL
    /// frame would carry there: the folded pseudo-header sum, not
    /// complemented.
    fn partial_at(frame: &[u8]) -> (usize, u16) {
        let p = parse_udp_frame(frame).expect("a valid UDP frame to change");
        let l4 = p.l4_offset;
        let ulen = u16::from_be_bytes([frame[l4 + 4], frame[l4 + 5]]);
        let sum = checksum::pseudo_header_sum(p.src_ip, p.dst_ip, ipproto::UDP, ulen.into());
        (l4 + 6, !checksum::finish(sum))
    }

    fn with_udp_checksum(frame: &[u8], at: usize, v: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        f[at..at + 2].copy_from_slice(&v.to_be_bytes());
        f
    }

    /// `frame` as a local sender at default veth offloads leaves it.
    pub(crate) fn partial(frame: &[u8]) -> Vec<u8> {
        let (at, v) = partial_at(frame);
        with_udp_checksum(frame, at, v)
    }

    /// `frame` with a UDP checksum that is neither the full nor the
    /// partial value (nor zero).
    pub(crate) fn wrong(frame: &[u8]) -> Vec<u8> {
        let (at, partial) = partial_at(frame);
        let full = u16::from_be_bytes([frame[at], frame[at + 1]]);
        let v = (1u16..)
            .map(|d| partial.wrapping_add(d))
            .find(|v| ![0, full, partial].contains(v))
            .expect("a wrong value");
        with_udp_checksum(frame, at, v)
    }

    /// `frame` with a zero UDP checksum ("none": IPv4 only).
    pub(crate) fn zero(frame: &[u8]) -> Vec<u8> {
        let (at, _) = partial_at(frame);
        with_udp_checksum(frame, at, 0)
    }
}
