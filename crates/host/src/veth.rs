//! A veth's other end, wherever it is: its interface index and, when it is
//! in another network namespace, that namespace, found by asking the
//! kernel which namespace carries the veth's link-netnsid (RTM_GETNSID on
//! each namespace this process can find). Its offloads decide whether an
//! XDP program on this end may redirect what it sends.
use std::fs::File;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use crate::error::{HostError, Result};
use crate::netdev::{tx_offloads, TxOffloads};
use crate::netns;

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
    let ifindex = nix::net::if_::if_nametoindex(iface)
        .map_err(|_| HostError::Other(format!("no interface {iface:?}")))?;
    let mut msg = LinkMessage::default();
    msg.header.index = ifindex;
    let reply = request(
        RouteNetlinkMessage::GetLink(msg),
        &format!("reading link {iface}"),
    )?;
    let RouteNetlinkMessage::NewLink(link) = reply else {
        return Err(HostError::Netlink(format!(
            "reading link {iface}: unexpected reply"
        )));
    };
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
    for f in netns::find_all() {
        if nsid_of(&f.file).ok().flatten() == Some(nsid) {
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

/// The id the calling thread's namespace gives namespace `ns`, if any.
fn nsid_of(ns: &File) -> Result<Option<i32>> {
    let mut msg = NsidMessage::default();
    msg.attributes
        .push(NsidAttribute::Fd(ns.as_raw_fd() as u32));
    let reply = request(RouteNetlinkMessage::GetNsId(msg), "reading a namespace id")?;
    let RouteNetlinkMessage::NewNsId(m) = reply else {
        return Ok(None);
    };
    Ok(m.attributes.iter().find_map(|a| match a {
        NsidAttribute::Id(id) if *id >= 0 => Some(*id),
        _ => None,
    }))
}

/// One rtnetlink request, answered by one message, on a socket of the
/// calling thread's namespace.
fn request(msg: RouteNetlinkMessage, what: &str) -> Result<RouteNetlinkMessage> {
    let err = |e: std::io::Error| HostError::Netlink(format!("{what}: {e}"));
    let mut sock = Socket::new(NETLINK_ROUTE).map_err(err)?;
    sock.bind_auto().map_err(err)?;
    sock.connect(&SocketAddr::new(0, 0)).map_err(err)?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    header.sequence_number = 1;
    let mut req = NetlinkMessage::new(header, NetlinkPayload::from(msg));
    req.finalize();
    let mut buf = vec![0u8; req.buffer_len()];
    req.serialize(&mut buf);
    sock.send(&buf, 0).map_err(err)?;
    let mut answer = None;
    // The reply, then the ACK; bounded in case the kernel says more.
    for _ in 0..8 {
        let mut rbuf = vec![0u8; 32 * 1024];
        let n = sock.recv(&mut &mut rbuf[..], 0).map_err(err)?;
        let mut off = 0;
        while off < n {
            let m = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rbuf[off..n])
                .map_err(|e| HostError::Netlink(format!("{what}: {e}")))?;
            let len = m.header.length as usize;
            match m.payload {
                NetlinkPayload::InnerMessage(r) => answer = Some(r),
                NetlinkPayload::Error(e) => match e.code {
                    Some(c) => {
                        return Err(err(std::io::Error::from_raw_os_error(-c.get())));
                    }
                    None => {
                        return answer.ok_or_else(|| {
                            HostError::Netlink(format!("{what}: no answer before the ACK"))
                        })
                    }
                },
                _ => {}
            }
            if len == 0 {
                break;
            }
            off += (len + 3) & !3;
        }
    }
    answer.ok_or_else(|| HostError::Netlink(format!("{what}: no answer")))
}
