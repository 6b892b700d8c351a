//! Attaching a declaration: the router on its ports, each network function
//! in its container, the chains' steering rules, and pass-throughs on the
//! ports' peers. Dropping a `Dataplane` detaches everything not pinned.
use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::Path;

use peregrine_bpf::nf::{NfProgram, NfSetup};
use peregrine_bpf::router::{FibMode, PortStats, RouterProgram};
use peregrine_bpf::{Hook, Link, XdpProgram};
use peregrine_host::netns;
use peregrine_host::tc::Tc;

use crate::cls_port::ClsPort;
use crate::config::{ChainMatch, DataplaneConfig, NfKind};
use crate::error::{DataplaneError, Result};
use crate::hook::pick;
use crate::hosts::{HostIface, Hosts};
use crate::peer::{delivers_to_peer, ensure_peer_receives, ensure_xdp_receiver, PassThrough};
use crate::pins;

/// A network function running in a container.
pub struct RunningNf {
    pub host: String,
    pub iface: String,
    pub prog: NfProgram,
    pub link: Link,
}

/// How one router port is attached: a link (XDP, tcx), or a cls_bpf
/// filter with its record (`cls_port`).
pub enum PortLink {
    Link(Link),
    Cls(ClsPort),
}

impl PortLink {
    /// The port's interface index (in the router's namespace).
    pub fn ifindex(&self) -> u32 {
        match self {
            PortLink::Link(l) => l.ifindex,
            PortLink::Cls(c) => c.ifindex,
        }
    }
}

/// A router (with its chains and network functions), attached.
pub struct Dataplane {
    pub router: RouterProgram,
    /// None: the namespace of the process that attached it.
    pub router_ns: Option<String>,
    /// Where the router runs on every port.
    pub hook: Hook,
    /// (port name, attachment)
    pub ports: Vec<(String, PortLink)>,
    pub nfs: Vec<RunningNf>,
    /// Pass-through programs on port peers that ran no XDP (see PassThrough).
    pub peers: Vec<PassThrough>,
    /// The router's maps are pinned there already (before its cls_bpf
    /// ports were attached: a filter outlives a killed attacher, and its
    /// maps must be found beside its record).
    maps_pinned: Option<std::path::PathBuf>,
}

impl Dataplane {
    /// Attaches the router to `ports` of namespace `ns` (None: the caller's)
    /// at `hook`. On error nothing stays attached: the links made so far
    /// close when they drop.
    pub fn router(
        ns: Option<&str>,
        ports: &[String],
        hook: Hook,
        fib: FibMode,
        classify: bool,
    ) -> Result<Dataplane> {
        Dataplane::attach(ns, ports, hook, fib, classify, None, |_| Ok(()))
    }

    /// `router` at tc ingress with each port a cls_bpf filter, its record
    /// in `dir` (the directory the router will be pinned in, which must
    /// exist). Dropped before `pin`, the ports are detached.
    pub fn router_cls(
        ns: Option<&str>,
        ports: &[String],
        fib: FibMode,
        dir: &Path,
    ) -> Result<Dataplane> {
        Dataplane::attach(ns, ports, Hook::TC, fib, false, Some(dir), |_| Ok(()))
    }

    /// Loads the router and attaches it to `ports`; `then` adds what else
    /// runs with it (network functions and their ports), and last each
    /// port's delivery is chosen (see `pick_peer_delivery`), once every
    /// program on the ports' peers is in place.
    /// `cls`: the ports are cls_bpf filters recorded in that directory.
    #[allow(clippy::too_many_arguments)]
    fn attach(
        ns: Option<&str>,
        ports: &[String],
        hook: Hook,
        fib: FibMode,
        classify: bool,
        cls: Option<&Path>,
        then: impl FnOnce(&mut Dataplane) -> Result<()>,
    ) -> Result<Dataplane> {
        let mut router = RouterProgram::load(fib)?;
        let mut links = Vec::new();
        match cls {
            None => {
                for p in ports {
                    let l = netns::run_in_opt(ns, || attach_port(&router, p, hook, classify))??;
                    links.push((p.clone(), PortLink::Link(l)));
                }
            }
            Some(dir) => {
                router.pin_maps(dir)?;
                let tc = netns::run_in_opt(ns, Tc::open)??;
                let prog = router.prog_at(hook)?;
                // Each port joins the tables before its filter runs (as a
                // port joining a running router does); its record is
                // marked kept by `pin`, once the router is whole.
                for p in ports {
                    let ifindex = netns::run_in_opt(ns, || router.join_port(p, classify))??;
                    let port = ClsPort::attach(ns, &tc, prog.as_fd(), p, &pins::port_cls(dir, p))
                        .inspect_err(|_| {
                        let _ = router.remove_port(ifindex);
                    })?;
                    links.push((p.clone(), PortLink::Cls(port)));
                }
            }
        }
        let mut dp = Dataplane {
            router,
            router_ns: ns.map(str::to_string),
            hook,
            ports: links,
            nfs: Vec::new(),
            peers: Vec::new(),
            maps_pinned: cls.map(Path::to_path_buf),
        };
        then(&mut dp)?;
        dp.pick_peer_delivery()?;
        Ok(dp)
    }

    /// At the tc hook, chooses per port whether routed frames go straight
    /// into the peer's namespace (`delivers_to_peer`). Runs once every
    /// program on the ports' peers is in place: it looks for their XDP.
    fn pick_peer_delivery(&self) -> Result<()> {
        if self.hook.is_xdp() {
            return Ok(());
        }
        let ns = self.router_ns.as_deref();
        for (p, l) in &self.ports {
            let peer = netns::run_in_opt(ns, || delivers_to_peer(p))??;
            self.router.set_peer_delivery(l.ifindex(), peer)?;
        }
        Ok(())
    }

    /// Deploys `cfg` on `hosts`.
    pub fn deploy(hosts: &(impl Hosts + ?Sized), cfg: &DataplaneConfig) -> Result<Dataplane> {
        let rns = hosts.netns(&cfg.router)?;
        let hook = match netns::run_in(&rns, || pick(cfg.hook, None, &cfg.ports))??.hook {
            Hook::Xdp(_) => Hook::Xdp(cfg.mode),
            tc => tc,
        };
        let mut dp = Dataplane::attach(
            Some(&rns),
            &cfg.ports,
            hook,
            cfg.fib,
            !cfg.chains.is_empty(),
            None,
            |dp| dp.run_nfs(hosts, cfg, &rns),
        )?;
        dp.prepare_peers(hosts, &cfg.router)?;
        Ok(dp)
    }

    /// Runs every network function of `cfg` in its container, with the
    /// router ports facing it, and steers the chains through them; `rns` is
    /// the router's namespace.
    fn run_nfs(
        &mut self,
        hosts: &(impl Hosts + ?Sized),
        cfg: &DataplaneConfig,
        rns: &str,
    ) -> Result<()> {
        let ifindex_in = |ns: &str, iface: &str| -> Result<u32> {
            Ok(netns::run_in(ns, || peregrine_bpf::link::ifindex(iface))??)
        };
        let router_side = |host: &str, iface: &str| -> Result<String> {
            let end = HostIface {
                host: host.to_string(),
                iface: iface.to_string(),
            };
            match hosts.veth_peer(&end) {
                Some(p) if p.host == cfg.router => Ok(p.iface),
                Some(p) => Err(DataplaneError::Config(format!(
                    "{host}:{iface} is linked to {}:{}, not to the router host {}",
                    p.host, p.iface, cfg.router
                ))),
                None => Err(DataplaneError::Config(format!(
                    "{host}:{iface} is not one end of a veth link"
                ))),
            }
        };

        // Each network function: the router port facing it (entry), and the
        // router port its frames come back on (same port unless it forwards).
        let mut entry = BTreeMap::new();
        let mut exit = BTreeMap::new();
        for n in &cfg.nfs {
            let in_port = router_side(&n.host, &n.iface)?;
            let out_port = router_side(&n.host, n.out_iface())?;
            for p in [&in_port, &out_port] {
                if !self.ports.iter().any(|(name, _)| name == p) {
                    let l = netns::run_in(rns, || attach_port(&self.router, p, self.hook, false))??;
                    self.ports.push((p.clone(), PortLink::Link(l)));
                }
            }
            // The function hands frames back with XDP_TX or a redirect,
            // which veth delivers only to an end that runs XDP: the XDP
            // router there already does; at the tc hook the port gets a
            // pass-through (the frame then reaches the tc router as an skb).
            for p in [&in_port, &out_port] {
                if let Some(pt) = ensure_xdp_receiver(rns, p)? {
                    self.peers.push(pt);
                }
            }
            entry.insert(n.host.clone(), ifindex_in(rns, &in_port)?);
            exit.insert(n.host.clone(), ifindex_in(rns, &out_port)?);
            let nns = hosts.netns(&n.host)?;
            let setup = NfSetup {
                out_ifindex: match &n.kind {
                    NfKind::Forward { out } => Some(ifindex_in(&nns, out)?),
                    _ => None,
                },
                rules: n.acl.clone(),
            };
            let prog = NfProgram::load(&setup)?;
            let link = netns::run_in(&nns, || prog.attach(&n.iface, cfg.mode))??;
            self.nfs.push(RunningNf {
                host: n.host.clone(),
                iface: n.iface.clone(),
                prog,
                link,
            });
        }
        for (ci, ch) in cfg.chains.iter().enumerate() {
            let first = entry[&ch.hops[0]];
            for w in ch.hops.windows(2) {
                self.router.set_port(exit[&w[0]], entry[&w[1]], false)?;
            }
            // The last hop's frames are routed (next 0).
            self.router
                .set_port(exit[ch.hops.last().expect("non-empty")], 0, false)?;
            let chain = ci as u32 + 1;
            match ch.matches {
                ChainMatch::Dst(p) => self.router.steer_prefix(p.addr, p.len, first, chain)?,
                ChainMatch::L4 { proto, port } => {
                    self.router.steer_l4(proto, port, first, chain)?
                }
                ChainMatch::SrcMac(mac) => self.router.steer_mac(mac, first, chain)?,
            }
        }
        Ok(())
    }

    /// Makes every port's veth peer accept the frames the router redirects
    /// to it (veth drops them unless the receiving end runs XDP).
    pub fn prepare_peers(
        &mut self,
        hosts: &(impl Hosts + ?Sized),
        router_host: &str,
    ) -> Result<()> {
        if !self.hook.is_xdp() {
            return Ok(());
        }
        for (port, _) in &self.ports {
            let end = HostIface {
                host: router_host.to_string(),
                iface: port.clone(),
            };
            if let Some(peer) = hosts.veth_peer(&end) {
                if let Some(p) = ensure_xdp_receiver(&hosts.netns(&peer.host)?, &peer.iface)? {
                    self.peers.push(p);
                }
            }
        }
        Ok(())
    }

    /// Outside labs: makes every port's veth peer (found from the port,
    /// in whatever namespace it is) accept what the XDP router redirects to
    /// it. The tc router needs nothing there.
    pub fn prepare_peers_here(&mut self) -> Result<()> {
        if !self.hook.is_xdp() {
            return Ok(());
        }
        let ns = self.router_ns.clone();
        for (port, _) in &self.ports {
            if let Some(p) = netns::run_in_opt(ns.as_deref(), || ensure_peer_receives(port))?? {
                self.peers.push(p);
            }
        }
        Ok(())
    }

    /// Pins links and maps under `dir` so the data plane outlives this process.
    pub fn pin(&mut self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| DataplaneError::Other(format!("creating {}: {e}", dir.display())))?;
        if self.maps_pinned.as_deref() != Some(dir) {
            self.router.pin_maps(dir)?;
        }
        for (name, l) in &mut self.ports {
            match l {
                PortLink::Link(l) => l.pin(&pins::port_link(dir, name))?,
                // Recorded in the directory it was attached for.
                PortLink::Cls(c) if c.record == pins::port_cls(dir, name) => c.keep()?,
                PortLink::Cls(c) => {
                    return Err(DataplaneError::Other(format!(
                        "the tc port {name} is recorded at {}, not in {}",
                        c.record.display(),
                        dir.display()
                    )))
                }
            }
        }
        for n in &mut self.nfs {
            n.link.pin(&pins::nf_link(dir, &n.host, &n.iface))?;
            n.prog.pin_stats(&pins::nf_stats(dir, &n.host, &n.iface))?;
        }
        for p in &self.peers {
            p.link.pin(&pins::peer_link(dir, &p.ns, &p.iface))?;
        }
        Ok(())
    }

    /// Per-port counters: (port name, ifindex, counters).
    pub fn port_stats(&self) -> Result<Vec<(String, u32, PortStats)>> {
        self.ports
            .iter()
            .map(|(n, l)| Ok((n.clone(), l.ifindex(), self.router.stats(l.ifindex())?)))
            .collect()
    }
}

/// Attaches the router to `iface` (in the calling thread's namespace) at
/// `hook` and makes it a port.
fn attach_port(router: &RouterProgram, iface: &str, hook: Hook, classify: bool) -> Result<Link> {
    Ok(router.attach(iface, hook, classify)?)
}
