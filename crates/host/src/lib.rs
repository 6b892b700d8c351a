//! The kernel objects a host has: network namespaces, netlink (links,
//! addresses, routes, neighbours, counters), device settings, NAPI
//! threads, signals, qdiscs and classes (tc over netlink),, CPU pinning and resource limits. No knowledge of labs or programs.

pub mod caps;
pub mod cpu;
pub mod error;
pub mod fs;
pub mod limits;
pub mod napi;
pub mod netdev;
pub mod netns;
pub mod nl;
pub mod signals;
pub mod snmp;
pub mod tc;
pub mod uapi;
pub mod veth;

pub use error::{ControlError, HostError, Result};
