//! A veth's other end, wherever it is: its interface index and, when it is
//! in another network namespace, that namespace, found by asking the
//! kernel which namespace carries the veth's link-netnsid (RTM_GETNSID on
//! each namespace this process can find), asked through `nl`'s rtnetlink.
//! Its offloads decide whether an XDP program on this end may redirect
//! what it sends.
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo};

use crate::error::{HostError, Result};
use crate::netdev::{tx_offloads, TxOffloads};
use crate::netns;
use crate::nl::Netlink;

/// The other end of a veth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethPeer {
    pub name: String,
    pub ifindex: u32,
    /// Its namespace: a /run/netns name, "pid N", or None for the caller's.
    pub ns: Option<String>,
    pub offloads: TxOffloads,
}

/// Where the other end of a veth is, with its namespace open.
pub struct PeerEnd {
    pub ifindex: u32,
    /// None: the caller's namespace.
    pub ns: Option<netns::Found>,
}

impl PeerEnd {
    /// Runs `f` in the peer's namespace.
    pub fn run_in<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        match &self.ns {
            Some(n) => netns::run_in_file(&n.file, f),
            None => Ok(f()),
        }
    }

    /// The peer's interface name (in its namespace).
    pub fn name(&self) -> Result<String> {
        let i = self.ifindex;
        self.run_in(|| nix::net::if_::if_indextoname(i))?
            .map(|n| n.to_string_lossy().into_owned())
            .map_err(|e| HostError::Other(format!("naming the veth peer ifindex {i}: {e}")))
    }
}

/// The other end of veth `iface` (in the calling thread's namespace); None
/// when `iface` is not a veth.
pub fn peer_end(iface: &str) -> Result<Option<PeerEnd>> {
    let ifindex = peregrine_bpf::link::ifindex(iface).map_err(|e| match e {
        peregrine_bpf::BpfError::UnknownInterface(_) => {
            HostError::Other(format!("no interface {iface:?}"))
        }
        e => HostError::Other(e.to_string()),
    })?;
    let nl = Netlink::new()?;
    let link = nl.link_by_index_here(ifindex)?;
    let mut veth = false;
    let mut peer = None;
    let mut nsid = None;
    for a in &link.attributes {
        match a {
            LinkAttribute::LinkInfo(infos) => {
                veth = infos
                    .iter()
                    .any(|i| matches!(i, LinkInfo::Kind(InfoKind::Veth)))
            }
            LinkAttribute::Link(p) => peer = Some(*p),
            LinkAttribute::LinkNetNsId(id) => nsid = Some(*id),
            _ => {}
        }
    }
    let Some(peer) = peer.filter(|_| veth) else {
        return Ok(None);
    };
    let Some(nsid) = nsid else {
        return Ok(Some(PeerEnd {
            ifindex: peer,
            ns: None,
        }));
    };
    // The named namespaces first (where containers made with `ip netns`
    // and labs are): opening every process's namespace is the slow part.
    // (`find_all` runs only when no named namespace is the peer's.)
    let all = netns::find_named()
        .into_iter()
        .chain(std::iter::once(()).flat_map(|()| netns::find_all()));
    for f in all {
        if nl.nsid_here(&f.file).ok().flatten() == Some(nsid) {
            return Ok(Some(PeerEnd {
                ifindex: peer,
                ns: Some(f),
            }));
        }
    }
    Err(HostError::Other(format!(
        "the peer of veth {iface} (ifindex {peer}, netnsid {nsid}) is in a namespace this process cannot find"
    )))
}

/// The peer of veth `iface` (in the calling thread's namespace) and its
/// offloads; None when `iface` is not a veth.
pub fn peer_of(iface: &str) -> Result<Option<VethPeer>> {
    let Some(end) = peer_end(iface)? else {
        return Ok(None);
    };
    let name = end.name()?;
    let offloads = end.run_in(|| tx_offloads(&name))??;
    Ok(Some(VethPeer {
        name,
        ifindex: end.ifindex,
        ns: end.ns.map(|n| n.label),
        offloads,
    }))
}
