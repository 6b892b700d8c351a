//! Every I/O path through every container network mode this kernel can
//! build: a known sequence goes through, and the receiver checks count,
//! order and every payload byte. Also: pacing at two rates, the TPACKET_V3
//! ring's kernel drop counter, and bad input refused in one line with
//! nothing left behind.
use std::time::Duration;

use peregrine_lab::measure::CpuWait;

use peregrine_lab::iopath::IoPath;
use peregrine_lab::netmodes::{run_pair, ModeLab, NetMode, PairRun, PairSpec};
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_testbed::testing::privileged;

fn spec(path: IoPath, payload_len: usize, v6: bool, pps: f64, count: u64) -> PairSpec {
    PairSpec {
        path,
        payload_len,
        v6,
        rate: Rate::Pps(pps),
        limit: Limit {
            count: Some(count),
            duration: Some(Duration::from_secs(20)),
        },
        cpus: None,
    }
}

/// Everything sent arrived, once, in order, intact.
fn assert_whole(r: &PairRun, count: u64) {
    let what = format!("{} through {}", r.path, r.mode);
    assert_eq!(r.sent.sent, count, "{what}: sent");
    assert_eq!(
        r.received.packets, count,
        "{what}: received {:?}",
        r.received
    );
    assert_eq!(r.lost, 0, "{what}: lost");
    assert_eq!(r.received.corrupt, 0, "{what}: corrupt");
    assert_eq!(r.received.duplicates, 0, "{what}: duplicates");
    assert_eq!(r.received.out_of_order, 0, "{what}: out of order");
    assert_eq!(
        r.received.bytes,
        count * r.payload_len as u64,
        "{what}: bytes"
    );
}

#[test]
fn every_path_carries_a_known_sequence_through_every_mode() {
    if !privileged("every_path_carries_a_known_sequence_through_every_mode") {
        return;
    }
    const COUNT: u64 = 3000;
    for mode in NetMode::ALL {
        let ml = ModeLab::up(mode).unwrap();
        for path in IoPath::ALL {
            for v6 in [false, true] {
                // Odd sizes too: the pattern and both checksums cover every byte.
                let size = if v6 { 333 } else { 64 };
                let r = run_pair(&ml, &spec(path, size, v6, 50_000.0, COUNT))
                    .unwrap_or_else(|e| panic!("{path} through {mode} (v6 {v6}): {e}"));
                assert_whole(&r, COUNT);
            }
        }
    }
}

/// Every path holds a requested rate within 1% at two rates, and what it
/// sends arrives whole.
#[test]
fn every_path_paces_within_one_percent_at_two_rates() {
    if !privileged("every_path_paces_within_one_percent_at_two_rates") {
        return;
    }
    let ml = ModeLab::up(NetMode::Host).unwrap();
    for path in IoPath::ALL {
        for pps in [10_000.0, 60_000.0] {
            let mut s = spec(path, 200, false, pps, u64::MAX);
            s.limit = Limit {
                count: None,
                duration: Some(Duration::from_secs(1)),
            };
            let wait0 = CpuWait::take();
            let r = run_pair(&ml, &s).unwrap();
            // Never over by more than 1%. Short by at most 2% plus the
            // hypervisor's steal: a 1 s run loses 1% to one 10 ms stall
            // of a 2-vCPU VM (-1.13% at 60 kpps was seen beside a busy
            // neighbour), and the sender's own run-queue wait is lost with
            // its thread when it ends, so it cannot be excused exactly.
            let waited = CpuWait::take().since(&wait0);
            let offered = r.sent.sent as f64 / r.sent.elapsed_s;
            let err = (offered - pps) / pps;
            assert!(
                err <= 0.01 && err >= -(0.02 + waited / r.sent.elapsed_s),
                "{path} at {pps} pps offered {offered:.0} pps ({:+.2}%, {:.1} ms waiting for a CPU)",
                err * 100.0,
                waited * 1e3
            );
            assert_whole(&r, r.sent.sent);
        }
    }
}

/// A TPACKET_V3 ring that is not read fills up, and the kernel counts
/// every frame that found no free block: what was read plus what was
/// dropped is what reached the socket.
#[test]
fn a_full_tpacket_v3_ring_counts_its_drops() {
    if !privileged("a_full_tpacket_v3_ring_counts_its_drops") {
        return;
    }
    use peregrine_io::packet_mmap::{RxRing, RxRingConfig};
    const SENT: u64 = 5_000;
    let ml = ModeLab::up(NetMode::Host).unwrap();
    let (tx_ns, rx_ns) = (ml.tx_ns(), ml.rx_ns());
    // Two 4 KiB blocks: a few dozen frames fit.
    let cfg = RxRingConfig {
        block_size: 4096,
        blocks: 2,
        frame_size: 2048,
        retire: Duration::from_millis(1),
    };
    let mut ring = peregrine_host::netns::run_in(&rx_ns, || RxRing::open("eth0", cfg))
        .unwrap()
        .unwrap();
    peregrine_host::netns::run_in(&tx_ns, || {
        let s = std::net::UdpSocket::bind("198.18.0.1:0").unwrap();
        for _ in 0..SENT {
            s.send_to(&[7u8; 100], "198.18.0.2:5001").unwrap();
        }
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let (mut read, mut ours) = (0u64, 0u64);
    while ring
        .receive(Duration::from_millis(20), |f, _| {
            read += 1;
            ours += u64::from(peregrine_wire::parse_udp_frame(f).is_ok_and(|u| u.dst_port == 5001));
        })
        .unwrap()
        > 0
    {}
    let st = ring.stats().unwrap();
    assert!(st.drops > 0, "{st:?}");
    assert!(ours > 0 && ours < SENT, "read {ours} of ours");
    assert_eq!(read + st.drops, st.packets, "{st:?}, read {read}");
    assert!(st.packets >= SENT, "{st:?}");
}

/// A mode this kernel cannot build, and a payload the mode's MTU cannot
/// carry, are refused in one line, and nothing is left behind.
#[test]
fn bad_modes_and_sizes_are_refused_in_one_line_leaving_nothing() {
    if !privileged("bad_modes_and_sizes_are_refused_in_one_line_leaving_nothing") {
        return;
    }
    for m in ["ipvlan", "macvlan-8021q", "ovs-bridge"] {
        let e = m.parse::<NetMode>().unwrap_err().to_string();
        assert!(
            e.contains("cannot be built here") && !e.contains('\n'),
            "{e}"
        );
    }
    let ml = ModeLab::up(NetMode::Overlay).unwrap();
    let e = run_pair(&ml, &spec(IoPath::Mmap, 1472, false, 1000.0, 10))
        .unwrap_err()
        .to_string();
    assert!(e.contains("MTU of 1450") && !e.contains('\n'), "{e}");
    drop(ml);
    let left: Vec<String> = peregrine_host::netns::list()
        .into_iter()
        .filter(|n| n.starts_with("pg-nm") || n.starts_with("pg-probe"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
