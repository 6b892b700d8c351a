//! Peer delivery kept true: a router port at tc delivers into its veth
//! peer's namespace with bpf_redirect_peer only while that peer runs no
//! XDP program (redirect_peer skips the peer's XDP hook, where a function
//! or QUIC service's dispatcher runs). The services switch it themselves
//! when they attach or detach; the agent recomputes it for every port
//! (`RunningRouter::refresh_peer_delivery`), which also catches a service
//! killed outright, whose exit could not say so.
use peregrine_dataplane::router::Site;
use peregrine_dataplane::RunningRouter;

/// Recomputes peer delivery on the ports of the router here; what changed.
pub fn refresh() -> Vec<String> {
    let Ok(dir) = Site::here().dir() else {
        return Vec::new();
    };
    if !dir.exists() {
        return Vec::new();
    }
    let changed = RunningRouter::open(&dir).and_then(|r| r.refresh_peer_delivery(None));
    match changed {
        Ok(ports) => ports
            .into_iter()
            .map(|p| format!("router: port {p}: peer delivery recomputed (an XDP program came onto its peer or left it)"))
            .collect(),
        Err(_) => Vec::new(),
    }
}
