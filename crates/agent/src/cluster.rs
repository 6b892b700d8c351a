//! More than one node (`[cluster]`): routes to the other nodes' pod CIDRs
//! through their node addresses, as Cilium's native routing programs them
//! from the Node objects. The agent marks its routes with its own route
//! protocol number (`ip route` shows `proto 176`), so it finds, repairs
//! and removes exactly the routes it made and never one someone else made.
//!
//! ```toml
//! [cluster]
//! pod_cidr = "198.18.80.0/24"          # this node's pods (optional)
//! [[cluster.node]]
//! name = "node-b"
//! pod_cidr = "198.18.81.0/24"
//! address = "198.18.90.2"              # node-b's address: the next hop
//! ```
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

/// The route protocol number of the agent's routes.
pub const ROUTE_PROTO: u8 = 176;

/// An address prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub plen: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let bad = || format!("{s:?} is not a prefix (address/length)");
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let plen: u8 = p.parse().map_err(|_| bad())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if plen > max {
            return Err(bad());
        }
        let c = Cidr { addr, plen };
        if c.network() != addr {
            return Err(format!(
                "{s}: host bits set (the prefix is {})",
                Cidr {
                    addr: c.network(),
                    plen
                }
            ));
        }
        Ok(c)
    }

    fn bits(a: IpAddr) -> (u128, u8) {
        match a {
            IpAddr::V4(v) => (u32::from(v) as u128, 32),
            IpAddr::V6(v) => (u128::from(v), 128),
        }
    }

    fn network(&self) -> IpAddr {
        let (b, w) = Cidr::bits(self.addr);
        let keep = if self.plen == 0 {
            0
        } else {
            (u128::MAX >> (128 - w as u32)) & !((1u128 << (w - self.plen)) - 1)
        };
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4(((b & keep) as u32).into()),
            IpAddr::V6(_) => IpAddr::V6((b & keep).into()),
        }
    }

    /// Whether the two prefixes share an address.
    pub fn overlaps(&self, o: &Cidr) -> bool {
        if self.addr.is_ipv4() != o.addr.is_ipv4() {
            return false;
        }
        let shorter = self.plen.min(o.plen);
        Cidr {
            addr: self.addr,
            plen: shorter,
        }
        .network()
            == Cidr {
                addr: o.addr,
                plen: shorter,
            }
            .network()
    }

    pub fn contains(&self, a: IpAddr) -> bool {
        let max = if a.is_ipv4() { 32 } else { 128 };
        self.overlaps(&Cidr { addr: a, plen: max })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.plen)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Another node: its pods are reached through its address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeerNode {
    pub name: String,
    pub pod_cidr: Cidr,
    pub address: IpAddr,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClusterDecl {
    /// This node's pods.
    pub pod_cidr: Option<Cidr>,
    pub nodes: Vec<PeerNode>,
}

/// The `[cluster]` section, every mistake in it (one line each).
pub fn parse(v: &toml::Value) -> Result<ClusterDecl, Vec<String>> {
    let t = v
        .as_table()
        .ok_or_else(|| vec!["not a table".to_string()])?;
    let mut errs = Vec::new();
    let mut c = ClusterDecl::default();
    for (k, v) in t {
        match k.as_str() {
            "pod_cidr" => match v.as_str().map(Cidr::parse) {
                Some(Ok(p)) => c.pod_cidr = Some(p),
                Some(Err(e)) => errs.push(format!("pod_cidr: {e}")),
                None => errs.push("pod_cidr is a string".into()),
            },
            "node" => {
                let Some(items) = v.as_array() else {
                    errs.push("node is a list of tables: write [[cluster.node]]".into());
                    continue;
                };
                for (i, item) in items.iter().enumerate() {
                    match peer(item) {
                        Ok(p) => c.nodes.push(p),
                        Err(e) => errs.push(format!("[[cluster.node]] #{}: {e}", i + 1)),
                    }
                }
            }
            other => errs.push(format!("unknown key {other:?} (pod_cidr, node)")),
        }
    }
    for (i, a) in c.nodes.iter().enumerate() {
        for b in &c.nodes[i + 1..] {
            if a.name == b.name {
                errs.push(format!("node {} twice", a.name));
            } else if a.pod_cidr.overlaps(&b.pod_cidr) {
                errs.push(format!(
                    "nodes {} and {}: pod CIDRs {} and {} overlap",
                    a.name, b.name, a.pod_cidr, b.pod_cidr
                ));
            }
        }
        if let Some(own) = c.pod_cidr {
            if own.overlaps(&a.pod_cidr) {
                errs.push(format!(
                    "node {}: its pod CIDR {} overlaps this node's {own}",
                    a.name, a.pod_cidr
                ));
            }
            if own.contains(a.address) {
                errs.push(format!(
                    "node {}: its address {} is inside this node's pod CIDR {own}",
                    a.name, a.address
                ));
            }
        }
        if a.pod_cidr.contains(a.address) {
            errs.push(format!(
                "node {}: its address {} is inside its own pod CIDR {}",
                a.name, a.address, a.pod_cidr
            ));
        }
    }
    if errs.is_empty() {
        Ok(c)
    } else {
        Err(errs)
    }
}

fn peer(v: &toml::Value) -> Result<PeerNode, String> {
    let t = v.as_table().ok_or("not a table")?;
    for k in t.keys() {
        if !["name", "pod_cidr", "address"].contains(&k.as_str()) {
            return Err(format!("unknown key {k:?} (name, pod_cidr, address)"));
        }
    }
    let s = |k: &str| {
        t.get(k)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("{k} missing (a string)"))
    };
    let name = s("name")?.to_string();
    if !crate::names::valid_name(&name) {
        return Err(format!("name {name:?}: letters, digits and -_. only"));
    }
    let pod_cidr = Cidr::parse(s("pod_cidr")?)?;
    let address: IpAddr = s("address")?.parse().map_err(|_| {
        format!(
            "address {:?} is not an IP address",
            s("address").unwrap_or("")
        )
    })?;
    if address.is_ipv4() != pod_cidr.addr.is_ipv4() {
        return Err(format!(
            "address {address} and pod_cidr {pod_cidr} are of different IP versions"
        ));
    }
    Ok(PeerNode {
        name,
        pod_cidr,
        address,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `[[cluster.node]]` table.
    fn node(name: &str, cidr: &str, address: &str) -> String {
        format!(
            "[[cluster.node]]\nname = \"{name}\"\npod_cidr = \"{cidr}\"\naddress = \"{address}\"\n"
        )
    }

    fn parse_str(s: &str) -> Result<ClusterDecl, Vec<String>> {
        let t: toml::Table = toml::from_str(s).unwrap();
        parse(&t["cluster"])
    }

    #[test]
    fn a_cluster_section_parses_and_each_mistake_is_one_line() {
        let c = parse_str(&format!(
            "[cluster]\npod_cidr = \"198.18.80.0/24\"\n{}{}",
            node("b", "198.18.81.0/24", "198.18.90.2"),
            node("c", "2001:db8:81::/64", "2001:db8:90::3")
        ))
        .unwrap();
        assert_eq!(c.nodes.len(), 2);
        assert_eq!(c.nodes[1].pod_cidr.to_string(), "2001:db8:81::/64");
        let e = parse_str(&format!(
            "[cluster]\npod_cidr = \"198.18.80.0/23\"\ncolour = 1\n{}{}{}{}",
            node("b", "198.18.81.0/24", "198.18.90.2"),
            node("b", "198.18.82.1/24", "198.18.90.3"),
            node("d", "198.18.84.0/24", "2001:db8::1"),
            node("e", "198.18.85.0/24", "198.18.85.7")
        ))
        .unwrap_err();
        let all = e.join("\n");
        assert!(all.contains("unknown key \"colour\""), "{all}");
        assert!(
            all.contains("host bits set (the prefix is 198.18.82.0/24)"),
            "{all}"
        );
        assert!(all.contains("different IP versions"), "{all}");
        assert!(all.contains("overlaps this node's 198.18.80.0/23"), "{all}");
        assert!(all.contains("inside its own pod CIDR"), "{all}");
        assert_eq!(e.len(), 5, "{all}");
    }

    #[test]
    fn prefixes_overlap_and_contain_as_sets_do() {
        let p = |s: &str| Cidr::parse(s).unwrap();
        assert!(p("198.18.0.0/15").overlaps(&p("198.19.4.0/24")));
        assert!(!p("198.18.80.0/24").overlaps(&p("198.18.81.0/24")));
        assert!(!p("198.18.80.0/24").overlaps(&p("2001:db8::/32")));
        assert!(p("0.0.0.0/0").contains("198.18.1.1".parse().unwrap()));
        assert!(p("2001:db8::/32").contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!p("2001:db8::/32").contains("2001:db9::1".parse().unwrap()));
        assert!(Cidr::parse("198.18.80.0/33").is_err());
    }
}
