//! The XDP data plane: the FIB router on a host's ports, steering into
//! containers (network namespaces over veth), service chains of network
//! functions, their attachments and the pins that keep them after the
//! attaching command exits.
//!
//! - `config`: a declaration (TOML), parsed once into typed values.
//! - `hosts`: where the declaration's hosts are (a lab, or a host by hand).
//! - `cls_port`: a router port at tc ingress as a cls_bpf filter (no
//!   link: a record pinned beside it), made in one netlink request.
//! - `deploy`: attaching it all; `Dataplane` owns the programs and links.
//! - `hook`: XDP or tc on the router's ports, picked from the veth peers' offloads.
//! - `peer`: pass-throughs that let a veth peer receive redirected frames,
//!   and the tc router's delivery to a peer refreshed as XDP comes and goes.
//! - `pins`: the one pin layout every command reads and writes.
//! - `running`: ports added to and removed from a router left running.
//! - `router`: the router's lifecycle (attach, join, leave, detach, list,
//!   counters, chain apply/remove), each call reporting what it changed.
//! - `report`: counters and lists as tables, JSON and watch counters.

pub mod cls_port;
pub mod config;
pub mod deploy;
pub mod error;
pub mod hook;
pub mod hosts;
pub mod peer;
pub mod pins;
pub mod report;
pub mod router;
pub mod running;

pub use config::{ChainConfig, ChainMatch, DataplaneConfig, NfConfig, NfKind};
pub use deploy::{Dataplane, RunningNf};
pub use error::{DataplaneError, Result};
pub use hook::{HookChoice, Pick, TcAttach};
pub use hosts::{HostIface, Hosts, NamedNamespaces};
pub use peer::{ensure_xdp_receiver, refresh_peer_of, PassThrough, PeerDelivery, RouterAwareLink};
pub use peregrine_bpf::Hook;
pub use pins::PinScope;
pub use report::{ChainStats, RouterStats};
pub use router::{AttachConfig, Attached, Detached, Plan, Site};
pub use running::RunningRouter;
