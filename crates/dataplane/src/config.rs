//! A data plane declaration: the router on a host's ports, network functions
//! in containers and the chains that steer traffic through them. The TOML
//! text is parsed once, here, into typed values; nothing downstream parses a
//! string again.
use std::fmt;
use std::path::Path;

use peregrine_bpf::nf::Acl;
use peregrine_bpf::router::FibMode;
use peregrine_bpf::XdpMode;
use peregrine_wire::{MacAddr, Prefix};
use serde::Deserialize;

use crate::error::{DataplaneError, Result};
use crate::hook::HookChoice;

/// A router (and optionally chains) for one host of a lab, or of network
/// namespaces made by hand.
#[derive(Debug, Clone, PartialEq)]
pub struct DataplaneConfig {
    /// Lab the hosts belong to; None: hosts are network namespaces named
    /// under /run/netns (as `ip netns add` makes them).
    pub lab: Option<String>,
    /// Host that runs the router.
    pub router: String,
    /// Router ports facing the outside: routed, and classified for chains.
    pub ports: Vec<String>,
    pub mode: XdpMode,
    /// The router's hook (`hook = "xdp" | "tc" | "auto"`, default auto).
    pub hook: HookChoice,
    pub fib: FibMode,
    pub nfs: Vec<NfConfig>,
    pub chains: Vec<ChainConfig>,
}

/// A network function in a container (a host reached over veth).
#[derive(Debug, Clone, PartialEq)]
pub struct NfConfig {
    pub host: String,
    /// Where frames arrive (a veth whose peer is a router port).
    pub iface: String,
    pub kind: NfKind,
    /// Drop or pass by rule, first match wins, unmatched frames pass; any
    /// kind may filter, `filter` does nothing else.
    pub acl: Vec<Acl>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NfKind {
    /// Sends every frame back where it came from.
    Reflect,
    /// Accepted for older files: every function counts, and a `count`
    /// function sends frames back like `reflect` (docs/DATAPLANE.md).
    Count,
    /// Sends frames on through the container's interface `out`.
    Forward { out: String },
    /// Applies its ACL and sends what passes back.
    Filter,
}

impl NfKind {
    pub fn name(&self) -> &'static str {
        match self {
            NfKind::Reflect => "reflect",
            NfKind::Count => "count",
            NfKind::Forward { .. } => "forward",
            NfKind::Filter => "filter",
        }
    }
}

impl NfConfig {
    /// The container interface frames leave by.
    pub fn out_iface(&self) -> &str {
        match &self.kind {
            NfKind::Forward { out } => out,
            _ => &self.iface,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChainConfig {
    pub name: String,
    pub matches: ChainMatch,
    /// Containers in order (hosts of `nfs`).
    pub hops: Vec<String>,
}

/// Which frames enter a chain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ChainMatch {
    Dst(Prefix),
    L4 { proto: u8, port: u16 },
    SrcMac(MacAddr),
}

impl fmt::Display for ChainMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainMatch::Dst(p) => write!(f, "dst {p}"),
            ChainMatch::L4 { proto, port } => write!(f, "{} port {port}", proto_name(*proto)),
            ChainMatch::SrcMac(m) => write!(f, "src mac {m}"),
        }
    }
}

/// Protocol names a declaration may use.
const PROTOCOLS: &[(&str, u8)] = &[("icmp", 1), ("tcp", 6), ("udp", 17), ("icmpv6", 58)];

fn parse_proto(s: &str) -> Result<u8> {
    match PROTOCOLS.iter().find(|(n, _)| *n == s) {
        Some((_, p)) => Ok(*p),
        None => s.parse().map_err(|_| {
            DataplaneError::Config(format!(
                "protocol {s:?}: expected udp, tcp, icmp, icmpv6 or a number"
            ))
        }),
    }
}

fn proto_name(p: u8) -> String {
    match PROTOCOLS.iter().find(|(_, n)| *n == p) {
        Some((name, _)) => name.to_string(),
        None => p.to_string(),
    }
}

fn config(e: impl fmt::Display) -> DataplaneError {
    DataplaneError::Config(e.to_string())
}

// The file's shape, before checking.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    lab: Option<String>,
    router: String,
    ports: Vec<String>,
    mode: Option<String>,
    hook: Option<String>,
    fib: Option<String>,
    #[serde(default, rename = "nf")]
    nfs: Vec<RawNf>,
    #[serde(default, rename = "chain")]
    chains: Vec<RawChain>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNf {
    host: String,
    iface: Option<String>,
    kind: String,
    out: Option<String>,
    #[serde(default)]
    acl: Vec<RawAcl>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAcl {
    src: Option<String>,
    dst: Option<String>,
    proto: Option<String>,
    port: Option<u16>,
    action: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChain {
    name: String,
    #[serde(rename = "match")]
    matches: RawMatch,
    hops: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    dst: Option<String>,
    proto: Option<String>,
    port: Option<u16>,
    src_mac: Option<String>,
}

impl RawAcl {
    fn check(&self) -> Result<Acl> {
        let (prefix, match_src) = match (&self.src, &self.dst) {
            (Some(_), Some(_)) => return Err(config("an ACL rule matches src or dst, not both")),
            (Some(s), None) => (Some(s.parse::<Prefix>().map_err(config)?), true),
            (None, Some(d)) => (Some(d.parse::<Prefix>().map_err(config)?), false),
            (None, None) => (None, false),
        };
        let drop = match self.action.as_deref().unwrap_or("drop") {
            "drop" => true,
            "pass" => false,
            a => return Err(config(format!("ACL action {a:?}: expected drop or pass"))),
        };
        let proto = self.proto.as_deref().map(parse_proto).transpose()?;
        if self.port.is_some() && !matches!(proto, Some(6 | 17)) {
            return Err(config("an ACL port needs proto = \"udp\" or \"tcp\""));
        }
        Ok(Acl {
            prefix: prefix.map(|p| (p.addr, p.len)),
            match_src,
            proto,
            port: self.port,
            family: None,
            drop,
        })
    }
}

impl RawNf {
    fn check(self) -> Result<NfConfig> {
        let kind = match (self.kind.as_str(), self.out.clone()) {
            ("reflect", _) => NfKind::Reflect,
            ("count", _) => NfKind::Count,
            ("forward", Some(out)) => NfKind::Forward { out },
            ("forward", None) => return Err(config("forward needs out = \"<interface>\"")),
            ("filter", _) if self.acl.is_empty() => return Err(config("filter needs acl rules")),
            ("filter", _) => NfKind::Filter,
            (k, _) => {
                return Err(config(format!(
                    "kind {k:?}: expected reflect, forward, filter or count"
                )))
            }
        };
        Ok(NfConfig {
            host: self.host,
            iface: self.iface.unwrap_or_else(|| "eth0".into()),
            kind,
            acl: self.acl.iter().map(RawAcl::check).collect::<Result<_>>()?,
        })
    }
}

impl RawMatch {
    fn check(&self) -> Result<ChainMatch> {
        let l4 = self.proto.is_some() || self.port.is_some();
        match (&self.dst, l4, &self.src_mac) {
            (Some(d), false, None) => Ok(ChainMatch::Dst(d.parse().map_err(config)?)),
            (None, true, None) => match (&self.proto, self.port) {
                (Some(p), Some(port)) => Ok(ChainMatch::L4 {
                    proto: parse_proto(p)?,
                    port,
                }),
                _ => Err(config("proto and port go together")),
            },
            (None, false, Some(m)) => Ok(ChainMatch::SrcMac(m.parse().map_err(config)?)),
            _ => Err(config(
                "match needs exactly one of dst, proto+port, src_mac",
            )),
        }
    }
}

impl DataplaneConfig {
    pub fn from_toml(text: &str) -> Result<DataplaneConfig> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| config(e.message().replace('\n', "; ")))?;
        let mode = match raw.mode.as_deref() {
            Some(m) => m.parse()?,
            None => XdpMode::Native,
        };
        let hook: HookChoice = match raw.hook.as_deref() {
            Some(h) => h.parse()?,
            None => HookChoice::Auto,
        };
        if hook.is_tc() && raw.mode.is_some() {
            return Err(config(
                "mode is an XDP mode; hook = \"tc\" takes none (leave mode out or use hook = \"xdp\")",
            ));
        }
        let fib = match raw.fib.as_deref() {
            Some(f) => f.parse()?,
            None => FibMode::Full,
        };
        if raw.ports.is_empty() {
            return Err(config("no router ports given"));
        }
        let nfs = raw
            .nfs
            .into_iter()
            .map(|n| {
                let host = n.host.clone();
                n.check().map_err(|e| config(format!("nf {host}: {e}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut chains = Vec::new();
        for ch in raw.chains {
            let name = ch.name;
            let matches = ch
                .matches
                .check()
                .map_err(|e| config(format!("chain {name}: {e}")))?;
            if ch.hops.is_empty() {
                return Err(config(format!("chain {name}: no hops")));
            }
            if let Some(h) = ch.hops.iter().find(|h| !nfs.iter().any(|n| &n.host == *h)) {
                return Err(config(format!("chain {name}: hop {h:?} has no [[nf]]")));
            }
            chains.push(ChainConfig {
                name,
                matches,
                hops: ch.hops,
            });
        }
        Ok(DataplaneConfig {
            lab: raw.lab,
            router: raw.router,
            ports: raw.ports,
            mode,
            hook,
            fib,
            nfs,
            chains,
        })
    }

    pub fn from_file(path: &Path) -> Result<DataplaneConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| config(format!("reading {}: {e}", path.display())))?;
        DataplaneConfig::from_toml(&text).map_err(|e| match e {
            DataplaneError::Config(m) => config(format!("{}: {m}", path.display())),
            o => o,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "lab = \"l\"\nrouter = \"r\"\nports = [\"p0\"]\n";

    fn err(extra: &str) -> String {
        DataplaneConfig::from_toml(&format!("{BASE}{extra}"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_declaration_becomes_typed_values() {
        let c = DataplaneConfig::from_toml(&format!(
            "{BASE}fib = \"direct\"\n\
             [[nf]]\nhost = \"c1\"\nkind = \"forward\"\nout = \"eth1\"\n\
             [[nf]]\nhost = \"c2\"\nkind = \"filter\"\nacl = [{{ dst = \"198.18.9.0/24\", proto = \"udp\", port = 9 }}]\n\
             [[chain]]\nname = \"web\"\nmatch = {{ proto = \"tcp\", port = 80 }}\nhops = [\"c1\", \"c2\"]\n\
             [[chain]]\nname = \"net\"\nmatch = {{ dst = \"198.18.5.0/24\" }}\nhops = [\"c2\"]\n"
        ))
        .unwrap();
        assert_eq!(c.mode, XdpMode::Native);
        assert_eq!(c.hook, HookChoice::Auto);
        assert_eq!(c.fib, FibMode::Direct);
        assert_eq!(c.nfs[0].out_iface(), "eth1");
        assert_eq!(c.nfs[1].iface, "eth0");
        assert_eq!(c.nfs[1].kind, NfKind::Filter);
        let rule = &c.nfs[1].acl[0];
        assert_eq!((rule.proto, rule.port), (Some(17), Some(9)));
        assert!(rule.drop && !rule.match_src);
        assert_eq!(c.chains[0].matches, ChainMatch::L4 { proto: 6, port: 80 });
        assert_eq!(c.chains[0].matches.to_string(), "tcp port 80");
        assert_eq!(c.chains[1].matches.to_string(), "dst 198.18.5.0/24");
    }

    #[test]
    fn every_mistake_is_named() {
        let nf = "[[nf]]\nhost = \"c1\"\nkind = \"reflect\"\n";
        for (extra, want) in [
            ("[[nf]]\nhost = \"c1\"\nkind = \"forward\"\n", "nf c1: forward needs out"),
            ("[[nf]]\nhost = \"c1\"\nkind = \"filter\"\n", "nf c1: filter needs acl rules"),
            ("[[nf]]\nhost = \"c1\"\nkind = \"nat\"\n", "kind \"nat\""),
            (
                "[[nf]]\nhost = \"c1\"\nkind = \"filter\"\nacl = [{ src = \"198.18.0.0/15\", dst = \"198.18.0.0/15\" }]\n",
                "src or dst, not both",
            ),
            (
                "[[nf]]\nhost = \"c1\"\nkind = \"filter\"\nacl = [{ port = 9 }]\n",
                "port needs proto",
            ),
            (
                "[[nf]]\nhost = \"c1\"\nkind = \"filter\"\nacl = [{ dst = \"198.18.0.0/15\", action = \"reject\" }]\n",
                "action \"reject\"",
            ),
            ("[[chain]]\nname = \"x\"\nmatch = { dst = \"198.18.0.0/15\" }\nhops = [\"c9\"]\n", "hop \"c9\" has no [[nf]]"),
            ("[[chain]]\nname = \"x\"\nmatch = { port = 80 }\nhops = [\"c1\"]\n", "proto and port go together"),
            ("[[chain]]\nname = \"x\"\nmatch = { proto = \"gre\", port = 80 }\nhops = [\"c1\"]\n", "protocol \"gre\""),
            ("[[chain]]\nname = \"x\"\nmatch = {}\nhops = [\"c1\"]\n", "exactly one of"),
            ("[[chain]]\nname = \"x\"\nmatch = { dst = \"198.18.0.0/40\" }\nhops = [\"c1\"]\n", "prefix length above 32"),
            ("[[chain]]\nname = \"x\"\nmatch = { src_mac = \"zz\" }\nhops = [\"c1\"]\n", "chain x"),
            ("[[chain]]\nname = \"x\"\nmatch = { dst = \"198.18.0.0/15\" }\nhops = []\n", "no hops"),
        ] {
            let e = if extra.starts_with("[[chain]]") {
                err(&format!("{nf}{extra}"))
            } else {
                err(extra)
            };
            assert!(e.contains(want), "{extra}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        assert!(err("mode = \"turbo\"\n").contains("turbo"));
        assert!(err("hook = \"ebpf\"\n").contains("expected xdp, tc or auto"));
        assert!(err("hook = \"tc\"\nmode = \"native\"\n").contains("takes none"));
        assert!(
            DataplaneConfig::from_toml("lab = \"l\"\nrouter = \"r\"\nports = []\n")
                .unwrap_err()
                .to_string()
                .contains("no router ports")
        );
    }
}
