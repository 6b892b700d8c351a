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
//!
//! or, in a cluster, from the Node objects (`kube`), beside any declared:
//!
//! ```toml
//! [cluster]
//! nodes_from = "kubernetes"
//! api_server = "198.18.250.1:6443"     # default: KUBERNETES_SERVICE_HOST:_PORT
//! ```
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use serde::Serialize;

/// The route protocol number of the agent's routes.
pub const ROUTE_PROTO: u8 = 176;

/// The ServiceAccount's token and CA, where the kubelet mounts them.
pub const TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
pub const CA_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// Where the Node objects come from, as declared (`[cluster]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeSource {
    /// None: the in-cluster `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`.
    pub api_server: Option<SocketAddr>,
    pub token_file: PathBuf,
    pub ca_file: PathBuf,
    /// This node's name; None: `NODE_NAME` (the downward API), else the
    /// host name.
    pub node_name: Option<String>,
}

impl Default for KubeSource {
    fn default() -> KubeSource {
        KubeSource {
            api_server: None,
            token_file: TOKEN_FILE.into(),
            ca_file: CA_FILE.into(),
            node_name: None,
        }
    }
}

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
    /// `nodes_from = "kubernetes"`: the other nodes also come from the API
    /// server's Node objects (`kube`).
    pub kubernetes: Option<KubeSource>,
}

/// The `[cluster]` section, every mistake in it (one line each).
pub fn parse(v: &toml::Value) -> Result<ClusterDecl, Vec<String>> {
    let t = v
        .as_table()
        .ok_or_else(|| vec!["not a table".to_string()])?;
    let mut errs = Vec::new();
    let mut c = ClusterDecl::default();
    let mut kube = KubeSource::default();
    let mut kube_keys = Vec::new();
    let string = |k: &str, v: &toml::Value| {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("{k} is a string"))
    };
    for (k, v) in t {
        match k.as_str() {
            "nodes_from" => match v.as_str() {
                Some("kubernetes") => c.kubernetes = Some(kube.clone()),
                Some(other) => errs.push(format!(
                    "nodes_from {other:?}: \"kubernetes\" is the one source of nodes"
                )),
                None => errs.push("nodes_from is a string".into()),
            },
            "api_server" => {
                kube_keys.push("api_server");
                match string(k, v).and_then(|a| {
                    a.parse::<std::net::SocketAddr>().map_err(|_| {
                        format!(
                            "api_server {a:?}: an address and port (198.18.250.1:6443, [2001:db8::1]:6443); names are not looked up"
                        )
                    })
                }) {
                    Ok(a) => kube.api_server = Some(a),
                    Err(e) => errs.push(e),
                }
            }
            "token_file" | "ca_file" => {
                kube_keys.push(if k == "token_file" {
                    "token_file"
                } else {
                    "ca_file"
                });
                match string(k, v) {
                    Ok(f) if k == "token_file" => kube.token_file = f.into(),
                    Ok(f) => kube.ca_file = f.into(),
                    Err(e) => errs.push(e),
                }
            }
            "node_name" => {
                kube_keys.push("node_name");
                match string(k, v) {
                    Ok(n) if crate::names::valid_name(&n) => kube.node_name = Some(n),
                    Ok(n) => errs.push(format!("node_name {n:?}: letters, digits and -_. only")),
                    Err(e) => errs.push(e),
                }
            }
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
            other => errs.push(format!(
                "unknown key {other:?} (pod_cidr, node, nodes_from, api_server, token_file, ca_file, node_name)"
            )),
        }
    }
    match &mut c.kubernetes {
        // The keys may come before nodes_from.
        Some(k) => *k = kube,
        None => {
            if let Some(k) = kube_keys.first() {
                errs.push(format!("{k} needs nodes_from = \"kubernetes\""));
            }
        }
    }
    // Each node joins the ones before it unless it conflicts (after the
    // loop: `pod_cidr` may come after the nodes).
    for n in std::mem::take(&mut c.nodes) {
        match conflict(&c, &n) {
            Some(e) => errs.push(e),
            None => c.nodes.push(n),
        }
    }
    if errs.is_empty() {
        Ok(c)
    } else {
        Err(errs)
    }
}

/// Why node `n` cannot join `c`'s nodes (one line), if it cannot: its
/// name or pod CIDR taken, or addresses that would route into pods.
fn conflict(c: &ClusterDecl, n: &PeerNode) -> Option<String> {
    for a in &c.nodes {
        if a.name == n.name {
            return Some(format!("node {} twice", n.name));
        }
        if a.pod_cidr.overlaps(&n.pod_cidr) {
            return Some(format!(
                "nodes {} and {}: pod CIDRs {} and {} overlap",
                a.name, n.name, a.pod_cidr, n.pod_cidr
            ));
        }
    }
    if let Some(own) = c.pod_cidr {
        if own.overlaps(&n.pod_cidr) {
            return Some(format!(
                "node {}: its pod CIDR {} overlaps this node's {own}",
                n.name, n.pod_cidr
            ));
        }
        if own.contains(n.address) {
            return Some(format!(
                "node {}: its address {} is inside this node's pod CIDR {own}",
                n.name, n.address
            ));
        }
    }
    if n.pod_cidr.contains(n.address) {
        return Some(format!(
            "node {}: its address {} is inside its own pod CIDR {}",
            n.name, n.address, n.pod_cidr
        ));
    }
    None
}

/// `c` with the nodes the API server gave (`kube`) added after the
/// declared ones; a found node that conflicts with one already there (a
/// declared node of its name, an overlapping pod CIDR) is left out, and
/// why is returned, one line each.
pub fn with_found(c: &ClusterDecl, found: &[PeerNode]) -> (ClusterDecl, Vec<String>) {
    let mut out = c.clone();
    let mut skipped = Vec::new();
    for n in found {
        match conflict(&out, n) {
            // A declared node of the same name and prefix: the same route.
            Some(_) if out.nodes.contains(n) => {}
            Some(e) => skipped.push(format!("cluster: Node object left out: {e}")),
            None => out.nodes.push(n.clone()),
        }
    }
    (out, skipped)
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
    fn nodes_from_kubernetes_and_what_the_api_server_gives_join_the_declared() {
        let c = parse_str(&format!(
            "[cluster]\npod_cidr = \"198.18.80.0/24\"\nnodes_from = \"kubernetes\"\napi_server = \"198.18.250.1:6443\"\n{}",
            node("b", "198.18.81.0/24", "198.18.90.2")
        ))
        .unwrap();
        let k = c.kubernetes.clone().unwrap();
        assert_eq!(k.api_server.unwrap().to_string(), "198.18.250.1:6443");
        assert_eq!(k.token_file.to_str(), Some(TOKEN_FILE));
        let found = |name: &str, cidr: &str, a: &str| PeerNode {
            name: name.into(),
            pod_cidr: Cidr::parse(cidr).unwrap(),
            address: a.parse().unwrap(),
        };
        let (m, skipped) = with_found(
            &c,
            &[
                found("b", "198.18.81.0/24", "198.18.90.2"), // as declared
                found("c", "198.18.82.0/24", "198.18.90.3"),
                found("d", "198.18.81.128/25", "198.18.90.4"), // b's pods
                found("e", "198.18.80.0/24", "198.18.90.5"),   // this node's
            ],
        );
        let names: Vec<&str> = m.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["b", "c"]);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].contains("nodes b and d"), "{skipped:?}");
        assert!(skipped[1].contains("overlaps this node's"), "{skipped:?}");
        // Mistakes: a source other than kubernetes, a name for a server,
        // a source's key without the source.
        let e = parse_str("[cluster]\nnodes_from = \"etcd\"\napi_server = \"apiserver:6443\"\n")
            .unwrap_err();
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(
            e.iter().any(|m| m.contains("names are not looked up")),
            "{e:?}"
        );
        assert!(e.iter().any(|m| m.contains("needs nodes_from")), "{e:?}");
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
