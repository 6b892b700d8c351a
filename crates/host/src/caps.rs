//! The capabilities attaching BPF programs needs, checked before libbpf
//! would fail with its log.
use peregrine_bpf::skel::uapi::types::peregrine_cap;

use crate::error::{HostError, Result};

/// Missing capabilities (by name) among CAP_BPF and CAP_NET_ADMIN.
fn missing() -> Vec<&'static str> {
    let eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0);
    [
        ("CAP_BPF", peregrine_cap::PG_CAP_BPF.0),
        ("CAP_NET_ADMIN", peregrine_cap::PG_CAP_NET_ADMIN.0),
    ]
    .into_iter()
    .filter(|(_, bit)| eff & (1u64 << bit) == 0)
    .map(|(n, _)| n)
    .collect()
}

/// One line instead of libbpf's log when this process may not use BPF:
/// "`what` needs root (CAP_BPF and CAP_NET_ADMIN); this process lacks ...".
pub fn require_bpf(what: &str) -> Result<()> {
    let missing = missing();
    if !missing.is_empty() {
        return Err(HostError::Other(format!(
            "{what} needs root (CAP_BPF and CAP_NET_ADMIN); this process lacks {}",
            missing.join(" and ")
        )));
    }
    Ok(())
}
