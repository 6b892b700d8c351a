//! A router another process attached and left running (found from its pins):
//! ports added to it and taken out of it while it forwards, from any later
//! command (`router attach` on a namespace that has a router,
//! `router detach IFACE...`). The new port runs the same program the
//! running ports run (found by id from a port's pinned link) on the same
//! maps (their pins), so it is one router whichever command made a port.
use std::path::{Path, PathBuf};

use peregrine_bpf::link::PinnedLink;
use peregrine_bpf::router::RouterMaps;
use peregrine_bpf::{Hook, Link};
use peregrine_host::netns;
use peregrine_host::nl::NetlinkHere;
use peregrine_host::tc::Tc;

use crate::cls_port::{self, ClsPort};
use crate::error::{DataplaneError, Result};
use crate::peer::{delivers_to_peer, ensure_peer_receives, peer_label};
use crate::pins;

/// A live router pinned in `dir`.
pub struct RunningRouter {
    dir: PathBuf,
    maps: RouterMaps,
    /// A live port's link: the program new ports run and its hook.
    sample: PinnedLink,
    /// Its ports are cls_bpf filters (`cls_port`): new ones are too.
    cls: bool,
    /// Its ports' interface names.
    pub ports: Vec<String>,
}

impl RunningRouter {
    /// The router pinned in `dir`; an error when none of its ports is live.
    pub fn open(dir: &Path) -> Result<RunningRouter> {
        Self::of(dir, pins::attachment(dir))
    }

    /// The router pinned in `dir` whose attachment the caller read.
    pub(crate) fn of(dir: &Path, a: pins::Attachment) -> Result<RunningRouter> {
        let (sample, cls) = a
            .ports
            .iter()
            .find_map(|p| p.link.filter(|l| l.live()).map(|l| (l, p.cls)))
            .ok_or_else(|| {
                DataplaneError::Other(format!(
                    "no live router at {}",
                    peregrine_bpf::bpffs::display(dir)
                ))
            })?;
        Ok(RunningRouter {
            dir: dir.to_path_buf(),
            maps: RouterMaps::pinned(dir)?,
            sample,
            cls,
            ports: a.ports.into_iter().map(|p| p.iface).collect(),
        })
    }

    /// The ports (of `ifaces`) that deliver into their peer's namespace
    /// with bpf_redirect_peer.
    /// Reads those ports' pins alone (not every port's: a pod joining a
    /// router of many asks this).
    pub fn peer_delivered(&self, ifaces: &[String]) -> Vec<String> {
        let mut out: Vec<String> = ifaces
            .iter()
            .filter(|i| {
                pins::live_port_link(&self.dir, i)
                    .is_some_and(|l| self.maps.peer_delivery(l.ifindex).unwrap_or(false))
            })
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// At tc, sets each live port's peer delivery to what
    /// `delivers_to_peer` says now: an XDP program may have come onto a
    /// port's peer or left it since (one left off by a `faas serve` killed
    /// outright, whose exit could not say so). The ports whose flag changed.
    pub fn refresh_peer_delivery(&self, ns: Option<&str>) -> Result<Vec<String>> {
        if self.sample.xdp {
            return Ok(Vec::new());
        }
        let mut changed = Vec::new();
        for p in pins::attachment(&self.dir).ports {
            let Some(l) = p.link.filter(|l| l.live()) else {
                continue;
            };
            let now = netns::run_in_opt(ns, || delivers_to_peer(&p.iface))??;
            if self.maps.peer_delivery(l.ifindex)? != now {
                self.maps.set_peer_delivery(l.ifindex, now)?;
                changed.push(p.iface);
            }
        }
        Ok(changed)
    }

    /// "xdp" or "tc": the hook its ports run at.
    pub fn hook_kind(&self) -> &'static str {
        self.sample.hook_kind()
    }

    /// Its ports at tc are cls_bpf filters (tcx links otherwise).
    pub fn cls(&self) -> bool {
        self.cls
    }

    /// Adds `ifaces` (interfaces of namespace `ns`, None: the caller's) as
    /// ports at `hook`, which must be the hook the router runs at (its
    /// other program is not reachable from its links), attached as its
    /// ports are (tcx links or cls_bpf filters). Each new link or record is
    /// pinned beside the others; at the XDP hook each new port's veth peer
    /// gets a pass-through as at attach. On error the ports added by this
    /// call are taken out again and the running ones are untouched. The
    /// pass-throughs it put on peers (`namespace:iface`).
    pub fn add_ports(
        &self,
        ns: Option<&str>,
        ifaces: &[String],
        hook: Hook,
    ) -> Result<Vec<String>> {
        if hook.is_xdp() != self.sample.xdp {
            return Err(DataplaneError::Config(format!(
                "the router here runs at the {} hook; a port cannot join it at {hook} (detach it and attach every port at one hook)",
                self.hook_kind()
            )));
        }
        if let Some(i) = ifaces.iter().find(|i| self.ports.contains(i)) {
            return Err(DataplaneError::Config(format!(
                "{i} is already a port of the router here"
            )));
        }
        // Room first: entries of ports whose interface went (a pod's veth
        // deleted with its pod) leave the port tables (best effort: a full
        // router says so when the port is added).
        let _ = self.forget_gone_ports(ns);
        let prog = peregrine_bpf::maps::program_by_id(self.sample.prog_id)?;
        let tc = match self.cls {
            true => Some(netns::run_in_opt(ns, Tc::open)??),
            false => None,
        };
        let mut added: Vec<String> = Vec::new();
        let mut peers = Vec::new();
        for iface in ifaces {
            let made = match &tc {
                Some(tc) => self.add_cls_port(ns, tc, &prog, iface).map(|()| None),
                None => self.add_port(ns, &prog, iface, hook),
            };
            if made.is_ok() || self.ports_pinned().contains(iface) {
                added.push(iface.clone());
            }
            match made {
                Ok(p) => peers.extend(p),
                Err(e) => {
                    let _ = self.remove_pinned(ns, &added);
                    return Err(e);
                }
            }
        }
        Ok(peers)
    }

    fn add_port(
        &self,
        ns: Option<&str>,
        prog: &impl std::os::fd::AsFd,
        iface: &str,
        hook: Hook,
    ) -> Result<Option<String>> {
        let link: Link =
            netns::run_in_opt(ns, || self.maps.attach_port(prog, iface, hook, false))??;
        let peer = match hook {
            Hook::Tcx(_) => netns::run_in_opt(ns, || delivers_to_peer(iface))??,
            Hook::Xdp(_) => false,
        };
        let made = self
            .maps
            .set_peer_delivery(link.ifindex, peer)
            .map_err(DataplaneError::from)
            .and_then(|()| Ok(link.pin(&pins::port_link(&self.dir, iface))?));
        if let Err(e) = made {
            let _ = self.maps.remove_port(link.ifindex);
            return Err(e);
        }
        if hook.is_xdp() {
            if let Some(p) = netns::run_in_opt(ns, || ensure_peer_receives(iface))?? {
                p.link.pin(&pins::peer_link(&self.dir, &p.ns, &p.iface))?;
                return Ok(Some(format!("{}:{}", p.ns, p.iface)));
            }
        }
        Ok(None)
    }

    /// `add_port` as a cls_bpf filter, with `tc` opened in `ns`.
    fn add_cls_port(
        &self,
        ns: Option<&str>,
        tc: &Tc,
        prog: &impl std::os::fd::AsFd,
        iface: &str,
    ) -> Result<()> {
        let ifindex = netns::run_in_opt(ns, || self.maps.join_port(iface, false))??;
        let record = pins::port_cls(&self.dir, iface);
        let made = ClsPort::attach(ns, tc, prog.as_fd(), iface, &record).and_then(|mut port| {
            let peer = netns::run_in_opt(ns, || delivers_to_peer(iface))??;
            self.maps.set_peer_delivery(ifindex, peer)?;
            port.keep()
        });
        if made.is_err() {
            let _ = self.maps.remove_port(ifindex);
        }
        made
    }

    /// Interfaces with a port link pinned now.
    fn ports_pinned(&self) -> Vec<String> {
        pins::attachment(&self.dir)
            .ports
            .into_iter()
            .map(|p| p.iface)
            .collect()
    }

    /// Takes `ifaces` out of the router: each one's link is detached at
    /// once and unpinned, its entries leave the port maps, and the
    /// pass-through on its veth peer (if the router put one there) goes.
    /// Every name must be a port. Ports left keep forwarding.
    pub fn remove_ports(&self, ns: Option<&str>, ifaces: &[String]) -> Result<()> {
        if let Some(i) = ifaces.iter().find(|i| !self.ports.contains(i)) {
            return Err(DataplaneError::Config(format!(
                "{i} is not a port of the router here (its ports: {})",
                self.ports.join(" ")
            )));
        }
        self.remove_pinned(ns, ifaces)
    }

    /// Deletes the port-table entries of ports whose interface is gone
    /// from namespace `ns`: a dead link no longer tells its ifindex, so
    /// `remove_pinned` cannot name them to `remove_port`.
    fn forget_gone_ports(&self, ns: Option<&str>) -> Result<()> {
        let live = netns::run_in_opt(ns, || NetlinkHere::open()?.link_indexes())??;
        self.maps.forget_gone_ports(&live)?;
        Ok(())
    }

    pub(crate) fn remove_pinned(&self, ns: Option<&str>, ifaces: &[String]) -> Result<()> {
        // Opened in `ns` for the first cls_bpf port.
        let mut tc: Option<Tc> = None;
        for iface in ifaces {
            let record = pins::port_cls(&self.dir, iface);
            // Its interface while it is there (a record of an attach
            // killed part-way too: its port entries were made first).
            let ifindex = match record.exists() {
                true => peregrine_bpf::cls::read(&record).map_or(0, |r| r.ifindex),
                false => pins::live_port_link(&self.dir, iface).map_or(0, |l| l.ifindex),
            };
            if ifindex != 0 {
                self.maps.remove_port(ifindex)?;
            }
            if record.exists() {
                if tc.is_none() {
                    tc = Some(netns::run_in_opt(ns, Tc::open)??);
                }
                cls_port::detach(tc.as_ref().expect("opened"), &record)?;
            } else {
                peregrine_bpf::link::detach_pinned(&pins::port_link(&self.dir, iface))?;
            }
            // The pass-through the router put on this port's peer, if the
            // port (and so its peer) is still there to be asked.
            let peer = netns::run_in_opt(ns, || peregrine_host::veth::peer_end(iface))
                .ok()
                .and_then(|r| r.ok())
                .flatten();
            if let Some(end) = peer {
                if let Ok(name) = end.name() {
                    let p = pins::peer_link(&self.dir, &peer_label(&end), &name);
                    peregrine_bpf::link::detach_pinned(&p)?;
                }
            }
        }
        // Ports whose interface went took their ifindex with them.
        let _ = self.forget_gone_ports(ns);
        Ok(())
    }
}
