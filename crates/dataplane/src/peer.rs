//! The receiving end of a redirect: veth drops frames redirected to it
//! (XDP_REDIRECT) unless its peer runs an XDP program, so the data plane
//! (and the lab's generator) put a counting pass-through there.
//!
//! And the other way round: the tc router delivers into a container with
//! bpf_redirect_peer only while the container's end runs no XDP (that
//! helper skips the XDP hook). A product that attaches XDP on an
//! interface (`faas serve`'s dispatcher, the stack's steering, the
//! scheduler's policer) or takes it off calls `refresh_peer_of`, or holds
//! its link in a `RouterAwareLink`, which does it on both sides.
use std::path::PathBuf;

use peregrine_bpf::router::{PortTable, RouterMaps};
use peregrine_bpf::sink::SinkProgram;
use peregrine_bpf::{Link, TcxDirection, XdpAction, XdpMode, XdpProgram};
use peregrine_host::netns;

use crate::error::{DataplaneError, Result};
use crate::pins;

/// A counting pass-through XDP program on a veth that had none.
pub struct PassThrough {
    pub ns: String,
    pub iface: String,
    pub prog: SinkProgram,
    pub link: Link,
}

/// Makes `ns:iface` accept redirected frames: attaches a pass-through program
/// if no XDP program runs there (None if one already does).
pub fn ensure_xdp_receiver(ns: &str, iface: &str) -> Result<Option<PassThrough>> {
    netns::run_in(ns, || receiver_here(ns, iface))?
}

/// Makes the veth peer of `port` (an interface of the calling thread's
/// namespace; the peer may be in any namespace) accept redirected frames,
/// as `ensure_xdp_receiver`. None when `port` is no veth or its peer
/// already runs XDP.
pub fn ensure_peer_receives(port: &str) -> Result<Option<PassThrough>> {
    let Some(end) = peregrine_host::veth::peer_end(port)? else {
        return Ok(None);
    };
    let iface = end.name()?;
    end.run_in(|| receiver_here(&peer_label(&end), &iface))?
}

/// The name a port's peer's pass-through pin carries for the peer's
/// namespace: no spaces ("pid 42" -> "pid42"), "here" for the caller's.
pub(crate) fn peer_label(end: &peregrine_host::veth::PeerEnd) -> String {
    match &end.ns {
        Some(n) => n.label.replace(' ', ""),
        None => "here".to_string(),
    }
}

fn receiver_here(ns: &str, iface: &str) -> Result<Option<PassThrough>> {
    let idx = peregrine_bpf::link::ifindex(iface)?;
    if peregrine_bpf::xdp::attached_prog_id(idx)?.is_some() {
        return Ok(None);
    }
    let prog = SinkProgram::load(XdpAction::Pass)?;
    let link = prog.attach(iface, XdpMode::Native)?;
    tracing::info!("{ns}:{iface} had no XDP program; attached a pass-through so redirected frames are not dropped");
    Ok(Some(PassThrough {
        ns: ns.to_string(),
        iface: iface.to_string(),
        prog,
        link,
    }))
}

/// Whether the tc router delivers what it routes out of port `port` (in
/// the calling thread's namespace) straight into the namespace of its veth
/// peer with bpf_redirect_peer: the peer is in another namespace (a
/// container) and runs no XDP program (redirect_peer skips the peer's XDP
/// hook, where a network function or a counting sink would run), and
/// nothing shapes or classifies what the port sends (`egress_shaped`:
/// redirect_peer skips the port's own egress too). The skb then skips the
/// veth's transmit and the peer's backlog queue.
pub fn delivers_to_peer(port: &str) -> Result<bool> {
    let Some(end) = peregrine_host::veth::peer_end(port)? else {
        return Ok(false);
    };
    if end.ns.is_none() || egress_shaped(port)? {
        return Ok(false);
    }
    let idx = end.ifindex;
    Ok(end
        .run_in(|| peregrine_bpf::xdp::attached_prog_id(idx))??
        .is_none())
}

/// `port` (of the calling thread's namespace) shapes or classifies what
/// it sends: a root qdisc other than the kernel's default (the htb
/// engine's tree, a user's own) or a program at its tcx egress.
fn egress_shaped(port: &str) -> Result<bool> {
    let idx = peregrine_bpf::link::ifindex(port)?;
    if !peregrine_bpf::tcx::attached_ids(idx, TcxDirection::Egress)?.is_empty() {
        return Ok(true);
    }
    Ok(peregrine_host::tc::Tc::open()?.root_qdisc(idx)?.is_some())
}

/// Sets how the tc router port on `ifindex` (of the calling thread's
/// namespace) delivers to what `delivers_to_peer` says now, for a caller
/// that put shaping onto the port's egress or took it off (the htb
/// engine's tree). Nothing when no tc router port is there; a failure is
/// logged, not returned (the shaping is in place either way).
pub fn refresh_port_logged(ifindex: u32) {
    let done = (|| -> Result<()> {
        let Some((router, port)) = router_port_here(ifindex)? else {
            return Ok(());
        };
        let now = delivers_to_peer(&port)?;
        if router.peer_delivery(ifindex)? != now {
            router.set_peer_delivery(ifindex, now)?;
            if now {
                tracing::info!(
                    "router port {port} delivers into its peer's namespace with bpf_redirect_peer again (nothing shapes its egress now)"
                );
            } else {
                tracing::info!(
                    "router port {port} now delivers through its own egress (bpf_redirect_neigh), where its qdisc shapes what it sends; bpf_redirect_peer would skip it"
                );
            }
        }
        Ok(())
    })();
    if let Err(e) = done {
        tracing::warn!("ifindex {ifindex}: updating how a tc router delivers through it: {e}");
    }
}

/// What `refresh_peer_of` found: the tc router port whose veth peer the
/// interface is, and how the router delivers to it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerDelivery {
    /// The router's pin directory (None: a router a process holds
    /// unpinned, found by its program).
    pub router: Option<PathBuf>,
    /// The router's port (named as when attached, in the router's namespace).
    pub port: String,
    /// The interface asked about.
    pub iface: String,
    /// The port delivers with bpf_redirect_peer (past `iface`'s XDP hook,
    /// which runs nothing); false: through the veth (bpf_redirect_neigh),
    /// so `iface`'s XDP program sees every routed frame.
    pub peer_delivery: bool,
    /// Whether this call changed it.
    pub changed: bool,
}

/// Sets how a tc router delivers to `iface` (an interface of the calling
/// thread's namespace) to what `delivers_to_peer` says now, after an XDP
/// program came onto `iface` or left it: when `iface` is a veth whose other
/// end is a port of a tc router (pinned on this host, outside labs in the
/// port's namespace's `_netns/<cookie>` or in a lab's; or held unpinned by
/// a process), that port's peer-delivery flag. None when `iface` faces no such port. Logs one line
/// when the flag changes.
pub fn refresh_peer_of(iface: &str) -> Result<Option<PeerDelivery>> {
    let Some(end) = peregrine_host::veth::peer_end(iface)? else {
        return Ok(None);
    };
    let Some((router, port)) = end.run_in(|| router_port_here(end.ifindex))?? else {
        return Ok(None);
    };
    let now = end.run_in(|| delivers_to_peer(&port))??;
    let was = router.peer_delivery(end.ifindex)?;
    if was != now {
        router.set_peer_delivery(end.ifindex, now)?;
        if now {
            tracing::info!(
                "router port {port} delivers into {iface}'s namespace with bpf_redirect_peer again ({iface} runs no XDP program now)"
            );
        } else {
            tracing::info!(
                "router port {port} now delivers through {iface}'s XDP hook (bpf_redirect_neigh through the veth instead of bpf_redirect_peer, which would skip the XDP program on {iface})"
            );
        }
    }
    Ok(Some(PeerDelivery {
        router: router.dir(),
        port,
        iface: iface.to_string(),
        peer_delivery: now,
        changed: was != now,
    }))
}

/// Where a tc router port's maps are found.
enum RouterAt {
    /// A router pinned in this directory.
    Pinned(PathBuf),
    /// A router no pin names (a process holds it), by its tc program.
    Program(u32),
}

impl RouterAt {
    /// Whether port `ifindex` delivers with bpf_redirect_peer.
    fn peer_delivery(&self, ifindex: u32) -> Result<bool> {
        Ok(match self {
            RouterAt::Pinned(dir) => RouterMaps::pinned(dir)?.peer_delivery(ifindex)?,
            RouterAt::Program(id) => PortTable::of_program(*id)?.peer_delivery(ifindex)?,
        })
    }

    fn set_peer_delivery(&self, ifindex: u32, peer: bool) -> Result<()> {
        match self {
            RouterAt::Pinned(dir) => RouterMaps::pinned(dir)?.set_peer_delivery(ifindex, peer)?,
            RouterAt::Program(id) => {
                PortTable::of_program(*id)?.set_peer_delivery(ifindex, peer)?
            }
        }
        Ok(())
    }

    fn dir(self) -> Option<PathBuf> {
        match self {
            RouterAt::Pinned(dir) => Some(dir),
            RouterAt::Program(_) => None,
        }
    }
}

/// The tc router port on `ifindex` of the calling thread's namespace:
/// where its router's maps are, and the port's name. A port matches when
/// its pinned link is at tc on that ifindex and runs one of the programs
/// the kernel has there, at tcx or as our cls_bpf filter (ifindexes
/// repeat across namespaces; program ids do not), so a lab's router
/// (pinned under the lab, whose namespace its pins do not name) is found
/// too. A router no pin names (one a process holds: a bench's, an
/// embedding program's) is found by its program at that tc ingress, so it
/// too stops skipping an XDP program that comes onto its port's peer.
fn router_port_here(ifindex: u32) -> Result<Option<(RouterAt, String)>> {
    // A port attached as a tcx link or as a cls_bpf filter.
    let ids = crate::cls_port::tc_ingress_programs(ifindex)?;
    if ids.is_empty() {
        return Ok(None);
    }
    let cookie = netns::cookie()?;
    for a in pins::list_attachments() {
        if a.cookie.is_some_and(|c| c != cookie) {
            continue;
        }
        let port = a.ports.iter().find(|p| {
            p.link.is_some_and(|l| {
                l.live() && !l.xdp && l.ifindex == ifindex && ids.contains(&l.prog_id)
            })
        });
        if let Some(p) = port {
            return Ok(Some((RouterAt::Pinned(a.dir.clone()), p.iface.clone())));
        }
    }
    for id in ids {
        if peregrine_bpf::maps::program_name_of(id) == peregrine_bpf::prog_names::ROUTER_TC {
            let port = peregrine_bpf::link::iface_name(ifindex);
            return Ok(Some((RouterAt::Program(id), port)));
        }
    }
    Ok(None)
}

/// `refresh_peer_of(iface)` in namespace `ns` (None: the caller's), for
/// callers that cannot fail on it (a drop, a server already serving): a
/// failure is logged, not returned.
pub fn refresh_peer_logged(ns: Option<&str>, iface: &str) -> Option<PeerDelivery> {
    let done = netns::run_in_opt(ns, || refresh_peer_of(iface))
        .map_err(DataplaneError::from)
        .and_then(|r| r);
    done.unwrap_or_else(|e| {
        tracing::warn!("{iface}: updating how a tc router delivers to it: {e}");
        None
    })
}

/// An XDP link on an interface that may face a tc router's port: the
/// router's delivery to it is refreshed (`refresh_peer_of`) once the link
/// is made and again once it is dropped (on a stop, an error path or a
/// panic's unwinding alike), so routed frames pass its XDP program while it
/// runs and take bpf_redirect_peer again after. A process killed outright
/// leaves the router delivering through the veth: slower, never lost.
pub struct RouterAwareLink {
    link: Option<Link>,
    ns: Option<String>,
}

impl RouterAwareLink {
    /// `link`, just attached at XDP on an interface of namespace `ns`
    /// (None: the caller's).
    pub fn new(link: Link, ns: Option<&str>) -> RouterAwareLink {
        refresh_peer_logged(ns, &link.iface);
        RouterAwareLink {
            link: Some(link),
            ns: ns.map(str::to_string),
        }
    }
}

impl Drop for RouterAwareLink {
    fn drop(&mut self) {
        if let Some(l) = self.link.take() {
            let iface = l.iface.clone();
            // Detached first: the refresh then sees the hook empty.
            drop(l);
            refresh_peer_logged(self.ns.as_deref(), &iface);
        }
    }
}
