//! The XDP data plane deployed in a lab: the router on a host's ports and
//! service chains through containers (lab hosts reached over veth), each
//! container running a network function. Declared in one TOML file, applied
//! and removed with one command; kept alive by pins when the command exits.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use peregrine_bpf::nf::{Acl, NfProgram, NfSetup, NfStats};
use peregrine_bpf::router::{FibMode, PortStats, RouterProgram};
use peregrine_bpf::{Link, XdpMode, XdpProgram};
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::lab::ns_name;
use crate::topology::{parse_cidr, Endpoint, Topology};
use peregrine_host::netns;
use peregrine_wire::MacAddr;

/// A router (and optionally chains) for one host of a lab.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    /// Lab the hosts belong to.
    pub lab: String,
    /// Host that runs the router.
    pub router: String,
    /// Router ports facing the outside: routed, and classified for chains.
    pub ports: Vec<String>,
    #[serde(default = "native")]
    pub mode: String,
    #[serde(default = "full")]
    pub fib: String,
    #[serde(default, rename = "nf")]
    pub nfs: Vec<NfConfig>,
    #[serde(default, rename = "chain")]
    pub chains: Vec<ChainConfig>,
}

fn native() -> String {
    "native".into()
}
fn full() -> String {
    "full".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NfConfig {
    /// The container (lab host) the function runs in.
    pub host: String,
    /// Where frames arrive (a veth whose peer is a router port).
    #[serde(default = "eth0")]
    pub iface: String,
    /// reflect | forward | filter | count
    pub kind: String,
    /// forward: the container interface frames leave by.
    #[serde(default)]
    pub out: Option<String>,
    /// filter: rules, first match wins, unmatched frames pass.
    #[serde(default)]
    pub acl: Vec<AclConfig>,
}

fn eth0() -> String {
    "eth0".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AclConfig {
    #[serde(default)]
    pub src: Option<String>,
    #[serde(default)]
    pub dst: Option<String>,
    /// udp | tcp | icmp | icmpv6 | a number
    #[serde(default)]
    pub proto: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    /// drop (default) or pass
    #[serde(default = "drop")]
    pub action: String,
}

fn drop() -> String {
    "drop".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    pub name: String,
    /// Which frames enter the chain: exactly one of dst, proto+port, src_mac.
    #[serde(rename = "match")]
    pub matches: MatchConfig,
    /// Containers in order (host names of `[[nf]]` entries).
    pub hops: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    #[serde(default)]
    pub dst: Option<String>,
    #[serde(default)]
    pub proto: Option<String>,
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub src_mac: Option<String>,
}

fn parse_proto(s: &str) -> Result<u8> {
    Ok(match s {
        "udp" => 17,
        "tcp" => 6,
        "icmp" => 1,
        "icmpv6" => 58,
        n => n.parse().map_err(|_| {
            LabError::Config(format!(
                "protocol {n:?}: expected udp, tcp, icmp, icmpv6 or a number"
            ))
        })?,
    })
}

impl AclConfig {
    fn to_acl(&self) -> Result<Acl> {
        if self.src.is_some() && self.dst.is_some() {
            return Err(LabError::Config(
                "an ACL rule matches src or dst, not both".into(),
            ));
        }
        let (prefix, match_src) = match (&self.src, &self.dst) {
            (Some(s), None) => (Some(parse_cidr(s)?), true),
            (None, Some(d)) => (Some(parse_cidr(d)?), false),
            _ => (None, false),
        };
        let drop = match self.action.as_str() {
            "drop" => true,
            "pass" => false,
            a => {
                return Err(LabError::Config(format!(
                    "ACL action {a:?}: expected drop or pass"
                )))
            }
        };
        if self.port.is_some() && !matches!(self.proto.as_deref(), Some("udp" | "tcp" | "6" | "17"))
        {
            return Err(LabError::Config(
                "an ACL port needs proto = \"udp\" or \"tcp\"".into(),
            ));
        }
        Ok(Acl {
            prefix,
            match_src,
            proto: self.proto.as_deref().map(parse_proto).transpose()?,
            port: self.port,
            family: None,
            drop,
        })
    }
}

impl DataplaneConfig {
    pub fn from_toml(text: &str) -> Result<DataplaneConfig> {
        let c: DataplaneConfig =
            toml::from_str(text).map_err(|e| LabError::Config(e.message().replace('\n', "; ")))?;
        c.mode.parse::<XdpMode>()?;
        c.fib.parse::<FibMode>()?;
        if c.ports.is_empty() {
            return Err(LabError::Config("no router ports given".into()));
        }
        for n in &c.nfs {
            match n.kind.as_str() {
                "reflect" | "count" => {}
                "forward" if n.out.is_some() => {}
                "forward" => {
                    return Err(LabError::Config(format!(
                        "nf {}: forward needs out = \"<interface>\"",
                        n.host
                    )))
                }
                "filter" if !n.acl.is_empty() => {}
                "filter" => {
                    return Err(LabError::Config(format!(
                        "nf {}: filter needs acl rules",
                        n.host
                    )))
                }
                k => {
                    return Err(LabError::Config(format!(
                        "nf {}: kind {k:?}: expected reflect, forward, filter or count",
                        n.host
                    )))
                }
            }
            for a in &n.acl {
                a.to_acl()
                    .map_err(|e| LabError::Config(format!("nf {}: {e}", n.host)))?;
            }
        }
        for ch in &c.chains {
            if ch.hops.is_empty() {
                return Err(LabError::Config(format!("chain {}: no hops", ch.name)));
            }
            for h in &ch.hops {
                if !c.nfs.iter().any(|n| &n.host == h) {
                    return Err(LabError::Config(format!(
                        "chain {}: hop {h:?} has no [[nf]]",
                        ch.name
                    )));
                }
            }
            let m = &ch.matches;
            let kinds = [
                m.dst.is_some(),
                m.proto.is_some() || m.port.is_some(),
                m.src_mac.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return Err(LabError::Config(format!(
                    "chain {}: match needs exactly one of dst, proto+port, src_mac",
                    ch.name
                )));
            }
            if let Some(d) = &m.dst {
                parse_cidr(d)?;
            }
            if (m.proto.is_some()) != (m.port.is_some()) {
                return Err(LabError::Config(format!(
                    "chain {}: proto and port go together",
                    ch.name
                )));
            }
            if let Some(p) = &m.proto {
                parse_proto(p)?;
            }
            if let Some(mac) = &m.src_mac {
                mac.parse::<MacAddr>()
                    .map_err(|e| LabError::Config(format!("chain {}: {e}", ch.name)))?;
            }
        }
        Ok(c)
    }

    pub fn from_file(path: &Path) -> Result<DataplaneConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LabError::Config(format!("reading {}: {e}", path.display())))?;
        DataplaneConfig::from_toml(&text).map_err(|e| match e {
            LabError::Config(m) => LabError::Config(format!("{}: {m}", path.display())),
            o => o,
        })
    }

    /// Pin directory of a deployment: /sys/fs/bpf/peregrine/<lab>/dp-<router host>.
    pub fn pin_subdir(&self) -> String {
        format!("{}/dp-{}", self.lab, self.router)
    }
}

/// A network function running in a container.
pub struct RunningNf {
    pub host: String,
    pub iface: String,
    pub prog: NfProgram,
    pub link: Link,
}

/// A router (with its chains and network functions) attached in a lab.
/// Dropping it detaches everything not pinned.
pub struct Dataplane {
    pub router: RouterProgram,
    /// None: the namespace of the process that attached it.
    pub router_ns: Option<String>,
    /// (port name, link)
    pub ports: Vec<(String, Link)>,
    pub nfs: Vec<RunningNf>,
    /// Pass-through programs on port peers that ran no XDP (see PassThrough).
    pub peers: Vec<crate::sinks::PassThrough>,
}

impl Dataplane {
    /// Attaches the router to `ports` of namespace `ns` (None: the caller's).
    pub fn router(
        ns: Option<&str>,
        ports: &[String],
        mode: XdpMode,
        fib: FibMode,
        classify: bool,
    ) -> Result<Dataplane> {
        let router = RouterProgram::load(fib)?;
        let mut links = Vec::new();
        for p in ports {
            let l = netns::run_in_opt(ns, || router.attach(p, mode, classify))??;
            links.push((p.clone(), l));
        }
        Ok(Dataplane {
            router,
            router_ns: ns.map(str::to_string),
            ports: links,
            nfs: Vec::new(),
            peers: Vec::new(),
        })
    }

    /// Deploys `cfg` in the lab whose topology is `topo`.
    pub fn deploy(topo: &Topology, cfg: &DataplaneConfig) -> Result<Dataplane> {
        if topo.name != cfg.lab {
            return Err(LabError::Config(format!(
                "config is for lab {:?}, not {:?}",
                cfg.lab, topo.name
            )));
        }
        if topo.host(&cfg.router).is_none() {
            return Err(LabError::Config(format!(
                "lab {} has no host {:?}",
                topo.name, cfg.router
            )));
        }
        let mode: XdpMode = cfg.mode.parse()?;
        let rns = ns_name(&topo.name, &cfg.router);
        let mut dp = Dataplane::router(
            Some(&rns),
            &cfg.ports,
            mode,
            cfg.fib.parse()?,
            !cfg.chains.is_empty(),
        )?;
        let ifindex_in = |ns: &str, iface: &str| -> Result<u32> {
            Ok(netns::run_in(ns, || peregrine_bpf::xdp::ifindex(iface))??)
        };

        // Each network function: the router port facing it (entry), and the
        // router port its frames come back on (same port for reflect).
        let mut entry = BTreeMap::new();
        let mut exit = BTreeMap::new();
        for n in &cfg.nfs {
            let nf_ep = Endpoint {
                host: n.host.clone(),
                iface: n.iface.clone(),
            };
            let in_port = router_side(topo, &cfg.router, &nf_ep)?;
            let out_ep = Endpoint {
                host: n.host.clone(),
                iface: n.out.clone().unwrap_or_else(|| n.iface.clone()),
            };
            let out_port = router_side(topo, &cfg.router, &out_ep)?;
            for p in [&in_port, &out_port] {
                if !dp.ports.iter().any(|(name, _)| name == p) {
                    let l = netns::run_in(&rns, || dp.router.attach(p, mode, false))??;
                    dp.ports.push((p.clone(), l));
                }
            }
            entry.insert(n.host.clone(), ifindex_in(&rns, &in_port)?);
            exit.insert(n.host.clone(), ifindex_in(&rns, &out_port)?);
            let nns = ns_name(&topo.name, &n.host);
            let out_ifindex = match &n.out {
                Some(o) => Some(ifindex_in(&nns, o)?),
                None => None,
            };
            let rules = n
                .acl
                .iter()
                .map(AclConfig::to_acl)
                .collect::<Result<Vec<_>>>()?;
            let prog = NfProgram::load(&NfSetup { out_ifindex, rules })?;
            let link = netns::run_in(&nns, || prog.attach(&n.iface, mode))??;
            dp.nfs.push(RunningNf {
                host: n.host.clone(),
                iface: n.iface.clone(),
                prog,
                link,
            });
        }
        for (ci, ch) in cfg.chains.iter().enumerate() {
            let first = entry[&ch.hops[0]];
            for w in ch.hops.windows(2) {
                dp.router.set_port(exit[&w[0]], entry[&w[1]], false)?;
            }
            // The last hop's frames are routed (next 0).
            dp.router
                .set_port(exit[ch.hops.last().expect("non-empty")], 0, false)?;
            let m = &ch.matches;
            let chain = ci as u32 + 1;
            if let Some(d) = &m.dst {
                let (net, plen) = parse_cidr(d)?;
                dp.router.steer_prefix(net, plen, first, chain)?;
            } else if let (Some(p), Some(port)) = (&m.proto, m.port) {
                dp.router.steer_l4(parse_proto(p)?, port, first, chain)?;
            } else if let Some(mac) = &m.src_mac {
                dp.router.steer_mac(
                    mac.parse().map_err(|e| LabError::Config(format!("{e}")))?,
                    first,
                    chain,
                )?;
            }
        }
        dp.prepare_peers(topo, &cfg.router)?;
        Ok(dp)
    }

    /// Makes every port's veth peer in lab `topo` accept the frames the router
    /// redirects to it (veth drops them unless the receiving end runs XDP).
    pub fn prepare_peers(&mut self, topo: &Topology, router_host: &str) -> Result<()> {
        for (port, _) in &self.ports {
            let ep = Endpoint {
                host: router_host.to_string(),
                iface: port.clone(),
            };
            if let Some(peer) = topo.peer_of(&ep) {
                if let Some(p) = crate::sinks::ensure_xdp_receiver(
                    &ns_name(&topo.name, &peer.host),
                    &peer.iface,
                )? {
                    self.peers.push(p);
                }
            }
        }
        Ok(())
    }

    /// Pins links and maps under `dir` so the data plane outlives this process.
    pub fn pin(&mut self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| LabError::Other(format!("creating {}: {e}", dir.display())))?;
        self.router.pin_maps(dir)?;
        for (name, l) in &self.ports {
            l.pin(&dir.join(format!("link-{name}")))?;
        }
        for n in &mut self.nfs {
            n.link
                .pin(&dir.join(format!("nf-{}-{}", n.host, n.iface)))?;
            n.prog.pin_stats(&nf_stats_pin(dir, &n.host, &n.iface))?;
        }
        for p in &self.peers {
            p.link
                .pin(&dir.join(format!("peer-{}-{}", p.ns, p.iface)))?;
        }
        Ok(())
    }

    /// Per-port counters: (port name, ifindex, counters).
    pub fn port_stats(&self) -> Result<Vec<(String, u32, PortStats)>> {
        self.ports
            .iter()
            .map(|(n, l)| Ok((n.clone(), l.ifindex, self.router.stats(l.ifindex)?)))
            .collect()
    }
}

/// The router host's interface on the other end of `ep`'s veth.
fn router_side(topo: &Topology, router: &str, ep: &Endpoint) -> Result<String> {
    match topo.peer_of(ep) {
        Some(p) if p.host == router => Ok(p.iface),
        Some(p) => Err(LabError::Config(format!(
            "{ep} is linked to {p}, not to the router host {router}"
        ))),
        None => Err(LabError::Config(format!(
            "{ep} is not one end of a veth link"
        ))),
    }
}

/// Ports of a pinned data plane: (port name, ifindex in the router's namespace).
pub fn pinned_ports(dir: &Path, router_ns: Option<&str>) -> Result<Vec<(String, u32)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir)
        .map_err(|_| LabError::Other(format!("no data plane pinned at {}", dir.display())))?;
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Some(port) = n.strip_prefix("link-") {
            let idx = netns::run_in_opt(router_ns, || peregrine_bpf::xdp::ifindex(port))??;
            out.push((port.to_string(), idx));
        }
    }
    out.sort();
    Ok(out)
}

/// Where the counters of network function `host`:`iface` of the data plane
/// pinned in `dir` are pinned.
pub fn nf_stats_pin(dir: &Path, host: &str, iface: &str) -> PathBuf {
    dir.join(format!("nfstats-{host}-{iface}"))
}

/// Counters of every network function `cfg` declares, as pinned by `chain
/// apply`: (nf, counters), in the file's order.
pub fn pinned_nf_stats(cfg: &DataplaneConfig) -> Result<Vec<(NfConfig, NfStats)>> {
    let dir = pin_dir(cfg);
    if !dir.exists() {
        return Err(LabError::Other(format!(
            "nothing applied for lab {} router {} ({} does not exist)",
            cfg.lab,
            cfg.router,
            dir.display()
        )));
    }
    cfg.nfs
        .iter()
        .map(|n| {
            let p = nf_stats_pin(&dir, &n.host, &n.iface);
            Ok((n.clone(), peregrine_bpf::nf::read_pinned_stats(&p)?))
        })
        .collect()
}

/// Where `cfg`'s pins live.
pub fn pin_dir(cfg: &DataplaneConfig) -> PathBuf {
    Path::new(peregrine_bpf::bpffs::PIN_ROOT).join(cfg.pin_subdir())
}

/// Destination of a steering rule, for display.
pub fn describe_match(m: &MatchConfig) -> String {
    if let Some(d) = &m.dst {
        format!("dst {d}")
    } else if let (Some(p), Some(port)) = (&m.proto, m.port) {
        format!("{p} port {port}")
    } else if let Some(mac) = &m.src_mac {
        format!("src mac {mac}")
    } else {
        "nothing".into()
    }
}
