//! rtnetlink, one connection per namespace (`Netlink`), or one in the
//! calling thread's namespace (`NetlinkHere`: routes, neighbours,
//! addresses, link MAC and MTU; `watch_here`: their changes as they
//! happen). A connection's socket belongs to the namespace it was opened
//! in, so it is opened with the thread briefly inside that namespace and
//! then used from anywhere.
use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressFlags};
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, MacVlanMode};
use netlink_packet_route::neighbour::NeighbourState;
use rtnetlink::{
    Handle, LinkBridge, LinkMacVlan, LinkMessageBuilder, LinkUnspec, LinkVeth, LinkVxlan,
    RouteMessageBuilder,
};
use tokio::runtime::Runtime;

use crate::error::{HostError, Result};
use crate::netns;
use peregrine_wire::MacAddr;

/// Packet counters of an interface. On veth, `rx_dropped` counts frames
/// that found the receiving ring full (including XDP_REDIRECTed ones the
/// sender could not queue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
}

pub struct Netlink {
    rt: Runtime,
    handles: HashMap<String, Handle>,
}

/// How long [`NetlinkHere::request`] waits for the kernel's answers.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn nl_err(what: impl std::fmt::Display) -> impl FnOnce(rtnetlink::Error) -> HostError {
    let what = what.to_string();
    move |e| {
        let msg = match &e {
            rtnetlink::Error::NetlinkError(m) => match m.code {
                Some(c) => std::io::Error::from_raw_os_error(-c.get()).to_string(),
                None => e.to_string(),
            },
            other => other.to_string(),
        };
        HostError::Netlink(format!("{what}: {msg}"))
    }
}

impl Netlink {
    pub fn new() -> Result<Netlink> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| HostError::Other(format!("starting the netlink runtime: {e}")))?;
        Ok(Netlink {
            rt,
            handles: HashMap::new(),
        })
    }

    /// The connection for namespace `ns` (opened on first use).
    pub fn handle(&mut self, ns: &str) -> Result<Handle> {
        if let Some(h) = self.handles.get(ns) {
            return Ok(h.clone());
        }
        // The socket registers with the runtime's reactor as it is made.
        let _enter = self.rt.enter();
        let (conn, handle, _) = netns::run_in(ns, rtnetlink::new_connection)?
            .map_err(|e| HostError::Netlink(format!("opening netlink in {ns}: {e}")))?;
        // The connection task only runs inside block_on, which every call uses.
        self.rt.spawn(conn);
        self.handles.insert(ns.to_string(), handle.clone());
        Ok(handle)
    }

    /// A connection in the calling thread's namespace, not kept: the
    /// thread may be in another namespace at the next call.
    fn handle_here(&self) -> Result<Handle> {
        let _enter = self.rt.enter();
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| HostError::Netlink(format!("opening netlink here: {e}")))?;
        self.rt.spawn(conn);
        Ok(handle)
    }

    /// Link `index` of the calling thread's namespace.
    pub fn link_by_index_here(
        &self,
        index: u32,
    ) -> Result<netlink_packet_route::link::LinkMessage> {
        let h = self.handle_here()?;
        self.block_on(async { h.link().get().match_index(index).execute().try_next().await })
            .map_err(nl_err(format!("reading link {index}")))?
            .ok_or_else(|| HostError::Netlink(format!("no interface with index {index}")))
    }

    /// The id the calling thread's namespace gives the namespace `ns`
    /// (RTM_GETNSID by descriptor, so any namespace this process holds, not
    /// only a /run/netns one); None when it has given it none.
    pub fn nsid_here(&self, ns: &std::fs::File) -> Result<Option<i32>> {
        use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST};
        use netlink_packet_route::nsid::{NsidAttribute, NsidMessage};
        use netlink_packet_route::RouteNetlinkMessage;
        let mut h = self.handle_here()?;
        let mut msg = NsidMessage::default();
        msg.attributes
            .push(NsidAttribute::Fd(ns.as_raw_fd() as u32));
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetNsId(msg));
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK;
        let mut answers = h
            .request(req)
            .map_err(|e| HostError::Netlink(format!("reading a namespace id: {e}")))?;
        self.block_on(async {
            use futures::StreamExt;
            while let Some(m) = answers.next().await {
                match m.payload {
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNsId(m)) => {
                        return Ok(m.attributes.iter().find_map(|a| match a {
                            NsidAttribute::Id(id) if *id >= 0 => Some(*id),
                            _ => None,
                        }));
                    }
                    NetlinkPayload::Error(e) if e.code.is_some() => {
                        return Err(nl_err("reading a namespace id")(
                            rtnetlink::Error::NetlinkError(e),
                        ));
                    }
                    _ => {}
                }
            }
            Ok(None)
        })
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    pub fn link_index(&mut self, ns: &str, name: &str) -> Result<u32> {
        Ok(self.link_by_name(ns, name)?.header.index)
    }

    /// A veth pair with one end in each namespace and `queues` RX/TX queues.
    pub fn add_veth(
        &mut self,
        ns_a: &str,
        a: &str,
        ns_b: &str,
        b: &str,
        queues: u32,
        mtu: u32,
    ) -> Result<()> {
        let h = self.handle(ns_a)?;
        let fd_b = netns::open(ns_b)?;
        let peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name(b.to_string())
            .setns_by_fd(fd_b.as_raw_fd())
            .mtu(mtu)
            .append_extra_attribute(LinkAttribute::NumTxQueues(queues))
            .append_extra_attribute(LinkAttribute::NumRxQueues(queues))
            .build();
        let msg = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(a.to_string())
            .mtu(mtu)
            .append_extra_attribute(LinkAttribute::NumTxQueues(queues))
            .append_extra_attribute(LinkAttribute::NumRxQueues(queues))
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        let r = self.block_on(async { h.link().add(msg).execute().await });
        drop(fd_b);
        r.map_err(nl_err(format!("creating veth {ns_a}:{a} <-> {ns_b}:{b}")))
    }

    pub fn add_bridge(&mut self, ns: &str, name: &str) -> Result<()> {
        let h = self.handle(ns)?;
        let msg = LinkBridge::new(name).build();
        self.block_on(async { h.link().add(msg).execute().await })
            .map_err(nl_err(format!("creating bridge {ns}:{name}")))
    }

    pub fn set_master(&mut self, ns: &str, port: &str, bridge: &str) -> Result<()> {
        let p = self.link_index(ns, port)?;
        let b = self.link_index(ns, bridge)?;
        let h = self.handle(ns)?;
        let msg = LinkUnspec::new_with_index(p).controller(b).build();
        self.block_on(async { h.link().set(msg).execute().await })
            .map_err(nl_err(format!("adding {ns}:{port} to bridge {bridge}")))
    }

    /// A macvlan in bridge mode on `parent` (in `parent_ns`), placed in `ns`.
    pub fn add_macvlan(
        &mut self,
        parent_ns: &str,
        parent: &str,
        ns: &str,
        name: &str,
    ) -> Result<()> {
        let p = self.link_index(parent_ns, parent)?;
        let h = self.handle(parent_ns)?;
        let fd = netns::open(ns)?;
        let msg = LinkMacVlan::new(name, p, MacVlanMode::Bridge)
            .setns_by_fd(fd.as_raw_fd())
            .build();
        let r = self.block_on(async { h.link().add(msg).execute().await });
        drop(fd);
        r.map_err(nl_err(format!(
            "creating macvlan {ns}:{name} on {parent_ns}:{parent}"
        )))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add_vxlan(
        &mut self,
        ns: &str,
        name: &str,
        vni: u32,
        dev: &str,
        local: IpAddr,
        remote: IpAddr,
        port: u16,
    ) -> Result<()> {
        let d = self.link_index(ns, dev)?;
        let h = self.handle(ns)?;
        let mut b = LinkVxlan::new(name, vni).dev(d).port(port).learning(true);
        b = match (local, remote) {
            (IpAddr::V4(l), IpAddr::V4(r)) => b.local(l).remote(r),
            (IpAddr::V6(l), IpAddr::V6(r)) => b.local6(l).remote6(r),
            _ => {
                return Err(HostError::Config(format!(
                    "vxlan {ns}:{name}: local and remote address families differ"
                )))
            }
        };
        let msg = b.build();
        self.block_on(async { h.link().add(msg).execute().await })
            .map_err(nl_err(format!("creating vxlan {ns}:{name}")))
    }

    pub fn set_up(&mut self, ns: &str, name: &str) -> Result<()> {
        let i = self.link_index(ns, name)?;
        let h = self.handle(ns)?;
        let msg = LinkUnspec::new_with_index(i).up().build();
        self.block_on(async { h.link().set(msg).execute().await })
            .map_err(nl_err(format!("setting {ns}:{name} up")))
    }

    /// Deletes link `name` of `ns` (a veth takes its peer with it).
    pub fn del_link(&mut self, ns: &str, name: &str) -> Result<()> {
        let i = self.link_index(ns, name)?;
        let h = self.handle(ns)?;
        self.block_on(async { h.link().del(i).execute().await })
            .map_err(nl_err(format!("deleting {ns}:{name}")))
    }

    pub fn set_mac(&mut self, ns: &str, name: &str, mac: MacAddr) -> Result<()> {
        let i = self.link_index(ns, name)?;
        let h = self.handle(ns)?;
        let msg = LinkUnspec::new_with_index(i)
            .address(mac.0.to_vec())
            .build();
        self.block_on(async { h.link().set(msg).execute().await })
            .map_err(nl_err(format!("setting MAC {mac} on {ns}:{name}")))
    }

    /// The link message (attributes) of interface `name` in `ns`.
    fn link_by_name(
        &mut self,
        ns: &str,
        name: &str,
    ) -> Result<netlink_packet_route::link::LinkMessage> {
        self.find_link(ns, name)?
            .ok_or_else(|| HostError::Netlink(format!("no interface {name} in namespace {ns}")))
    }

    /// Interface `name` of `ns`, None when there is none.
    fn find_link(
        &mut self,
        ns: &str,
        name: &str,
    ) -> Result<Option<netlink_packet_route::link::LinkMessage>> {
        let h = self.handle(ns)?;
        let r = self.block_on(async {
            h.link()
                .get()
                .match_name(name.to_string())
                .execute()
                .try_next()
                .await
        });
        match r {
            Ok(m) => Ok(m),
            Err(rtnetlink::Error::NetlinkError(m))
                if m.code.is_some_and(|c| -c.get() == libc::ENODEV) =>
            {
                Ok(None)
            }
            Err(e) => Err(nl_err(format!("reading {ns}:{name}"))(e)),
        }
    }

    /// The interface index that interface `name` of `ns` names as its
    /// link (a veth's: its peer's index, in the peer's namespace); None
    /// when it names none.
    pub fn link_of(&mut self, ns: &str, name: &str) -> Result<Option<u32>> {
        let m = self.link_by_name(ns, name)?;
        Ok(m.attributes.iter().find_map(|a| match a {
            LinkAttribute::Link(i) => Some(*i),
            _ => None,
        }))
    }

    /// Interface `name` of `ns` exists.
    pub fn has_link(&mut self, ns: &str, name: &str) -> Result<bool> {
        Ok(self.find_link(ns, name)?.is_some())
    }

    /// A route to `dst/plen` directly on `dev` (scope link: a next hop of
    /// later routes may be behind it), as `ip route add DST dev DEV` adds.
    pub fn add_onlink_route(&mut self, ns: &str, dst: IpAddr, plen: u8, dev: &str) -> Result<()> {
        let what = format!("adding route {dst}/{plen} dev {dev} in {ns}");
        let oif = self.link_index(ns, dev)?;
        let h = self.handle(ns)?;
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, plen)
            .map_err(|e| HostError::Config(format!("{what}: {e}")))?
            .output_interface(oif)
            .scope(netlink_packet_route::route::RouteScope::Link)
            .build();
        self.block_on(async { h.route().add(msg).execute().await })
            .map_err(nl_err(what))
    }

    pub fn mac_of(&mut self, ns: &str, name: &str) -> Result<MacAddr> {
        let m = self.link_by_name(ns, name)?;
        for a in m.attributes {
            if let LinkAttribute::Address(b) = a {
                if b.len() == 6 {
                    let mut mac = [0u8; 6];
                    mac.copy_from_slice(&b);
                    return Ok(MacAddr(mac));
                }
            }
        }
        Err(HostError::Netlink(format!(
            "{ns}:{name} has no MAC address"
        )))
    }

    /// Adds an address; IPv6 addresses skip duplicate address detection so they
    /// are usable at once.
    pub fn add_addr(&mut self, ns: &str, dev: &str, ip: IpAddr, plen: u8) -> Result<()> {
        let i = self.link_index(ns, dev)?;
        let h = self.handle(ns)?;
        let mut req = h.address().add(i, ip, plen);
        if ip.is_ipv6() {
            req.message_mut()
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        self.block_on(async { req.execute().await })
            .map_err(nl_err(format!("adding address {ip}/{plen} to {ns}:{dev}")))
    }

    pub fn add_route(
        &mut self,
        ns: &str,
        dst: IpAddr,
        plen: u8,
        via: Option<IpAddr>,
        dev: Option<&str>,
    ) -> Result<()> {
        let what = format!("adding route {dst}/{plen} in {ns}");
        let oif = match dev {
            Some(d) => Some(self.link_index(ns, d)?),
            None => None,
        };
        let h = self.handle(ns)?;
        let mut b = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, plen)
            .map_err(|e| HostError::Config(format!("{what}: {e}")))?;
        if let Some(g) = via {
            b = b
                .gateway(g)
                .map_err(|e| HostError::Config(format!("{what}: {e}")))?;
        }
        if let Some(o) = oif {
            b = b.output_interface(o);
        }
        let msg = b.build();
        self.block_on(async { h.route().add(msg).execute().await })
            .map_err(nl_err(what))
    }

    pub fn add_neigh(&mut self, ns: &str, dev: &str, ip: IpAddr, mac: MacAddr) -> Result<()> {
        let i = self.link_index(ns, dev)?;
        let h = self.handle(ns)?;
        let req = h
            .neighbours()
            .add(i, ip)
            .link_layer_address(&mac.0)
            .state(NeighbourState::Permanent)
            .replace();
        self.block_on(async { req.execute().await })
            .map_err(nl_err(format!(
                "adding neighbour {ip} -> {mac} on {ns}:{dev}"
            )))
    }

    /// An interface's packet counters (IFLA_STATS64).
    pub fn link_counters(&mut self, ns: &str, name: &str) -> Result<LinkCounters> {
        let m = self.link_by_name(ns, name)?;
        m.attributes
            .into_iter()
            .find_map(|a| match a {
                LinkAttribute::Stats64(s) => Some(LinkCounters {
                    rx_packets: s.rx_packets,
                    tx_packets: s.tx_packets,
                    rx_dropped: s.rx_dropped,
                    tx_dropped: s.tx_dropped,
                }),
                _ => None,
            })
            .ok_or_else(|| HostError::Netlink(format!("{ns}:{name} reports no counters")))
    }

    /// Interface names in a namespace.
    pub fn links(&mut self, ns: &str) -> Result<Vec<String>> {
        let h = self.handle(ns)?;
        let msgs: Vec<_> = self
            .block_on(async { h.link().get().execute().try_collect::<Vec<_>>().await })
            .map_err(nl_err(format!("listing links in {ns}")))?;
        Ok(msgs
            .into_iter()
            .filter_map(|m| {
                m.attributes.into_iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n),
                    _ => None,
                })
            })
            .collect())
    }
}

/// What the kernel's neighbour table says of an entry, as a sender sees
/// it (the NUD states folded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeighbourUse {
    /// REACHABLE, PERMANENT, NOARP, DELAY, PROBE: the MAC may be used.
    Valid,
    /// STALE: the MAC may be used, and the kernel should confirm it.
    Stale,
    /// INCOMPLETE: being resolved, no MAC yet.
    Resolving,
    /// FAILED, NONE, or the entry was deleted: resolve again.
    Failed,
}

impl NeighbourUse {
    fn of(state: NeighbourState) -> NeighbourUse {
        match state {
            NeighbourState::Reachable
            | NeighbourState::Permanent
            | NeighbourState::Noarp
            | NeighbourState::Delay
            | NeighbourState::Probe => NeighbourUse::Valid,
            NeighbourState::Stale => NeighbourUse::Stale,
            NeighbourState::Incomplete => NeighbourUse::Resolving,
            _ => NeighbourUse::Failed,
        }
    }
}

/// One entry of the kernel's neighbour table (ARP or ND).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    pub ifindex: u32,
    pub ip: IpAddr,
    pub mac: Option<MacAddr>,
    pub state: NeighbourUse,
}

impl Neighbour {
    fn from_message(m: &netlink_packet_route::neighbour::NeighbourMessage) -> Option<Neighbour> {
        use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute};
        let mut ip = None;
        let mut mac = None;
        for a in &m.attributes {
            match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                    ip = Some(IpAddr::V4(*v4))
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                    ip = Some(IpAddr::V6(*v6))
                }
                NeighbourAttribute::LinkLayerAddress(b) if b.len() == 6 => {
                    let mut m = [0u8; 6];
                    m.copy_from_slice(b);
                    mac = Some(MacAddr(m));
                }
                _ => {}
            }
        }
        Some(Neighbour {
            ifindex: m.header.ifindex,
            ip: ip?,
            mac,
            state: NeighbourUse::of(m.header.state),
        })
    }
}

/// The kernel's answer to "how is `dst` reached" (`ip route get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteTo {
    /// The output interface.
    pub oif: u32,
    /// The next hop when it is not `dst` itself (on-link otherwise).
    pub gateway: Option<IpAddr>,
    /// The source address the kernel would pick.
    pub prefsrc: Option<IpAddr>,
}

/// An interface's MAC address and MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkInfo {
    pub mac: MacAddr,
    pub mtu: u32,
}

/// A change the kernel announced (see `watch_here`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlEvent {
    /// A neighbour entry was added or changed.
    Neighbour(Neighbour),
    /// A neighbour entry was deleted.
    NeighbourGone { ifindex: u32, ip: IpAddr },
    /// A route was added or removed (either family).
    RoutesChanged,
    /// A link changed (MTU, MAC, state).
    LinkChanged { ifindex: u32 },
}

fn route_ip(a: &netlink_packet_route::route::RouteAddress) -> Option<IpAddr> {
    use netlink_packet_route::route::RouteAddress;
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

/// A netlink connection in the network namespace of the thread that
/// opened it, usable from any thread after: for a process that works in
/// one namespace (the UDP/IP stack asks it for routes, neighbours, its
/// interface's addresses, MAC and MTU).
pub struct NetlinkHere {
    nl: Netlink,
    handle: Handle,
}

impl NetlinkHere {
    pub fn open() -> Result<NetlinkHere> {
        let nl = Netlink::new()?;
        let handle = nl.handle_here()?;
        Ok(NetlinkHere { nl, handle })
    }

    /// Sends `msg` with `flags` (NLM_F_REQUEST is added) and collects the
    /// kernel's answers; an error answer is an error naming `what` and the
    /// errno's meaning. For the messages rtnetlink has no request for (tc).
    pub(crate) fn request(
        &self,
        msg: netlink_packet_route::RouteNetlinkMessage,
        flags: u16,
        what: &str,
    ) -> Result<Vec<netlink_packet_route::RouteNetlinkMessage>> {
        self.request_or_errno(msg, flags, what)?.map_err(|errno| {
            HostError::Netlink(format!(
                "{what}: {}",
                std::io::Error::from_raw_os_error(errno)
            ))
        })
    }

    /// `request`, the kernel's refusal given as its errno (`Ok(Err(e))`)
    /// for callers to whom one refusal is an answer (ENOENT: there is
    /// none); failures to talk to the kernel are errors.
    pub(crate) fn request_or_errno(
        &self,
        msg: netlink_packet_route::RouteNetlinkMessage,
        flags: u16,
        what: &str,
    ) -> Result<std::result::Result<Vec<netlink_packet_route::RouteNetlinkMessage>, i32>> {
        use futures::StreamExt;
        use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
        let mut h = self.handle.clone();
        let mut req = NetlinkMessage::from(msg);
        req.header.flags = NLM_F_REQUEST | flags;
        let answer = async move {
            let mut answers = h.request(req).map_err(nl_err(what))?;
            let mut out = Vec::new();
            while let Some(m) = answers.next().await {
                match m.payload {
                    NetlinkPayload::Error(e) => {
                        if let Some(c) = e.code {
                            return Ok(Err(-c.get()));
                        }
                    }
                    NetlinkPayload::InnerMessage(i) => out.push(i),
                    _ => {}
                }
            }
            Ok(Ok(out))
        };
        // A request the kernel answers with nothing (no ACK asked for, and
        // no message to send) would wait forever: say so instead.
        self.nl
            .block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, answer).await })
            .unwrap_or_else(|_| {
                Err(HostError::Netlink(format!(
                    "{what}: no answer from the kernel in {} s",
                    REQUEST_TIMEOUT.as_secs()
                )))
            })
    }

    /// The main table's routes that `protocol` installed (its number in
    /// `ip route`'s `proto`), both families: (destination, prefix length,
    /// gateway).
    pub fn routes_of(&self, protocol: u8) -> Result<Vec<(IpAddr, u8, Option<IpAddr>)>> {
        use netlink_packet_route::route::{RouteAttribute, RouteProtocol};
        let mut out = Vec::new();
        for v6 in [false, true] {
            let msg = if v6 {
                RouteMessageBuilder::<std::net::Ipv6Addr>::new().build()
            } else {
                RouteMessageBuilder::<std::net::Ipv4Addr>::new().build()
            };
            let h = self.handle.clone();
            let msgs = self
                .nl
                .block_on(async { h.route().get(msg).execute().try_collect::<Vec<_>>().await })
                .map_err(nl_err("listing routes"))?;
            for m in msgs {
                if m.header.protocol != RouteProtocol::Other(protocol) || m.header.table != 254 {
                    continue;
                }
                let mut dst = None;
                let mut gw = None;
                for a in &m.attributes {
                    match a {
                        RouteAttribute::Destination(d) => dst = route_ip(d),
                        RouteAttribute::Gateway(g) => gw = route_ip(g),
                        _ => {}
                    }
                }
                if let Some(d) = dst {
                    out.push((d, m.header.destination_prefix_length, gw));
                }
            }
        }
        Ok(out)
    }

    /// Adds the route to `dst/plen` via `gw`, marked as `protocol`'s
    /// (replacing one to the same destination).
    pub fn replace_route(&self, dst: IpAddr, plen: u8, gw: IpAddr, protocol: u8) -> Result<()> {
        let what = format!("adding route {dst}/{plen} via {gw}");
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, plen)
            .map_err(|e| HostError::Config(format!("{what}: {e}")))?
            .gateway(gw)
            .map_err(|e| HostError::Config(format!("{what}: {e}")))?
            .protocol(netlink_packet_route::route::RouteProtocol::Other(protocol))
            .build();
        let h = self.handle.clone();
        self.nl
            .block_on(async { h.route().add(msg).replace().execute().await })
            .map_err(nl_err(what))
    }

    /// Deletes the route to `dst/plen` that `protocol` installed.
    pub fn del_route(&self, dst: IpAddr, plen: u8, protocol: u8) -> Result<()> {
        let what = format!("removing route {dst}/{plen}");
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, plen)
            .map_err(|e| HostError::Config(format!("{what}: {e}")))?
            .protocol(netlink_packet_route::route::RouteProtocol::Other(protocol))
            .build();
        let h = self.handle.clone();
        self.nl
            .block_on(async { h.route().del(msg).execute().await })
            .map_err(nl_err(what))
    }

    /// The route the kernel would take to `dst`.
    pub fn route_to(&self, dst: IpAddr) -> Result<RouteTo> {
        use netlink_packet_route::route::RouteAttribute;
        let what = format!("looking up the route to {dst}");
        let plen = if dst.is_ipv4() { 32 } else { 128 };
        let msg = RouteMessageBuilder::<IpAddr>::new()
            .destination_prefix(dst, plen)
            .map_err(|e| HostError::Config(format!("{what}: {e}")))?
            .build();
        let h = self.handle.clone();
        let m = self
            .nl
            .block_on(async { h.route().get(msg).execute().try_next().await })
            .map_err(nl_err(&what))?
            .ok_or_else(|| HostError::Netlink(format!("{what}: no answer")))?;
        let mut r = RouteTo {
            oif: 0,
            gateway: None,
            prefsrc: None,
        };
        for a in &m.attributes {
            match a {
                RouteAttribute::Oif(i) => r.oif = *i,
                RouteAttribute::Gateway(g) => r.gateway = route_ip(g),
                RouteAttribute::PrefSource(s) => r.prefsrc = route_ip(s),
                _ => {}
            }
        }
        Ok(r)
    }

    /// The index of every link of this namespace (one dump).
    pub fn link_indexes(&self) -> Result<Vec<u32>> {
        let h = self.handle.clone();
        let msgs: Vec<_> = self
            .nl
            .block_on(async { h.link().get().execute().try_collect::<Vec<_>>().await })
            .map_err(nl_err("listing the links"))?;
        Ok(msgs.iter().map(|m| m.header.index).collect())
    }

    /// The neighbour table's entries on interface `ifindex`.
    pub fn neighbours(&self, ifindex: u32) -> Result<Vec<Neighbour>> {
        let h = self.handle.clone();
        let msgs: Vec<_> = self
            .nl
            .block_on(async { h.neighbours().get().execute().try_collect::<Vec<_>>().await })
            .map_err(nl_err("reading the neighbour table"))?;
        Ok(msgs
            .iter()
            .filter_map(Neighbour::from_message)
            .filter(|n| n.ifindex == ifindex)
            .collect())
    }

    /// Asks the kernel to resolve `ip` on `ifindex` by its own means (ARP
    /// or ND, as if it had a packet for it: RTM_NEWNEIGH with NTF_USE); the
    /// result comes as a neighbour event. A STALE entry is re-confirmed.
    pub fn resolve_neighbour(&self, ifindex: u32, ip: IpAddr) -> Result<()> {
        use netlink_packet_route::neighbour::NeighbourFlags;
        let mut req = self
            .handle
            .neighbours()
            .add(ifindex, ip)
            .state(NeighbourState::None)
            .flags(NeighbourFlags::Use)
            .replace();
        // No link-layer address: the kernel finds it.
        req.message_mut().attributes.retain(|a| {
            !matches!(
                a,
                netlink_packet_route::neighbour::NeighbourAttribute::LinkLayerAddress(_)
            )
        });
        self.nl
            .block_on(async { req.execute().await })
            .map_err(nl_err(format!("asking the kernel to resolve {ip}")))
    }

    /// The addresses assigned to interface `ifindex`.
    pub fn addresses(&self, ifindex: u32) -> Result<Vec<IpAddr>> {
        let h = self.handle.clone();
        let msgs: Vec<_> = self
            .nl
            .block_on(async {
                h.address()
                    .get()
                    .set_link_index_filter(ifindex)
                    .execute()
                    .try_collect::<Vec<_>>()
                    .await
            })
            .map_err(nl_err(format!("reading the addresses of link {ifindex}")))?;
        Ok(msgs
            .iter()
            .filter(|m| m.header.index == ifindex)
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })
            })
            .collect())
    }

    /// Interface `ifindex`'s MAC address and MTU.
    pub fn link_info(&self, ifindex: u32) -> Result<LinkInfo> {
        let h = self.handle.clone();
        let m = self
            .nl
            .block_on(async {
                h.link()
                    .get()
                    .match_index(ifindex)
                    .execute()
                    .try_next()
                    .await
            })
            .map_err(nl_err(format!("reading link {ifindex}")))?
            .ok_or_else(|| HostError::Netlink(format!("no interface with index {ifindex}")))?;
        let mut mac = None;
        let mut mtu = None;
        for a in &m.attributes {
            match a {
                LinkAttribute::Address(b) if b.len() == 6 => {
                    let mut m = [0u8; 6];
                    m.copy_from_slice(b);
                    mac = Some(MacAddr(m));
                }
                LinkAttribute::Mtu(v) => mtu = Some(*v),
                _ => {}
            }
        }
        match (mac, mtu) {
            (Some(mac), Some(mtu)) => Ok(LinkInfo { mac, mtu }),
            _ => Err(HostError::Netlink(format!(
                "link {ifindex} has no Ethernet address or MTU"
            ))),
        }
    }
}

/// A thread following the kernel's neighbour, route and link changes in
/// the namespace of the thread that started it; stops when dropped.
pub struct NlWatch {
    stop: Option<futures::channel::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Calls `on_event` for every neighbour, route and link change of the
/// calling thread's namespace, from a thread of its own, until the watch
/// is dropped. Subscribed before it returns: no change after this call
/// is missed (read the current state after subscribing).
pub fn watch_here(mut on_event: impl FnMut(NlEvent) + Send + 'static) -> Result<NlWatch> {
    use futures::StreamExt;
    use netlink_packet_core::NetlinkPayload;
    use netlink_packet_route::RouteNetlinkMessage as M;
    use rtnetlink::MulticastGroup as G;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| HostError::Other(format!("starting the netlink watch runtime: {e}")))?;
    let (conn, _handle, mut messages) = {
        let _enter = rt.enter();
        rtnetlink::new_multicast_connection(&[G::Neigh, G::Ipv4Route, G::Ipv6Route, G::Link])
            .map_err(|e| HostError::Netlink(format!("subscribing to netlink changes: {e}")))?
    };
    let (stop, mut stopped) = futures::channel::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("nl-watch".into())
        .spawn(move || {
            rt.spawn(conn);
            rt.block_on(async move {
                loop {
                    let next = futures::future::select(messages.next(), &mut stopped).await;
                    let msg = match next {
                        futures::future::Either::Left((Some((m, _)), _)) => m,
                        _ => break,
                    };
                    let NetlinkPayload::InnerMessage(m) = msg.payload else {
                        continue;
                    };
                    let ev = match m {
                        M::NewNeighbour(n) => Neighbour::from_message(&n).map(NlEvent::Neighbour),
                        M::DelNeighbour(n) => {
                            Neighbour::from_message(&n).map(|n| NlEvent::NeighbourGone {
                                ifindex: n.ifindex,
                                ip: n.ip,
                            })
                        }
                        M::NewRoute(_) | M::DelRoute(_) => Some(NlEvent::RoutesChanged),
                        M::NewLink(l) | M::DelLink(l) => Some(NlEvent::LinkChanged {
                            ifindex: l.header.index,
                        }),
                        _ => None,
                    };
                    if let Some(ev) = ev {
                        on_event(ev);
                    }
                }
            });
        })
        .map_err(|e| HostError::Other(format!("starting the netlink watch thread: {e}")))?;
    Ok(NlWatch {
        stop: Some(stop),
        thread: Some(thread),
    })
}

impl Drop for NlWatch {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
