//! Control side of `bpf/dataplane/nf.bpf.c`: a network function in a container.
use std::mem::MaybeUninit;
use std::net::IpAddr;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};

use crate::error::{BpfError, Result};
use crate::loader::Loaded;
use crate::skel::nf::types::{acl_rule, acl_verdict, nf_config, nf_limits};
use crate::skel::nf::{NfSkel, NfSkelBuilder};
use crate::xdp::{XdpLink, XdpMode};

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

pub struct NfProgram {
    skel: Loaded<NfSkel<'static>>,
}

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
        let skel = Loaded::new(
            "nf.bpf.o",
            |storage: &'static mut MaybeUninit<libbpf_rs::OpenObject>| {
                let mut open = NfSkelBuilder::default()
                    .open(storage)
                    .map_err(BpfError::libbpf("opening nf.bpf.o"))?;
                let rodata = open
                    .maps
                    .rodata_data
                    .as_deref_mut()
                    .ok_or_else(|| BpfError::Invalid("nf.bpf.o has no rodata".into()))?;
                rodata.cfg = cfg;
                open.load().map_err(BpfError::libbpf("loading nf.bpf.o"))
            },
        )?;
        Ok(NfProgram { skel })
    }

    pub fn prog(&self) -> &libbpf_rs::ProgramMut<'static> {
        &self.skel.progs.nf
    }

    pub fn attach(&self, iface: &str, mode: XdpMode) -> Result<XdpLink> {
        XdpLink::attach(self.prog(), iface, mode)
    }

    pub fn stats(&self) -> Result<NfStats> {
        let v = self
            .skel
            .maps
            .nf_stats_map
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
            .map_err(BpfError::libbpf("reading network function counters"))?
            .unwrap_or_default();
        Ok(crate::pod::sum_per_cpu(&v))
    }

    /// Pins the counters at `path` (read back with [`read_pinned_stats`]).
    pub fn pin_stats(&mut self, path: &std::path::Path) -> Result<()> {
        let _ = std::fs::remove_file(path);
        self.skel
            .maps
            .nf_stats_map
            .pin(path)
            .map_err(BpfError::libbpf(format!("pinning {}", path.display())))
    }
}

/// Counters of a network function whose stats map is pinned at `path`.
pub fn read_pinned_stats(path: &std::path::Path) -> Result<NfStats> {
    let map = libbpf_rs::MapHandle::from_pinned_path(path).map_err(BpfError::libbpf(format!(
        "opening {} (is the chain applied?)",
        path.display()
    )))?;
    let v = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(BpfError::libbpf("reading network function counters"))?
        .unwrap_or_default();
    Ok(crate::pod::sum_per_cpu(&v))
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::{check_all, truncations, Expect, Fixture};
    use crate::testing::privileged;
    use crate::XdpAction;
    use peregrine_wire::{MacAddr, UdpFrameSpec};

    fn udp(src: &str, dst: &str, dport: u16) -> Vec<u8> {
        UdpFrameSpec {
            src_mac: MacAddr::local(1),
            dst_mac: MacAddr::local(2),
            src_ip: src.parse().unwrap(),
            dst_ip: dst.parse().unwrap(),
            src_port: 1000,
            dst_port: dport,
            ttl: 64,
            frame_len: 90,
        }
        .build(b"payload")
        .unwrap()
    }

    fn run(setup: &NfSetup, cases: Vec<(&str, Vec<u8>, XdpAction)>) -> (NfStats, usize) {
        let p = NfProgram::load(setup).unwrap();
        let fx: Vec<Fixture> = cases
            .into_iter()
            .map(|(n, f, v)| Fixture::new(n, f, v, Expect::Unchanged))
            .collect();
        let bad: Vec<String> = check_all(p.prog(), &fx)
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        (p.stats().unwrap(), fx.len())
    }

    #[test]
    fn reflect_and_forward_send_every_frame_on_unchanged() {
        if !privileged("reflect_and_forward_send_every_frame_on_unchanged") {
            return;
        }
        let v4 = udp("198.18.0.1", "198.19.0.1", 9);
        let mut cases = vec![
            ("ipv4", v4.clone(), XdpAction::Tx),
            (
                "ipv6",
                udp("2001:db8::1", "2001:db8:2::1", 9),
                XdpAction::Tx,
            ),
            ("garbage", vec![0x5a; 40], XdpAction::Tx),
        ];
        for (n, cut) in truncations(&v4, 42) {
            cases.push((
                Box::leak(format!("cut at {n}").into_boxed_str()),
                cut,
                XdpAction::Tx,
            ));
        }
        let (st, n) = run(&NfSetup::default(), cases.clone());
        assert_eq!((st.packets, st.sent, st.dropped), (n as u64, n as u64, 0));
        let fwd: Vec<_> = cases
            .into_iter()
            .map(|(a, b, _)| (a, b, XdpAction::Redirect))
            .collect();
        let (st, n) = run(
            &NfSetup {
                out_ifindex: Some(1),
                rules: vec![],
            },
            fwd,
        );
        assert_eq!(st.sent, n as u64);
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
        let cases = vec![
            (
                "allowed host",
                udp("198.18.0.7", "198.19.0.1", 9),
                XdpAction::Tx,
            ),
            (
                "denied subnet",
                udp("198.18.0.8", "198.19.0.1", 9),
                XdpAction::Drop,
            ),
            (
                "other subnet",
                udp("198.18.1.8", "198.19.0.1", 9),
                XdpAction::Tx,
            ),
            (
                "udp 53",
                udp("198.18.1.8", "198.19.0.1", 53),
                XdpAction::Drop,
            ),
            (
                "v6 bad prefix",
                udp("2001:db8::1", "2001:db8:bad:1::1", 9),
                XdpAction::Drop,
            ),
            (
                "v6 good prefix",
                udp("2001:db8::1", "2001:db8:bae::1", 9),
                XdpAction::Tx,
            ),
            (
                "v6 udp 53",
                udp("2001:db8::1", "2001:db8:2::1", 53),
                XdpAction::Drop,
            ),
            ("non-ip", vec![0xff; 60], XdpAction::Tx),
            (
                "eth only",
                udp("198.18.0.8", "198.19.0.1", 9)[..14].to_vec(),
                XdpAction::Tx,
            ),
            (
                "ip cut short",
                udp("198.18.0.8", "198.19.0.1", 9)[..30].to_vec(),
                XdpAction::Tx,
            ),
        ];
        let (st, _) = run(
            &NfSetup {
                out_ifindex: None,
                rules,
            },
            cases,
        );
        assert_eq!(st.dropped, 4);
        assert_eq!(st.sent, 6);
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
