//! Whole Ethernet/IP/UDP frames: a builder for the frames peregrine sends and a
//! checked parser for the frames it receives, both on the per-layer views.
use std::net::{IpAddr, SocketAddr};

pub use crate::error::{FrameError, Layer};
use crate::{checksum, ethernet, ip, ipproto, udp, vlan, MacAddr, ETH_HLEN, VLAN_HLEN};

/// What a UDP frame should contain. `frame_len` excludes the FCS, so a
/// "64-byte frame" in benchmark terms is `frame_len = 60`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpFrameSpec {
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub ttl: u8,
    pub frame_len: usize,
}

/// The largest frame built: a 9000-byte MTU jumbo frame and then some.
const MAX_FRAME_LEN: usize = 9216;

impl UdpFrameSpec {
    /// A frame from `src` to `dst` (one family) between the locally
    /// administered MACs `MacAddr::local(1)` and `local(2)`, TTL 64, sized
    /// for `payload_len` bytes of payload: where test and fixture frames
    /// start, changed with struct update syntax.
    pub fn between(src: SocketAddr, dst: SocketAddr, payload_len: usize) -> UdpFrameSpec {
        UdpFrameSpec {
            src_mac: MacAddr::local(1),
            dst_mac: MacAddr::local(2),
            src_ip: src.ip(),
            dst_ip: dst.ip(),
            src_port: src.port(),
            dst_port: dst.port(),
            ttl: 64,
            frame_len: 0,
        }
        .sized_for(payload_len)
    }

    /// This spec with a frame that holds exactly `payload_len` bytes of
    /// UDP payload.
    pub fn sized_for(self, payload_len: usize) -> UdpFrameSpec {
        UdpFrameSpec {
            frame_len: self.header_len() + payload_len,
            ..self
        }
    }

    /// Header bytes in front of the UDP payload.
    pub fn header_len(&self) -> usize {
        ETH_HLEN + ip::header_len_for(self.src_ip) + udp::HEADER_LEN
    }

    /// The smallest `frame_len` that still holds the headers.
    pub fn min_frame_len(&self) -> usize {
        self.header_len()
    }

    /// Builds the frame with `payload` at the start of the UDP payload and
    /// zeros after it; IPv4 header and UDP checksums are filled in.
    pub fn build(&self, payload: &[u8]) -> Result<Vec<u8>, FrameError> {
        let mut f = vec![0u8; self.frame_len];
        self.write_into(&mut f, payload)?;
        Ok(f)
    }

    /// As `build`, into the first `frame_len` bytes of `f` (which may be a
    /// received frame being turned into its reply).
    pub fn write_into(&self, f: &mut [u8], payload: &[u8]) -> Result<(), FrameError> {
        let hl = self.header_len();
        let max = MAX_FRAME_LEN;
        if self.frame_len < hl || self.frame_len > max || payload.len() > self.frame_len - hl {
            return Err(FrameError::BadSize {
                size: self.frame_len,
                min: hl,
                max,
            });
        }
        let udp = udp::Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            payload_len: self.frame_len - hl,
        };
        // Families checked here, before `f` (maybe a request) is touched.
        let ip = ip::Repr::new(
            self.src_ip,
            self.dst_ip,
            ipproto::UDP,
            udp.buffer_len(),
            self.ttl,
        )?;
        if f.len() < self.frame_len {
            return Err(FrameError::BadSize {
                size: self.frame_len,
                min: hl,
                max: f.len(),
            });
        }
        let f = &mut f[..self.frame_len];
        f.fill(0);
        let mut eth = ethernet::Frame::new_unchecked(&mut *f);
        let l3 = eth.payload_mut();
        ip.emit(l3);
        let l4 = &mut l3[ip.header_len()..];
        udp.emit(
            &mut udp::Packet::new_unchecked(l4),
            self.src_ip,
            self.dst_ip,
            payload,
        );
        ethernet::Repr {
            src_addr: self.src_mac,
            dst_addr: self.dst_mac,
            ethertype: ip.ethertype(),
        }
        .emit(&mut eth);
        Ok(())
    }
}

/// A received UDP frame, checked down to the UDP payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpFrame<'a> {
    pub dst_mac: MacAddr,
    pub src_mac: MacAddr,
    pub vlan: Option<u16>,
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub ttl: u8,
    pub src_port: u16,
    pub dst_port: u16,
    /// Offset of the IP header in the frame.
    pub l3_offset: usize,
    /// Offset of the UDP header in the frame.
    pub l4_offset: usize,
    pub payload: &'a [u8],
}

/// Parses and verifies a frame: one optional 802.1Q/802.1ad tag, lengths
/// consistent, IPv4 header checksum and UDP checksum valid (see
/// `udp::Packet::verify_checksum`: full, or exactly the partial
/// pseudo-header value of a CHECKSUM_PARTIAL frame from a local sender, or
/// zero on IPv4 only). Padding after the IP datagram (short frames) is
/// ignored.
pub fn parse_udp_frame(f: &[u8]) -> Result<UdpFrame<'_>, FrameError> {
    let eth = ethernet::Frame::new_checked(f)?;
    let (et, vlan, l3) = link_header(f)?;
    let (ip, ip_hlen) = ip::Repr::parse(et, &f[l3..])?;
    if ip.protocol() != ipproto::UDP {
        return Err(FrameError::NotUdp(ip.protocol()));
    }
    let (src_ip, dst_ip, ttl) = (ip.src_addr(), ip.dst_addr(), ip.ttl());
    let l4 = l3 + ip_hlen;
    let l4_len = ip.payload_len();
    let datagram = &f[l4..l4 + l4_len];
    let r = udp::Repr::parse(&udp::Packet::new_unchecked(datagram), src_ip, dst_ip)?;
    Ok(UdpFrame {
        dst_mac: eth.dst_addr(),
        src_mac: eth.src_addr(),
        vlan,
        src_ip,
        dst_ip,
        ttl,
        src_port: r.src_port,
        dst_port: r.dst_port,
        l3_offset: l3,
        l4_offset: l4,
        payload: &datagram[udp::HEADER_LEN..r.buffer_len()],
    })
}

/// The link layer of a frame: the EtherType after one optional
/// 802.1Q/802.1ad tag, the tag's VLAN id, and where the network header
/// starts.
pub fn link_header(f: &[u8]) -> Result<(u16, Option<u16>, usize), FrameError> {
    let eth = ethernet::Frame::new_checked(f)?;
    if vlan::is_tag_protocol(eth.ethertype()) {
        let tag = vlan::Tag::new_checked(eth.payload())?;
        Ok((tag.ethertype(), Some(tag.vlan_id()), ETH_HLEN + VLAN_HLEN))
    } else {
        Ok((eth.ethertype(), None, ETH_HLEN))
    }
}

/// Finishes the TCP or UDP checksum of a frame that a local sender left
/// CHECKSUM_PARTIAL (veth's default TX offload: the field holds only the
/// folded pseudo-header sum, for the device to complete). XDP and AF_XDP
/// see such frames as they are; whoever sends one on from user space must
/// finish it, or the receiver drops it. A frame whose field holds anything
/// else is left alone: a full checksum stays, a wrong one stays wrong.
/// (A full checksum that happens to equal the partial value is recomputed
/// to the same sum.) Returns whether it changed the frame.
pub fn finish_partial_checksum(f: &mut [u8]) -> bool {
    let Ok((et, _, l3)) = link_header(f) else {
        return false;
    };
    let Ok((ip, hlen)) = ip::Repr::parse(et, &f[l3..]) else {
        return false;
    };
    let field = match ip.protocol() {
        ipproto::TCP => 16,
        ipproto::UDP => 6,
        _ => return false,
    };
    let (l4, ip_len) = (l3 + hlen, ip.payload_len());
    if ip_len < field + 2 || l4 + ip_len > f.len() {
        return false;
    }
    // UDP's checksum covers the datagram its length field gives (RFC 768),
    // which may end before the IP payload does; TCP's, the IP payload.
    let len = if ip.protocol() == ipproto::UDP {
        let ulen = usize::from(u16::from_be_bytes([f[l4 + 4], f[l4 + 5]]));
        if !(udp::HEADER_LEN..=ip_len).contains(&ulen) {
            return false;
        }
        ulen
    } else {
        ip_len
    };
    let pseudo = checksum::pseudo_header_sum(ip.src_addr(), ip.dst_addr(), ip.protocol(), len);
    let at = l4 + field;
    if u16::from_be_bytes([f[at], f[at + 1]]) != !checksum::finish(pseudo) {
        return false;
    }
    f[at..at + 2].fill(0);
    let sum = match checksum::finish(checksum::sum_words(pseudo, &f[l4..l4 + len])) {
        // UDP sends a computed zero as all ones (zero means "none").
        0 if ip.protocol() == ipproto::UDP => 0xffff,
        c => c,
    };
    f[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{checksum, ethertype, UDP_HLEN};
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn spec(v6: bool, len: usize) -> UdpFrameSpec {
        let (s, d) = if v6 {
            ("[2001:db8::1]:1000", "[2001:db8::2]:9")
        } else {
            ("198.18.0.1:1000", "198.19.0.1:9")
        };
        UdpFrameSpec {
            frame_len: len,
            ..UdpFrameSpec::between(s.parse().unwrap(), d.parse().unwrap(), 0)
        }
    }

    #[test]
    fn build_then_parse_v4_and_v6() {
        for v6 in [false, true] {
            let f = spec(v6, 128).build(b"hello").unwrap();
            assert_eq!(f.len(), 128);
            let p = parse_udp_frame(&f).unwrap();
            assert_eq!(p.src_port, 1000);
            assert_eq!(p.dst_port, 9);
            assert_eq!(&p.payload[..5], b"hello");
            assert_eq!(p.ttl, 64);
        }
    }

    #[test]
    fn partial_pseudo_header_checksum_is_accepted_v4_and_v6() {
        for (src, dst) in [
            ("198.18.0.1:40000", "198.18.0.2:1232"),
            ("[2001:db8::1]:40000", "[2001:db8::2]:1232"),
        ] {
            let payload = b"partial checksum from a local sender";
            let s =
                UdpFrameSpec::between(src.parse().unwrap(), dst.parse().unwrap(), payload.len());
            let mut f = s.build(payload).unwrap();
            let full = f.clone();
            assert!(!finish_partial_checksum(&mut f), "a full checksum stays");
            let l4 = f.len() - payload.len() - 8;
            let ulen = payload.len() + 8;
            // What a CHECKSUM_PARTIAL frame carries: the folded pseudo-header
            // sum, not complemented.
            let pseudo = !checksum::finish(checksum::pseudo_header_sum(
                s.src_ip,
                s.dst_ip,
                ipproto::UDP,
                ulen,
            ));
            f[l4 + 6..l4 + 8].copy_from_slice(&pseudo.to_be_bytes());
            let p = parse_udp_frame(&f).expect("partial checksum accepted");
            assert_eq!(p.payload, payload);
            let mut finished = f.clone();
            assert!(finish_partial_checksum(&mut finished));
            assert_eq!(finished, full, "finished = what a full sender sends");
            // Anything else that is not the full checksum is refused.
            f[l4 + 6..l4 + 8].copy_from_slice(&pseudo.wrapping_add(1).to_be_bytes());
            assert!(matches!(
                parse_udp_frame(&f),
                Err(FrameError::BadChecksum(Layer::Udp))
            ));
            assert!(!finish_partial_checksum(&mut f), "a wrong one stays wrong");
        }
    }

    /// Found by fuzz/fuzz_targets/wire_frames.rs: UDP's checksum covers
    /// the UDP length field's bytes, which may be fewer than the IP
    /// payload's. Finishing summed the IP payload: it left a real partial
    /// checksum alone, and rewrote a wrong one that happened to be the IP
    /// length's partial value (once into one `parse_udp_frame` accepts).
    #[test]
    fn a_partial_checksum_covers_the_udp_length_not_the_ip_payload() {
        for (src, dst) in [
            ("198.18.0.1:40000", "198.18.0.2:1232"),
            ("[2001:db8::1]:40000", "[2001:db8::2]:1232"),
        ] {
            let (payload, trailer) = (&b"datagram"[..], &b"after it, in the IP payload"[..]);
            let s = UdpFrameSpec::between(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                payload.len() + trailer.len(),
            );
            let mut f = s.build(&[payload, trailer].concat()).unwrap();
            let l4 = f.len() - trailer.len() - payload.len() - UDP_HLEN;
            let (ulen, ip_len) = (UDP_HLEN + payload.len(), f.len() - l4);
            let mut d = udp::Packet::new_unchecked(&mut f[l4..]);
            d.set_len(ulen as u16);
            d.fill_checksum(s.src_ip, s.dst_ip);
            let full = f.clone();
            assert_eq!(parse_udp_frame(&full).unwrap().payload, payload);
            let partial = |len| {
                let sum = checksum::pseudo_header_sum(s.src_ip, s.dst_ip, ipproto::UDP, len);
                !checksum::finish(sum)
            };
            f[l4 + 6..l4 + 8].copy_from_slice(&partial(ulen).to_be_bytes());
            assert!(parse_udp_frame(&f).is_ok(), "partial over the UDP length");
            assert!(finish_partial_checksum(&mut f));
            assert_eq!(f, full, "finished over the UDP length");
            f[l4 + 6..l4 + 8].copy_from_slice(&partial(ip_len).to_be_bytes());
            assert_eq!(
                parse_udp_frame(&f),
                Err(FrameError::BadChecksum(Layer::Udp))
            );
            let wrong = f.clone();
            assert!(!finish_partial_checksum(&mut f), "a wrong one stays wrong");
            assert_eq!(f, wrong);
        }
    }

    #[test]
    fn corrupted_udp_byte_fails_checksum() {
        let mut f = spec(true, 100).build(b"abc").unwrap();
        let n = f.len();
        f[n - 1] ^= 0x55;
        assert_eq!(
            parse_udp_frame(&f),
            Err(FrameError::BadChecksum(Layer::Udp))
        );
    }

    #[test]
    fn every_truncation_is_refused() {
        for v6 in [false, true] {
            let f = spec(v6, 90).build(&[]).unwrap();
            let hl = spec(v6, 90).header_len();
            for cut in 0..hl {
                assert!(parse_udp_frame(&f[..cut]).is_err(), "cut at {cut} v6={v6}");
            }
        }
    }

    #[test]
    fn too_small_frame_is_refused() {
        assert!(matches!(
            spec(true, 60).build(&[]),
            Err(FrameError::BadSize { .. })
        ));
    }

    /// Any spec of either family: addresses, MACs, ports and TTL drawn at
    /// random, a payload and zero padding after it.
    fn any_spec() -> impl Strategy<Value = (UdpFrameSpec, Vec<u8>)> {
        let addrs = prop_oneof![
            (any::<[u8; 4]>(), any::<[u8; 4]>())
                .prop_map(|(s, d)| (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d)))),
            (any::<[u8; 16]>(), any::<[u8; 16]>())
                .prop_map(|(s, d)| (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))),
        ];
        (
            addrs,
            any::<[u8; 6]>(),
            any::<[u8; 6]>(),
            any::<(u16, u16, u8)>(),
            proptest::collection::vec(any::<u8>(), 0..1400),
            0usize..64,
        )
            .prop_map(|((s, d), sm, dm, (sp, dp, ttl), payload, pad)| {
                let spec = UdpFrameSpec {
                    src_mac: MacAddr(sm),
                    dst_mac: MacAddr(dm),
                    src_ip: s,
                    dst_ip: d,
                    src_port: sp,
                    dst_port: dp,
                    ttl,
                    frame_len: 0,
                };
                (spec.sized_for(payload.len() + pad), payload)
            })
    }

    /// The spec a parsed frame describes.
    fn spec_of(p: &UdpFrame<'_>, frame_len: usize) -> UdpFrameSpec {
        UdpFrameSpec {
            src_mac: p.src_mac,
            dst_mac: p.dst_mac,
            src_ip: p.src_ip,
            dst_ip: p.dst_ip,
            src_port: p.src_port,
            dst_port: p.dst_port,
            ttl: p.ttl,
            frame_len,
        }
    }

    proptest! {
        /// build -> parse gives back every field, the payload and the zero
        /// padding after it (the UDP length covers the whole frame), at the
        /// offsets of the family's headers.
        #[test]
        fn build_then_parse_round_trips((s, payload) in any_spec()) {
            let f = s.build(&payload).unwrap();
            prop_assert_eq!(f.len(), s.frame_len);
            let p = parse_udp_frame(&f).unwrap();
            prop_assert_eq!(spec_of(&p, f.len()), s.clone());
            prop_assert_eq!(p.vlan, None);
            prop_assert_eq!(p.l3_offset, ETH_HLEN);
            prop_assert_eq!(p.l4_offset, ETH_HLEN + ip::header_len_for(s.src_ip));
            prop_assert_eq!(p.payload.len(), s.frame_len - s.header_len());
            prop_assert_eq!(&p.payload[..payload.len()], &payload[..]);
            prop_assert!(p.payload[payload.len()..].iter().all(|&b| b == 0));
            // Built again from what was parsed: the same bytes.
            prop_assert_eq!(spec_of(&p, f.len()).build(p.payload).unwrap(), f);
        }

        /// Every frame length is either built (and parses) or refused with
        /// BadSize: nothing in between, nothing skipped.
        #[test]
        fn every_frame_length_is_built_or_refused(
            v6 in any::<bool>(), len in 0usize..9300, sp in any::<u16>()
        ) {
            let mut s = spec(v6, len);
            s.src_port = sp;
            let hl = s.header_len();
            match s.build(&[]) {
                Ok(f) => {
                    prop_assert!((hl..=9216).contains(&len), "built {len}");
                    prop_assert_eq!(f.len(), len);
                    let p = parse_udp_frame(&f).unwrap();
                    prop_assert_eq!(p.src_port, sp);
                    prop_assert_eq!(p.payload.len(), len - hl);
                }
                Err(e) => {
                    prop_assert!(!(hl..=9216).contains(&len), "refused {len}: {e}");
                    prop_assert_eq!(e, FrameError::BadSize { size: len, min: hl, max: 9216 });
                }
            }
        }

        /// A frame cut at any length short of its IP datagram is refused,
        /// never parsed into something shorter, as truncated in the layer
        /// the cut falls in (the IP layer from its header on: its length
        /// covers the UDP datagram).
        #[test]
        fn every_truncation_is_an_error((s, payload) in any_spec()) {
            let f = s.build(&payload).unwrap();
            let ip = if s.src_ip.is_ipv4() { Layer::Ipv4 } else { Layer::Ipv6 };
            for cut in 0..f.len() {
                let want = if cut < ETH_HLEN { Layer::Ethernet } else { ip };
                prop_assert_eq!(parse_udp_frame(&f[..cut]), Err(FrameError::Truncated(want)), "cut at {} of {}", cut, f.len());
            }
        }

        /// One flipped bit anywhere after the MACs is refused (header
        /// checksum, UDP checksum, or a header check); in a MAC it parses,
        /// with that MAC. The exceptions are the ones the formats allow: an
        /// IPv4 UDP checksum that became zero means "none"; IPv6 has no
        /// header checksum and the UDP one leaves out traffic class, flow
        /// label and hop limit (they parse, with the hop limit as flipped).
        #[test]
        fn every_flipped_bit_is_caught((s, payload) in any_spec(), at in any::<prop::sample::Index>(), bit in 0u8..8) {
            let mut f = s.build(&payload).unwrap();
            let i = at.index(f.len());
            f[i] ^= 1 << bit;
            let r = parse_udp_frame(&f);
            let l4 = ETH_HLEN + ip::header_len_for(s.src_ip);
            if i < 12 {
                let p = r.unwrap();
                prop_assert_eq!(&f[0..6], &p.dst_mac.0[..]);
                prop_assert_eq!(&f[6..12], &p.src_mac.0[..]);
            } else if s.src_ip.is_ipv4() && (l4 + 6..l4 + 8).contains(&i) && f[l4 + 6..l4 + 8] == [0, 0] {
                prop_assert!(r.is_ok(), "{:?}", r);
            } else if s.src_ip.is_ipv6() && ((i == 14 && bit < 4) || (15..18).contains(&i) || i == 21) {
                let p = r.unwrap();
                prop_assert_eq!(p.ttl, f[21]);
                prop_assert_eq!(spec_of(&p, f.len()), UdpFrameSpec { ttl: f[21], ..s });
            } else {
                prop_assert!(r.is_err(), "bit {} of byte {} flipped: parsed {:?}", bit, i, r);
                if i >= l4 + 8 {
                    prop_assert_eq!(r.unwrap_err(), FrameError::BadChecksum(Layer::Udp));
                }
            }
        }

        /// A zero UDP checksum: "none" on IPv4 (accepted, same parse),
        /// refused on IPv6 where the checksum is mandatory.
        #[test]
        fn zero_udp_checksum_is_accepted_on_v4_only((s, payload) in any_spec()) {
            let mut f = s.build(&payload).unwrap();
            let l4 = ETH_HLEN + ip::header_len_for(s.src_ip);
            f[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
            let r = parse_udp_frame(&f);
            if s.src_ip.is_ipv4() {
                prop_assert_eq!(spec_of(&r.unwrap(), f.len()), s);
            } else {
                prop_assert_eq!(r, Err(FrameError::BadChecksum(Layer::Udp)));
            }
        }

        /// An 802.1Q tag in front of the IP header: the same parse, its VLAN
        /// id reported, the IP header found after the tag.
        #[test]
        fn a_vlan_tag_is_parsed_through((s, payload) in any_spec(), tci in any::<u16>(), qinq in any::<bool>()) {
            let f = s.build(&payload).unwrap();
            let tpid = if qinq { ethertype::QINQ } else { ethertype::VLAN };
            let t = vlan::tagged(&f, tpid, tci);
            let ip = if s.src_ip.is_ipv4() { Layer::Ipv4 } else { Layer::Ipv6 };
            let p = parse_udp_frame(&t).unwrap();
            prop_assert_eq!(p.vlan, Some(tci & 0x0fff));
            prop_assert_eq!(p.l3_offset, ETH_HLEN + VLAN_HLEN);
            prop_assert_eq!(spec_of(&p, f.len()), s);
            for cut in 0..t.len() {
                let want = match cut {
                    c if c < ETH_HLEN => Layer::Ethernet,
                    c if c < ETH_HLEN + VLAN_HLEN => Layer::Vlan,
                    _ => ip,
                };
                prop_assert_eq!(parse_udp_frame(&t[..cut]), Err(FrameError::Truncated(want)), "tagged, cut at {}", cut);
            }
        }

        /// Random bytes never panic the parser, and the rare frame it accepts
        /// is consistent: its payload lies inside the frame right after the
        /// UDP header, and its checksums verify (building it again from the
        /// parse reproduces its UDP datagram, up to a zero v4 checksum).
        #[test]
        fn random_bytes_are_refused_or_parsed_consistently(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            ipv in prop_oneof![Just(None), Just(Some(ethertype::IPV4)), Just(Some(ethertype::IPV6))],
        ) {
            let mut bytes = bytes;
            if let (Some(et), true) = (ipv, bytes.len() >= 15) {
                // Steer a share of the cases past the ethertype check.
                bytes[12..14].copy_from_slice(&et.to_be_bytes());
                bytes[14] = if et == ethertype::IPV4 { 0x45 } else { 0x60 };
            }
            if let Ok(p) = parse_udp_frame(&bytes) {
                let start = p.l4_offset + UDP_HLEN;
                prop_assert!(start + p.payload.len() <= bytes.len());
                prop_assert_eq!(&bytes[start..start + p.payload.len()], p.payload);
                prop_assert_eq!(&bytes[p.l4_offset..p.l4_offset + 2], &p.src_port.to_be_bytes()[..]);
            }
        }
    }
}

/// Turns the UDP request frame in the first `len` bytes of `buf` into its
/// reply, in place: MACs, addresses and ports swapped, TTL/hop limit 64,
/// `payload` as the UDP payload (it may be longer or shorter than the
/// request's), lengths and checksums (IPv4 header, UDP) computed anew.
/// `buf` may extend past `len` to leave room to grow. Returns the reply's
/// length. The request is checked first; a bad one is refused untouched.
pub fn reply_in_place(buf: &mut [u8], len: usize, payload: &[u8]) -> Result<usize, FrameError> {
    let spec = parse_udp_frame(&buf[..len.min(buf.len())])?.reply_spec(payload.len())?;
    spec.write_into(buf, payload)?;
    Ok(spec.frame_len)
}

impl UdpFrame<'_> {
    /// The frame answering this one with a `payload_len`-byte payload: MACs,
    /// addresses and ports swapped, TTL/hop limit 64. For callers that have
    /// parsed the request already (`reply_in_place` parses it itself).
    pub fn reply_spec(&self, payload_len: usize) -> Result<UdpFrameSpec, FrameError> {
        if self.vlan.is_some() {
            return Err(FrameError::Malformed(
                Layer::Vlan,
                "802.1Q-tagged requests are not answered",
            ));
        }
        let spec = UdpFrameSpec {
            src_mac: self.dst_mac,
            dst_mac: self.src_mac,
            src_ip: self.dst_ip,
            dst_ip: self.src_ip,
            src_port: self.dst_port,
            dst_port: self.src_port,
            ttl: 64,
            frame_len: 0,
        };
        Ok(spec.sized_for(payload_len))
    }
}

#[cfg(test)]
mod reply_tests {
    use super::*;
    use proptest::prelude::*;

    fn request(v6: bool, payload: &[u8]) -> Vec<u8> {
        let (s, d) = if v6 {
            ("[2001:db8::1]:40000", "[2001:db8::2]:1232")
        } else {
            ("198.18.0.1:40000", "198.18.0.2:1232")
        };
        let spec = UdpFrameSpec {
            ttl: 61,
            ..UdpFrameSpec::between(s.parse().unwrap(), d.parse().unwrap(), payload.len())
        };
        spec.build(payload).unwrap()
    }

    proptest! {
        #[test]
        fn replies_swap_everything_and_carry_valid_checksums(
            v6 in any::<bool>(),
            req in proptest::collection::vec(any::<u8>(), 0..1400),
            resp in proptest::collection::vec(any::<u8>(), 0..1400),
        ) {
            let f = request(v6, &req);
            let len = f.len();
            let mut buf = f.clone();
            buf.resize(2048, 0xee);
            let n = reply_in_place(&mut buf, len, &resp).unwrap();
            let r = parse_udp_frame(&buf[..n]).unwrap();
            let q = parse_udp_frame(&f).unwrap();
            prop_assert_eq!(r.src_mac, q.dst_mac);
            prop_assert_eq!(r.dst_mac, q.src_mac);
            prop_assert_eq!(r.src_ip, q.dst_ip);
            prop_assert_eq!(r.dst_ip, q.src_ip);
            prop_assert_eq!((r.src_port, r.dst_port), (q.dst_port, q.src_port));
            prop_assert_eq!(r.payload, &resp[..]);
            prop_assert_eq!(r.ttl, 64);
        }
    }

    #[test]
    fn bad_requests_are_refused_untouched() {
        let f = request(false, b"abc");
        let mut buf = f.clone();
        buf[f.len() - 1] ^= 1; // UDP checksum now wrong
        let before = buf.clone();
        assert_eq!(
            reply_in_place(&mut buf, f.len(), b"x"),
            Err(FrameError::BadChecksum(Layer::Udp))
        );
        assert_eq!(buf, before);
        let mut short = f[..20].to_vec();
        assert!(reply_in_place(&mut short, 20, b"x").is_err());
        // No room to grow: refused.
        let mut tight = f.clone();
        assert!(matches!(
            reply_in_place(&mut tight, f.len(), &[0u8; 64]),
            Err(FrameError::BadSize { .. })
        ));
    }
}
