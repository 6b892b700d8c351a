//! The node as the agent sees it: what `status` prints, `/readyz` and the
//! metrics read.
use serde::Serialize;

use crate::services::ServiceStatus;

/// A port's stages in the order frames meet them.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    pub iface: String,
    pub stages: Vec<String>,
}

/// The node as `status` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub pid: u32,
    /// The agent's network namespace (one-shot commands there refuse).
    pub netns_cookie: u64,
    pub config: String,
    pub ready: bool,
    pub reconciles: u64,
    pub repairs: u64,
    /// The last pass's.
    pub errors: Vec<String>,
    pub waiting: Vec<String>,
    /// The last changes made (most recent last, at most 50).
    pub changes: Vec<String>,
    pub router: Option<RouterStatus>,
    pub qos: Vec<QosStatus>,
    pub order: Vec<Order>,
    pub services: Vec<ServiceStatus>,
    /// Seconds the last reconcile took.
    pub last_reconcile_seconds: f64,
    /// And each of its phases (router, policers, services, peer delivery).
    pub last_reconcile_phases: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouterStatus {
    pub hook: String,
    pub declared: Vec<String>,
    /// (port, live)
    pub ports: Vec<(String, bool)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QosStatus {
    pub iface: String,
    pub hook: String,
    pub rules: usize,
    pub scheduler: bool,
    pub live: bool,
}
