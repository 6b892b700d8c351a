//! Where a data plane's pins live, and what each pin is called: one layout
//! for `router attach`, `chain apply` and every reader of their counters.
//! Pins keep links and maps alive after the attaching command exits.
use std::path::{Path, PathBuf};

use peregrine_bpf::link::{pinned_link, PinnedLink};
use peregrine_bpf::nf::NfStats;
use peregrine_host::netns;

use crate::config::{DataplaneConfig, NfConfig};
use crate::error::{DataplaneError, Result};

/// Whose data plane: a lab host's, or the one of the network namespace the
/// command runs in (whichever way it got there: `ip netns exec`, nsenter,
/// a container runtime, a plain shell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinScope {
    LabHost {
        lab: String,
        host: String,
    },
    Here,
    /// The network namespace named so under /run/netns: its pins are those
    /// `Here` gives a command run in it (`router stats` there finds them).
    Named(String),
}

/// Below the pin root: routers outside labs, one directory per network
/// namespace, named by the namespace's cookie.
pub const NETNS_DIR: &str = "_netns";
/// Where every namespace's router was pinned before (one directory for all
/// namespaces); only removed now.
pub const LEGACY_DIR: &str = "_root";

impl PinScope {
    /// The deployment a declaration describes.
    pub fn of(cfg: &DataplaneConfig) -> PinScope {
        match &cfg.lab {
            Some(lab) => PinScope::LabHost {
                lab: lab.clone(),
                host: cfg.router.clone(),
            },
            None => PinScope::Named(cfg.router.clone()),
        }
    }

    /// Below the pin root: `<lab>/dp-<host>`, or outside labs
    /// `_netns/<cookie>` for the calling thread's network namespace.
    pub fn subdir(&self) -> Result<String> {
        Ok(match self {
            PinScope::LabHost { lab, host } => format!("{lab}/dp-{host}"),
            PinScope::Here => format!("{NETNS_DIR}/{}", netns::cookie()?),
            PinScope::Named(ns) => format!("{NETNS_DIR}/{}", netns::run_in(ns, netns::cookie)??),
        })
    }

    /// The directory, as this process reaches the host's bpffs.
    pub fn dir(&self) -> Result<PathBuf> {
        Ok(peregrine_bpf::bpffs::pin_root().join(self.subdir()?))
    }

    /// Where the router runs, for messages.
    pub fn describe(&self) -> String {
        match self {
            PinScope::LabHost { lab, host } => format!("lab {lab} host {host}"),
            PinScope::Here => "this network namespace".into(),
            PinScope::Named(ns) => format!("network namespace {ns}"),
        }
    }
}

/// One port of a pinned router: its interface (as named when attached) and
/// what its pinned link says now (None: the pin cannot be opened). A port
/// attached as a cls_bpf filter (`cls`) has its record read as a link:
/// the program, the record's id, the interface (0 once gone), at tc.
#[derive(Debug, Clone)]
pub struct PinnedPort {
    pub iface: String,
    pub link: Option<PinnedLink>,
    pub cls: bool,
}

/// What the cls_bpf record at `dir` says, as a pinned link would: its
/// interface only while the port is kept and its interface is there (a
/// record of an attach killed part-way reads as a dead link).
fn cls_as_link(dir: &Path) -> Option<PinnedLink> {
    let r = peregrine_bpf::cls::read(dir).ok()?;
    Some(PinnedLink {
        prog_id: r.prog_id,
        link_id: r.id,
        ifindex: if r.live() { r.ifindex } else { 0 },
        xdp: false,
    })
}

/// A router attachment found in the host's bpffs.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub dir: PathBuf,
    /// The namespace's cookie (routers outside labs).
    pub cookie: Option<u64>,
    /// `lab/host` for a lab's router.
    pub lab_host: Option<(String, String)>,
    pub ports: Vec<PinnedPort>,
}

impl Attachment {
    /// Nothing of it runs any more: no port's link is attached to a live
    /// interface (its namespace or interfaces are gone, or it was killed
    /// half-way before any port was pinned).
    pub fn stale(&self) -> bool {
        !self.ports.iter().any(|p| p.link.is_some_and(|l| l.live()))
    }
}

/// Reads the attachment pinned in `dir`.
pub fn attachment(dir: &Path) -> Attachment {
    let mut ports: Vec<PinnedPort> = peregrine_host::fs::list_dir(dir)
        .into_iter()
        .filter_map(|n| {
            if let Some(iface) = n.strip_prefix(PORT_LINK) {
                return Some(PinnedPort {
                    link: pinned_link(&dir.join(&n)).ok(),
                    iface: iface.to_string(),
                    cls: false,
                });
            }
            let iface = n.strip_prefix(PORT_CLS)?;
            Some(PinnedPort {
                link: cls_as_link(&dir.join(&n)),
                iface: iface.to_string(),
                cls: true,
            })
        })
        .collect();
    ports.sort_by(|a, b| a.iface.cmp(&b.iface));
    Attachment {
        dir: dir.to_path_buf(),
        cookie: None,
        lab_host: None,
        ports,
    }
}

/// Every router attachment in the host's bpffs: each namespace's outside
/// labs, then the labs' (`chain apply`, `router attach --lab`).
pub fn list_attachments() -> Vec<Attachment> {
    let root = peregrine_bpf::bpffs::pin_root();
    let mut out = Vec::new();
    let mut cookies: Vec<u64> = peregrine_host::fs::list_dir(&root.join(NETNS_DIR))
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    cookies.sort();
    for c in cookies {
        let mut a = attachment(&root.join(NETNS_DIR).join(c.to_string()));
        a.cookie = Some(c);
        out.push(a);
    }
    let mut labs = peregrine_host::fs::list_dir(&peregrine_bpf::bpffs::pin_root());
    labs.sort();
    for lab in labs.into_iter().filter(|l| !l.starts_with('_')) {
        let mut hosts = peregrine_host::fs::list_dir(&root.join(&lab));
        hosts.sort();
        for h in hosts {
            if let Some(host) = h.strip_prefix("dp-") {
                let mut a = attachment(&root.join(&lab).join(&h));
                a.lab_host = Some((lab.clone(), host.to_string()));
                out.push(a);
            }
        }
    }
    out
}

/// Detaches and unpins the router pinned in `dir`: each port's link is
/// detached at once (BPF_LINK_DETACH), each cls_bpf port's filter removed
/// in its namespace, then every pin goes, and the directories above it
/// that are left empty.
pub fn remove(dir: &Path) -> Result<()> {
    let mut records = Vec::new();
    for n in peregrine_host::fs::list_dir(dir) {
        let p = dir.join(&n);
        if n.starts_with(PORT_LINK) || n.starts_with("nf-") || n.starts_with("peer-") {
            peregrine_bpf::link::detach_pinned(&p)?;
        } else if n.starts_with(PORT_CLS) {
            records.push(p);
        }
    }
    crate::cls_port::detach_recorded(&records)?;
    Ok(peregrine_bpf::bpffs::remove_pin_dir(dir)?)
}

/// Removes every router attachment outside labs (live and stale) and what
/// older versions pinned under `_root`; the number of attachments removed.
pub fn remove_all_outside_labs() -> Result<usize> {
    remove_outside_labs(false)
}

/// Removes the router attachments outside labs that nothing runs any more
/// (`Attachment::stale`: a killed run's, a deleted namespace's) and what
/// older versions left; live ones are their users' and stay. How many.
pub fn remove_stale_outside_labs() -> Result<usize> {
    remove_outside_labs(true)
}

/// Removes the router attachments of network namespaces that no longer
/// exist: stale (nothing of them runs) and their namespace found nowhere
/// (`netns::cookies`: named, or held by a process). Nobody can own them
/// any more. A live router in a namespace this process cannot see is
/// kept. How many.
pub fn remove_of_gone_namespaces() -> Result<usize> {
    let live: Vec<u64> = netns::cookies().into_iter().map(|(_, c)| c).collect();
    let mut n = 0;
    for a in list_attachments() {
        if a.cookie.is_some_and(|c| !live.contains(&c)) && a.stale() {
            remove(&a.dir)?;
            n += 1;
        }
    }
    Ok(n)
}

fn remove_outside_labs(only_stale: bool) -> Result<usize> {
    let mut n = 0;
    for a in list_attachments()
        .into_iter()
        .filter(|a| a.cookie.is_some() && (!only_stale || a.stale()))
    {
        remove(&a.dir)?;
        n += 1;
    }
    let root = peregrine_bpf::bpffs::pin_root();
    let legacy = root.join(LEGACY_DIR);
    if legacy.exists() {
        for d in peregrine_host::fs::list_dir(&legacy) {
            remove(&legacy.join(d))?;
        }
        remove(&legacy)?;
    }
    let _ = std::fs::remove_dir(root.join(NETNS_DIR));
    let _ = std::fs::remove_dir(&root);
    Ok(n)
}

/// The router's link on `port`.
pub fn port_link(dir: &Path, port: &str) -> PathBuf {
    dir.join(format!("{PORT_LINK}{port}"))
}

/// The record of router port `port` attached as a cls_bpf filter.
pub fn port_cls(dir: &Path, port: &str) -> PathBuf {
    dir.join(format!("{PORT_CLS}{port}"))
}

/// The link of router port `port` pinned in `dir` when it runs (attached
/// to a live interface): that port's pin alone, whatever the number of
/// ports. A cls_bpf port's record reads as its link (`PinnedPort`).
pub fn live_port_link(dir: &Path, port: &str) -> Option<PinnedLink> {
    let cls = port_cls(dir, port);
    if cls.exists() {
        return cls_as_link(&cls).filter(|l| l.live());
    }
    pinned_link(&port_link(dir, port)).ok().filter(|l| l.live())
}
const PORT_LINK: &str = "link-";
const PORT_CLS: &str = "cls-";

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

/// Ports of a pinned data plane: (port name, ifindex), the ifindex as the
/// port's pinned link reports it (valid in the router's namespace, read
/// from anywhere). A port whose interface is gone is an error.
pub fn pinned_ports(dir: &Path) -> Result<Vec<(String, u32)>> {
    if !dir.exists() {
        return Err(DataplaneError::Other(format!(
            "no data plane pinned at {}",
            peregrine_bpf::bpffs::display(dir)
        )));
    }
    attachment(dir)
        .ports
        .into_iter()
        .map(|p| match p.link {
            Some(l) if l.live() => Ok((p.iface, l.ifindex)),
            _ => Err(DataplaneError::Other(format!(
                "the router's port {} is gone (its interface or namespace was removed); detach it",
                p.iface
            ))),
        })
        .collect()
}

/// Counters of every network function `cfg` declares, as pinned by `chain
/// apply`: (nf, counters), in the file's order.
pub fn pinned_nf_stats(cfg: &DataplaneConfig) -> Result<Vec<(NfConfig, NfStats)>> {
    let scope = PinScope::of(cfg);
    let dir = scope.dir()?;
    if !dir.exists() {
        return Err(DataplaneError::Other(format!(
            "nothing applied for the router of {} ({} does not exist)",
            scope.describe(),
            peregrine_bpf::bpffs::display(&dir)
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
