//! The AF_XDP invoker's request-to-reply path (`faas::invoker::handle`:
//! parse, `LocalAddrs` check, the function, the reply written in place in
//! the 2 KiB UMEM frame) with each built-in function and a WebAssembly
//! function (examples/functions/reverse.wat), on untrusted frames. Every
//! request ends in exactly one counter; a reply is a well-formed UDP frame
//! from us to the request's source (never to a group MAC or address), with
//! the function's answer as its payload.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use peregrine_faas::addrs::{group_address, invalid_source, LocalAddrs};
use peregrine_faas::functions::builtin;
use peregrine_faas::invoker::{handle, Counters};
use peregrine_faas::wasm::{WasmFunction, WasmLimits};
use peregrine_faas::Registry;
use peregrine_wire::{parse_udp_frame, MacAddr};
use peregrine_xsk::Verdict;

/// The UMEM frame size the invoker runs with by default.
const FRAME: usize = 2048;
const REVERSE_WAT: &[u8] = include_bytes!("../../examples/functions/reverse.wat");
/// Ports 1232.. in this order; the WebAssembly reverse answers as the
/// built-in one.
const FUNCTIONS: [&str; 5] = ["reverse", "echo", "upper", "sha256", "wasm:reverse"];

fn setup() -> &'static (Registry, LocalAddrs) {
    static SETUP: OnceLock<(Registry, LocalAddrs)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let mut r = Registry::default();
        for (i, name) in FUNCTIONS.iter().enumerate() {
            let f = match name.strip_prefix("wasm:") {
                Some(n) => Arc::new(
                    WasmFunction::new(n, REVERSE_WAT, WasmLimits::default()).expect("reverse.wat"),
                ) as Arc<dyn peregrine_faas::Function>,
                None => builtin(name).expect("a built-in"),
            };
            r.add(1232 + i as u16, f).expect("a free port");
        }
        let local = LocalAddrs {
            mac: Some(MacAddr::local(2)),
            unicast: vec![
                IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)),
                "2001:db8::2".parse().unwrap(),
                "fe80::2".parse().unwrap(),
            ],
            broadcast: vec![Ipv4Addr::new(198, 18, 0, 255)],
        };
        (r, local)
    })
}

fuzz_target!(|data: &[u8]| {
    let (registry, local) = setup();
    let len = data.len().min(FRAME);
    let mut buf = [0u8; FRAME];
    buf[..len].copy_from_slice(&data[..len]);
    let c = Counters::for_live();
    let mut scratch = Vec::new();
    let verdict = handle(registry, local, &mut buf, len, &mut scratch, &c);

    assert_eq!(c.requests.load(Ordering::Relaxed), 1);
    let dropped: u64 = c
        .drop_reasons()
        .iter()
        .map(|(_, n)| n.load(Ordering::Relaxed))
        .sum();
    let answered: u64 = c
        .per_function
        .iter()
        .map(|n| n.load(Ordering::Relaxed))
        .sum();
    assert_eq!(dropped + answered, 1, "one request, one outcome");

    let Verdict::Transmit(n) = verdict else {
        assert_eq!(answered, 0);
        return;
    };
    assert_eq!(answered, 1);
    let req = parse_udp_frame(&data[..len]).expect("only a parsed request is answered");
    let rep = parse_udp_frame(&buf[..n]).expect("a reply is a well-formed UDP frame");
    assert_eq!(rep.dst_mac, req.src_mac);
    assert_eq!(rep.dst_mac.0[0] & 1, 0, "never to a group MAC");
    assert_eq!(Some(rep.src_mac), local.mac);
    assert_eq!((rep.src_ip, rep.dst_ip), (req.dst_ip, req.src_ip));
    assert!(!group_address(rep.dst_ip) && !invalid_source(rep.dst_ip, true));
    assert!(!local.unicast.contains(&rep.dst_ip));
    assert!(!matches!(rep.dst_ip, IpAddr::V4(a) if local.broadcast.contains(&a)));
    assert_eq!((rep.src_port, rep.dst_port), (req.dst_port, req.src_port));
    assert_ne!(rep.dst_port, 0);
    assert!(rep.vlan.is_none());
    let name = FUNCTIONS[usize::from(req.dst_port - 1232)];
    let mut expected = Vec::new();
    builtin(name.trim_start_matches("wasm:"))
        .expect("a built-in")
        .call(req.payload, &mut expected)
        .expect("built-ins answer everything");
    assert_eq!(rep.payload, &expected[..], "{name}");
});
