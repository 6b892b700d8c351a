//! Policer attachments: one per interface, in the network namespace the
//! command runs in, pinned in the host's bpffs so it outlives the command
//! (`ip netns exec` included) and every later command finds it:
//! `<pin root>/_qos/<netns cookie>/<iface>/link`. The maps are found from
//! the program that link runs, never pinned apart from it.
//!
//! `apply` replaces a running policer's whole rule set in one step: the new
//! rules go into a freshly loaded program, which then takes the old one's
//! place on the same link (the kernel's link update). A file that does not
//! parse, a rule that is refused, or a program that does not load changes
//! nothing.
use std::path::{Path, PathBuf};

use peregrine_bpf::link::{pinned_link, PinnedLink};
use peregrine_bpf::policer::{
    InstalledRule, PolicerMaps, PolicerProgram, PolicerTotals, Rule, RuleCounters,
};
use peregrine_bpf::{bpffs, Hook, Link, XdpMode};
use peregrine_dataplane::peer::refresh_peer_logged;
use peregrine_host::netns;

use crate::error::{QosError, Result};

/// Below the pin root: policers, one directory per network namespace.
pub const QOS_DIR: &str = "_qos";
const LINK_PIN: &str = "link";

/// The hook a pinned policer link runs at: XDP (native, the only mode
/// `apply` uses) or tc.
fn hook_of(l: &PinnedLink) -> Hook {
    if l.xdp {
        Hook::Xdp(XdpMode::Native)
    } else {
        Hook::TC
    }
}

/// Where a policer runs when neither the command nor the file says: tc
/// (meters a GSO packet whole, keeps its checksum state, and runs before a
/// router attached at tc on the same interface, attached before it or
/// after: the policer takes the head of the tcx chain, `Placement::First`).
pub const DEFAULT_HOOK: Hook = Hook::TC;

/// The directory of `iface`'s policer in the calling thread's namespace.
pub fn dir_here(iface: &str) -> Result<PathBuf> {
    if iface.is_empty() || iface.contains('/') || iface == "." || iface == ".." {
        return Err(QosError::Config(format!(
            "interface name {iface:?} is not valid"
        )));
    }
    Ok(bpffs::pin_root()
        .join(QOS_DIR)
        .join(netns::cookie()?.to_string())
        .join(iface))
}

/// The lock file of policer changes, one for the host (as iptables'
/// /run/xtables.lock): a file per policer would outlive it.
const LOCK: &str = "/run/peregrine/qos.lock";

/// Holds off every other process's change to a policer (apply, rule add
/// and remove, class changes, detach, stale cleanup) until dropped: each reads the running rules and
/// writes on from what it read (a new rule takes the lowest free id and
/// resets that id's meter), so two at once on one policer would give two
/// rules one id and one meter. Not taken twice by one process: a second
/// `flock` (another open file description) would wait for the first; a
/// holder calls the `_locked` variants (`apply_locked`, `detach_locked`).
pub(crate) fn lock_changes() -> Result<peregrine_host::fs::FileLock> {
    peregrine_host::fs::FileLock::exclusive(Path::new(LOCK))
        .map_err(|e| QosError::Other(format!("locking {LOCK}: {e}")))
}

/// A policer found in the host's bpffs.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub dir: PathBuf,
    /// The network namespace's cookie.
    pub cookie: u64,
    /// The interface, as named when attached.
    pub iface: String,
    /// What the pinned link says now (None: it cannot be opened).
    pub link: Option<PinnedLink>,
    /// The htb engine's classifier is pinned beside the policer (`qos
    /// serve` with engine = "htb").
    pub htb_pin: bool,
    /// Its record, when it can be read.
    pub htb: Option<crate::htb::Record>,
}

impl Attachment {
    /// Nothing of it runs any more: its interface or namespace is gone, it
    /// was killed before its link was pinned, or the `qos serve` process
    /// that owned it is gone.
    pub fn stale(&self) -> bool {
        let policer = match self.link.filter(|l| l.live()) {
            None => true,
            Some(l) => orphaned(l.prog_id),
        };
        policer || (self.htb_pin && self.htb.is_none_or(|r| r.stale()))
    }

    pub fn hook(&self) -> Option<Hook> {
        self.link.as_ref().map(hook_of)
    }
}

/// The programs at tc ingress of a policer's interface, in the order
/// they run (tcx links, then cls_bpf filters), named: "policer" (this
/// one), "router" (a port of a router pinned on this host, either way),
/// or "prog ID".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcOrder(pub Vec<String>);

/// "policer, then router"; "policer alone".
impl std::fmt::Display for TcOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one} alone"),
            all => f.write_str(&all.join(", then ")),
        }
    }
}

impl Attachment {
    /// Where the policer runs among its interface's tc ingress programs,
    /// read in its namespace (found by cookie among those this process
    /// can find). None at XDP, when stale, or when the namespace is not
    /// found.
    pub fn tc_order(&self) -> Option<TcOrder> {
        let l = self.link.filter(|l| l.live() && !l.xdp)?;
        let ids = netns::run_in_cookie(self.cookie, || {
            peregrine_dataplane::cls_port::tc_ingress_programs(l.ifindex)
        })?
        .ok()?;
        let routers: Vec<u32> = peregrine_dataplane::pins::list_attachments()
            .iter()
            .flat_map(|a| a.ports.iter().filter_map(|p| p.link.map(|l| l.prog_id)))
            .collect();
        Some(TcOrder(
            ids.into_iter()
                .map(|id| match id {
                    id if id == l.prog_id => "policer".to_string(),
                    id if routers.contains(&id) => "router".to_string(),
                    id => format!("prog {id}"),
                })
                .collect(),
        ))
    }
}

fn attachment(dir: &Path, cookie: u64, iface: &str) -> Attachment {
    let htb = crate::htb::record(dir);
    Attachment {
        dir: dir.to_path_buf(),
        cookie,
        iface: iface.to_string(),
        link: pinned_link(&dir.join(LINK_PIN)).ok(),
        htb_pin: htb.is_some(),
        htb: htb.and_then(|r| r.ok()),
    }
}

/// Every policer on the host, in every namespace.
pub fn list() -> Vec<Attachment> {
    let root = bpffs::pin_root().join(QOS_DIR);
    let mut out = Vec::new();
    let mut cookies: Vec<u64> = peregrine_host::fs::list_dir(&root)
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    cookies.sort();
    for c in cookies {
        let ns_dir = root.join(c.to_string());
        let mut ifaces = peregrine_host::fs::list_dir(&ns_dir);
        ifaces.sort();
        for i in ifaces {
            out.push(attachment(&ns_dir.join(&i), c, &i));
        }
    }
    out
}

/// What `apply` did.
#[derive(Debug, Clone)]
pub struct Applied {
    pub hook: Hook,
    pub rules: usize,
    /// A running policer's rules were replaced (else one was attached).
    pub replaced: bool,
}

/// Puts `rules` on `iface` (in the calling thread's namespace) at `hook`:
/// attaches a policer, or replaces a running one's rules atomically.
/// Moving a running policer to the other hook is refused (detach first):
/// the two hooks cannot be swapped in one step.
pub fn apply(iface: &str, hook: Hook, rules: &[Rule]) -> Result<Applied> {
    let lock = lock_changes()?;
    apply_locked(&lock, iface, hook, rules)
}

/// `apply` for a caller that holds the policer lock (`lock_changes`, the
/// guard passed as proof) and keeps holding it after: `qos serve` checks
/// that no scheduler runs, applies and records itself as the owner in one
/// step, so no other process's `apply` can replace the program in between.
pub(crate) fn apply_locked(
    _held: &peregrine_host::fs::FileLock,
    iface: &str,
    hook: Hook,
    rules: &[Rule],
) -> Result<Applied> {
    bpffs::ensure_mounted()?;
    let dir = dir_here(iface)?;
    let mut existing = attachment(&dir, 0, iface);
    if existing.htb_pin {
        if let Some(pid) = existing.htb.and_then(|r| r.live_owner()) {
            return Err(QosError::Config(format!(
                "an htb scheduler (qos serve, pid {pid}) runs on {iface}: change its rules with \
                 `qos rule` and its classes with `qos class`, or stop it to apply a file"
            )));
        }
        // What a killed htb engine left goes whole: tree, classifier, policer.
        remove(&dir, netns::cookie()?)?;
        existing = attachment(&dir, 0, iface);
    }
    if let Some(l) = existing.link.filter(|l| l.live()) {
        if let Some(pid) = live_owner(l.prog_id) {
            // A new program would leave the scheduler's sockets behind in
            // the old one's map: its class traffic would stop being fed.
            return Err(QosError::Config(format!(
                "a scheduler (qos serve, pid {pid}) runs on {iface}: change its rules with \
                 `qos rule` and its classes with `qos class`, or stop it to apply a file"
            )));
        }
        let running = hook_of(&l);
        if running.kind() != hook.kind() {
            return Err(QosError::Config(format!(
                "the policer on {iface} runs at the {} hook; `peregrine qos detach {iface}` first to move it to {}",
                running.kind(),
                hook.kind()
            )));
        }
    }
    let prog = PolicerProgram::load()?;
    prog.maps()?.install_fresh(rules)?;
    let link_pin = dir.join(LINK_PIN);
    if existing.link.is_some_and(|l| l.live()) {
        // One step: from here on the link runs the new program, and every
        // later command finds the new maps through it.
        Link::from_pin(&link_pin)?.replace_program(prog.prog(hook))?;
        return Ok(Applied {
            hook,
            rules: rules.len(),
            replaced: true,
        });
    }
    // A stale directory (interface gone, or a run killed half-way) goes first.
    if dir.exists() {
        bpffs::remove_pin_dir(&dir)?;
    }
    let link = prog.attach(iface, hook)?;
    std::fs::create_dir_all(&dir)
        .map_err(|e| QosError::Other(format!("creating {}: {e}", bpffs::display(&dir))))?;
    // Pinned, or undone: the link detaches when dropped unpinned. Only
    // the link is pinned: the program and its maps live as long as it.
    if let Err(e) = link.pin(&link_pin) {
        let _ = link.unpin();
        let _ = bpffs::remove_pin_dir(&dir);
        return Err(e.into());
    }
    if hook.is_xdp() {
        // A tc router whose port faces `iface` now delivers through the
        // veth: bpf_redirect_peer would skip the policer.
        refresh_peer_logged(None, iface);
    }
    Ok(Applied {
        hook,
        rules: rules.len(),
        replaced: false,
    })
}

/// The running policer on `iface` here and its maps.
fn running_here(iface: &str) -> Result<(Attachment, PolicerMaps)> {
    crate::config::interface_here(iface)?;
    let dir = dir_here(iface)?;
    let a = attachment(&dir, 0, iface);
    if !a.link.is_some_and(|l| l.live()) {
        return Err(QosError::Request(format!(
            "no policer on {iface} in this network namespace (`peregrine qos apply` puts one there)"
        )));
    }
    let prog_id = a.link.map(|l| l.prog_id).unwrap_or_default();
    let maps = PolicerMaps::of_program(prog_id)?;
    Ok((a, maps))
}

/// The maps of the running policer on `iface` here.
pub fn maps_here(iface: &str) -> Result<PolicerMaps> {
    Ok(running_here(iface)?.1)
}

/// The link of the policer running on `iface` here (None: none runs).
/// Its `link_id` tells one policer from another put there later: an
/// owner that records it removes only its own.
pub fn link_here(iface: &str) -> Result<Option<PinnedLink>> {
    let dir = dir_here(iface)?;
    Ok(attachment(&dir, 0, iface).link.filter(|l| l.live()))
}

/// The pid of the live `qos serve` process scheduling for the policer
/// on `iface` here, if there is one.
pub fn scheduler_owner(iface: &str) -> Result<Option<u32>> {
    let dir = dir_here(iface)?;
    let a = attachment(&dir, 0, iface);
    if let Some(pid) = a.htb.and_then(|r| r.live_owner()) {
        return Ok(Some(pid));
    }
    Ok(a.link
        .filter(|l| l.live())
        .and_then(|l| live_owner(l.prog_id)))
}

/// The htb engine's record on `iface` here, if one was pinned (stale or not).
pub fn htb_here(iface: &str) -> Result<Option<crate::htb::Record>> {
    let dir = dir_here(iface)?;
    match crate::htb::record(&dir) {
        None => Ok(None),
        Some(r) => r.map(Some),
    }
}

/// Whether a program was set up by a `qos serve` that is gone.
fn orphaned(prog_id: u32) -> bool {
    owner_of(prog_id).is_some_and(|pid| !alive(pid))
}

/// The owner of a program's scheduler, when that process is alive.
fn live_owner(prog_id: u32) -> Option<u32> {
    owner_of(prog_id).filter(|&pid| alive(pid))
}

/// The pid of the `qos serve` that set up a program's scheduler, if one did.
fn owner_of(prog_id: u32) -> Option<u32> {
    let pid = PolicerMaps::of_program(prog_id)
        .ok()?
        .sched_port()
        .ok()?
        .owner_pid;
    (pid != 0).then_some(pid)
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Adds the rule `fields` describe (a class named among the running
/// scheduler's) to the running policer on `iface`; its id. Fields that do
/// not make a rule are a `Request` error.
pub fn add_rule_fields(iface: &str, fields: &crate::config::RuleFields) -> Result<u32> {
    let classes = match (htb_here(iface)?, maps_here(iface)) {
        (Some(r), _) => crate::htb::classes(&r.maps()?)?,
        (None, Ok(m)) => crate::classes::installed_classes(&m)?,
        (None, Err(_)) => Vec::new(),
    };
    let rule = fields.to_rule(0, &classes).map_err(QosError::Request)?;
    add_rule(iface, &rule)
}

/// Adds `rule` to the running policer on `iface`; its id.
pub fn add_rule(iface: &str, rule: &Rule) -> Result<u32> {
    let _lock = lock_changes()?;
    Ok(running_here(iface)?.1.add(rule)?)
}

/// Removes rule `id` from the running policer on `iface`.
pub fn remove_rule(iface: &str, id: u32) -> Result<()> {
    let _lock = lock_changes()?;
    Ok(running_here(iface)?.1.remove(id)?)
}

/// A policer's counters: the program's own and each rule's.
#[derive(Debug, Clone)]
pub struct PolicerStats {
    pub iface: String,
    pub hook: Hook,
    pub totals: PolicerTotals,
    pub rules: Vec<(InstalledRule, RuleCounters)>,
    /// The scheduler it feeds (`qos serve`), if any.
    pub scheduler: Option<crate::classes::SchedulerStats>,
}

/// The counters of the policer on `iface` here.
pub fn stats(iface: &str) -> Result<PolicerStats> {
    let (a, maps) = running_here(iface)?;
    let rules = maps
        .rules()?
        .into_iter()
        .map(|r| Ok((r, maps.counters(r.id)?)))
        .collect::<Result<Vec<_>>>()?;
    // The maps are open already: the owner from them, not from the link again.
    let owner = Some(maps.sched_port()?.owner_pid).filter(|&p| p != 0 && alive(p));
    let scheduler = match a.htb {
        Some(r) => Some(crate::htb::scheduler_stats(&r)?),
        None => crate::classes::scheduler_stats(&maps, owner)?,
    };
    Ok(PolicerStats {
        iface: iface.to_string(),
        hook: a.hook().unwrap_or(DEFAULT_HOOK),
        totals: maps.totals()?,
        rules,
        scheduler,
    })
}

/// The counters of the policers on `ifaces` here.
pub fn stats_of(ifaces: &[String]) -> Result<Vec<PolicerStats>> {
    ifaces.iter().map(|i| stats(i)).collect()
}

/// `iface`, or every interface with a policer in this namespace; an error
/// when there is none.
pub fn policed(iface: Option<String>) -> Result<Vec<String>> {
    let ifaces = match iface {
        Some(i) => vec![i],
        None => ifaces_here()?,
    };
    if ifaces.is_empty() {
        return Err(QosError::Other(
            "no policer in this network namespace (`peregrine qos apply` puts one there)".into(),
        ));
    }
    Ok(ifaces)
}

/// Interfaces with a policer in this namespace.
pub fn ifaces_here() -> Result<Vec<String>> {
    let c = netns::cookie()?;
    Ok(list()
        .into_iter()
        .filter(|a| a.cookie == c && !a.stale())
        .map(|a| a.iface)
        .collect())
}

/// Detaches the policer of `dir` and removes its pins (and the namespace's
/// directory once empty); an htb engine's tree and classifier first (in
/// namespace `cookie`, when it still exists: a namespace that is gone took
/// its devices' qdiscs with it).
fn remove(dir: &Path, cookie: u64) -> Result<()> {
    if dir.join(crate::htb::HTB_PIN).exists() {
        match netns::run_in_cookie(cookie, || crate::htb::remove_here(dir)) {
            Some(r) => r?,
            None => peregrine_bpf::link::detach_pinned(&dir.join(crate::htb::HTB_PIN))?,
        }
    }
    let link = dir.join(LINK_PIN);
    if link.exists() {
        peregrine_bpf::link::detach_pinned(&link)?;
    }
    // Also removes the namespace's directory once it is empty.
    Ok(bpffs::remove_pin_dir(dir)?)
}

/// Detaches the policer on `iface` here.
pub fn detach(iface: &str) -> Result<()> {
    let lock = lock_changes()?;
    detach_locked(&lock, iface)
}

/// `detach` for a caller that holds the policer lock (the guard passed as
/// proof): a `qos serve` whose start fails undoes it in the same step.
pub(crate) fn detach_locked(_held: &peregrine_host::fs::FileLock, iface: &str) -> Result<()> {
    let dir = dir_here(iface)?;
    if !dir.exists() {
        return Err(QosError::Request(format!(
            "no policer on {iface} in this network namespace"
        )));
    }
    let xdp = attachment(&dir, 0, iface)
        .link
        .is_some_and(|l| l.live() && l.xdp);
    remove(&dir, netns::cookie()?)?;
    if xdp {
        // Its XDP hook is empty again: a tc router facing it may deliver
        // with bpf_redirect_peer again.
        refresh_peer_logged(None, iface);
    }
    Ok(())
}

/// Removes the pins of policers whose interface or namespace is gone (or
/// whose run was killed before its link was pinned); how many.
pub fn detach_stale() -> Result<usize> {
    // Under the lock: a policer being applied has its directory before its
    // link pin, and looks stale in between.
    let _lock = lock_changes()?;
    let stale: Vec<_> = list().into_iter().filter(Attachment::stale).collect();
    for a in &stale {
        remove(&a.dir, a.cookie)?;
    }
    Ok(stale.len())
}

/// Removes the policers of network namespaces that no longer exist (stale,
/// and their namespace found nowhere: nobody can own them any more); a
/// live one in a namespace this process cannot see is kept. How many.
pub fn detach_gone_namespaces() -> Result<usize> {
    let _lock = lock_changes()?;
    let live: Vec<u64> = netns::cookies().into_iter().map(|(_, c)| c).collect();
    let gone: Vec<_> = list()
        .into_iter()
        .filter(|a| !live.contains(&a.cookie) && a.stale())
        .collect();
    for a in &gone {
        remove(&a.dir, a.cookie)?;
    }
    Ok(gone.len())
}

/// Detaches every policer on the host, live and stale; how many.
pub fn detach_all() -> Result<usize> {
    let _lock = lock_changes()?;
    let all = list();
    for a in &all {
        remove(&a.dir, a.cookie)?;
    }
    let root = bpffs::pin_root();
    let _ = std::fs::remove_dir(root.join(QOS_DIR));
    let _ = std::fs::remove_dir(&root);
    Ok(all.len())
}
