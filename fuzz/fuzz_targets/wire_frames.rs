//! Every layer of `peregrine_wire` on untrusted bytes: the checked views and
//! `Repr::parse` of Ethernet, the VLAN tag, IPv4, IPv6 and UDP, the whole
//! frame parser, the partial checksum finisher and the reply in place.
//! Nothing panics; what parses emits back to what was parsed (byte for byte
//! where the `Repr` keeps every field: Ethernet, VLAN tag, a UDP datagram
//! with a full checksum); a finished partial checksum is a full one; a
//! reply to a parsed request parses as the request swapped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_wire::{
    checksum, ethernet, finish_partial_checksum, ip, ipv4, ipv6, link_header, parse_udp_frame,
    reply_in_place, udp, vlan, FrameError, UdpFrameSpec,
};
use std::net::IpAddr;

fuzz_target!(|data: &[u8]| {
    link_layers(data);
    network_layers(data);
    whole_frame(data);
    checksums(data);
});

fn link_layers(data: &[u8]) {
    if let Ok(eth) = ethernet::Frame::new_checked(data) {
        let r = ethernet::Repr::parse(&eth).expect("a checked frame parses");
        let mut out = data[..ethernet::HEADER_LEN].to_vec();
        out.fill(0);
        r.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
        assert_eq!(out, data[..ethernet::HEADER_LEN], "ethernet re-emits");
        let _ = eth.payload();
    }
    if let Ok(tag) = vlan::Tag::new_checked(data) {
        let r = vlan::Repr::parse(&tag).expect("a checked tag parses");
        let mut out = [0u8; vlan::HEADER_LEN];
        r.emit(&mut vlan::Tag::new_unchecked(&mut out[..]));
        assert_eq!(out, data[..vlan::HEADER_LEN], "vlan tag re-emits");
        assert!(tag.vlan_id() < 4096);
    }
    let _ = link_header(data);
}

/// IPv4 and IPv6 at the start of `data`, and UDP after them.
fn network_layers(data: &[u8]) {
    let v4 = ipv4::Packet::new_unchecked(data);
    if let Ok(r) = ipv4::Repr::parse(&v4) {
        let p = ipv4::Packet::new_checked(data).expect("parsed, so checked");
        assert!(p.verify_checksum() && !p.is_fragment());
        assert_eq!(p.payload().len(), r.payload_len);
        let _ = p.options();
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut ipv4::Packet::new_unchecked(&mut out[..]));
        let again = ipv4::Repr::parse(&ipv4::Packet::new_unchecked(&out[..]));
        assert_eq!(again, Ok(r), "ipv4 emit then parse");
        datagram(p.payload(), r.src_addr.into(), r.dst_addr.into());
    }
    let v6 = ipv6::Packet::new_unchecked(data);
    if let Ok(r) = ipv6::Repr::parse(&v6) {
        let p = ipv6::Packet::new_checked(data).expect("parsed, so checked");
        assert_eq!(p.payload().len(), r.payload_len);
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut ipv6::Packet::new_unchecked(&mut out[..]));
        let again = ipv6::Repr::parse(&ipv6::Packet::new_unchecked(&out[..]));
        assert_eq!(again, Ok(r), "ipv6 emit then parse");
        datagram(p.payload(), r.src_addr.into(), r.dst_addr.into());
    }
    for et in [
        peregrine_wire::ethertype::IPV4,
        peregrine_wire::ethertype::IPV6,
        0,
    ] {
        if let Ok((r, hlen)) = ip::Repr::parse(et, data) {
            assert!(hlen + r.payload_len() <= data.len());
        }
    }
}

/// A UDP datagram between `src` and `dst`: a parsed one emits back; with a
/// full checksum (not zero, not only the partial value) to the same bytes.
fn datagram(data: &[u8], src: IpAddr, dst: IpAddr) {
    let p = udp::Packet::new_unchecked(data);
    let Ok(r) = udp::Repr::parse(&p, src, dst) else {
        return;
    };
    let len = r.buffer_len();
    assert!(len <= data.len());
    let mut out = vec![0u8; len];
    r.emit(
        &mut udp::Packet::new_unchecked(&mut out[..]),
        src,
        dst,
        &data[udp::HEADER_LEN..len],
    );
    let emitted = udp::Repr::parse(&udp::Packet::new_unchecked(&out[..]), src, dst);
    assert_eq!(emitted, Ok(r), "udp emit then parse");
    let full = checksum::finish(checksum::sum_words(
        checksum::pseudo_header_sum(src, dst, peregrine_wire::ipproto::UDP, len),
        &data[..len],
    )) == 0;
    if p.checksum() != 0 && full {
        assert_eq!(out, data[..len], "udp with a full checksum re-emits");
    }
}

fn whole_frame(data: &[u8]) {
    let parsed = parse_udp_frame(data);
    let mut finished = data.to_vec();
    let changed = finish_partial_checksum(&mut finished);
    if !changed {
        assert_eq!(finished, data, "unchanged means untouched");
    }
    let Ok(u) = parsed else {
        if let Err(FrameError::BadChecksum(peregrine_wire::Layer::Udp)) = parsed {
            // Finishing never makes a wrong checksum right.
            assert!(!changed || parse_udp_frame(&finished).is_err());
        }
        return;
    };
    assert!(u.l3_offset < u.l4_offset && u.l4_offset + 8 + u.payload.len() <= data.len());
    // A partial checksum finished: the same frame, now with a full sum.
    let f = parse_udp_frame(&finished).expect("a finished frame still parses");
    assert_eq!(
        (f.src_ip, f.dst_ip, f.src_port, f.dst_port),
        (u.src_ip, u.dst_ip, u.src_port, u.dst_port)
    );
    assert_eq!(f.payload, u.payload);
    if changed {
        let seg = &finished[u.l4_offset..u.l4_offset + 8 + u.payload.len()];
        let sum = checksum::pseudo_header_sum(u.src_ip, u.dst_ip, 17, seg.len());
        assert_eq!(
            checksum::finish(checksum::sum_words(sum, seg)),
            0,
            "finished is full"
        );
    }
    // The frame built from what was parsed parses to the same.
    let spec = UdpFrameSpec {
        src_mac: u.src_mac,
        dst_mac: u.dst_mac,
        src_ip: u.src_ip,
        dst_ip: u.dst_ip,
        src_port: u.src_port,
        dst_port: u.dst_port,
        ttl: u.ttl,
        frame_len: 0,
    }
    .sized_for(u.payload.len());
    if let Ok(built) = spec.build(u.payload) {
        let b = parse_udp_frame(&built).expect("a built frame parses");
        assert_eq!(
            (b.src_mac, b.dst_mac, b.src_ip, b.dst_ip),
            (u.src_mac, u.dst_mac, u.src_ip, u.dst_ip)
        );
        assert_eq!(
            (b.src_port, b.dst_port, b.ttl, b.payload),
            (u.src_port, u.dst_port, u.ttl, u.payload)
        );
    }
    // Its reply, in place, with the payload reversed.
    let reply_payload: Vec<u8> = u.payload.iter().rev().copied().collect();
    let mut buf = data.to_vec();
    buf.resize(data.len().max(2048), 0xa5);
    match reply_in_place(&mut buf, data.len(), &reply_payload) {
        Ok(n) => {
            let r = parse_udp_frame(&buf[..n]).expect("a reply parses");
            assert!(u.vlan.is_none());
            assert_eq!((r.src_mac, r.dst_mac), (u.dst_mac, u.src_mac));
            assert_eq!((r.src_ip, r.dst_ip), (u.dst_ip, u.src_ip));
            assert_eq!((r.src_port, r.dst_port), (u.dst_port, u.src_port));
            assert_eq!(r.payload, &reply_payload[..]);
        }
        Err(_) => assert!(u.vlan.is_some() || spec.frame_len > 9216),
    }
}

/// The fast sum (eight bytes at a time, native order) agrees with RFC
/// 1071 word by word, and with itself split at any even offset.
fn checksums(data: &[u8]) {
    let whole = checksum::finish(checksum::sum_words(0, data));
    let reference = data
        .chunks(2)
        .map(|w| u64::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum::<u64>();
    assert_eq!(
        whole,
        checksum::finish(reference),
        "sum_words against RFC 1071"
    );
    let at = data.len() / 2 & !1;
    let split = checksum::sum_words(checksum::sum_words(0, &data[..at]), &data[at..]);
    assert_eq!(whole, checksum::finish(split));
    assert_eq!(checksum::checksum(data), whole);
}
