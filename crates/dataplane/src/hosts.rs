//! Where a declaration's hosts are: the data plane names hosts (the router's,
//! each container's) and needs their namespaces and veth peers. A lab
//! answers from its topology; a host set up by hand can answer too.
use peregrine_host::{netns, veth};

use crate::error::{DataplaneError, Result};

/// One end of a veth pair: a host and its interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIface {
    pub host: String,
    pub iface: String,
}

pub trait Hosts {
    /// The network namespace host `host` runs in.
    fn netns(&self, host: &str) -> Result<String>;
    /// The other end of `end`'s veth, if `end` is one end of a veth pair.
    fn veth_peer(&self, end: &HostIface) -> Option<HostIface>;
}

/// Hosts that are network namespaces named under /run/netns (`ip netns
/// add`, or a container runtime's `ip netns attach`), for declarations
/// without a lab. A veth's other end is found from the kernel (its peer
/// ifindex and link-netnsid), so it must be in a named namespace too.
pub struct NamedNamespaces;

impl Hosts for NamedNamespaces {
    fn netns(&self, host: &str) -> Result<String> {
        if netns::exists(host) {
            Ok(host.to_string())
        } else {
            Err(DataplaneError::Config(format!(
                "no network namespace {host:?} (/run/netns/{host}); without `lab`, hosts are named namespaces"
            )))
        }
    }

    fn veth_peer(&self, end: &HostIface) -> Option<HostIface> {
        let peer = netns::run_in(&end.host, || veth::peer_end(&end.iface))
            .ok()?
            .ok()??;
        let host = match &peer.ns {
            None => end.host.clone(),
            Some(f) if f.named => f.label.clone(),
            Some(_) => return None,
        };
        Some(HostIface {
            iface: peer.name().ok()?,
            host,
        })
    }
}
