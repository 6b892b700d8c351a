//! rtnetlink, one connection per namespace. A connection's socket belongs to
//! the namespace it was opened in, so it is opened with the thread briefly
//! inside that namespace and then used from anywhere.
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
        let h = self.handle(ns)?;
        self.block_on(async {
            h.link()
                .get()
                .match_name(name.to_string())
                .execute()
                .try_next()
                .await
        })
        .map_err(nl_err(format!("reading {ns}:{name}")))?
        .ok_or_else(|| HostError::Netlink(format!("no interface {name} in namespace {ns}")))
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
