//! Control side of `bpf/dataplane/router.bpf.c`: the XDP router and its steering maps.
use std::net::IpAddr;
use std::path::Path;

use peregrine_wire::MacAddr;

use crate::error::{BpfError, Result};
use crate::link::{Hook, Link};
use crate::loader::{open_and_load, rodata, Loaded};
use crate::maps;
use crate::pod::Pod;
use crate::skel::router::types::{
    router_action, router_limits, router_port, steer_l4_key, steer_mac_key, steer_target,
    steer_v4_key, steer_v6_key,
};
use crate::skel::router::{RouterSkel, RouterSkelBuilder};
use crate::xdp::XdpMode;

pub use crate::skel::router::types::router_port_stats as PortStats;

pub const ACTIONS: usize = router_action::ROUTER_ACTIONS.0 as usize;
pub const MAX_IFINDEX: u32 = router_limits::ROUTER_MAX_IFINDEX.0;

/// Short name of a router action (index into PortStats arrays).
pub fn action_name(i: usize) -> &'static str {
    match router_action(i as u32) {
        router_action::ROUTER_FORWARD => "forward",
        router_action::ROUTER_STEER => "steer",
        router_action::ROUTER_PASS_NOT_IP => "pass_not_ip",
        router_action::ROUTER_PASS_VLAN => "pass_vlan",
        router_action::ROUTER_PASS_MALFORMED => "pass_malformed",
        router_action::ROUTER_PASS_OPTIONS => "pass_ip_options",
        router_action::ROUTER_PASS_FRAGMENT => "pass_fragment",
        router_action::ROUTER_PASS_TTL => "pass_ttl",
        router_action::ROUTER_PASS_LOCAL => "pass_local",
        router_action::ROUTER_PASS_NO_NEIGH => "pass_no_neigh",
        router_action::ROUTER_PASS_NO_ROUTE => "pass_no_route",
        router_action::ROUTER_PASS_FRAG_NEEDED => "pass_frag_needed",
        router_action::ROUTER_PASS_NO_PORT => "pass_no_port",
        _ => "unknown",
    }
}

/// Which FIB lookup the router does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FibMode {
    /// Policy routing rules, then the table they pick.
    #[default]
    Full,
    /// Straight to the ingress device's table (main, or its l3mdev's).
    Direct,
}

impl std::str::FromStr for FibMode {
    type Err = BpfError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "full" => Ok(FibMode::Full),
            "direct" => Ok(FibMode::Direct),
            _ => Err(BpfError::Invalid(format!(
                "unknown FIB mode {s:?}: expected full or direct"
            ))),
        }
    }
}

/// Adds the steering rule `key` of `map`: matching frames go to port
/// `ifindex` (`chain`: through that service chain first).
fn steer(
    map: &libbpf_rs::MapMut<'static>,
    key: &[u8],
    ifindex: u32,
    chain: u32,
    rule: &str,
) -> Result<()> {
    let t = steer_target { ifindex, chain };
    maps::update(
        map,
        key,
        t.as_bytes(),
        &format!("adding steering rule {rule}"),
    )
}

/// Refuses ports the router's per-port tables have no room for.
fn check_port(ifindex: u32) -> Result<()> {
    if ifindex >= MAX_IFINDEX {
        return Err(BpfError::Invalid(format!(
            "ifindex {ifindex} is beyond the router's port table ({MAX_IFINDEX})"
        )));
    }
    Ok(())
}

fn slot(ifindex: u32) -> u32 {
    if ifindex < MAX_IFINDEX {
        ifindex
    } else {
        0
    }
}

/// Names of the maps pinned for a persistent router.
const PINNED_MAPS: &[&str] = &[
    "port_stats",
    "ports",
    "tx_ports",
    "steer_v4",
    "steer_v6",
    "steer_l4",
    "steer_mac",
];

pub struct RouterProgram {
    skel: Loaded<RouterSkel<'static>>,
}

impl RouterProgram {
    pub fn load(mode: FibMode) -> Result<RouterProgram> {
        let skel = open_and_load::<RouterSkelBuilder>("router.bpf.o", |open| {
            rodata(open.maps.rodata_data.as_deref_mut(), "router.bpf.o")?.fib_flags = match mode {
                FibMode::Full => 0,
                FibMode::Direct => libbpf_sys::BPF_FIB_LOOKUP_DIRECT,
            };
            Ok(())
        })?;
        Ok(RouterProgram { skel })
    }

    pub fn prog(&self) -> &libbpf_rs::ProgramMut<'static> {
        &self.skel.progs.router
    }

    /// Attaches the router to `iface` and makes it an egress port.
    /// `classify`: apply steering rules to frames arriving here.
    pub fn attach(&self, iface: &str, mode: XdpMode, classify: bool) -> Result<Link> {
        let link = Link::attach(self.prog(), iface, Hook::Xdp(mode))?;
        self.add_port(link.ifindex)?;
        self.set_port(link.ifindex, 0, classify)?;
        Ok(link)
    }

    /// Makes `ifindex` a port frames may be redirected to.
    pub fn add_port(&self, ifindex: u32) -> Result<()> {
        check_port(ifindex)?;
        maps::update(
            &self.skel.maps.tx_ports,
            &ifindex.to_ne_bytes(),
            &ifindex.to_ne_bytes(),
            &format!("adding ifindex {ifindex} to the router's ports"),
        )
    }

    /// Frames arriving on `ifindex` go on to `next_ifindex` (a service chain
    /// hop; 0: classify if asked, then route).
    pub fn set_port(&self, ifindex: u32, next_ifindex: u32, classify: bool) -> Result<()> {
        check_port(ifindex)?;
        let p = router_port {
            next_ifindex,
            classify: u32::from(classify),
        };
        maps::update(
            &self.skel.maps.ports,
            &ifindex.to_ne_bytes(),
            p.as_bytes(),
            &format!("configuring router port {ifindex}"),
        )
    }

    /// Steers frames to destinations in `net/plen` to port `ifindex`.
    pub fn steer_prefix(&self, net: IpAddr, plen: u8, ifindex: u32, chain: u32) -> Result<()> {
        let rule = format!("{net}/{plen}");
        let m = &self.skel.maps;
        match net {
            IpAddr::V4(a) => {
                let k = steer_v4_key {
                    prefixlen: u32::from(plen.min(32)),
                    addr: u32::from_ne_bytes(a.octets()),
                };
                steer(&m.steer_v4, k.as_bytes(), ifindex, chain, &rule)
            }
            IpAddr::V6(a) => {
                let k = steer_v6_key {
                    prefixlen: u32::from(plen.min(128)),
                    addr: a.octets(),
                };
                steer(&m.steer_v6, k.as_bytes(), ifindex, chain, &rule)
            }
        }
    }

    /// Steers frames of IP protocol `proto` to destination port `port`.
    pub fn steer_l4(&self, proto: u8, port: u16, ifindex: u32, chain: u32) -> Result<()> {
        let k = steer_l4_key {
            proto,
            pad: 0,
            port: port.to_be(),
        };
        let rule = format!("proto {proto} port {port}");
        let m = &self.skel.maps;
        steer(&m.steer_l4, k.as_bytes(), ifindex, chain, &rule)
    }

    /// Steers frames from source MAC `mac` (the source's method).
    pub fn steer_mac(&self, mac: MacAddr, ifindex: u32, chain: u32) -> Result<()> {
        let k = steer_mac_key { mac: mac.0, pad: 0 };
        let rule = format!("for source MAC {mac}");
        let m = &self.skel.maps;
        steer(&m.steer_mac, k.as_bytes(), ifindex, chain, &rule)
    }

    /// Counters of port `ifindex`, summed over CPUs.
    pub fn stats(&self, ifindex: u32) -> Result<PortStats> {
        maps::read_per_cpu(&self.skel.maps.port_stats, &slot(ifindex).to_ne_bytes())
    }

    /// Pins the router's maps in `dir` so that it can be inspected and
    /// changed after this process exits (with its links pinned too).
    pub fn pin_maps(&mut self, dir: &Path) -> Result<()> {
        let m = &mut self.skel.maps;
        let maps: [(&str, &mut libbpf_rs::MapMut<'static>); 7] = [
            ("port_stats", &mut m.port_stats),
            ("ports", &mut m.ports),
            ("tx_ports", &mut m.tx_ports),
            ("steer_v4", &mut m.steer_v4),
            ("steer_v6", &mut m.steer_v6),
            ("steer_l4", &mut m.steer_l4),
            ("steer_mac", &mut m.steer_mac),
        ];
        debug_assert_eq!(maps.len(), PINNED_MAPS.len());
        for (name, map) in maps {
            let p = dir.join(name);
            let _ = std::fs::remove_file(&p);
            map.pin(&p)
                .map_err(BpfError::libbpf(format!("pinning {}", p.display())))?;
        }
        Ok(())
    }
}

/// Counters of port `ifindex` of a router pinned in `dir`.
pub fn read_pinned_stats(dir: &Path, ifindex: u32) -> Result<PortStats> {
    maps::read_pinned_per_cpu(
        &dir.join("port_stats"),
        &slot(ifindex).to_ne_bytes(),
        "is a router attached?",
    )
}

/// BPF_PROG_RUN fixtures of the frames the router hands to the kernel before
/// any FIB lookup (no namespace needed: they arrive on lo). Those that need
/// routes and neighbours are in crates/lab/tests/router_fixtures.rs.
#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{
        arp_request, garbage, ip4_fragment, ip4_options, ip_first_byte, spec, udp, vlan,
    };
    use crate::fixture::{
        assert_passed, check_table, router_actions_moved, truncations, Case, Expect, Fixture,
    };
    use crate::testing::privileged;
    use crate::XdpAction;
    use peregrine_wire::{ethertype, MacAddr, UdpFrameSpec};

    /// ifindex of `lo`, which BPF_PROG_RUN reports as ingress without a ctx.
    const LO: u32 = 1;

    fn frame(dst: &str, ttl: u8) -> Vec<u8> {
        let src = if dst.contains(':') {
            "2001:db8:1::1"
        } else {
            "198.18.1.1"
        };
        let s = UdpFrameSpec {
            ttl,
            frame_len: 100,
            ..spec(src, dst)
        };
        udp(&s, b"hello")
    }

    #[test]
    fn frames_for_the_kernel_are_passed_and_counted_once() {
        if !privileged("frames_for_the_kernel_are_passed_and_counted_once") {
            return;
        }
        let r = RouterProgram::load(FibMode::Full).unwrap();
        let plain = frame("198.19.0.5", 64);
        let v6 = frame("2001:db8:99::5", 64);
        let mut table: Vec<(String, Vec<u8>, &str)> = vec![
            (
                "ipv4 ttl 1 expires".into(),
                frame("198.19.0.5", 1),
                "pass_ttl",
            ),
            ("ipv4 ttl 0".into(), frame("198.19.0.5", 0), "pass_ttl"),
            (
                "ipv6 hop limit 1 expires".into(),
                frame("2001:db8:99::5", 1),
                "pass_ttl",
            ),
            (
                "arp".into(),
                arp_request(
                    MacAddr::local(1),
                    "198.18.1.1".parse().unwrap(),
                    "198.18.1.2".parse().unwrap(),
                ),
                "pass_not_ip",
            ),
            (
                "ipv4 first fragment".into(),
                ip4_fragment(&plain, true, 0),
                "pass_fragment",
            ),
            (
                "ipv4 later fragment".into(),
                ip4_fragment(&plain, false, 16),
                "pass_fragment",
            ),
            (
                "ipv4 options".into(),
                ip4_options(&plain, 1),
                "pass_ip_options",
            ),
            (
                "802.1Q tagged".into(),
                vlan(&plain, ethertype::VLAN, 7),
                "pass_vlan",
            ),
            (
                "QinQ tagged".into(),
                vlan(&vlan(&plain, ethertype::VLAN, 7), ethertype::QINQ, 8),
                "pass_vlan",
            ),
            ("garbage".into(), garbage(80), "pass_not_ip"),
            (
                "ipv4 ethertype, version 5".into(),
                ip_first_byte(&plain, 0x55),
                "pass_malformed",
            ),
            // parse.h's rule: options cut short are malformed (were
            // counted as options), and so is a tag cut short (was vlan).
            (
                "ipv4 options cut short".into(),
                ip4_options(&plain, 2)[..14 + 24].to_vec(),
                "pass_malformed",
            ),
            (
                "802.1Q tag cut short".into(),
                vlan(&plain, ethertype::VLAN, 7)[..16].to_vec(),
                "pass_malformed",
            ),
        ];
        for (label, frame) in [("ipv4", &plain), ("ipv6", &v6)] {
            for (n, cut) in truncations(frame, frame.len()) {
                table.push((format!("{label} cut at {n} bytes"), cut, "pass_malformed"));
            }
        }
        let cases: Vec<Case<Vec<&str>>> = table
            .into_iter()
            .map(|(n, f, action)| {
                let fx = Fixture::new(n, f, XdpAction::Pass, Expect::Unchanged).on(LO);
                Case::new(fx, vec![action])
            })
            .collect();
        let bad = check_table(
            r.prog(),
            &cases,
            || r.stats(LO).unwrap(),
            router_actions_moved,
        );
        assert_passed("router", &bad);
    }
}
