//! Building and removing labs. Every namespace a lab creates is named
//! `pg-<lab>-<host>`; a state file under /run/peregrine/labs records who owns
//! the lab, so state left by a killed run is recognised and removed by the
//! next `lab up` or `lab down --all`. A lab owns exactly the namespaces its
//! state file records: a state file that cannot be read or parsed proves
//! nothing, so every removal refuses it in one line naming the file and
//! removes none of what it may have recorded.
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::topology::{parse_cidr, Endpoint, Topology};
use peregrine_host::nl::Netlink;
use peregrine_host::{netns, signals};
use peregrine_wire::MacAddr;

pub const NS_PREFIX: &str = "pg-";
pub const STATE_DIR: &str = "/run/peregrine/labs";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    pub name: String,
    pub topology: Topology,
    /// Process that owns an ephemeral lab (or is still building it); `None`
    /// for a lab made by `lab up`, which lives until `lab down`.
    pub owner_pid: Option<u32>,
    /// Made afresh for each lab built: the handle that built it removes it
    /// only while its state still has this token, never a lab of the same
    /// name built since (by another run, or by this process). 0 in files
    /// written before there were tokens.
    #[serde(default)]
    pub token: u64,
}

/// A new lab's token: random, never 0.
fn new_token() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std seeds each RandomState from the OS's randomness (once per
    // thread, then a counter): no two labs share a token.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() | 1
}

/// The namespace of `host` in lab `lab`.
pub fn ns_name(lab: &str, host: &str) -> String {
    format!("{NS_PREFIX}{lab}-{host}")
}

fn state_path(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(format!("{name}.json"))
}

/// The recorded state of lab `name`, None when it has no state file. A
/// state file that cannot be read or parsed is an error naming it: which
/// namespaces it recorded is unknown, so nothing may be removed on its word.
fn read_state(name: &str) -> Result<Option<LabState>> {
    let path = state_path(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable_state(name, &path, &e.to_string())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| unreadable_state(name, &path, &e.to_string()))
}

/// The one-line error for lab `name`'s state file at `path` that could not
/// be used (`why`).
fn unreadable_state(name: &str, path: &Path, why: &str) -> LabError {
    let why: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    LabError::Other(format!(
        "lab state {} cannot be used ({why}): which namespaces lab {name} owns is unknown, so none is removed; delete its namespaces (ip netns del {NS_PREFIX}{name}-<host>) and the file by hand",
        path.display()
    ))
}

/// The recorded state of an existing lab.
pub fn state(name: &str) -> Result<LabState> {
    read_state(name)?.ok_or_else(|| LabError::NoSuchLab(name.to_string()))
}

fn write_state(s: &LabState) -> Result<()> {
    std::fs::create_dir_all(STATE_DIR)
        .map_err(|e| LabError::Other(format!("creating {STATE_DIR}: {e}")))?;
    let tmp = state_path(&format!(".{}", s.name));
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(s).expect("state serialises"),
    )
    .and_then(|_| std::fs::rename(&tmp, state_path(&s.name)))
    .map_err(|e| LabError::Other(format!("writing lab state: {e}")))
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Serialises lab creation and removal between processes (flock, released
/// when the guard drops or the process dies).
struct LabLock(#[allow(dead_code)] peregrine_host::fs::FileLock);

impl LabLock {
    fn take() -> Result<LabLock> {
        peregrine_host::fs::FileLock::exclusive(&Path::new(STATE_DIR).join(".lock"))
            .map(LabLock)
            .map_err(|e| LabError::Other(format!("locking labs ({STATE_DIR}/.lock): {e}")))
    }
}

/// What a lab listing shows.
#[derive(Debug, Clone, Serialize)]
pub struct LabInfo {
    pub name: String,
    pub namespaces: Vec<String>,
    pub owner_pid: Option<u32>,
    /// Left by a run that no longer exists (its recorded owner is dead).
    pub stale: bool,
    /// Why the lab's state file cannot be used (one line naming it): then
    /// neither its namespaces nor its owner are known, it is not called
    /// stale, and nothing removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every lab with a state file, by name, with what the file records (or
/// why it cannot be used).
fn recorded() -> Vec<(String, Result<LabState>)> {
    let mut names: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(STATE_DIR) {
        for e in rd.flatten() {
            let f = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = f.strip_suffix(".json") {
                if !n.starts_with('.') {
                    names.push(n.to_string());
                }
            }
        }
    }
    names.sort();
    names
        .into_iter()
        .filter_map(|name| match read_state(&name) {
            Ok(Some(s)) => Some((name, Ok(s))),
            // Removed since the directory was read: no longer a lab.
            Ok(None) => None,
            Err(e) => Some((name, Err(e))),
        })
        .collect()
}

fn is_stale(s: &LabState) -> bool {
    s.owner_pid.is_some_and(|p| !pid_alive(p))
}

pub fn list() -> Vec<LabInfo> {
    let all_ns = netns::list();
    recorded()
        .into_iter()
        .map(|(name, state)| match state {
            Ok(s) => LabInfo {
                namespaces: owned_namespaces(&name, &s.topology)
                    .into_iter()
                    .filter(|n| all_ns.contains(n))
                    .collect(),
                owner_pid: s.owner_pid,
                stale: is_stale(&s),
                name,
                error: None,
            },
            Err(e) => LabInfo {
                name,
                namespaces: vec![],
                owner_pid: None,
                stale: false,
                error: Some(e.to_string()),
            },
        })
        .collect()
}

/// The namespaces lab `name` made: one per host of `topology`, the one its
/// state file records (written before the first namespace is made). A
/// namespace that merely looks like a lab's (`pg-<lab>-<host>`, made by a
/// user or a test harness) is not one, and no cleanup touches it.
fn owned_namespaces(name: &str, topology: &Topology) -> Vec<String> {
    topology
        .hosts
        .iter()
        .map(|h| ns_name(name, &h.name))
        .collect()
}

/// Removes a lab's namespaces (those of `topology`, what its state file
/// records; None: no state file, none) and with them its links and XDP
/// attachments, its pins and its state file. Idempotent.
fn remove(name: &str, topology: Option<&Topology>) -> Result<Vec<String>> {
    let existing = netns::list();
    let mut removed = Vec::new();
    for ns in topology.map_or_else(Vec::new, |t| owned_namespaces(name, t)) {
        if existing.contains(&ns) {
            netns::delete(&ns)?;
            removed.push(ns);
        }
    }
    peregrine_bpf::bpffs::remove_pins(name)?;
    let path = state_path(name);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(LabError::Other(format!(
                "removing lab state {}: {e}",
                path.display()
            )))
        }
    }
    Ok(removed)
}

/// Removes every lab whose owner died (what its state file records);
/// returns the lab names removed. A state file that cannot be used is an
/// error naming it (after the others are dealt with), and what it may
/// have recorded stays.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let _l = LabLock::take()?;
    let swept = cleanup_stale_locked()?;
    match swept.unreadable.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(swept.removed),
    }
}

/// What a stale cleanup did: the labs removed, and the labs whose state
/// file it could not use, with why (left as they are).
struct Swept {
    removed: Vec<String>,
    unreadable: Vec<(String, LabError)>,
}

fn cleanup_stale_locked() -> Result<Swept> {
    let mut swept = Swept {
        removed: Vec::new(),
        unreadable: Vec::new(),
    };
    for (name, state) in recorded() {
        match state {
            Ok(s) if is_stale(&s) => {
                remove(&name, Some(&s.topology))?;
                swept.removed.push(name);
            }
            Ok(_) => {}
            Err(e) => swept.unreadable.push((name, e)),
        }
    }
    // Pin directories of labs that no longer exist (a lab whose state file
    // cannot be used still exists).
    let live: Vec<String> = recorded().into_iter().map(|(n, _)| n).collect();
    for d in peregrine_host::fs::list_dir(&peregrine_bpf::bpffs::pin_root()) {
        if !live.contains(&d) && d.chars().all(|c| c.is_ascii_alphanumeric()) {
            peregrine_bpf::bpffs::remove_pins(&d)?;
        }
    }
    Ok(swept)
}

pub fn down(name: &str) -> Result<Vec<String>> {
    let _l = LabLock::take()?;
    let state = read_state(name)?.ok_or_else(|| LabError::NoSuchLab(name.to_string()))?;
    remove(name, Some(&state.topology))
}

/// Removes every peregrine lab, live or stale, and the stale state of
/// killed runs outside labs (never a live attachment someone made). A lab
/// whose state file cannot be used is left whole (namespaces, pins and
/// file) and, once everything else is removed, is the error.
pub fn down_all() -> Result<DownAll> {
    let _l = LabLock::take()?;
    let mut labs = Vec::new();
    let mut unreadable = Vec::new();
    for (name, state) in recorded() {
        match state {
            Ok(s) => {
                remove(&name, Some(&s.topology))?;
                labs.push(name);
            }
            Err(e) => unreadable.push((name, e)),
        }
    }
    // Pins of labs, then the stale state of killed runs outside labs:
    // routers and policers nothing runs any more (their namespace or
    // interfaces are gone). Live ones are their users': `router detach
    // --all` and `qos detach --all` remove those.
    for d in peregrine_host::fs::list_dir(&peregrine_bpf::bpffs::pin_root()) {
        if !d.starts_with('_') && !unreadable.iter().any(|(n, _)| *n == d) {
            peregrine_bpf::bpffs::remove_pins(&d)?;
        }
    }
    let stale_routers = peregrine_dataplane::pins::remove_stale_outside_labs()?;
    let stale_policers =
        peregrine_qos::attach::detach_stale().map_err(|e| LabError::Other(e.to_string()))?;
    if let Some((_, e)) = unreadable.into_iter().next() {
        return Err(e);
    }
    Ok(DownAll {
        labs,
        stale_routers,
        stale_policers,
    })
}

/// What `down_all` removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DownAll {
    pub labs: Vec<String>,
    /// Router attachments outside labs that nothing ran any more.
    pub stale_routers: usize,
    /// Policers whose interface or namespace was gone.
    pub stale_policers: usize,
}

impl DownAll {
    pub fn is_empty(&self) -> bool {
        self == &DownAll::default()
    }
}

/// Runs a command inside a lab host's namespace and returns its exit code.
pub fn exec(name: &str, host: &str, cmd: &[String]) -> Result<i32> {
    let state = state(name)?;
    if state.topology.host(host).is_none() {
        return Err(LabError::Config(format!("lab {name} has no host {host:?}")));
    }
    let (prog, args) = cmd
        .split_first()
        .ok_or_else(|| LabError::Other("no command given after --".into()))?;
    let st = netns::command(&ns_name(name, host), prog)?
        .args(args)
        .status()
        .map_err(|e| LabError::Other(format!("running {prog}: {e}")))?;
    Ok(st
        .code()
        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Stays until `peregrine lab down`.
    Persistent,
    /// Removed when the `Lab` value drops (normal end, error, Ctrl-C).
    Ephemeral,
}

/// Whether nftables' `nft` runs here: a topology with NAT rules needs it.
fn nft_available() -> bool {
    std::process::Command::new("nft")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Loads `rules` into namespace `ns` with `nft -f -`.
fn load_nft(ns: &str, host: &str, rules: &str) -> Result<()> {
    use std::io::Write;
    let mut child = netns::command(ns, "nft")?
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| LabError::Other(format!("host {host}: running nft: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(rules.as_bytes())
            .map_err(|e| LabError::Other(format!("host {host}: nft: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| LabError::Other(format!("host {host}: nft: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("failed");
        return Err(LabError::Config(format!(
            "host {host}: nft rules refused: {}",
            first.trim()
        )));
    }
    Ok(())
}

/// A lab that exists. An ephemeral one is removed on drop.
pub struct Lab {
    pub topo: Topology,
    lifetime: Lifetime,
    removed: bool,
    /// Its state's token (`LabState::token`).
    token: u64,
}

fn stable_mac(lab: &str, ep: &Endpoint) -> MacAddr {
    // FNV-1a: stable across runs so captures and neighbour entries line up.
    let mut h: u32 = 0x811c9dc5;
    for b in format!("{lab}/{ep}").bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x01000193);
    }
    MacAddr::local(h)
}

impl Lab {
    pub fn name(&self) -> &str {
        &self.topo.name
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn ns(&self, host: &str) -> String {
        ns_name(&self.topo.name, host)
    }

    /// Builds `topo`. Stale labs are removed first. If anything fails (or
    /// Ctrl-C arrives), everything created so far is removed again.
    pub fn up(topo: Topology, lifetime: Lifetime) -> Result<Lab> {
        topo.validate()?;
        if let Some(h) = topo.hosts.iter().find(|h| h.nft.is_some()) {
            if !nft_available() {
                return Err(LabError::Config(format!(
                    "host {} of lab {} has nftables rules, but nftables' nft is not installed (apt-get install nftables)",
                    h.name, topo.name
                )));
            }
        }
        let lock = LabLock::take()?;
        let name = topo.name.clone();
        // Another lab's unusable state file does not stop this one (`lab
        // list`, `lab down` and `lab down --all` name it too); this lab's
        // is the error below.
        for (n, e) in cleanup_stale_locked()?.unreadable {
            if n != name {
                eprintln!("peregrine: {e}");
            }
        }
        if read_state(&name)?.is_some() {
            return Err(LabError::Exists(name));
        }
        let existing = netns::list();
        if let Some(ns) = topo
            .hosts
            .iter()
            .map(|h| ns_name(&name, &h.name))
            .find(|n| existing.contains(n))
        {
            return Err(LabError::Invalid(format!(
                "lab {name}: namespace {ns} exists and is not a lab's (no lab records it); peregrine leaves it alone: give the lab another name"
            )));
        }
        // The state file goes first: a run killed mid-build leaves a state
        // whose owner is dead, which marks everything it made as stale.
        let token = new_token();
        write_state(&LabState {
            name: name.clone(),
            topology: topo.clone(),
            owner_pid: Some(std::process::id()),
            token,
        })?;
        // `removed: true` while building: Drop must not take the lock we hold.
        // A panic here leaves a state file whose owner is gone: stale, and
        // removed by the next run.
        let mut lab = Lab {
            topo,
            lifetime,
            removed: true,
            token,
        };
        if let Err(e) = lab.build() {
            // What this run recorded and built, under the lock it holds.
            if let Err(e2) = remove(&name, Some(&lab.topo)) {
                eprintln!("peregrine: removing half-built lab {name}: {e2}");
            }
            return Err(e);
        }
        // Still under the lock: no `lab down` and `lab up` of the name by
        // another process comes between the build and this record.
        if lifetime == Lifetime::Persistent {
            write_state(&LabState {
                name: name.clone(),
                topology: lab.topo.clone(),
                owner_pid: None,
                token,
            })?;
        }
        drop(lock);
        lab.removed = false;
        Ok(lab)
    }

    fn build(&self) -> Result<()> {
        let t = &self.topo;
        for h in &t.hosts {
            signals::check()?;
            netns::create(&self.ns(&h.name))?;
        }
        let mut nl = Netlink::new()?;
        for l in &t.links {
            signals::check()?;
            let (a, b) = (&l.a, &l.b);
            nl.add_veth(
                &self.ns(&a.host),
                &a.iface,
                &self.ns(&b.host),
                &b.iface,
                l.queues,
                l.mtu,
            )?;
        }
        for m in &t.macvlans {
            let p = &m.parent;
            nl.add_macvlan(&self.ns(&p.host), &p.iface, &self.ns(&m.host), &m.name)?;
        }
        for x in &t.vxlans {
            nl.add_vxlan(
                &self.ns(&x.host),
                &x.name,
                x.vni,
                &x.dev,
                x.local,
                x.remote,
                x.port,
            )?;
        }
        // Bridges last: their ports may be macvlans or VXLANs.
        for br in &t.bridges {
            nl.add_bridge(&self.ns(&br.host), &br.name)?;
            for p in &br.ports {
                nl.set_master(&self.ns(&br.host), p, &br.name)?;
            }
        }
        for ep in t.interfaces()? {
            signals::check()?;
            let ns = self.ns(&ep.host);
            let host = t.host(&ep.host).expect("validated");
            let mac = match host.mac.get(&ep.iface) {
                Some(m) => m.parse().map_err(|e| LabError::Config(format!("{e}")))?,
                None => stable_mac(&t.name, &ep),
            };
            nl.set_mac(&ns, &ep.iface, mac)?;
        }
        for h in &t.hosts {
            signals::check()?;
            let ns = self.ns(&h.name);
            netns::run_in(&ns, || -> Result<()> {
                // No router solicitations or DAD probes: they would be noise
                // on measured links.
                for (k, v) in [
                    ("net.ipv6.conf.default.router_solicitations", "0"),
                    ("net.ipv6.conf.all.accept_dad", "0"),
                ] {
                    netns::write_sysctl(k, v)?;
                }
                for (k, v) in &h.sysctl {
                    netns::write_sysctl(k, v)?;
                }
                Ok(())
            })??;
            nl.set_up(&ns, "lo")?;
        }
        for ep in t.interfaces()? {
            nl.set_up(&self.ns(&ep.host), &ep.iface)?;
        }
        // Offloads stay at the kernel's defaults unless a link sets them.
        for l in &t.links {
            for ep in [&l.a, &l.b] {
                for (offload, on) in l.offloads.settings() {
                    peregrine_host::netdev::set_offload(
                        &self.ns(&ep.host),
                        &ep.iface,
                        offload,
                        on,
                    )?;
                }
            }
        }
        for h in &t.hosts {
            signals::check()?;
            let ns = self.ns(&h.name);
            for (dev, addrs) in &h.addr {
                for a in addrs {
                    let (ip, plen) = parse_cidr(a)?;
                    nl.add_addr(&ns, dev, ip, plen)?;
                }
            }
        }
        for h in &t.hosts {
            let ns = self.ns(&h.name);
            for n in &h.neighbours {
                nl.add_neigh(
                    &ns,
                    &n.dev,
                    n.ip,
                    n.mac
                        .parse()
                        .map_err(|e| LabError::Config(format!("{e}")))?,
                )?;
            }
            for r in &h.routes {
                let (dst, plen) = if r.to == "default" {
                    let v6 = r.via.map(|v| v.is_ipv6()).unwrap_or(false);
                    (
                        if v6 {
                            IpAddr::V6(0.into())
                        } else {
                            IpAddr::V4(0.into())
                        },
                        0,
                    )
                } else {
                    parse_cidr(&r.to)?
                };
                nl.add_route(&ns, dst, plen, r.via, r.dev.as_deref())?;
            }
        }
        for h in &t.hosts {
            if let Some(rules) = &h.nft {
                load_nft(&self.ns(&h.name), &h.name, rules)?;
            }
        }
        Ok(())
    }

    /// The other end of the veth at `ep`.
    pub fn peer_of(&self, ep: &Endpoint) -> Option<Endpoint> {
        self.topo.peer_of(ep)
    }

    /// Removes the lab now (also done on drop for ephemeral labs).
    pub fn down(&mut self) -> Result<Vec<String>> {
        self.removed = true;
        let _l = LabLock::take()?;
        // What the state file records now: if `lab down` removed the lab
        // already, namespaces named like it since are someone else's; and a
        // lab of that name built since (its state has another token: by
        // another run, or by this process through another handle) is its
        // builder's, left whole: nothing of it is this handle's.
        let state = read_state(&self.topo.name)?;
        match state {
            Some(s) if s.token != self.token => Ok(Vec::new()),
            state => remove(&self.topo.name, state.as_ref().map(|s| &s.topology)),
        }
    }

    /// The pin directory for this lab's BPF objects.
    pub fn pin_dir(&self) -> Result<PathBuf> {
        Ok(peregrine_bpf::bpffs::pin_dir(&self.topo.name)?)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.lifetime == Lifetime::Ephemeral && !self.removed {
            if let Err(e) = self.down() {
                eprintln!("peregrine: removing lab {}: {e}", self.topo.name);
            }
        }
    }
}

/// A lab's hosts, for the data plane: host `h` runs in namespace
/// `pg-<lab>-<h>`, veth peers are the topology's links.
impl peregrine_dataplane::Hosts for Topology {
    fn netns(&self, host: &str) -> peregrine_dataplane::Result<String> {
        match self.host(host) {
            Some(_) => Ok(ns_name(&self.name, host)),
            None => Err(peregrine_dataplane::DataplaneError::Config(format!(
                "lab {} has no host {host:?}",
                self.name
            ))),
        }
    }

    fn veth_peer(
        &self,
        end: &peregrine_dataplane::HostIface,
    ) -> Option<peregrine_dataplane::HostIface> {
        let p = self.peer_of(&Endpoint {
            host: end.host.clone(),
            iface: end.iface.clone(),
        })?;
        Some(peregrine_dataplane::HostIface {
            host: p.host,
            iface: p.iface,
        })
    }
}
