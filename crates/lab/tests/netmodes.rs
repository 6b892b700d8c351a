//! Every I/O path through every container network mode this kernel can
//! build: a known sequence goes through, and the receiver checks count,
//! order and every payload byte. Also: pacing at two rates, the TPACKET_V3
//! ring's kernel drop counter, and bad input refused in one line with
//! nothing left behind.
use std::time::Duration;

use peregrine_bpf::testing::privileged;
use peregrine_lab::iopath::IoPath;
use peregrine_lab::netmodes::{run_pair, ModeLab, NetMode, PairRun, PairSpec};
use peregrine_lab::pacing::{Limit, Rate};

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
