//! The commands. Two modes, told apart by the configuration:
//!
//! - **chained** (no `ipam`): after `bridge` or `ptp`; the pod's interfaces
//!   come from `prevResult`, which is passed on unchanged;
//! - **standalone** (`ipam` given): the pod's veth is made here, its
//!   addresses delegated to the IPAM plugin, routed as the reference `ptp`
//!   routes (the pod's address alone on its interface, everything via the
//!   host side, which holds the gateway address).
//!
//! Either way the pod's host-side interface is handed to the node agent,
//! which joins it to the node's router and polices its bandwidth. ADD is
//! undone whole when a step fails; DEL succeeds when the pod, its
//! namespace or the agent is gone.
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use peregrine_agent::control::{self, Reply, Request};
use peregrine_agent::pods::{PodKey, PodPort};
use peregrine_host::nl::Netlink;
use serde_json::Value;

use crate::env::{Command, Env};
use crate::ipam;
use crate::spec::{code, network, parse_cidr, CniError, CniResult, Interface, NetConf, Version};

/// The host's namespace, as `Netlink` names namespaces.
const HOST: &str = "/proc/self/ns/net";

/// Runs the runtime's command; what goes to stdout.
pub fn run(env: &Env, stdin: &[u8]) -> Result<Option<Value>, CniError> {
    if env.command == Command::Version {
        let asked = serde_json::from_slice::<Value>(stdin)
            .ok()
            .and_then(|v| {
                v.get("cniVersion")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_else(|| Version::V1_1_0.as_str().into());
        return Ok(Some(serde_json::json!({
            "cniVersion": asked,
            "supportedVersions": crate::spec::SUPPORTED,
        })));
    }
    let conf = NetConf::parse(stdin)?;
    let version = Version::parse(&conf.cni_version)?;
    if matches!(env.command, Command::Gc | Command::Status) && version < Version::V1_1_0 {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            format!(
                "{} needs cniVersion 1.1.0 (the configuration says {})",
                env.command.name(),
                conf.cni_version
            ),
        ));
    }
    let p = Plugin {
        env,
        ipam: conf.ipam_type()?,
        socket: conf
            .agent_socket
            .clone()
            .unwrap_or_else(peregrine_agent::state::socket_path),
        conf,
        version,
        stdin,
    };
    match env.command {
        Command::Add => p.add().map(Some),
        Command::Del => p.del().map(|()| None),
        Command::Check => p.check().map(|()| None),
        Command::Gc => p.gc().map(|()| None),
        Command::Status => p.status().map(|()| None),
        Command::Version => unreachable!("answered above"),
    }
}

struct Plugin<'a> {
    env: &'a Env,
    conf: NetConf,
    version: Version,
    /// Standalone: the IPAM plugin.
    ipam: Option<String>,
    socket: PathBuf,
    stdin: &'a [u8],
}

fn host_err(what: &str) -> impl Fn(peregrine_host::HostError) -> CniError + '_ {
    move |e| CniError::new(code::IO_FAILURE, format!("{what}: {e}"))
}

/// The host side of a standalone pod's veth: "pg" and a hash of the
/// attachment (container id, interface), 14 bytes.
pub fn host_iface_name(key: &PodKey) -> String {
    let h = peregrine_agent::state::text_hash(&format!("{}/{}", key.container_id, key.ifname));
    format!("pg{:012x}", h & 0xffff_ffff_ffff)
}

impl Plugin<'_> {
    fn key(&self) -> PodKey {
        PodKey {
            container_id: self.env.container_id.clone(),
            ifname: self.env.ifname.clone(),
        }
    }

    fn netns(&self) -> Result<&str, CniError> {
        let n = self.env.netns.as_deref().unwrap_or_default();
        if std::path::Path::new(n).exists() {
            Ok(n)
        } else {
            Err(CniError::new(
                code::UNKNOWN_CONTAINER,
                format!("CNI_NETNS {n}: no such namespace"),
            ))
        }
    }

    fn prev(&self) -> Result<Option<CniResult>, CniError> {
        self.conf
            .prev_result
            .as_ref()
            .map(|v| CniResult::from_value(v, "prevResult"))
            .transpose()
    }

    /// The agent's answer to `req`; not there: "try again later".
    fn ask(&self, req: &Request) -> Result<Reply, CniError> {
        let r = control::request(&self.socket, req)
            .map_err(|e| CniError::new(code::TRY_AGAIN_LATER, e))?;
        if r.ok {
            Ok(r)
        } else {
            Err(CniError::new(
                code::AGENT_REFUSED,
                format!("the peregrine agent refused: {}", r.lines.join("; ")),
            ))
        }
    }

    fn agent_there(&self) -> bool {
        UnixStream::connect(&self.socket).is_ok()
    }

    fn add(&self) -> Result<Value, CniError> {
        let netns = self.netns()?.to_string();
        let (result, host_iface, pod_if) = match &self.ipam {
            Some(kind) => self.add_standalone(kind, &netns)?,
            None => {
                let prev = self.prev()?.ok_or_else(|| {
                    CniError::new(
                        code::INVALID_CONFIG,
                        "no prevResult: chained, peregrine-cni goes after a plugin that makes the pod's interface (bridge, ptp); standalone, give it an \"ipam\" section",
                    )
                })?;
                let (host, pod_if) = self.chained_ends(&prev, &netns)?;
                (prev, host, pod_if)
            }
        };
        let pod = self.pod_port(&result, &host_iface, pod_if, &netns);
        if let Err(e) = self.ask(&Request::PodAdd { pod: Box::new(pod) }) {
            if let Some(kind) = &self.ipam {
                let _ = self.undo_standalone(kind, &host_iface);
            }
            return Err(e);
        }
        serde_json::to_value(result.to_version(self.version))
            .map_err(|e| CniError::new(code::IO_FAILURE, e.to_string()))
    }

    fn pod_port(&self, r: &CniResult, host_iface: &str, pod_if: usize, netns: &str) -> PodPort {
        let arg = |k: &str| self.env.args.get(k).cloned();
        PodPort {
            key: self.key(),
            netns: netns.to_string(),
            host_iface: host_iface.to_string(),
            ips: r
                .ips
                .iter()
                .filter(|i| i.interface.is_none_or(|n| n == pod_if))
                .map(|i| i.address.clone())
                .collect(),
            pod_namespace: arg("K8S_POD_NAMESPACE"),
            pod_name: arg("K8S_POD_NAME"),
            pod_uid: arg("K8S_POD_UID"),
            bandwidth: self
                .conf
                .runtime_config
                .bandwidth
                .unwrap_or_default()
                .normalized(),
            annotations: self
                .conf
                .runtime_config
                .pod_annotations
                .iter()
                .filter(|(k, _)| k.starts_with("peregrine.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// Chained: the pod's interface in `prev` and its veth's host end
    /// (the interface outside the pod whose index the pod's end links to).
    fn chained_ends(&self, prev: &CniResult, netns: &str) -> Result<(String, usize), CniError> {
        let ifname = &self.env.ifname;
        let pod_if = prev
            .interfaces
            .iter()
            .position(|i| &i.name == ifname && i.sandbox.is_some())
            .ok_or_else(|| {
                CniError::new(
                    code::INVALID_CONFIG,
                    format!("prevResult has no interface {ifname} in the pod's namespace: put peregrine-cni after a plugin that makes it (bridge, ptp)"),
                )
            })?;
        let mut nl = Netlink::new().map_err(host_err("netlink"))?;
        let peer = nl
            .link_of(netns, ifname)
            .map_err(host_err("reading the pod's interface"))?;
        for i in prev.interfaces.iter().filter(|i| i.sandbox.is_none()) {
            if peer.is_some() && nl.link_index(HOST, &i.name).ok() == peer {
                return Ok((i.name.clone(), pod_if));
            }
        }
        Err(CniError::new(
            code::INVALID_CONFIG,
            format!("the pod's {ifname} is not a veth whose host end prevResult names (bridge and ptp make one)"),
        ))
    }

    /// Standalone ADD: addresses from IPAM, the veth, addresses and routes
    /// on both ends; undone whole on failure.
    fn add_standalone(
        &self,
        kind: &str,
        netns: &str,
    ) -> Result<(CniResult, String, usize), CniError> {
        let host = host_iface_name(&self.key());
        let r = ipam::delegate(kind, Command::Add, self.env, self.stdin)?.ok_or_else(|| {
            CniError::new(code::IO_FAILURE, format!("ipam {kind} gave no result"))
        })?;
        match self.plumb(&r, &host, netns) {
            Ok(res) => Ok((res, host, 1)),
            Err(e) => {
                let _ = self.undo_standalone(kind, &host);
                Err(e)
            }
        }
    }

    fn plumb(&self, ipam: &CniResult, host: &str, netns: &str) -> Result<CniResult, CniError> {
        let ifname = &self.env.ifname;
        let mut nl = Netlink::new().map_err(host_err("netlink"))?;
        if nl
            .has_link(netns, ifname)
            .map_err(host_err("reading the pod's namespace"))?
        {
            return Err(CniError::new(
                code::INVALID_CONFIG,
                format!("the pod's namespace has an interface {ifname} already"),
            ));
        }
        let mtu = self.conf.mtu.unwrap_or(1500);
        nl.add_veth(HOST, host, netns, ifname, 1, mtu)
            .map_err(host_err("creating the pod's veth"))?;
        nl.set_up(HOST, host)
            .map_err(host_err("setting the host end up"))?;
        nl.set_up(netns, ifname)
            .map_err(host_err("setting the pod's end up"))?;
        let mut gateways: Vec<IpAddr> = Vec::new();
        for ip in &ipam.ips {
            let (addr, plen) = ip.cidr()?;
            let gw: IpAddr = ip
                .gateway
                .as_deref()
                .and_then(|g| g.parse().ok())
                .ok_or_else(|| {
                    CniError::new(
                        code::INVALID_CONFIG,
                        format!("ipam gave {} no gateway; standalone mode routes through one (host-local gives the subnet's first address by default)", ip.address),
                    )
                })?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let sysctl = if addr.is_ipv4() {
                "net.ipv4.ip_forward"
            } else {
                "net.ipv6.conf.all.forwarding"
            };
            // As ptp does: the host forwards for its pods.
            if std::fs::read_to_string(format!("/proc/sys/{}", sysctl.replace('.', "/")))
                .is_ok_and(|v| v.trim() != "1")
            {
                peregrine_host::netns::write_sysctl(sysctl, "1").map_err(host_err("forwarding"))?;
            }
            let step = |r: peregrine_host::Result<()>, what: &str| r.map_err(host_err(what));
            step(nl.add_addr(netns, ifname, addr, max), "the pod's address")?;
            step(
                nl.add_onlink_route(netns, gw, max, ifname),
                "the pod's route to its gateway",
            )?;
            if plen < max {
                step(
                    nl.add_route(netns, network(addr, plen), plen, Some(gw), Some(ifname)),
                    "the pod's subnet route",
                )?;
            }
            if !gateways.contains(&gw) {
                step(
                    nl.add_addr(HOST, host, gw, max),
                    "the gateway address on the host end",
                )?;
                gateways.push(gw);
            }
            step(
                nl.add_onlink_route(HOST, addr, max, host),
                "the host's route to the pod",
            )?;
        }
        for r in &ipam.routes {
            let (dst, plen) = parse_cidr(&r.dst)?;
            let via = match r.gw.as_deref() {
                Some(g) => g.parse().map_err(|_| {
                    CniError::new(
                        code::INVALID_CONFIG,
                        format!("ipam route {}: bad gw {g:?}", r.dst),
                    )
                })?,
                None => *gateways
                    .iter()
                    .find(|g| g.is_ipv4() == dst.is_ipv4())
                    .ok_or_else(|| {
                        CniError::new(
                            code::INVALID_CONFIG,
                            format!("ipam route {}: no gateway of its family", r.dst),
                        )
                    })?,
            };
            nl.add_route(netns, dst, plen, Some(via), Some(ifname))
                .map_err(host_err("an ipam route in the pod"))?;
        }
        let mac =
            |nl: &mut Netlink, ns: &str, i: &str| nl.mac_of(ns, i).ok().map(|m| m.to_string());
        let mut res = ipam.clone();
        res.interfaces = vec![
            Interface {
                name: host.to_string(),
                mac: mac(&mut nl, HOST, host),
                ..Default::default()
            },
            Interface {
                name: ifname.clone(),
                mac: mac(&mut nl, netns, ifname),
                sandbox: Some(netns.to_string()),
                ..Default::default()
            },
        ];
        for ip in &mut res.ips {
            ip.interface = Some(1);
        }
        Ok(res)
    }

    /// Removes a standalone pod's veth (from whichever end is left) and
    /// releases its addresses (host-local's DEL of a released address is
    /// no error); each step is skipped when already done.
    fn undo_standalone(&self, kind: &str, host: &str) -> Result<(), CniError> {
        if let Ok(mut nl) = Netlink::new() {
            let in_pod = self
                .env
                .netns
                .as_deref()
                .filter(|n| std::path::Path::new(n).exists());
            match in_pod {
                Some(n) if nl.has_link(n, &self.env.ifname).unwrap_or(false) => {
                    let _ = nl.del_link(n, &self.env.ifname);
                }
                _ => {
                    if nl.has_link(HOST, host).unwrap_or(false) {
                        let _ = nl.del_link(HOST, host);
                    }
                }
            }
        }
        ipam::delegate(kind, Command::Del, self.env, self.stdin).map(|_| ())
    }

    fn del(&self) -> Result<(), CniError> {
        if self.agent_there() {
            self.ask(&Request::PodDel { key: self.key() })?;
        }
        if let Some(kind) = &self.ipam {
            self.undo_standalone(kind, &host_iface_name(&self.key()))?;
        }
        Ok(())
    }

    fn check(&self) -> Result<(), CniError> {
        let netns = self.netns()?.to_string();
        let prev = self.prev()?.ok_or_else(|| {
            CniError::new(
                code::INVALID_CONFIG,
                "CHECK needs the prevResult of the ADD",
            )
        })?;
        match &self.ipam {
            Some(kind) => {
                let mut nl = Netlink::new().map_err(host_err("netlink"))?;
                let host = host_iface_name(&self.key());
                for (ns, i) in [
                    (netns.as_str(), self.env.ifname.as_str()),
                    (HOST, host.as_str()),
                ] {
                    if !nl.has_link(ns, i).map_err(host_err("reading links"))? {
                        return Err(CniError::new(
                            code::INVALID_CONFIG,
                            format!("interface {i} is gone"),
                        ));
                    }
                }
                ipam::delegate(kind, Command::Check, self.env, self.stdin)?;
            }
            None => {
                self.chained_ends(&prev, &netns)?;
            }
        }
        self.ask(&Request::PodCheck { key: self.key() }).map(|_| ())
    }

    fn gc(&self) -> Result<(), CniError> {
        let keep: Vec<PodKey> = self
            .conf
            .valid_attachments
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(PodKey::from)
            .collect();
        if let Some(kind) = &self.ipam {
            ipam::delegate(kind, Command::Gc, self.env, self.stdin)?;
        }
        self.ask(&Request::PodGc { keep }).map(|_| ())
    }

    fn status(&self) -> Result<(), CniError> {
        if let Some(kind) = &self.ipam {
            ipam::delegate(kind, Command::Status, self.env, self.stdin)?;
        }
        match control::request(&self.socket, &Request::Status) {
            Ok(r) if r.ok => Ok(()),
            Ok(r) => Err(CniError::new(code::NOT_AVAILABLE, r.lines.join("; "))),
            Err(e) => Err(CniError::new(code::NOT_AVAILABLE, e)),
        }
    }
}
