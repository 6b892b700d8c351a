//! The sink's BPF_PROG_RUN fixtures (`peregrine_bpf::sink`, bpf/lab/sink.bpf.c):
//! frame in, verdict and frame out, and the exact counter change each frame
//! must cause; they need the generator's frames, so they run here.

use crate::fixture::frames::{
    arp, bad_ip4_checksum, garbage, ip4_fragment, ip4_options, ip_first_byte, udp_ports, vlan,
    with_protocol,
};
use crate::fixture::{assert_counters, gen_setup, truncations, Case, Expect, Fixture};
use crate::gen::FrameSizes;
use crate::testing::privileged;
use peregrine_bpf::sink::SinkProgram;
use peregrine_bpf::XdpAction;
use peregrine_bpf::XdpProgram;
use peregrine_wire::{ethertype, ipproto};

/// What one frame adds to the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    Generator,
    Other,
    Malformed,
    /// Carries the magic, checksum wrong: dropped whatever the verdict.
    BadChecksum,
}

/// A frame exactly as the generator makes it (`len` without FCS).
fn gen_frame(v6: bool, len: usize) -> Vec<u8> {
    gen_setup(v6, FrameSizes::Fixed(len + 4), 1, false)
        .frame(len + 4)
        .unwrap()
}

fn tagged(frame: &[u8]) -> Vec<u8> {
    vlan(frame, ethertype::VLAN, 42)
}

fn qinq(frame: &[u8]) -> Vec<u8> {
    vlan(&tagged(frame), ethertype::QINQ, 7)
}

/// The table: name, frame, how it is counted.
fn table() -> Vec<(String, Vec<u8>, Counted)> {
    use Counted::*;
    let v4 = gen_frame(false, 60);
    let v6 = gen_frame(true, 74);
    // IPv4 with 4 bytes of options (NOPs): the sink must skip them.
    let opt = ip4_options(&gen_frame(false, 60), 1);
    let mut t: Vec<(String, Vec<u8>, Counted)> = vec![
        ("ipv4 generator frame".into(), v4.clone(), Generator),
        ("ipv6 generator frame".into(), v6.clone(), Generator),
        (
            "ipv4 1514-byte generator frame".into(),
            gen_frame(false, 1514),
            Generator,
        ),
        (
            "802.1Q-tagged ipv4 generator frame".into(),
            tagged(&v4),
            Generator,
        ),
        (
            "802.1Q-tagged ipv6 generator frame".into(),
            tagged(&v6),
            Generator,
        ),
        // Parsed with parse.h's rule: two tags (was: one).
        ("QinQ ipv4 generator frame".into(), qinq(&v4), Generator),
        ("QinQ ipv6 generator frame".into(), qinq(&v6), Generator),
        (
            "three tags".into(),
            vlan(&qinq(&v4), ethertype::QINQ, 9),
            Other,
        ),
        (
            "udp without the magic".into(),
            udp_ports(
                ("198.18.0.1", "198.18.0.2"),
                (1024, 9),
                60,
                b"hello, not ours!",
            ),
            Other,
        ),
        (
            "udp payload too short for meta".into(),
            udp_ports(("198.18.0.1", "198.18.0.2"), (1024, 9), 50, &[]),
            Other,
        ),
        ("ipv4 with options".into(), opt.clone(), Generator),
        ("ipv4 fragment".into(), ip4_fragment(&v4, true, 1), Other),
        // Any fragment is not a whole datagram (was: a first fragment
        // carrying the magic counted as the generator's).
        (
            "ipv4 first fragment".into(),
            ip4_fragment(&v4, true, 0),
            Other,
        ),
        (
            "ipv4 later fragment".into(),
            ip4_fragment(&v4, false, 16),
            Other,
        ),
        (
            "ipv4 header length below 5 words".into(),
            ip_first_byte(&v4, 0x44),
            Other,
        ),
        (
            "ipv4 ethertype, version 6".into(),
            ip_first_byte(&v4, 0x65),
            Other,
        ),
        // A total length shorter than the header (was: counted).
        (
            "ipv4 total length below its header".into(),
            {
                let mut f = v4.clone();
                f[16..18].copy_from_slice(&19u16.to_be_bytes());
                f
            },
            Other,
        ),
        ("ipv4 tcp".into(), with_protocol(&v4, ipproto::TCP), Other),
        (
            "ipv6 icmp".into(),
            with_protocol(&v6, ipproto::ICMPV6),
            Other,
        ),
        ("arp".into(), arp(), Other),
        ("garbage".into(), garbage(64), Other),
    ];
    // Issue 9: the checksum rule of wire's parse_udp_frame (full, or
    // exactly the partial pseudo-header value; zero only on IPv4).
    use crate::fixture::checksums::{partial, wrong, zero};
    let v6_big = gen_frame(true, 1514);
    for (fam, f) in [("ipv4", &v4), ("ipv6", &v6), ("ipv6 1514-byte", &v6_big)] {
        t.push((format!("{fam} partial checksum"), partial(f), Generator));
        t.push((format!("{fam} wrong checksum"), wrong(f), BadChecksum));
        t.push((
            format!("802.1Q {fam} partial checksum"),
            tagged(&partial(f)),
            Generator,
        ));
        t.push((
            format!("802.1Q {fam} wrong checksum"),
            tagged(&wrong(f)),
            BadChecksum,
        ));
    }
    t.push(("ipv4 zero checksum (none)".into(), zero(&v4), Generator));
    t.push(("ipv6 zero checksum".into(), zero(&v6), BadChecksum));
    t.push((
        "ipv4 1514-byte wrong checksum".into(),
        wrong(&gen_frame(false, 1514)),
        BadChecksum,
    ));
    t.push((
        "ipv4 wrong header checksum".into(),
        bad_ip4_checksum(&v4),
        BadChecksum,
    ));
    t.push((
        "ipv4 with options, wrong checksum".into(),
        ip4_options(&wrong(&v4), 1),
        BadChecksum,
    ));
    // A payload byte changed: the full checksum no longer holds.
    let mut flipped = gen_frame(false, 200);
    flipped[150] ^= 1;
    t.push(("ipv4 payload byte flipped".into(), flipped, BadChecksum));
    let mut flipped = partial(&gen_frame(true, 201));
    flipped[150] ^= 1;
    // The partial value covers no data: a flipped byte still passes, as
    // it does through the kernel's sockets (nothing verifies it).
    t.push((
        "ipv6 odd length, partial, payload changed".into(),
        flipped,
        Generator,
    ));

    // Truncated at and between every header boundary and inside the
    // payload: a frame shorter than the headers or the datagram it
    // announces is malformed, never delivered traffic.
    for (label, frame) in [
        ("ipv4", v4.clone()),
        ("ipv6", v6.clone()),
        ("vlan ipv4", tagged(&v4)),
        ("vlan ipv6", tagged(&v6)),
        ("qinq ipv4", qinq(&v4)),
        ("ipv4 options", opt),
    ] {
        for (n, cut) in truncations(&frame, frame.len()) {
            t.push((format!("{label} cut at {n} bytes"), cut, Malformed));
        }
    }
    t
}

/// Counter deltas: packets, bytes, gen_packets, gen_bytes, malformed,
/// bad_checksum.
type Deltas = [u64; 6];

/// Loads a sink with `verdict` and runs the table on it (the drop and
/// pass sinks differ only in the verdict for generator frames).
fn check_with_counters(test: &str, verdict: XdpAction) {
    if !privileged(test) {
        return;
    }
    let prog = &SinkProgram::load(verdict).unwrap();
    let cases: Vec<Case<Deltas>> = table()
        .into_iter()
        .map(|(name, input, counted)| {
            let len = input.len() as u64;
            let (v, effect) = match counted {
                Counted::Generator => (verdict, [1, len, 1, len, 0, 0]),
                Counted::Other => (XdpAction::Pass, [1, len, 0, 0, 0, 0]),
                Counted::Malformed => (XdpAction::Pass, [1, len, 0, 0, 1, 0]),
                Counted::BadChecksum => (XdpAction::Drop, [1, len, 0, 0, 0, 1]),
            };
            Case::new(Fixture::new(name, input, v, Expect::Unchanged), effect)
        })
        .collect();
    assert_counters(
        &format!("{verdict:?} sink"),
        prog.prog(),
        &cases,
        || prog.stats().unwrap(),
        |s| {
            [
                s.packets,
                s.bytes,
                s.gen_packets,
                s.gen_bytes,
                s.malformed,
                s.bad_checksum,
            ]
        },
    );
}

#[test]
fn drop_sink_fixtures() {
    check_with_counters("drop_sink_fixtures", XdpAction::Drop);
}

#[test]
fn pass_sink_fixtures() {
    check_with_counters("pass_sink_fixtures", XdpAction::Pass);
}

#[test]
fn sink_refuses_other_verdicts() {
    assert!(SinkProgram::load(XdpAction::Tx).is_err());
}
