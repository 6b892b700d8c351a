//! Control side of `bpf/dataplane/classify.bpf.c`: the HTB engine's
//! classifier at tcx egress of the shaped device. It runs the policer's
//! rule lookup on the policer's own rule maps (handed to the loader by fd,
//! so `qos rule add|del` reach it), and sets skb->priority (and, under an
//! MQ root, queue_mapping) of class traffic; its own maps hold the tree's
//! record (`htb_port`: device, handles, TX queues, owner) and the classes
//! (`htb_classes`, the scheduler's class slots).
use std::os::fd::AsFd;

use libbpf_rs::MapHandle;

use crate::error::{BpfError, Result};
use crate::link::{Hook, Link, Placement};
use crate::loader::{open_and_load, Loaded};
use crate::maps;
use crate::pod::Pod;
use crate::policer::{ClassSlot, PolicerMaps};
use crate::skel::classify::types::htb_limits;
use crate::skel::classify::{ClassifySkel, ClassifySkelBuilder};
use crate::tcx::TcxDirection;

pub use crate::skel::classify::types::{htb_port as HtbPort, htb_totals as HtbTotals};

/// TX queues that get an HTB each under an MQ root, at most.
pub const MAX_TX_QUEUES: u32 = htb_limits::HTB_MAX_QUEUES.0;

/// The names of the classifier's own maps.
pub const MAP_NAMES: [&str; 3] = ["htb_port", "htb_classes", "htb_totals"];

/// The loaded classifier.
pub struct ClassifierProgram {
    skel: Loaded<ClassifySkel<'static>>,
}

impl ClassifierProgram {
    /// Loads the classifier on `policer`'s rule maps (the masks and rules
    /// it matches with are those maps, not copies).
    pub fn load(policer: &PolicerMaps) -> Result<ClassifierProgram> {
        let (masks, rules) = policer.rule_maps();
        let skel = open_and_load::<ClassifySkelBuilder>("classify.bpf.o", |open| {
            open.maps
                .policer_masks
                .reuse_fd(masks.as_fd())
                .map_err(BpfError::libbpf("sharing the policer's masks"))?;
            open.maps
                .policer_rules
                .reuse_fd(rules.as_fd())
                .map_err(BpfError::libbpf("sharing the policer's rules"))?;
            Ok(())
        })?;
        Ok(ClassifierProgram { skel })
    }

    pub fn prog(&self) -> &libbpf_rs::ProgramMut<'static> {
        &self.skel.progs.classify
    }

    /// Attaches at tcx egress of `iface`, after what runs there.
    pub fn attach(&self, iface: &str) -> Result<Link> {
        Link::attach_with(
            self.prog(),
            iface,
            Hook::Tcx(TcxDirection::Egress),
            Placement::Last,
        )
    }

    pub fn maps(&self) -> Result<ClassifierMaps> {
        let m = &self.skel.maps;
        let handle = |map: &libbpf_rs::MapMut<'static>| {
            MapHandle::try_from(map)
                .map_err(BpfError::libbpf("taking a handle of a classifier map"))
        };
        Ok(ClassifierMaps {
            port: handle(&m.htb_port)?,
            classes: handle(&m.htb_classes)?,
            totals: handle(&m.htb_totals)?,
        })
    }
}

/// The classifier's own maps, of a program just loaded or of the one a
/// pinned link runs.
pub struct ClassifierMaps {
    port: MapHandle,
    classes: MapHandle,
    totals: MapHandle,
}

impl ClassifierMaps {
    pub fn of_program(prog_id: u32) -> Result<ClassifierMaps> {
        let mut found = maps::maps_of_program(prog_id)?;
        let mut take = |name: &str| {
            let i = found.iter().position(|(n, _)| n == name).ok_or_else(|| {
                BpfError::Invalid(format!(
                    "program {prog_id} has no map {name}: not a classifier"
                ))
            })?;
            Ok::<_, BpfError>(found.swap_remove(i).1)
        };
        Ok(ClassifierMaps {
            port: take(MAP_NAMES[0])?,
            classes: take(MAP_NAMES[1])?,
            totals: take(MAP_NAMES[2])?,
        })
    }

    pub fn port(&self) -> Result<HtbPort> {
        maps::read(&self.port, &0u32.to_ne_bytes(), "reading the htb record")
    }

    pub fn set_port(&self, p: &HtbPort) -> Result<()> {
        maps::update(
            &self.port,
            &0u32.to_ne_bytes(),
            p.as_bytes(),
            "writing the htb record",
        )
    }

    /// Class slot `id` (`used` 0: free).
    pub fn class_slot(&self, id: u32) -> Result<ClassSlot> {
        maps::read(
            &self.classes,
            &id.to_ne_bytes(),
            &format!("reading htb class {id}"),
        )
    }

    pub fn set_class_slot(&self, id: u32, slot: &ClassSlot) -> Result<()> {
        maps::update(
            &self.classes,
            &id.to_ne_bytes(),
            slot.as_bytes(),
            &format!("writing htb class {id}"),
        )
    }

    /// The classifier's counters, summed over CPUs.
    pub fn totals(&self) -> Result<HtbTotals> {
        maps::read_per_cpu(&self.totals, &0u32.to_ne_bytes())
    }
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{arp_request, garbage, ip4_fragment, udp_ports, vlan};
    use crate::fixture::{run_once_skb_priority, skb_runnable, truncations, TcAction};
    use crate::policer::{Exceed, Match, PolicerProgram, Rate, Rule};
    use peregrine_testbed::testing::privileged;
    use peregrine_wire::{ethertype, MacAddr};

    const NEXT: u32 = -1i32 as u32;

    fn filter(matches: Match, class: u16) -> Rule {
        Rule {
            matches,
            rate: Rate::Unmetered,
            burst: 0,
            exceed: Exceed::Drop,
            priority: u32::from(class),
            class,
        }
    }

    fn slot(used: bool) -> ClassSlot {
        ClassSlot {
            used: u32::from(used),
            ..Default::default()
        }
    }

    /// The classifier on a fresh policer's maps with two class rules: UDP
    /// port 9 to 198.19.0.0/16 -> class 1, anything from 2001:db8::1 ->
    /// class 2; class 3's rule (TCP) names a class whose slot is free.
    fn loaded(queues: u16) -> (PolicerProgram, ClassifierProgram, ClassifierMaps) {
        let p = PolicerProgram::load().unwrap();
        let pm = p.maps().unwrap();
        let v4 = Match {
            dst: Some("198.19.0.0/16".parse().unwrap()),
            proto: Some(17),
            dport: Some(9),
            ..Default::default()
        };
        let v6 = Match {
            src: Some("2001:db8::1/128".parse().unwrap()),
            ..Default::default()
        };
        let gone = Match {
            family: Some(4),
            proto: Some(6),
            ..Default::default()
        };
        pm.install_fresh(&[filter(v4, 1), filter(v6, 2), filter(gone, 3)])
            .unwrap();
        let c = ClassifierProgram::load(&pm).unwrap();
        let m = c.maps().unwrap();
        m.set_port(&HtbPort {
            egress_ifindex: 1,
            root_major: 0x7067,
            major: if queues > 1 { 0x7068 } else { 0x7067 },
            queues,
            link_bps: 1_000_000,
            ..Default::default()
        })
        .unwrap();
        m.set_class_slot(1, &slot(true)).unwrap();
        m.set_class_slot(2, &slot(true)).unwrap();
        m.set_class_slot(3, &slot(false)).unwrap();
        (p, c, m)
    }

    fn udp(src: &str, dst: &str, dport: u16) -> Vec<u8> {
        udp_ports((src, dst), (1000, dport), 100, b"classified")
    }

    /// (packets, classified, unclassified, not IP, malformed)
    fn totals(m: &ClassifierMaps) -> [u64; 5] {
        let t = m.totals().unwrap();
        [
            t.packets,
            t.classified,
            t.unclassified,
            t.not_ip,
            t.malformed,
        ]
    }

    #[test]
    fn class_traffic_gets_its_htb_class_in_priority() {
        if !privileged("class_traffic_gets_its_htb_class_in_priority") {
            return;
        }
        let (_p, c, m) = loaded(1);
        let cases: Vec<(&str, Vec<u8>, u32, [u64; 5])> = vec![
            (
                "IPv4 UDP to port 9: class 1",
                udp("198.18.0.1", "198.19.0.5", 9),
                0x7067_0001,
                [1, 1, 0, 0, 0],
            ),
            (
                "VLAN-tagged, the same",
                vlan(&udp("198.18.0.1", "198.19.0.5", 9), ethertype::VLAN, 7),
                0x7067_0001,
                [1, 1, 0, 0, 0],
            ),
            (
                "IPv6 from 2001:db8::1: class 2",
                udp("2001:db8::1", "2001:db8::2", 53),
                0x7067_0002,
                [1, 1, 0, 0, 0],
            ),
            (
                "another port: no rule",
                udp("198.18.0.1", "198.19.0.5", 10),
                0,
                [1, 0, 1, 0, 0],
            ),
            (
                "another source: no rule",
                udp("2001:db8::3", "2001:db8::2", 53),
                0,
                [1, 0, 1, 0, 0],
            ),
            (
                "a later fragment has no ports: no rule",
                ip4_fragment(&udp("198.18.0.1", "198.19.0.5", 9), false, 64),
                0,
                [1, 0, 1, 0, 0],
            ),
            (
                "ARP: not IP",
                arp_request(
                    MacAddr([2, 0, 0, 0, 0, 1]),
                    "198.18.0.1".parse().unwrap(),
                    "198.18.0.2".parse().unwrap(),
                ),
                0,
                [1, 0, 0, 1, 0],
            ),
        ];
        let mut bad = Vec::new();
        for (name, frame, want, moved) in cases {
            let before = totals(&m);
            let (verdict, prio) = run_once_skb_priority(c.prog(), &frame).unwrap();
            let after = totals(&m);
            let got: [u64; 5] = std::array::from_fn(|i| after[i] - before[i]);
            if verdict != NEXT || prio != want || got != moved {
                bad.push(format!("{name}: verdict {verdict:#x} priority {prio:#x} moved {got:?} (want {want:#x}, {moved:?})"));
            }
        }
        // Garbage: whatever its bytes say, passed untouched.
        let (v, prio) = run_once_skb_priority(c.prog(), &garbage(60)).unwrap();
        assert_eq!((v, prio), (NEXT, 0));
        assert!(bad.is_empty(), "{bad:#?}");
        assert_eq!(TcAction::Next.raw(), NEXT);
    }

    #[test]
    fn a_class_whose_slot_is_free_is_not_used() {
        if !privileged("a_class_whose_slot_is_free_is_not_used") {
            return;
        }
        let (_p, c, m) = loaded(1);
        let tcp = crate::fixture::frames::with_protocol(&udp("198.18.0.1", "198.20.0.1", 80), 6);
        let before = totals(&m);
        assert_eq!(run_once_skb_priority(c.prog(), &tcp).unwrap(), (NEXT, 0));
        assert_eq!(totals(&m)[2] - before[2], 1, "counted unclassified");
    }

    /// Under an MQ root the priority's major names the HTB of the queue the
    /// flow's hash picked.
    #[test]
    fn several_queues_pick_the_queue_htb() {
        if !privileged("several_queues_pick_the_queue_htb") {
            return;
        }
        let (_p, c, _m) = loaded(2);
        let mut majors = std::collections::BTreeSet::new();
        for sport in 0..64u16 {
            let f = udp_ports(("198.18.0.1", "198.19.0.5"), (1000 + sport, 9), 100, b"q");
            let (v, prio) = run_once_skb_priority(c.prog(), &f).unwrap();
            assert_eq!(v, NEXT);
            assert_eq!(prio & 0xffff, 1, "{prio:#x}");
            majors.insert(prio >> 16);
        }
        assert!(
            majors.iter().all(|m| *m == 0x7068 || *m == 0x7069),
            "{majors:?}"
        );
        assert_eq!(
            majors.len(),
            2,
            "64 flows spread over both queues: {majors:?}"
        );
    }

    /// A frame cut at every header boundary (and every byte between) is
    /// passed with its priority untouched and counted, never classified.
    #[test]
    fn malformed_frames_at_every_header_boundary_pass_unclassified() {
        if !privileged("malformed_frames_at_every_header_boundary_pass_unclassified") {
            return;
        }
        let (_p, c, m) = loaded(1);
        let mut bad = Vec::new();
        let mut ran = 0;
        // (frame, where its ports end; from there the policer's rules match
        // as on a whole frame): cut anywhere before, the Ethernet, VLAN, IP
        // header or the ports are missing.
        for (frame, l4_end) in [
            (udp("198.18.0.1", "198.19.0.5", 9), 14 + 20 + 4),
            // Its rule has no ports: a whole IPv6 header matches it, so
            // the cuts end there.
            (udp("2001:db8::1", "2001:db8::2", 53), 14 + 40),
            (
                vlan(&udp("198.18.0.1", "198.19.0.5", 9), ethertype::VLAN, 7),
                18 + 20 + 4,
            ),
        ] {
            for (n, cut) in truncations(&frame, l4_end) {
                if !skb_runnable(&cut) {
                    continue;
                }
                let before = totals(&m);
                // Frames the kernel will not make an skb of never reach a
                // program: nothing to check.
                let Ok((v, prio)) = run_once_skb_priority(c.prog(), &cut) else {
                    continue;
                };
                ran += 1;
                let after = totals(&m);
                if v != NEXT || prio != 0 || after[1] != before[1] {
                    bad.push(format!("cut at {n}: verdict {v:#x} priority {prio:#x}"));
                }
            }
        }
        assert!(bad.is_empty(), "{bad:#?}");
        assert!(ran >= 20, "only {ran} cut frames ran");
    }
}
