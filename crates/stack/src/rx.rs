//! A received frame checked down to its UDP payload, or the counter its
//! drop belongs to. The frame is untrusted: everything is checked by
//! `peregrine_wire::parse_udp_frame` (lengths, IPv4 header checksum, UDP
//! checksum full or partial), and the frame must be addressed to us.
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::AtomicU64;

use peregrine_wire::ip::invalid_source;
use peregrine_wire::{parse_udp_frame, FrameError, Layer, MacAddr};

use crate::counters::Counters;

/// A datagram for the stack: who sent it, to which local address and port,
/// and where its payload lies in the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: Range<usize>,
}

/// Why a frame was dropped: one counter each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxDrop {
    Truncated,
    Malformed,
    BadIpChecksum,
    BadUdpChecksum,
    NotUdp,
    OtherHost,
    BadSource,
}

impl RxDrop {
    pub(crate) fn counter(self, c: &Counters) -> &AtomicU64 {
        match self {
            RxDrop::Truncated => &c.rx_truncated,
            RxDrop::Malformed => &c.rx_malformed,
            RxDrop::BadIpChecksum => &c.rx_bad_ip_checksum,
            RxDrop::BadUdpChecksum => &c.rx_bad_udp_checksum,
            RxDrop::NotUdp => &c.rx_not_udp,
            RxDrop::OtherHost => &c.rx_other_host,
            RxDrop::BadSource => &c.rx_bad_source,
        }
    }
}

fn drop_of(e: FrameError) -> RxDrop {
    match e {
        FrameError::Truncated(_) => RxDrop::Truncated,
        FrameError::BadChecksum(Layer::Udp) => RxDrop::BadUdpChecksum,
        FrameError::BadChecksum(_) => RxDrop::BadIpChecksum,
        FrameError::NotIp(_) | FrameError::NotUdp(_) => RxDrop::NotUdp,
        FrameError::Malformed(..) | FrameError::BadSize { .. } | FrameError::MixedFamilies => {
            RxDrop::Malformed
        }
    }
}

/// Checks `frame` received on an interface whose MAC is `ours`.
pub fn classify(frame: &[u8], ours: MacAddr) -> Result<Incoming, RxDrop> {
    let u = parse_udp_frame(frame).map_err(drop_of)?;
    if u.vlan.is_some() {
        return Err(RxDrop::NotUdp);
    }
    // Group addresses (broadcast, multicast) have the low bit of the first
    // byte set; a unicast frame must be ours.
    if u.dst_mac != ours && !u.dst_mac.is_group() {
        return Err(RxDrop::OtherHost);
    }
    // What the kernel's input drops as a martian source (broadcast,
    // multicast, unspecified, loopback), and a group source MAC: no host
    // sends from these, and an answer would go to many (or be logged by
    // whoever tried to answer, once per spoofed datagram).
    if u.src_mac.is_group() || invalid_source(u.src_ip, true) {
        return Err(RxDrop::BadSource);
    }
    let start = u.payload.as_ptr() as usize - frame.as_ptr() as usize;
    Ok(Incoming {
        src: SocketAddr::new(u.src_ip, u.src_port),
        dst: SocketAddr::new(u.dst_ip, u.dst_port),
        payload: start..start + u.payload.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_wire::{UdpFrameSpec, ETH_HLEN, IPV4_HLEN, IPV6_HLEN, UDP_HLEN};

    fn frame(v6: bool, payload: &[u8]) -> Vec<u8> {
        let (s, d) = if v6 {
            ("[2001:db8::1]:40000", "[2001:db8::2]:4433")
        } else {
            ("198.18.0.1:40000", "198.18.0.2:4433")
        };
        UdpFrameSpec::between(s.parse().unwrap(), d.parse().unwrap(), payload.len())
            .build(payload)
            .unwrap()
    }

    fn ours() -> MacAddr {
        MacAddr::local(2)
    }

    #[test]
    fn a_good_datagram_comes_with_its_payload() {
        for v6 in [false, true] {
            let f = frame(v6, b"hello");
            let i = classify(&f, ours()).unwrap();
            assert_eq!(&f[i.payload.clone()], b"hello");
            assert_eq!(i.dst.port(), 4433);
            assert_eq!(i.src.port(), 40000);
            // Empty datagrams are datagrams too.
            let e = frame(v6, b"");
            assert_eq!(classify(&e, ours()).unwrap().payload.len(), 0);
        }
    }

    #[test]
    fn every_cut_is_truncated_or_malformed_never_accepted() {
        for v6 in [false, true] {
            let f = frame(v6, b"0123456789");
            for n in 0..f.len() {
                let r = classify(&f[..n], ours());
                assert!(
                    matches!(r, Err(RxDrop::Truncated) | Err(RxDrop::Malformed)),
                    "v6={v6} cut at {n}: {r:?}"
                );
            }
        }
    }

    #[test]
    fn bad_checksums_and_headers_are_counted_by_reason() {
        let f = frame(false, b"payload");
        let mut ipsum = f.clone();
        ipsum[ETH_HLEN + 10] ^= 0x40;
        assert_eq!(classify(&ipsum, ours()), Err(RxDrop::BadIpChecksum));
        let mut udpsum = f.clone();
        udpsum[ETH_HLEN + IPV4_HLEN + 6] ^= 0x01;
        assert_eq!(classify(&udpsum, ours()), Err(RxDrop::BadUdpChecksum));
        let mut data = f.clone();
        *data.last_mut().unwrap() ^= 0xff;
        assert_eq!(classify(&data, ours()), Err(RxDrop::BadUdpChecksum));
        let mut v6data = frame(true, b"payload");
        *v6data.last_mut().unwrap() ^= 0xff;
        assert_eq!(classify(&v6data, ours()), Err(RxDrop::BadUdpChecksum));
        // IPv6 has no "no checksum".
        let mut v6zero = frame(true, b"payload");
        v6zero[ETH_HLEN + IPV6_HLEN + 6..ETH_HLEN + IPV6_HLEN + 8].fill(0);
        assert_eq!(classify(&v6zero, ours()), Err(RxDrop::BadUdpChecksum));
        let mut version = f.clone();
        version[ETH_HLEN] = 0x55;
        assert_eq!(classify(&version, ours()), Err(RxDrop::Malformed));
        let mut tcp = f.clone();
        tcp[ETH_HLEN + 9] = 6;
        let sum = {
            tcp[ETH_HLEN + 10..ETH_HLEN + 12].fill(0);
            peregrine_wire::checksum::checksum(&tcp[ETH_HLEN..ETH_HLEN + IPV4_HLEN])
        };
        tcp[ETH_HLEN + 10..ETH_HLEN + 12].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(classify(&tcp, ours()), Err(RxDrop::NotUdp));
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(classify(&arp, ours()), Err(RxDrop::NotUdp));
        // UDP length longer than the IP payload.
        let mut ulen = f.clone();
        ulen[ETH_HLEN + IPV4_HLEN + 4..ETH_HLEN + IPV4_HLEN + 6]
            .copy_from_slice(&(UDP_HLEN as u16 + 100).to_be_bytes());
        assert!(classify(&ulen, ours()).is_err());
    }

    #[test]
    fn a_local_senders_partial_checksum_is_accepted() {
        for v6 in [false, true] {
            let mut f = frame(v6, b"partial");
            let l3 = ETH_HLEN;
            let l4 = l3 + if v6 { IPV6_HLEN } else { IPV4_HLEN };
            let u = parse_udp_frame(&f).unwrap();
            let len = f.len() - l4;
            let pseudo = peregrine_wire::checksum::pseudo_header_sum(u.src_ip, u.dst_ip, 17, len);
            let partial = !peregrine_wire::checksum::finish(pseudo);
            f[l4 + 6..l4 + 8].copy_from_slice(&partial.to_be_bytes());
            assert!(classify(&f, ours()).is_ok(), "v6={v6}");
        }
    }

    #[test]
    fn frames_for_other_macs_are_not_ours_but_broadcast_is() {
        let mut f = frame(false, b"x");
        f[..6].copy_from_slice(&MacAddr::local(9).0);
        assert_eq!(classify(&f, ours()), Err(RxDrop::OtherHost));
        f[..6].fill(0xff);
        assert!(classify(&f, ours()).is_ok());
    }

    /// Issue 28: spoofed Initials from 255.255.255.255 or 224.0.0.5 reached
    /// quinn, which logged an error for each reply it could not route.
    /// The kernel's input drops these sources as martians; so does the
    /// stack, counted.
    #[test]
    fn martian_sources_and_group_source_macs_are_bad_sources() {
        for src in [
            "255.255.255.255:5000",
            "224.0.0.5:5000",
            "0.0.0.0:5000",
            "0.1.2.3:5000",
            "127.0.0.1:5000",
        ] {
            let f =
                UdpFrameSpec::between(src.parse().unwrap(), "198.18.0.2:4433".parse().unwrap(), 1)
                    .build(b"x")
                    .unwrap();
            assert_eq!(classify(&f, ours()), Err(RxDrop::BadSource), "{src}");
        }
        for src in ["[ff02::1]:5000", "[::]:5000", "[::1]:5000"] {
            let f = UdpFrameSpec::between(
                src.parse().unwrap(),
                "[2001:db8::2]:4433".parse().unwrap(),
                1,
            )
            .build(b"x")
            .unwrap();
            assert_eq!(classify(&f, ours()), Err(RxDrop::BadSource), "{src}");
        }
        for v6 in [false, true] {
            for group in [
                [0xff; 6],
                [0x01, 0, 0x5e, 0, 0, 1],
                [0x33, 0x33, 0, 0, 0, 1],
            ] {
                let mut f = frame(v6, b"x");
                f[6..12].copy_from_slice(&group);
                assert_eq!(classify(&f, ours()), Err(RxDrop::BadSource), "{group:x?}");
            }
        }
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any bytes, and any single-byte change of a good frame: no
            /// panic, and an accepted payload lies inside the frame.
            #[test]
            fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200),
                            at in 0usize..80, val in any::<u8>(), v6 in any::<bool>()) {
                if let Ok(i) = classify(&bytes, ours()) {
                    prop_assert!(i.payload.end <= bytes.len());
                }
                let mut f = frame(v6, b"abcdefgh");
                let at = at % f.len();
                f[at] = val;
                if let Ok(i) = classify(&f, ours()) {
                    prop_assert!(i.payload.end <= f.len());
                }
            }
        }
    }
}
