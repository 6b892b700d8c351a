//! Where a data plane's pins live, and what each pin is called: one layout
//! for `router attach`, `chain apply` and every reader of their counters.
//! Pins keep links and maps alive after the attaching command exits.
use std::path::{Path, PathBuf};

use peregrine_bpf::nf::NfStats;
use peregrine_host::netns;

use crate::config::{DataplaneConfig, NfConfig};
use crate::error::{DataplaneError, Result};

/// Whose data plane: a lab host's, or the one of the namespace the command
/// runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinScope {
    LabHost { lab: String, host: String },
    Here,
}

impl PinScope {
    /// The deployment a declaration describes.
    pub fn of(cfg: &DataplaneConfig) -> PinScope {
        PinScope::LabHost {
            lab: cfg.lab.clone(),
            host: cfg.router.clone(),
        }
    }

    /// Below the pin root: `<lab>/dp-<host>`, or `_root/dp` outside labs.
    pub fn subdir(&self) -> String {
        match self {
            PinScope::LabHost { lab, host } => format!("{lab}/dp-{host}"),
            PinScope::Here => "_root/dp".into(),
        }
    }

    pub fn dir(&self) -> PathBuf {
        Path::new(peregrine_bpf::bpffs::PIN_ROOT).join(self.subdir())
    }

    /// Where the router runs, for messages.
    pub fn describe(&self) -> String {
        match self {
            PinScope::LabHost { lab, host } => format!("lab {lab} host {host}"),
            PinScope::Here => "this namespace".into(),
        }
    }
}

/// The router's link on `port`.
pub fn port_link(dir: &Path, port: &str) -> PathBuf {
    dir.join(format!("{PORT_LINK}{port}"))
}
const PORT_LINK: &str = "link-";

/// The link of network function `host`:`iface`.
pub fn nf_link(dir: &Path, host: &str, iface: &str) -> PathBuf {
    dir.join(format!("nf-{host}-{iface}"))
}

/// The counters of network function `host`:`iface`.
pub fn nf_stats(dir: &Path, host: &str, iface: &str) -> PathBuf {
    dir.join(format!("nfstats-{host}-{iface}"))
}

/// The pass-through link on a port's peer `ns`:`iface`.
pub fn peer_link(dir: &Path, ns: &str, iface: &str) -> PathBuf {
    dir.join(format!("peer-{ns}-{iface}"))
}

/// Ports of a pinned data plane: (port name, ifindex in the router's namespace).
pub fn pinned_ports(dir: &Path, router_ns: Option<&str>) -> Result<Vec<(String, u32)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir)
        .map_err(|_| DataplaneError::Other(format!("no data plane pinned at {}", dir.display())))?;
    for e in rd.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Some(port) = n.strip_prefix(PORT_LINK) {
            let idx = netns::run_in_opt(router_ns, || peregrine_bpf::link::ifindex(port))??;
            out.push((port.to_string(), idx));
        }
    }
    out.sort();
    Ok(out)
}

/// Counters of every network function `cfg` declares, as pinned by `chain
/// apply`: (nf, counters), in the file's order.
pub fn pinned_nf_stats(cfg: &DataplaneConfig) -> Result<Vec<(NfConfig, NfStats)>> {
    let dir = PinScope::of(cfg).dir();
    if !dir.exists() {
        return Err(DataplaneError::Other(format!(
            "nothing applied for lab {} router {} ({} does not exist)",
            cfg.lab,
            cfg.router,
            dir.display()
        )));
    }
    cfg.nfs
        .iter()
        .map(|n| {
            let p = nf_stats(&dir, &n.host, &n.iface);
            Ok((n.clone(), peregrine_bpf::nf::read_pinned_stats(&p)?))
        })
        .collect()
}
