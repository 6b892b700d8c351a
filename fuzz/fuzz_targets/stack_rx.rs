//! The UDP/IP stack's RX classification (`peregrine_stack::rx::classify`)
//! on untrusted frames: it never panics, agrees with
//! `peregrine_wire::parse_udp_frame` on every frame, and hands on only
//! untagged datagrams to our MAC or a group MAC from a unicast MAC and a
//! source address a host may have (`ip::invalid_source`), with the
//! payload's range inside the frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_stack::rx::{classify, RxDrop};
use peregrine_wire::ip::invalid_source;
use peregrine_wire::{parse_udp_frame, FrameError, Layer, MacAddr};

fuzz_target!(|data: &[u8]| {
    let ours = MacAddr::local(2);
    let got = classify(data, ours);
    match parse_udp_frame(data) {
        Ok(u) => {
            let expected_drop = if u.vlan.is_some() {
                Some(RxDrop::NotUdp)
            } else if u.dst_mac != ours && u.dst_mac.0[0] & 1 == 0 {
                Some(RxDrop::OtherHost)
            } else if u.src_mac.0[0] & 1 != 0 || invalid_source(u.src_ip, true) {
                Some(RxDrop::BadSource)
            } else {
                None
            };
            match (got, expected_drop) {
                (Ok(i), None) => {
                    assert!(i.payload.end <= data.len());
                    assert_eq!(&data[i.payload.clone()], u.payload);
                    assert_eq!((i.src.ip(), i.src.port()), (u.src_ip, u.src_port));
                    assert_eq!((i.dst.ip(), i.dst.port()), (u.dst_ip, u.dst_port));
                }
                (Err(d), Some(e)) => assert_eq!(d, e),
                (g, e) => panic!("classify {g:?}, expected drop {e:?}"),
            }
        }
        Err(e) => {
            let expected = match e {
                FrameError::Truncated(_) => RxDrop::Truncated,
                FrameError::BadChecksum(Layer::Udp) => RxDrop::BadUdpChecksum,
                FrameError::BadChecksum(_) => RxDrop::BadIpChecksum,
                FrameError::NotIp(_) | FrameError::NotUdp(_) => RxDrop::NotUdp,
                _ => RxDrop::Malformed,
            };
            assert_eq!(got, Err(expected), "{e:?}");
        }
    }
});
