//! Where a declaration's hosts are: the data plane names hosts (the router's,
//! each container's) and needs their namespaces and veth peers. A lab
//! answers from its topology; a host set up by hand can answer too.
use crate::error::Result;

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
