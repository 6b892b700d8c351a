//! The router's lifecycle, one typed API for the CLI, the bench and an
//! agent: attach (a new router, or ports joining the one that runs), ports
//! leaving, detach (one namespace's, or every one), list (stale entries
//! included), counters, and `chain apply|remove` of a declaration. Each
//! call reports what it changed and what it found, and touches nothing it
//! does not report.
use std::path::PathBuf;

use peregrine_bpf::router::{read_pinned_stats, FibMode, PortStats};
use peregrine_bpf::{Hook, XdpMode};
use peregrine_host::netns;

use crate::config::DataplaneConfig;
use crate::deploy::Dataplane;
use crate::error::{DataplaneError, Result};
use crate::hook::{pick, HookChoice, TcAttach};
use crate::hosts::Hosts;
use crate::pins::{self, PinScope};
use crate::running::RunningRouter;

/// Where a router runs: a namespace (None: the caller's), whose pins, and
/// the hosts its ports' peers are found among (a lab's topology, and the
/// router's host there; None: from the kernel, wherever the peers are).
pub struct Site<'a> {
    pub ns: Option<String>,
    pub pins: PinScope,
    pub hosts: Option<(&'a dyn Hosts, String)>,
}

impl Site<'_> {
    /// The calling thread's namespace.
    pub fn here() -> Site<'static> {
        Site {
            ns: None,
            pins: PinScope::Here,
            hosts: None,
        }
    }

    /// The pin directory of this site's router (it may not exist).
    pub fn dir(&self) -> Result<PathBuf> {
        netns::run_in_opt(self.ns.as_deref(), || self.pins.dir())?
    }

    /// The pin directory of the router attached here; an error, ending with
    /// `hint`, when there is none.
    pub fn attached_dir(&self, hint: &str) -> Result<PathBuf> {
        let dir = self.dir()?;
        if !dir.exists() {
            return Err(DataplaneError::Other(format!(
                "no router attached in {} ({} does not exist){hint}",
                self.pins.describe(),
                peregrine_bpf::bpffs::display(&dir)
            )));
        }
        Ok(dir)
    }
}

/// What `attach` is asked: ports, hook, XDP mode, FIB lookup.
#[derive(Debug, Clone)]
pub struct AttachConfig {
    pub ports: Vec<String>,
    pub hook: HookChoice,
    /// The XDP mode asked for, if one was (tc takes none).
    pub mode: Option<XdpMode>,
    /// How a new router's ports at tc are attached (ports joining a
    /// running router are attached as its ports are).
    pub tc_attach: TcAttach,
    pub fib: FibMode,
    /// When ports join a running tc router, recheck how every running
    /// port delivers to its peer (an XDP program may have come or gone
    /// there unannounced): what a one-shot command wants. A caller that
    /// rechecks them itself (the agent, once a second) says false: the
    /// recheck costs a peer lookup per running port, so joins of N pods
    /// one by one would cost O(N^2).
    pub refresh_running: bool,
}

/// What `attach` found and changed.
#[derive(Debug, Clone)]
pub struct Attached {
    /// Found: a stale router (its interfaces gone, or a killed run's
    /// half-made pins), removed first; its pin directory.
    pub removed_stale: Option<PathBuf>,
    /// Found: the ports of the router that runs here, which `ports` joined
    /// (None: a new router was attached).
    pub joined: Option<Vec<String>>,
    /// The hook the ports run at.
    pub hook: Hook,
    /// At tc: the ports are cls_bpf filters (tcx links otherwise).
    pub cls: bool,
    /// Why `auto` picked `hook` for a new router.
    pub picked: Option<String>,
    /// XDP asked for on ports whose peers send what XDP cannot redirect.
    pub warning: Option<String>,
    pub fib: FibMode,
    /// The ports attached now.
    pub ports: Vec<String>,
    /// Of those, the ports the tc router delivers through with
    /// bpf_redirect_peer (their veth peer runs no XDP).
    pub peer_delivered: Vec<String>,
    /// Pass-throughs put on ports' veth peers (`namespace:iface`).
    pub pass_throughs: Vec<String>,
    /// Running ports whose delivery (bpf_redirect_peer or not) was set
    /// anew when these joined (an XDP program came or went on their peer).
    pub refreshed: Vec<String>,
    /// Where it is pinned.
    pub dir: PathBuf,
}

/// Attaches the router to `cfg.ports` at `site` and leaves it running
/// (pinned); where a router runs already, the ports join it at its hook.
/// `plan` then `Plan::attach`, for callers with nothing to say between.
pub fn attach(site: &Site, cfg: &AttachConfig) -> Result<Attached> {
    plan(site, cfg)?.attach()
}

/// What `attach` will do, decided before anything is attached: the
/// request checked, a stale router there removed, the hook picked (or the
/// running router's, which the ports join), the warning to show first.
pub struct Plan<'s, 'a> {
    site: &'s Site<'a>,
    cfg: AttachConfig,
    dir: PathBuf,
    running: Option<RunningRouter>,
    /// Found: a stale router (its interfaces gone, or a killed run's
    /// half-made pins), removed; its pin directory.
    pub removed_stale: Option<PathBuf>,
    /// The hook the ports will run at.
    pub hook: Hook,
    /// At tc: as cls_bpf filters (the running router's way, or
    /// `tc_attach` for a new one).
    pub cls: bool,
    /// Why `auto` picked `hook` for a new router.
    pub picked: Option<String>,
    /// XDP asked for on ports whose peers send what XDP cannot redirect.
    pub warning: Option<String>,
    /// Found: the ports of the router running here, which the new ones
    /// will join (None: a new router).
    pub joins: Option<Vec<String>>,
}

/// Plans attaching `cfg.ports` at `site`. Wrong requests (no such
/// interface, a port twice, --mode with tc, a hook other than the running
/// router's) are `Request` errors; a stale router there is removed.
pub fn plan<'s, 'a>(site: &'s Site<'a>, cfg: &AttachConfig) -> Result<Plan<'s, 'a>> {
    let ns = site.ns.as_deref();
    check_ports(site, &cfg.ports)?;
    if cfg.hook.is_tc() && cfg.mode.is_some() {
        return Err(DataplaneError::Request(
            "--mode is an XDP mode; --hook tc takes none (leave --mode out or use --hook xdp)"
                .into(),
        ));
    }
    if matches!(cfg.hook, HookChoice::Given(Hook::Xdp(_))) && cfg.tc_attach == TcAttach::Cls {
        return Err(DataplaneError::Request(
            "--tc-attach is how ports attach at tc; --hook xdp takes none (leave --tc-attach out or use --hook tc)"
                .into(),
        ));
    }
    let dir = site.dir()?;
    let (running, removed_stale) = running_router(&dir)?;
    let p = netns::run_in_opt(ns, || pick(cfg.hook, cfg.mode, &cfg.ports))??;
    let (hook, picked) = match &running {
        Some(r) => (join_hook(r, cfg, &p)?, None),
        None => (
            p.hook,
            (cfg.hook == HookChoice::Auto).then(|| p.why.clone()),
        ),
    };
    let cls = !hook.is_xdp()
        && match &running {
            Some(r) => r.cls(),
            None => cfg.tc_attach == TcAttach::Cls,
        };
    Ok(Plan {
        site,
        cfg: cfg.clone(),
        dir,
        joins: running.as_ref().map(|r| r.ports.clone()),
        running,
        removed_stale,
        hook,
        cls,
        picked,
        warning: p.warning,
    })
}

impl Plan<'_, '_> {
    /// Attaches as planned. On error nothing of this call stays attached
    /// or pinned.
    pub fn attach(self) -> Result<Attached> {
        let (site, cfg, dir) = (self.site, &self.cfg, &self.dir);
        let ns = site.ns.as_deref();
        let mut report = Attached {
            removed_stale: self.removed_stale.clone(),
            joined: self.joins.clone(),
            hook: self.hook,
            cls: self.cls,
            picked: self.picked.clone(),
            warning: self.warning.clone(),
            fib: cfg.fib,
            ports: cfg.ports.clone(),
            peer_delivered: Vec::new(),
            pass_throughs: Vec::new(),
            refreshed: Vec::new(),
            dir: dir.clone(),
        };
        if let Some(r) = &self.running {
            report.pass_throughs = r.add_ports(ns, &cfg.ports, self.hook)?;
            if let Err(e) = verify_attached(&cfg.ports, dir) {
                // The new ports (not among those `r` was read with).
                let _ = r.remove_pinned(ns, &cfg.ports);
                return Err(e);
            }
            // The running ports too: what is on their peers may have
            // changed unannounced (a server killed outright).
            if cfg.refresh_running {
                report.refreshed = r.refresh_peer_delivery(ns).unwrap_or_else(|e| {
                    tracing::warn!("rechecking the running ports' delivery to their peers: {e}");
                    Vec::new()
                });
            }
            report.peer_delivered = r.peer_delivered(&cfg.ports);
            return Ok(report);
        }
        let mut dp = if self.cls {
            // The ports' records go in the router's directory from the
            // start: made before each filter.
            make_dir(dir)?;
            Dataplane::router_cls(ns, &cfg.ports, cfg.fib, dir).inspect_err(|_| {
                let _ = pins::remove(dir);
            })?
        } else {
            Dataplane::router(ns, &cfg.ports, self.hook, cfg.fib, false)?
        };
        report.peer_delivered = dp
            .ports
            .iter()
            .filter(|(_, l)| dp.router.peer_delivery(l.ifindex()).unwrap_or(false))
            .map(|(n, _)| n.clone())
            .collect();
        match &site.hosts {
            Some((hosts, host)) => dp.prepare_peers(*hosts, host)?,
            None => dp.prepare_peers_here()?,
        }
        report.pass_throughs = dp
            .peers
            .iter()
            .map(|p| format!("{}:{}", p.ns, p.iface))
            .collect();
        pin_or_undo(dp, dir)?;
        if let Err(e) = verify_attached(&cfg.ports, dir) {
            let _ = pins::remove(dir);
            return Err(e);
        }
        Ok(report)
    }
}

/// The hook new ports join the running router `r` at: its own. An explicit
/// hook naming the other one, or `auto` on a port that needs tc next to an
/// XDP router, is a wrong request.
fn join_hook(r: &RunningRouter, cfg: &AttachConfig, p: &crate::hook::Pick) -> Result<Hook> {
    let running_tc = r.hook_kind() == "tc";
    let refuse = |m: String| Err(DataplaneError::Request(m));
    if running_tc && cfg.mode.is_some() {
        return refuse(
            "--mode is an XDP mode and the router here runs at tc; leave --mode out".into(),
        );
    }
    if running_tc && !r.cls() && cfg.tc_attach == TcAttach::Cls {
        return refuse(format!(
            "the router here attaches its ports at tc as tcx links (on {}); new ports join it that way: leave --tc-attach out, or detach it and attach every port with --tc-attach cls",
            r.ports.join(" ")
        ));
    }
    match (cfg.hook, p.hook, running_tc) {
        (HookChoice::Auto, Hook::Tcx(_), false) => refuse(format!(
            "the router here runs at the XDP hook (on {}), and {} needs tc: {}; detach it and attach every port with --hook tc",
            r.ports.join(" "),
            cfg.ports.join(" "),
            p.why
        )),
        (HookChoice::Auto, _, true) => Ok(Hook::TC),
        (HookChoice::Given(Hook::Xdp(_)), _, true) | (HookChoice::Given(Hook::Tcx(_)), _, false) => {
            refuse(format!(
                "the router here runs at the {} hook (on {}); new ports join it there: leave --hook out or give --hook {}",
                r.hook_kind(),
                r.ports.join(" "),
                r.hook_kind()
            ))
        }
        (_, h, _) => Ok(h),
    }
}

/// Checks the ports: each exists, none twice (also under another name).
fn check_ports(site: &Site, ifaces: &[String]) -> Result<()> {
    let mut seen: Vec<(u32, &String)> = Vec::new();
    for i in ifaces {
        let idx = match netns::run_in_opt(site.ns.as_deref(), || peregrine_bpf::link::ifindex(i))? {
            Ok(idx) => idx,
            Err(_) => {
                return Err(DataplaneError::Request(format!(
                    "no interface {i:?} in {}",
                    site.pins.describe()
                )))
            }
        };
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == idx) {
            return Err(DataplaneError::Request(format!(
                "same interface twice: {first} and {i} are both ifindex {idx}; give each port once"
            )));
        }
        seen.push((idx, i));
    }
    Ok(())
}

/// The live router pinned in `dir`, if one runs; a stale one there is
/// removed (its directory returned).
fn running_router(dir: &std::path::Path) -> Result<(Option<RunningRouter>, Option<PathBuf>)> {
    if !dir.exists() {
        return Ok((None, None));
    }
    let a = pins::attachment(dir);
    if a.stale() {
        pins::remove(dir)?;
        return Ok((None, Some(dir.to_path_buf())));
    }
    Ok((Some(RunningRouter::of(dir, a)?), None))
}

/// Pins a fresh deployment; on failure nothing stays attached or pinned
/// (the unpinned links close when `dp` drops).
fn pin_or_undo(mut dp: Dataplane, dir: &std::path::Path) -> Result<()> {
    if let Err(e) = make_dir(dir).and_then(|()| dp.pin(dir)) {
        // The ports not pinned detach as `dp` drops.
        drop(dp);
        let _ = pins::remove(dir);
        return Err(e);
    }
    Ok(())
}

/// The router's pin directory in the host's bpffs (mounted if it is not).
fn make_dir(dir: &std::path::Path) -> Result<()> {
    peregrine_bpf::bpffs::ensure_mounted()?;
    std::fs::create_dir_all(dir).map_err(|e| {
        DataplaneError::Other(format!(
            "creating {}: {e}",
            peregrine_bpf::bpffs::display(dir)
        ))
    })
}

/// Checks that every port in `ifaces` of the router pinned in `dir` runs
/// its program (the attachment took); reads those ports' pins alone.
fn verify_attached(ifaces: &[String], dir: &std::path::Path) -> Result<()> {
    for i in ifaces {
        if pins::live_port_link(dir, i).is_none() {
            return Err(DataplaneError::Other(format!("the router did not take on {i}: its link is not attached after attaching; nothing of this command left attached")));
        }
    }
    Ok(())
}

/// What `detach` changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detached {
    /// Ports left the router; the others keep forwarding.
    Ports {
        removed: Vec<String>,
        left: Vec<String>,
    },
    /// The whole router went (every port named, or none), pins and all.
    Router { dir: PathBuf },
}

/// Takes `ports` out of the router at `site`, or the whole router (no
/// ports, or every one of them).
pub fn detach(site: &Site, ports: &[String]) -> Result<Detached> {
    let dir = site.attached_dir("")?;
    if !ports.is_empty() {
        let r = RunningRouter::open(&dir)?;
        r.remove_ports(site.ns.as_deref(), ports)?;
        let left: Vec<String> = r
            .ports
            .iter()
            .filter(|p| !ports.contains(p))
            .cloned()
            .collect();
        if !left.is_empty() {
            return Ok(Detached::Ports {
                removed: ports.to_vec(),
                left,
            });
        }
    }
    pins::remove(&dir)?;
    Ok(Detached::Router { dir })
}

/// Detaches every router attachment on the host (outside labs, in labs,
/// live or stale, and what older versions pinned); how many.
pub fn detach_all() -> Result<usize> {
    let n = pins::remove_all_outside_labs()?;
    let labs: Vec<_> = pins::list_attachments()
        .into_iter()
        .filter(|a| a.lab_host.is_some())
        .collect();
    for a in &labs {
        pins::remove(&a.dir)?;
    }
    Ok(n + labs.len())
}

/// One router port found on the host (or an attachment without ports).
#[derive(Debug, Clone)]
pub struct Listed {
    /// "lab L host H", the namespace's name, or "netns cookie C".
    pub namespace: String,
    pub cookie: Option<u64>,
    /// "-" for an attachment without ports.
    pub iface: String,
    /// "xdp", "tc" (a tcx link), "tc (cls_bpf)" (a filter) or "-".
    pub hook: &'static str,
    pub prog_id: Option<u32>,
    pub ifindex: u32,
    pub stale: bool,
}

/// Every router attachment on the host, a port a row, stale ones included.
pub fn list() -> Vec<Listed> {
    let names = netns::cookies();
    let mut rows = Vec::new();
    for a in pins::list_attachments() {
        let stale = a.stale();
        let namespace = match (&a.lab_host, a.cookie) {
            (Some((l, h)), _) => format!("lab {l} host {h}"),
            (None, Some(c)) => netns::cookie_name(&names, c),
            (None, None) => "?".into(),
        };
        if a.ports.is_empty() {
            rows.push(Listed {
                namespace,
                cookie: a.cookie,
                iface: "-".into(),
                hook: "-",
                prog_id: None,
                ifindex: 0,
                stale,
            });
            continue;
        }
        for p in &a.ports {
            rows.push(Listed {
                namespace: namespace.clone(),
                cookie: a.cookie,
                iface: p.iface.clone(),
                hook: match (p.cls, p.link) {
                    (true, _) => "tc (cls_bpf)",
                    (false, Some(l)) => l.hook_kind(),
                    (false, None) => "-",
                },
                prog_id: p.link.map(|l| l.prog_id),
                ifindex: p.link.map(|l| l.ifindex).unwrap_or(0),
                stale: stale || !p.link.is_some_and(|l| l.live()),
            });
        }
    }
    rows
}

/// The counters of the router pinned in `dir` (`Site::attached_dir`):
/// (port, ifindex, counters) per port.
pub fn stats(dir: &std::path::Path) -> Result<Vec<(String, u32, PortStats)>> {
    pins::pinned_ports(dir)?
        .into_iter()
        .map(|(n, i)| Ok((n, i, read_pinned_stats(dir, i)?)))
        .collect()
}

/// What `apply` found and changed.
#[derive(Debug, Clone)]
pub struct Applied {
    /// Found: a stale data plane, removed first; its pin directory.
    pub removed_stale: Option<PathBuf>,
    pub hook: Hook,
    /// The network functions attached (`host:iface`).
    pub nfs: Vec<String>,
    pub dir: PathBuf,
}

/// Attaches the router, network functions and chains `cfg` declares on
/// `hosts` and pins them; refused where a data plane runs already.
pub fn apply(cfg: &DataplaneConfig, hosts: &dyn Hosts) -> Result<Applied> {
    let dir = PinScope::of(cfg).dir()?;
    let (running, removed_stale) = running_router(&dir)?;
    if running.is_some() {
        return Err(DataplaneError::Other(format!(
            "a data plane is already attached here ({}); detach or remove it first",
            peregrine_bpf::bpffs::display(&dir)
        )));
    }
    let dp = Dataplane::deploy(hosts, cfg)?;
    let nfs = dp
        .nfs
        .iter()
        .map(|n| format!("{}:{}", n.host, n.iface))
        .collect();
    let hook = dp.hook;
    pin_or_undo(dp, &dir)?;
    Ok(Applied {
        removed_stale,
        hook,
        nfs,
        dir,
    })
}

/// Removes everything `cfg`'s deployment attached; its pin directory, or
/// None when nothing was applied.
pub fn remove(cfg: &DataplaneConfig) -> Result<Option<PathBuf>> {
    let dir = PinScope::of(cfg).dir()?;
    if !dir.exists() {
        return Ok(None);
    }
    pins::remove(&dir)?;
    Ok(Some(dir))
}
