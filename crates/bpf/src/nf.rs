//! Control side of `bpf/dataplane/nf.bpf.c`: a network function in a container.
use std::net::IpAddr;
use std::path::Path;

use crate::error::{BpfError, Result};
use crate::link::xdp_program;
use crate::loader::{open_and_load, rodata};
use crate::maps;
use crate::skel::nf::types::{acl_rule, acl_verdict, nf_config, nf_limits};
use crate::skel::nf::{NfSkel, NfSkelBuilder};

pub use crate::skel::nf::types::nf_stats as NfStats;

pub const MAX_RULES: usize = nf_limits::NF_MAX_RULES.0 as usize;

/// One ACL rule as users write it; becomes the generated `acl_rule`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Acl {
    /// Source (true) or destination prefix; None: any address.
    pub prefix: Option<(IpAddr, u8)>,
    pub match_src: bool,
    /// IP protocol number; None: any.
    pub proto: Option<u8>,
    /// Destination port; None: any.
    pub port: Option<u16>,
    /// Family when no prefix says it (4 or 6); None: any.
    pub family: Option<u8>,
    pub drop: bool,
}

impl Acl {
    fn to_rule(&self) -> acl_rule {
        let mut r = acl_rule {
            family: self.family.unwrap_or(0),
            proto: self.proto.unwrap_or(0),
            port: self.port.unwrap_or(0).to_be(),
            match_src: u8::from(self.match_src),
            verdict: if self.drop {
                acl_verdict::ACL_DROP.0 as u8
            } else {
                acl_verdict::ACL_PASS.0 as u8
            },
            ..Default::default()
        };
        if let Some((net, plen)) = self.prefix {
            match net {
                IpAddr::V4(a) => {
                    r.family = 4;
                    r.addr[..4].copy_from_slice(&a.octets());
                    r.prefixlen = plen.min(32);
                }
                IpAddr::V6(a) => {
                    r.family = 6;
                    r.addr = a.octets();
                    r.prefixlen = plen.min(128);
                }
            }
        }
        r
    }
}

/// What the function does with frames.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NfSetup {
    /// None: back out of the interface they came in on (reflect);
    /// Some(ifindex): redirect there (forward).
    pub out_ifindex: Option<u32>,
    /// ACL, first match wins; empty: no filtering.
    pub rules: Vec<Acl>,
}

xdp_program!(NfProgram, NfSkel, nf);

impl NfProgram {
    pub fn load(setup: &NfSetup) -> Result<NfProgram> {
        if setup.rules.len() > MAX_RULES {
            return Err(BpfError::Invalid(format!(
                "{} ACL rules: a network function holds at most {MAX_RULES}",
                setup.rules.len()
            )));
        }
        let mut cfg = nf_config {
            out_ifindex: setup.out_ifindex.unwrap_or(0),
            rules: setup.rules.len() as u32,
            ..Default::default()
        };
        for (slot, r) in cfg.acl.iter_mut().zip(&setup.rules) {
            *slot = r.to_rule();
        }
        let skel = open_and_load::<NfSkelBuilder>("nf.bpf.o", |open| {
            rodata(open.maps.rodata_data.as_deref_mut(), "nf.bpf.o")?.cfg = cfg;
            Ok(())
        })?;
        Ok(NfProgram { skel })
    }

    pub fn stats(&self) -> Result<NfStats> {
        maps::read_per_cpu(&self.skel.maps.nf_stats_map, &0u32.to_ne_bytes())
    }

    /// Pins the counters at `path` (read back with [`read_pinned_stats`]).
    pub fn pin_stats(&mut self, path: &Path) -> Result<()> {
        let _ = std::fs::remove_file(path);
        self.skel
            .maps
            .nf_stats_map
            .pin(path)
            .map_err(BpfError::libbpf(format!("pinning {}", path.display())))
    }
}

/// Counters of a network function whose stats map is pinned at `path`.
pub fn read_pinned_stats(path: &Path) -> Result<NfStats> {
    maps::read_pinned_per_cpu(path, &0u32.to_ne_bytes(), "is the chain applied?")
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{garbage, ip4_options, ip_first_byte, udp_ports, vlan};
    use crate::fixture::{assert_counters, truncations, Case, Expect, Fixture};
    use crate::XdpAction;
    use crate::XdpProgram;
    use peregrine_testbed::testing::privileged;
    use peregrine_wire::ethertype;

    fn frame(src: &str, dst: &str, dport: u16) -> Vec<u8> {
        udp_ports((src, dst), (1000, dport), 90, b"payload")
    }

    /// Counter deltas of one frame: packets, sent, dropped, judged as IP,
    /// partial checksum completed.
    type Deltas = [u64; 5];

    /// Runs `cases` through `p`, each with its counter deltas.
    fn check_cases(p: &NfProgram, cases: &[Case<Deltas>]) {
        assert_counters(
            "nf",
            p.prog(),
            cases,
            || p.stats().unwrap(),
            |s| [s.packets, s.sent, s.dropped, s.ip, s.csum_completed],
        );
    }

    /// Runs the table (name, frame, verdict, judged as IP) on a program
    /// loaded with `setup`: a sent frame counts as sent, a dropped one as
    /// dropped.
    fn run(setup: &NfSetup, table: Vec<(String, Vec<u8>, XdpAction, bool)>) {
        let p = NfProgram::load(setup).unwrap();
        let cases: Vec<Case<Deltas>> = table
            .into_iter()
            .map(|(n, f, v, ip)| {
                let dropped = v == XdpAction::Drop;
                let effect = [1, u64::from(!dropped), u64::from(dropped), u64::from(ip), 0];
                Case::new(Fixture::new(n, f, v, Expect::Unchanged), effect)
            })
            .collect();
        check_cases(&p, &cases);
    }

    /// `frame` (UDP, or TCP after `with_protocol`) with the partial
    /// pseudo-header checksum a local sender at default veth offloads
    /// leaves, where its protocol keeps the field.
    fn partial_l4(frame: &[u8]) -> Vec<u8> {
        use peregrine_wire::{checksum, ip, ipproto};
        let eth = if u16::from_be_bytes([frame[12], frame[13]]) == ethertype::VLAN {
            18
        } else {
            14
        };
        let et = u16::from_be_bytes([frame[eth - 2], frame[eth - 1]]);
        let (repr, hlen) = ip::Repr::parse(et, &frame[eth..]).expect("an IP frame");
        let at = eth
            + hlen
            + if repr.protocol() == ipproto::TCP {
                16
            } else {
                6
            };
        let sum = checksum::pseudo_header_sum(
            repr.src_addr(),
            repr.dst_addr(),
            repr.protocol(),
            repr.payload_len(),
        );
        let mut f = frame.to_vec();
        f[at..at + 2].copy_from_slice(&(!checksum::finish(sum)).to_be_bytes());
        f
    }

    /// What leaves the function: wire's completion of the same frame (an
    /// independent implementation).
    fn completed(frame: &[u8]) -> Vec<u8> {
        let mut f = frame.to_vec();
        assert!(peregrine_wire::finish_partial_checksum(&mut f), "partial");
        f
    }

    #[test]
    fn partial_checksums_are_completed_before_sending_on() {
        if !privileged("partial_checksums_are_completed_before_sending_on") {
            return;
        }
        use crate::fixture::frames::{ip4_fragment, with_protocol};
        let p = NfProgram::load(&NfSetup::default()).unwrap();
        let mut cases: Vec<Case<Deltas>> = Vec::new();
        let mut add = |name: String, input: Vec<u8>, expect: Expect, done: u64| {
            let f = Fixture::new(name, input, XdpAction::Tx, expect);
            cases.push(Case::new(f, [1, 1, 0, 0, done]));
        };
        for (src, dst) in [
            ("198.18.0.1", "198.19.0.1"),
            ("2001:db8::1", "2001:db8:2::1"),
        ] {
            // Payload lengths around csum.h's 256-byte blocks, odd and even.
            for len in [1usize, 2, 7, 100, 247, 248, 249, 503, 1000, 1400] {
                let hdr = if dst.contains(':') { 62 } else { 42 };
                let full = udp_ports((src, dst), (40000, 7000), hdr + len, &vec![0xa5; len]);
                let part = partial_l4(&full);
                add(
                    format!("udp {dst} {len} B partial"),
                    part.clone(),
                    Expect::Frame(full.clone()),
                    1,
                );
                add(
                    format!("udp {dst} {len} B full"),
                    full.clone(),
                    Expect::Unchanged,
                    0,
                );
                // TCP: the same bytes under protocol 6, long enough for
                // TCP's checksum field at offset 16.
                if len >= 12 {
                    let tcp = partial_l4(&with_protocol(&full, 6));
                    add(
                        format!("tcp {dst} {len} B partial"),
                        tcp.clone(),
                        Expect::Frame(completed(&tcp)),
                        1,
                    );
                }
                let tagged = partial_l4(&vlan(&full, ethertype::VLAN, 7));
                add(
                    format!("802.1Q udp {dst} {len} B partial"),
                    tagged.clone(),
                    Expect::Frame(completed(&tagged)),
                    1,
                );
            }
        }
        let v4 = udp_ports(
            ("198.18.0.1", "198.19.0.1"),
            (40000, 7000),
            342,
            &[0x5a; 300],
        );
        let part = partial_l4(&v4);
        // Left alone: a wrong checksum, a fragment, a datagram cut short,
        // and every cut at a header boundary.
        let mut wrong = part.clone();
        let at = 14 + 20 + 6;
        wrong[at] ^= 0x10;
        add("udp wrong checksum".into(), wrong, Expect::Unchanged, 0);
        add(
            "ipv4 fragment".into(),
            ip4_fragment(&part, true, 0),
            Expect::Unchanged,
            0,
        );
        add(
            "datagram cut short".into(),
            part[..200].to_vec(),
            Expect::Unchanged,
            0,
        );
        for (n, cut) in truncations(&part, 14 + 20 + 8) {
            add(format!("partial cut at {n}"), cut, Expect::Unchanged, 0);
        }
        check_cases(&p, &cases);
    }

    #[test]
    fn reflect_and_forward_send_every_frame_on_unchanged() {
        if !privileged("reflect_and_forward_send_every_frame_on_unchanged") {
            return;
        }
        let v4 = frame("198.18.0.1", "198.19.0.1", 9);
        // No rules: nothing is judged, so nothing counts as IP.
        let mut table = vec![
            ("ipv4".to_string(), v4.clone()),
            ("ipv6".into(), frame("2001:db8::1", "2001:db8:2::1", 9)),
            ("garbage".into(), garbage(40)),
        ];
        for (n, cut) in truncations(&v4, 42) {
            table.push((format!("cut at {n}"), cut));
        }
        let with = |v: XdpAction| {
            table
                .iter()
                .map(|(n, f)| (n.clone(), f.clone(), v, false))
                .collect::<Vec<_>>()
        };
        run(&NfSetup::default(), with(XdpAction::Tx));
        run(
            &NfSetup {
                out_ifindex: Some(1),
                rules: vec![],
            },
            with(XdpAction::Redirect),
        );
    }

    #[test]
    fn acl_first_match_wins_and_unmatched_pass() {
        if !privileged("acl_first_match_wins_and_unmatched_pass") {
            return;
        }
        let rules = vec![
            // Let one host through, drop the rest of its subnet.
            Acl {
                prefix: Some(("198.18.0.7".parse().unwrap(), 32)),
                match_src: true,
                drop: false,
                ..Default::default()
            },
            Acl {
                prefix: Some(("198.18.0.0".parse().unwrap(), 24)),
                match_src: true,
                drop: true,
                ..Default::default()
            },
            // UDP to port 53 anywhere.
            Acl {
                proto: Some(17),
                port: Some(53),
                drop: true,
                ..Default::default()
            },
            // An IPv6 destination prefix.
            Acl {
                prefix: Some(("2001:db8:bad::".parse().unwrap(), 48)),
                drop: true,
                ..Default::default()
            },
        ];
        let (tx, drop) = (XdpAction::Tx, XdpAction::Drop);
        let denied = frame("198.18.0.8", "198.19.0.1", 9);
        let dns = frame("198.18.1.8", "198.19.0.1", 53);
        let table: Vec<(&str, Vec<u8>, XdpAction, bool)> = vec![
            (
                "allowed host",
                frame("198.18.0.7", "198.19.0.1", 9),
                tx,
                true,
            ),
            ("denied subnet", denied.clone(), drop, true),
            (
                "other subnet",
                frame("198.18.1.8", "198.19.0.1", 9),
                tx,
                true,
            ),
            ("udp 53", dns.clone(), drop, true),
            (
                "v6 bad prefix",
                frame("2001:db8::1", "2001:db8:bad:1::1", 9),
                drop,
                true,
            ),
            (
                "v6 good prefix",
                frame("2001:db8::1", "2001:db8:bae::1", 9),
                tx,
                true,
            ),
            (
                "v6 udp 53",
                frame("2001:db8::1", "2001:db8:2::1", 53),
                drop,
                true,
            ),
            ("non-ip", vec![0xff; 60], tx, false),
            ("eth only", denied[..14].to_vec(), tx, false),
            ("ip cut short", denied[..30].to_vec(), tx, false),
            // parse.h's rule: the port is read after the options (was: from
            // the options when they were cut short).
            ("udp 53 with ipv4 options", ip4_options(&dns, 2), drop, true),
            // Tags are looked through (was: a tagged frame was not judged).
            (
                "802.1Q-tagged denied subnet",
                vlan(&denied, ethertype::VLAN, 5),
                drop,
                true,
            ),
            (
                "QinQ udp 53",
                vlan(&vlan(&dns, ethertype::VLAN, 5), ethertype::QINQ, 6),
                drop,
                true,
            ),
            // A version other than 4 is not IPv4 (was: judged as IPv4).
            (
                "ipv4 ethertype, version 6",
                ip_first_byte(&denied, 0x65),
                tx,
                false,
            ),
        ];
        run(
            &NfSetup {
                out_ifindex: None,
                rules,
            },
            table
                .into_iter()
                .map(|(n, f, v, ip)| (n.to_string(), f, v, ip))
                .collect(),
        );
    }

    #[test]
    fn too_many_rules_are_refused() {
        let rules = vec![Acl::default(); MAX_RULES + 1];
        let e = NfProgram::load(&NfSetup {
            out_ifindex: None,
            rules,
        })
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("at most"), "{e}");
    }
}
