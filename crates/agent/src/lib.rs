//! `peregrine agent`: one declared state per node, reconciled. The agent
//! owns what it attaches (router ports, policers) and the AF_XDP services
//! it starts (function invokers, QUIC servers, schedulers), calls the same
//! library lifecycles the one-shot commands call, adopts what an earlier
//! agent left after a restart, and never touches what it did not make.
//!
//! - `decl`: node.toml (sections in the existing formats), checked whole.
//! - `check`: the declaration checked whole (sections, then composition).
//! - `names`: interface and service names, checked one way.
//! - `cluster`: routes to the other nodes' pod CIDRs.
//! - `kube`: the other nodes from the API server's Node objects.
//! - `compose`: which stages share an interface, their order, what is refused.
//! - `reconcile`: the data plane brought to the declaration, drift repaired.
//! - `pods`: pod interfaces the CNI plugin hands over, recorded.
//! - `annotations`: a pod's `peregrine.io/` deny lists.
//! - `podreq`: the plugin's requests served.
//! - `peer`: router ports' peer delivery recomputed as XDP comes and goes.
//! - `services`: supervised children, restarted, adopted.
//! - `state`: what the agent owns, recorded for the next agent.
//! - `control`: the root-only socket of `apply`, `diff` and `status`.
//! - `diff`: what a new declaration changes.
//! - `status`: the node as `status`, `/readyz` and the metrics see it.
//! - `metrics`: the node's Prometheus endpoint, `/healthz`, `/readyz`.
//! - `agent`: the loop (start, file changes, SIGHUP, kernel events, requests).

pub mod agent;
pub mod annotations;
pub mod check;
pub mod cluster;
pub mod compose;
pub mod control;
pub mod decl;
pub mod diff;
pub mod kube;
pub mod metrics;
pub mod names;
pub mod peer;
pub mod podreq;
pub mod pods;
pub mod reconcile;
pub mod services;
pub mod state;
pub mod status;

pub use agent::{run, Options};
pub use decl::{NodeDecl, ServiceKind};
pub use status::Status;
