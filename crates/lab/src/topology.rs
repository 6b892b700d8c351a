//! Lab topologies as TOML files: hosts (network namespaces), veth links,
//! bridges, macvlans, VXLAN tunnels, addresses, routes, neighbours, sysctls.
//! Parsing checks everything that can be checked before touching the kernel,
//! so a bad file creates nothing.
use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use peregrine_wire::MacAddr;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Lab name: lower-case letters and digits, at most 12.
    pub name: String,
    #[serde(default, rename = "host")]
    pub hosts: Vec<Host>,
    #[serde(default, rename = "link")]
    pub links: Vec<Link>,
    #[serde(default, rename = "bridge")]
    pub bridges: Vec<Bridge>,
    #[serde(default, rename = "macvlan")]
    pub macvlans: Vec<Macvlan>,
    #[serde(default, rename = "vxlan")]
    pub vxlans: Vec<Vxlan>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Host {
    pub name: String,
    /// Interface name -> addresses in CIDR form.
    #[serde(default)]
    pub addr: BTreeMap<String, Vec<String>>,
    /// Interface name -> MAC address (otherwise a stable one is derived).
    #[serde(default)]
    pub mac: BTreeMap<String, String>,
    #[serde(default)]
    pub sysctl: BTreeMap<String, String>,
    #[serde(default, rename = "route")]
    pub routes: Vec<Route>,
    #[serde(default, rename = "neigh")]
    pub neighbours: Vec<Neighbour>,
    /// An nftables ruleset loaded into the host once its addresses and
    /// routes are up (`nft -f`): NAT port publishing, as container runtimes
    /// do it. Needs nftables' `nft`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nft: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// "host:iface" in the file.
    pub a: Endpoint,
    pub b: Endpoint,
    #[serde(default = "one")]
    pub queues: u32,
    #[serde(default = "default_mtu")]
    pub mtu: u32,
    /// Offloads of both ends; what is not set stays at the kernel's default
    /// (on, for veth), as on an ordinary host.
    #[serde(default, skip_serializing_if = "Offloads::kernel_default")]
    pub offloads: Offloads,
}

/// Offloads a link sets on both ends (`offloads = { tx = false, gso =
/// false }`). A lab whose XDP program redirects frames a kernel socket sent
/// turns `tx` off: a redirected frame keeps the partial checksum TX offload
/// left in it, and the receiver drops it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Offloads {
    /// TX checksum offload (`ethtool -K tx`).
    pub tx: Option<bool>,
    /// Generic segmentation offload (`ethtool -K gso`).
    pub gso: Option<bool>,
}

impl Topology {
    /// The links' offloads in words, for result files' notes: what a
    /// benchmark tunes is said where its figures are.
    pub fn offloads_note(&self) -> String {
        let set: Vec<String> = self
            .links
            .iter()
            .filter(|l| !l.offloads.kernel_default())
            .map(|l| {
                let what: Vec<String> = l
                    .offloads
                    .settings()
                    .map(|(o, on)| {
                        format!("{} {}", o.ethtool_name(), if on { "on" } else { "off" })
                    })
                    .collect();
                format!("{}~{}: {}", l.a, l.b, what.join(", "))
            })
            .collect();
        if set.is_empty() {
            "lab veths at the kernel's default offloads (TX checksum and GSO on)".into()
        } else {
            format!(
                "lab veth offloads set by the topology ({}); others at the kernel's defaults",
                set.join("; ")
            )
        }
    }
}

impl Offloads {
    /// Nothing set: the kernel's defaults.
    pub fn kernel_default(&self) -> bool {
        self.tx.is_none() && self.gso.is_none()
    }

    /// What is set, as offload and on/off.
    pub fn settings(&self) -> impl Iterator<Item = (peregrine_host::netdev::Offload, bool)> {
        use peregrine_host::netdev::Offload;
        [(Offload::TxChecksum, self.tx), (Offload::Gso, self.gso)]
            .into_iter()
            .filter_map(|(o, on)| on.map(|on| (o, on)))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bridge {
    pub host: String,
    pub name: String,
    #[serde(default)]
    pub ports: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Macvlan {
    /// Where the macvlan interface ends up.
    pub host: String,
    pub name: String,
    /// "host:iface" of the parent device; mode is always bridge.
    pub parent: Endpoint,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Vxlan {
    pub host: String,
    pub name: String,
    pub vni: u32,
    /// Underlay device in the same host.
    pub dev: String,
    pub local: IpAddr,
    pub remote: IpAddr,
    #[serde(default = "vxlan_port")]
    pub port: u16,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Destination prefix in CIDR form, or "default".
    pub to: String,
    #[serde(default)]
    pub via: Option<IpAddr>,
    #[serde(default)]
    pub dev: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Neighbour {
    pub dev: String,
    pub ip: IpAddr,
    pub mac: String,
}

fn one() -> u32 {
    1
}
fn default_mtu() -> u32 {
    1500
}
fn vxlan_port() -> u16 {
    4789
}

/// An interface in a host: parsed from "host:iface" once, when read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Endpoint {
    pub host: String,
    pub iface: String,
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint> {
        let (h, i) = s.split_once(':').ok_or_else(|| {
            LabError::Config(format!("endpoint {s:?}: expected \"host:interface\""))
        })?;
        Ok(Endpoint {
            host: h.to_string(),
            iface: i.to_string(),
        })
    }
}

impl TryFrom<String> for Endpoint {
    type Error = LabError;
    fn try_from(s: String) -> Result<Endpoint> {
        Endpoint::parse(&s)
    }
}

impl From<Endpoint> for String {
    fn from(e: Endpoint) -> String {
        e.to_string()
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.iface)
    }
}

/// Parses "198.18.0.1/24" or "2001:db8::1/64".
pub fn parse_cidr(s: &str) -> Result<(IpAddr, u8)> {
    let p: peregrine_wire::Prefix = s.parse().map_err(LabError::Config)?;
    Ok((p.addr, p.len))
}

/// Addresses labs may use: 198.18.0.0/15 and 2001:db8::/32 (benchmarking and
/// documentation ranges), so lab traffic can never reach a real network.
pub fn allowed_address(ip: IpAddr) -> bool {
    LAB_PREFIXES.iter().any(|p| p.contains(ip))
}

const LAB_PREFIXES: [peregrine_wire::Prefix; 2] = [
    peregrine_wire::Prefix {
        addr: IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 0)),
        len: 15,
    },
    peregrine_wire::Prefix {
        addr: IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)),
        len: 32,
    },
];

fn check_name(kind: &str, n: &str, max: usize, allow_dash: bool) -> Result<()> {
    let ok = !n.is_empty()
        && n.len() <= max
        && n.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || (allow_dash && (c == '-' || c == '_'))
        })
        && n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        let extra = if allow_dash { ", '-' or '_'" } else { "" };
        Err(LabError::Config(format!(
            "{kind} name {n:?}: use 1..={max} lower-case letters, digits{extra}"
        )))
    }
}

fn check_ifname(n: &str) -> Result<()> {
    if n.is_empty() || n.len() > 15 || n.contains(['/', ':', ' ']) || n == "." || n == ".." {
        return Err(LabError::Config(format!(
            "interface name {n:?}: 1..=15 characters without '/', ':' or spaces"
        )));
    }
    Ok(())
}

impl Topology {
    pub fn from_toml(text: &str) -> Result<Topology> {
        let t: Topology = toml::from_str(text).map_err(|e| {
            let msg = e.message().replace('\n', "; ");
            let at = e.span().map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line})")
            });
            LabError::Config(format!("{msg}{}", at.unwrap_or_default()))
        })?;
        t.validate()?;
        Ok(t)
    }

    pub fn from_file(path: &std::path::Path) -> Result<Topology> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LabError::Config(format!("reading {}: {e}", path.display())))?;
        Topology::from_toml(&text).map_err(|e| match e {
            LabError::Config(m) => LabError::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Every interface the topology creates, by endpoint.
    pub fn interfaces(&self) -> Result<Vec<Endpoint>> {
        let mut v = Vec::new();
        for l in &self.links {
            v.push(l.a.clone());
            v.push(l.b.clone());
        }
        for b in &self.bridges {
            v.push(Endpoint {
                host: b.host.clone(),
                iface: b.name.clone(),
            });
        }
        for m in &self.macvlans {
            v.push(Endpoint {
                host: m.host.clone(),
                iface: m.name.clone(),
            });
        }
        for x in &self.vxlans {
            v.push(Endpoint {
                host: x.host.clone(),
                iface: x.name.clone(),
            });
        }
        Ok(v)
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The other end of the veth whose one end is `ep`.
    pub fn peer_of(&self, ep: &Endpoint) -> Option<Endpoint> {
        self.links.iter().find_map(|l| {
            if &l.a == ep {
                Some(l.b.clone())
            } else if &l.b == ep {
                Some(l.a.clone())
            } else {
                None
            }
        })
    }

    pub fn validate(&self) -> Result<()> {
        check_name("lab", &self.name, 12, false)?;
        if self.hosts.is_empty() {
            return Err(LabError::Config("no [[host]] defined".into()));
        }
        let mut hosts = HashSet::new();
        for h in &self.hosts {
            check_name("host", &h.name, 16, true)?;
            if !hosts.insert(h.name.as_str()) {
                return Err(LabError::Config(format!("host {:?} defined twice", h.name)));
            }
        }
        let ifaces = self.interfaces()?;
        let mut seen = HashSet::new();
        for ep in &ifaces {
            if !hosts.contains(ep.host.as_str()) {
                return Err(LabError::Config(format!(
                    "{ep}: no host named {:?}",
                    ep.host
                )));
            }
            check_ifname(&ep.iface)?;
            if ep.iface == "lo" || !seen.insert(ep.clone()) {
                return Err(LabError::Config(format!("interface {ep} defined twice")));
            }
        }
        let has = |host: &str, iface: &str| {
            iface == "lo"
                || seen.contains(&Endpoint {
                    host: host.into(),
                    iface: iface.into(),
                })
        };
        for l in &self.links {
            if l.queues == 0 || l.queues > 64 {
                return Err(LabError::Config(format!(
                    "link {} - {}: queues {} outside 1..=64",
                    l.a, l.b, l.queues
                )));
            }
            if !(68..=9000).contains(&l.mtu) {
                return Err(LabError::Config(format!(
                    "link {} - {}: mtu {} outside 68..=9000",
                    l.a, l.b, l.mtu
                )));
            }
        }
        for b in &self.bridges {
            for p in &b.ports {
                if !has(&b.host, p) {
                    return Err(LabError::Config(format!(
                        "bridge {}:{}: port {p:?} is not an interface of host {}",
                        b.host, b.name, b.host
                    )));
                }
            }
        }
        for m in &self.macvlans {
            let p = &m.parent;
            if !has(&p.host, &p.iface) {
                return Err(LabError::Config(format!(
                    "macvlan {}:{}: parent {} is not defined",
                    m.host, m.name, m.parent
                )));
            }
        }
        for x in &self.vxlans {
            if !has(&x.host, &x.dev) {
                return Err(LabError::Config(format!(
                    "vxlan {}:{}: device {} is not an interface of host {}",
                    x.host, x.name, x.dev, x.host
                )));
            }
            if x.vni == 0 || x.vni >= 1 << 24 {
                return Err(LabError::Config(format!(
                    "vxlan {}:{}: vni {} outside 1..16777215",
                    x.host, x.name, x.vni
                )));
            }
            for a in [x.local, x.remote] {
                if !allowed_address(a) {
                    return Err(LabError::Config(format!(
                        "vxlan {}:{}: {a} is outside 198.18.0.0/15 and 2001:db8::/32",
                        x.host, x.name
                    )));
                }
            }
        }
        // One address, one interface: two hosts answering for the same
        // address would split its traffic by whichever neighbour entry won.
        let mut owner: BTreeMap<IpAddr, Endpoint> = BTreeMap::new();
        for h in &self.hosts {
            for (dev, addrs) in &h.addr {
                if !has(&h.name, dev) {
                    return Err(LabError::Config(format!(
                        "host {}: address on unknown interface {dev:?}",
                        h.name
                    )));
                }
                for a in addrs {
                    let (ip, _) = parse_cidr(a)?;
                    if !allowed_address(ip) {
                        return Err(LabError::Config(format!(
                            "host {}: address {a} is outside 198.18.0.0/15 and 2001:db8::/32",
                            h.name
                        )));
                    }
                    let here = Endpoint {
                        host: h.name.clone(),
                        iface: dev.clone(),
                    };
                    if let Some(first) = owner.insert(ip, here.clone()) {
                        return Err(LabError::Config(format!(
                            "address {ip} is given to both {first} and {here} (host:interface): an address belongs to one interface"
                        )));
                    }
                }
            }
            for (dev, mac) in &h.mac {
                if !has(&h.name, dev) {
                    return Err(LabError::Config(format!(
                        "host {}: MAC on unknown interface {dev:?}",
                        h.name
                    )));
                }
                mac.parse::<MacAddr>()
                    .map_err(|e| LabError::Config(format!("host {}: {e}", h.name)))?;
            }
            for k in h.sysctl.keys() {
                if !k.starts_with("net.") {
                    return Err(LabError::Config(format!(
                        "host {}: sysctl {k:?} is not a per-namespace net.* setting",
                        h.name
                    )));
                }
            }
            for r in &h.routes {
                if r.to != "default" {
                    let (ip, _) = parse_cidr(&r.to)?;
                    if !allowed_address(ip) {
                        return Err(LabError::Config(format!(
                            "host {}: route to {} is outside the lab ranges",
                            h.name, r.to
                        )));
                    }
                }
                if let Some(d) = &r.dev {
                    if !has(&h.name, d) {
                        return Err(LabError::Config(format!(
                            "host {}: route via unknown interface {d:?}",
                            h.name
                        )));
                    }
                }
                if r.via.is_none() && r.dev.is_none() {
                    return Err(LabError::Config(format!(
                        "host {}: route to {} needs via or dev",
                        h.name, r.to
                    )));
                }
                if let Some(v) = r.via {
                    if !allowed_address(v) {
                        return Err(LabError::Config(format!(
                            "host {}: gateway {v} is outside the lab ranges",
                            h.name
                        )));
                    }
                }
            }
            for n in &h.neighbours {
                if !has(&h.name, &n.dev) {
                    return Err(LabError::Config(format!(
                        "host {}: neighbour on unknown interface {:?}",
                        h.name, n.dev
                    )));
                }
                n.mac
                    .parse::<MacAddr>()
                    .map_err(|e| LabError::Config(format!("host {}: {e}", h.name)))?;
                if !allowed_address(n.ip) {
                    return Err(LabError::Config(format!(
                        "host {}: neighbour {} is outside the lab ranges",
                        h.name, n.ip
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Built-in topologies, embedded in the binary.
pub mod builtin {
    /// Two hosts on one veth link.
    pub const PAIR: &str = include_str!("../topologies/pair.toml");
    /// Generator -> device under test (forwarding) -> sink, IPv4 and IPv6.
    pub const GEN_DUT_SINK: &str = include_str!("../topologies/gen-dut-sink.toml");

    /// gen-dut-sink plus containers c1 (reflect) and c2 (forward) on the DUT.
    pub const CHAIN: &str = include_str!("../topologies/chain.toml");

    pub fn get(name: &str) -> Option<&'static str> {
        match name {
            "pair" => Some(PAIR),
            "gen-dut-sink" => Some(GEN_DUT_SINK),
            "chain" => Some(CHAIN),
            "netmode-host" => Some(include_str!("../topologies/netmodes/host.toml")),
            "netmode-bridge" => Some(include_str!("../topologies/netmodes/bridge.toml")),
            "netmode-macvlan" => Some(include_str!("../topologies/netmodes/macvlan.toml")),
            "netmode-overlay" => Some(include_str!("../topologies/netmodes/overlay.toml")),
            "netmode-same-host" => Some(include_str!("../topologies/netmodes/same-host.toml")),
            _ => None,
        }
    }

    pub const NAMES: &[&str] = &[
        "pair",
        "gen-dut-sink",
        "chain",
        "netmode-host",
        "netmode-bridge",
        "netmode-macvlan",
        "netmode-overlay",
        "netmode-same-host",
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for n in builtin::NAMES {
            Topology::from_toml(builtin::get(n).unwrap()).unwrap();
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let cases = [
            ("name = \"x\"\n[[host]]\nname = \"a\"\n[[link]]\na = \"a:e0\"\nb = \"b:e0\"\n", "no host named \"b\""),
            ("name = \"x\"\n[[host]]\nname = \"a\"\naddr = { e0 = [\"10.0.0.1/24\"] }\n", "unknown interface"),
            ("name = \"x\"\n[[host]]\nname = \"a\"\nbogus = 1\n", "unknown field `bogus`"),
            ("name = \"Bad-Name\"\n[[host]]\nname = \"a\"\n", "lab name"),
            ("name = \"x\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\n[[link]]\na = \"a:e0\"\nb = \"b:e0\"\n[[host]]\nname = \"a\"\n", "defined twice"),
            ("name = \"x\"\n[[host]]\nname = \"a\"\n[[host]]\nname = \"b\"\naddr = { e0 = [\"10.0.0.1/24\"] }\n[[link]]\na = \"a:e0\"\nb = \"b:e0\"\n", "outside 198.18.0.0/15"),
            ("name = \"x\"\n[[host]\n", "line"),
        ];
        for (text, want) in cases {
            let e = Topology::from_toml(text).unwrap_err().to_string();
            assert!(e.contains(want), "{e:?} should mention {want:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
    }

    /// Issue 9: one address on two hosts was accepted; refused, naming both.
    #[test]
    fn one_address_on_two_hosts_is_refused() {
        let text = |a: &str, b: &str| {
            format!(
                "name = \"x\"\n[[host]]\nname = \"a\"\naddr = {{ e0 = [\"{a}\"] }}\n[[host]]\nname = \"b\"\naddr = {{ e0 = [\"{b}\"] }}\n[[link]]\na = \"a:e0\"\nb = \"b:e0\"\n"
            )
        };
        for (a, b, ip) in [
            ("198.18.0.1/24", "198.18.0.1/24", "198.18.0.1"),
            // The prefix length does not make it another address.
            ("198.18.0.1/24", "198.18.0.1/32", "198.18.0.1"),
            ("2001:db8::1/64", "2001:db8::1/64", "2001:db8::1"),
        ] {
            let e = Topology::from_toml(&text(a, b)).unwrap_err().to_string();
            assert!(e.contains(ip), "{e}");
            assert!(e.contains("a:e0") && e.contains("b:e0"), "names both: {e}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
        Topology::from_toml(&text("198.18.0.1/24", "198.18.0.2/24")).unwrap();
    }

    #[test]
    fn lab_ranges() {
        assert!(allowed_address("198.19.255.1".parse().unwrap()));
        assert!(!allowed_address("198.20.0.1".parse().unwrap()));
        assert!(allowed_address("2001:db8:ffff::1".parse().unwrap()));
        assert!(!allowed_address("2001:db9::1".parse().unwrap()));
    }
}
