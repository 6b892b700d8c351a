//! Pods handed to the agent by the CNI plugin (`peregrine-cni`): each pod
//! interface's host side joins the node's router, with the pod's bandwidth
//! (the `kubernetes.io/ingress-bandwidth` / `egress-bandwidth`
//! annotations, as runtimeConfig `bandwidth`) policed and its
//! `peregrine.io/` deny lists (`annotations`) in front of those rates. The
//! agent records them beside its state so that a restarted agent keeps
//! them.
use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use peregrine_bpf::policer::Rate;
use peregrine_bpf::router::FibMode;
use peregrine_bpf::Hook;
use peregrine_dataplane::{HookChoice, TcAttach};
use peregrine_host::netns;
use peregrine_qos::config::{default_burst, PolicerConfig};
use peregrine_qos::shaper;
use serde::{Deserialize, Serialize};

use crate::annotations::{self, Direction};
use crate::compose;
use crate::decl::{NodeDecl, QosDecl, RouterDecl};

/// A pod interface: the CNI attachment's key (container id, interface).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PodKey {
    pub container_id: String,
    /// The interface's name inside the pod (CNI_IFNAME).
    pub ifname: String,
}

/// runtimeConfig `bandwidth`, as the CNI `bandwidth` plugin reads it:
/// rates in bit/s, bursts in bits; absent (or a rate of 0) is unlimited.
/// containerd writes the keys capitalized (`EgressRate`, go-cni's field
/// names; Go's JSON decoding ignores case), the spec's conventions
/// camelCase: both are read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    #[serde(default, alias = "IngressRate", skip_serializing_if = "unset")]
    pub ingress_rate: Option<u64>,
    #[serde(default, alias = "IngressBurst", skip_serializing_if = "unset")]
    pub ingress_burst: Option<u64>,
    #[serde(default, alias = "EgressRate", skip_serializing_if = "unset")]
    pub egress_rate: Option<u64>,
    #[serde(default, alias = "EgressBurst", skip_serializing_if = "unset")]
    pub egress_burst: Option<u64>,
}

/// A key left out of the JSON written (`skip_serializing_if`).
fn unset(v: &Option<u64>) -> bool {
    v.is_none()
}

impl Bandwidth {
    pub fn is_empty(&self) -> bool {
        self.ingress_rate.is_none() && self.egress_rate.is_none()
    }

    /// A rate of 0 is no limit (containerd sends 0 for a direction the
    /// pod's annotations leave out), and so is its burst.
    pub fn normalized(self) -> Bandwidth {
        let dir = |rate: Option<u64>, burst: Option<u64>| match rate {
            Some(0) | None => (None, None),
            r => (r, burst),
        };
        let (ingress_rate, ingress_burst) = dir(self.ingress_rate, self.ingress_burst);
        let (egress_rate, egress_burst) = dir(self.egress_rate, self.egress_burst);
        Bandwidth {
            ingress_rate,
            ingress_burst,
            egress_rate,
            egress_burst,
        }
    }
}

/// One pod interface handed over by the plugin's ADD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodPort {
    #[serde(flatten)]
    pub key: PodKey,
    /// The pod's network namespace (CNI_NETNS).
    pub netns: String,
    /// The host side of the pod's interface, in the agent's namespace.
    pub host_iface: String,
    /// The pod's addresses (CIDR notation).
    #[serde(default)]
    pub ips: Vec<String>,
    /// Kubernetes names, from CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME,
    /// K8S_POD_UID); absent outside Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Bandwidth::is_empty")]
    pub bandwidth: Bandwidth,
    /// The pod's `peregrine.io/...` annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl std::fmt::Display for PodKey {
    /// `CONTAINER_ID/IFNAME`, the id cut to 12 characters as runtimes show it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id: String = self.container_id.chars().take(12).collect();
        write!(f, "{id}/{}", self.ifname)
    }
}

impl PodPort {
    /// "pod NAMESPACE/NAME (ID/IFNAME)", or "pod ID/IFNAME" outside
    /// Kubernetes: how every line about it names it.
    pub fn who(&self) -> String {
        match (&self.pod_namespace, &self.pod_name) {
            (Some(ns), Some(n)) => format!("pod {ns}/{n} ({})", self.key),
            (None, Some(n)) => format!("pod {n} ({})", self.key),
            _ => format!("pod {}", self.key),
        }
    }

    /// The `pod` label of its metrics: the Kubernetes name, or the
    /// container id.
    pub fn label(&self) -> String {
        self.pod_name
            .clone()
            .unwrap_or_else(|| self.key.container_id.clone())
    }
}

/// Bursts from this many bits up are the runtimes' "no burst given"
/// (kubelet's math.MaxInt32, containerd's math.MaxUint32, CRI-O's
/// math.MaxUint32 * 8): taken as absent, not as a 256 MiB-512 MiB bucket
/// that would let the first half gigabyte through unpoliced.
pub const NO_BURST_BITS: u64 = i32::MAX as u64;

/// The policer's burst (bytes) for `rate_bps` and the burst the pod asked
/// for (bits): that, but at least the qos rules file's own default (what
/// the rate earns over TCP's minimum retransmission timeout, at least a
/// GSO packet); absent, or one of the runtimes' "no limit" values, is that
/// floor.
pub fn burst_bytes(rate_bps: u64, burst_bits: Option<u64>) -> u64 {
    let floor = default_burst(Rate::Bits(rate_bps));
    match burst_bits {
        Some(b) if b > 0 && b < NO_BURST_BITS => b.div_ceil(8).max(floor),
        _ => floor,
    }
}

impl PodPort {
    /// The rate and burst (bits) of `dir`.
    fn rate(&self, dir: Direction) -> (Option<u64>, Option<u64>) {
        let b = &self.bandwidth;
        match dir {
            Direction::Ingress => (b.ingress_rate, b.ingress_burst),
            Direction::Egress => (b.egress_rate, b.egress_burst),
        }
    }

    /// Whether `dir` is policed: a rate, a deny list, or both.
    pub fn polices(&self, dir: Direction) -> bool {
        self.rate(dir).0.is_some() || self.annotations.contains_key(dir.annotation())
    }

    /// What polices `dir`, for people: "ingress_rate",
    /// "peregrine.io/ingress-deny and ingress_rate", ...
    pub fn policed_by(&self, dir: Direction) -> String {
        let rate = match dir {
            Direction::Ingress => "ingress_rate",
            Direction::Egress => "egress_rate",
        };
        match (
            self.annotations.contains_key(dir.annotation()),
            self.rate(dir).0.is_some(),
        ) {
            (true, true) => format!("{} and {rate}", dir.annotation()),
            (true, false) => dir.annotation().to_string(),
            _ => rate.to_string(),
        }
    }
}

/// The pod's policer of `dir` as a rules file, at tc: a rule of rate 0 per
/// entry of its deny list, then one rule for every packet at its rate
/// with its burst (either may be absent). None when it has neither.
fn policer_config(p: &PodPort, dir: Direction) -> Result<Option<(String, PolicerConfig)>, String> {
    if !p.polices(dir) {
        return Ok(None);
    }
    let mut file = String::from("hook = \"tc\"\n");
    for d in annotations::denies(&p.annotations, dir)? {
        file.push('\n');
        file.push_str(&d.rule(dir));
    }
    let (rate, burst) = p.rate(dir);
    if let Some(rate_bps) = rate {
        file.push_str(&format!(
            "\n[[rule]]\nrate = \"{rate_bps}bit\"\nburst = \"{}\"\n",
            burst_bytes(rate_bps, burst)
        ));
    }
    let cfg = PolicerConfig::parse(&file).map_err(|e| format!("{}: {e}", p.policed_by(dir)))?;
    Ok(Some((file, cfg)))
}

/// The pod's egress policer (what it sends: `egress_rate` and
/// `peregrine.io/egress-deny`) as the node's policer on its host
/// interface's ingress: a `[[qos]]` of the effective declaration.
pub fn egress_qos(p: &PodPort) -> Option<Result<QosDecl, String>> {
    policer_config(p, Direction::Egress)
        .map(|c| {
            c.map(|(file, cfg)| QosDecl {
                iface: p.host_iface.clone(),
                file,
                cfg,
            })
        })
        .transpose()
}

/// What the agent holds for one pod interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    pub pod: PodPort,
    /// The `ingress_rate` policer or `egress_rate` shaper put on the pod's
    /// own interface inside its namespace: that namespace's cookie (None:
    /// nothing put there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_pod: Option<u64>,
    /// The link id of the ingress policer the agent put there (None: it
    /// put none). A policer with another id on that interface is someone
    /// else's: never replaced, never removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_pod_policer: Option<u32>,
    /// Saved before the agent puts QoS inside the pod and cleared once
    /// what it put is recorded. A restarted agent that finds it takes the
    /// live policer there as its own unless it is the one that ran before:
    /// an agent killed between the attach and the record leaves nothing
    /// behind after the pod's DEL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_pod_pending: Option<InPodPending>,
}

/// What ran on the pod's interface inside its namespace before the agent
/// put its QoS there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InPodPending {
    /// The link id of the policer that ran there (None: none did).
    pub before: Option<u32>,
}

/// The registry file's format. 1: records say which in-pod policer is the
/// agent's (`in_pod_policer`) and mark what is being put there
/// (`in_pod_pending`). A file without a version and with neither field in
/// any record is an older agent's that kept neither: only its records are
/// adopted by sight (`RegistryFile::legacy`). Unversioned files that carry
/// either field (development builds between the two) are read as version 1.
const REGISTRY_VERSION: u32 = 1;

#[derive(Debug, Default, Serialize, Deserialize)]
struct RegistryFile {
    #[serde(default)]
    version: u32,
    netns_cookie: u64,
    pods: Vec<PodRecord>,
}

impl RegistryFile {
    /// Written by an agent that kept no in-pod link ids: no version, and
    /// no record says which in-pod policer is the agent's or was pending.
    fn legacy(&self) -> bool {
        self.version < REGISTRY_VERSION
            && self
                .pods
                .iter()
                .all(|r| r.in_pod_policer.is_none() && r.in_pod_pending.is_none())
    }
}

/// The pods the agent holds, persisted in its run directory
/// (`pods.json`, written atomically after every change) so that a
/// restarted agent keeps them and adopts their ports and policers.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    dir: PathBuf,
    cookie: u64,
    pub pods: BTreeMap<PodKey, PodRecord>,
}

impl Registry {
    fn path(dir: &Path) -> PathBuf {
        dir.join("pods.json")
    }

    /// What an earlier agent of namespace `cookie` recorded in `dir`
    /// (empty when none, or another namespace's).
    pub fn load(dir: &Path, cookie: u64) -> Registry {
        let f: RegistryFile = std::fs::read(Self::path(dir))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let legacy = f.legacy();
        let mut pods: BTreeMap<PodKey, PodRecord> = if f.netns_cookie == cookie {
            f.pods.into_iter().map(|r| (r.pod.key.clone(), r)).collect()
        } else {
            BTreeMap::new()
        };
        adopt_unrecorded_policers(&mut pods, legacy);
        Registry {
            dir: dir.to_path_buf(),
            cookie,
            pods,
        }
    }

    /// Writes it (a temporary file renamed over the old one).
    pub fn save(&self) -> Result<(), String> {
        let f = RegistryFile {
            version: REGISTRY_VERSION,
            netns_cookie: self.cookie,
            pods: self.pods.values().cloned().collect(),
        };
        let tmp = self.dir.join("pods.json.tmp");
        let path = Self::path(&self.dir);
        std::fs::write(&tmp, serde_json::to_vec_pretty(&f).unwrap_or_default())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("saving {}: {e}", path.display()))
    }

    /// The pod whose host interface is `iface`.
    pub fn by_host_iface(&self, iface: &str) -> Option<&PodRecord> {
        self.pods.values().find(|r| r.pod.host_iface == iface)
    }
}

/// The node as reconciled: the declaration, with every pod's host
/// interface a router port (a router with `router attach`'s defaults
/// when none is declared: hook auto, full FIB) and every pod's
/// `egress_rate` a policer on it.
pub fn effective(decl: &NodeDecl, reg: &Registry) -> NodeDecl {
    if reg.pods.is_empty() {
        return decl.clone();
    }
    let mut d = decl.clone();
    let r = d.router.get_or_insert_with(|| RouterDecl {
        ports: Vec::new(),
        hook: HookChoice::Auto,
        mode: None,
        tc_attach: TcAttach::default(),
        fib: FibMode::Full,
    });
    for rec in reg.pods.values() {
        if !r.ports.contains(&rec.pod.host_iface) {
            r.ports.push(rec.pod.host_iface.clone());
        }
    }
    for rec in reg.pods.values() {
        if d.qos.iter().any(|q| q.iface == rec.pod.host_iface) {
            continue;
        }
        if let Some(Ok(q)) = egress_qos(&rec.pod) {
            d.qos.push(q);
        }
    }
    d
}

fn check_cidr(s: &str) -> Result<(), String> {
    let (a, len) = s.split_once('/').unwrap_or((s, ""));
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("ip {s:?}: not an address in CIDR notation (198.18.0.2/24)"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    match len.parse::<u8>() {
        Ok(l) if l <= max => Ok(()),
        _ => Err(format!("ip {s:?}: the prefix length after / is 0 to {max}")),
    }
}

/// Everything wrong with an ADD before anything changes, as one line.
pub(crate) fn validate(p: &PodPort, decl: &NodeDecl, reg: &Registry) -> Result<(), String> {
    if p.key.container_id.trim().is_empty() {
        return Err("container_id is empty".into());
    }
    if !crate::names::valid_iface(&p.key.ifname) {
        return Err(format!(
            "ifname {:?} is not an interface name",
            p.key.ifname
        ));
    }
    if p.netns.trim().is_empty() {
        return Err("netns is empty (the pod's network namespace, CNI_NETNS)".into());
    }
    if !crate::names::valid_iface(&p.host_iface) {
        return Err(format!(
            "host_iface {:?} is not an interface name",
            p.host_iface
        ));
    }
    for ip in &p.ips {
        check_cidr(ip)?;
    }
    let bw = &p.bandwidth;
    for (what, rate, burst) in [
        ("ingress", bw.ingress_rate, bw.ingress_burst),
        ("egress", bw.egress_rate, bw.egress_burst),
    ] {
        match (rate, burst) {
            (Some(0), _) => return Err(format!("{what}Rate 0: a rate is above 0")),
            (None, Some(_)) => {
                return Err(format!(
                    "{what}Burst without {what}Rate: a burst needs a rate"
                ))
            }
            _ => {}
        }
    }
    annotations::check(&p.annotations)?;
    if let Some(Err(e)) = egress_qos(p) {
        return Err(e);
    }
    policer_config(p, Direction::Ingress)?;
    if let Some(other) = reg
        .by_host_iface(&p.host_iface)
        .filter(|r| r.pod.key != p.key)
    {
        return Err(format!(
            "host interface {} belongs to {} already",
            p.host_iface,
            other.pod.who()
        ));
    }
    if p.polices(Direction::Egress) && decl.qos.iter().any(|q| q.iface == p.host_iface) {
        return Err(format!(
            "the declaration has a [[qos]] on {}: the pod's {} cannot police it too",
            p.host_iface,
            p.policed_by(Direction::Egress)
        ));
    }
    if peregrine_bpf::link::ifindex(&p.host_iface).is_err() {
        return Err(format!(
            "host interface {} does not exist in the agent's network namespace",
            p.host_iface
        ));
    }
    if !Path::new(&p.netns).exists() {
        return Err(format!("netns {}: no such file", p.netns));
    }
    // The node with this pod must compose (one XDP program per interface).
    let mut with = reg.clone();
    with.pods.insert(
        p.key.clone(),
        PodRecord {
            pod: p.clone(),
            in_pod: None,
            in_pod_policer: None,
            in_pod_pending: None,
        },
    );
    let before = compose::check(&effective(decl, reg));
    if let Some(e) = compose::check(&effective(decl, &with))
        .into_iter()
        .find(|e| !before.contains(e))
    {
        return Err(e);
    }
    Ok(())
}

/// Runs `f` on a short-lived thread inside the network namespace at
/// `path` (a /run/netns or /proc/PID/ns/net file): `f` and the cookie of
/// that namespace.
fn in_netns<T: Send>(path: &str, f: impl FnOnce() -> T + Send) -> Result<(u64, T), String> {
    let file = File::open(path).map_err(|e| format!("netns {path}: {e}"))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            netns::run_in_file(&file, || {
                let c = netns::cookie().map_err(|e| e.to_string())?;
                Ok((c, f()))
            })
            .map_err(|e| e.to_string())?
        })
        .join()
        .unwrap_or_else(|_| Err(format!("the thread in netns {path} panicked")))
    })
}

/// The egress shaper's bucket (bytes) for `rate_bps` and the burst the
/// pod asked for (bits): that, or 10 ms of the rate, at least 16 KiB.
pub fn shaper_burst(rate_bps: u64, burst_bits: Option<u64>) -> u64 {
    match burst_bits {
        Some(b) if b > 0 && b < NO_BURST_BITS => b.div_ceil(8),
        _ => (rate_bps / 8 / 100).max(16 * 1024),
    }
}

/// What `apply_in_pod` put on the pod's interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InPod {
    /// The pod's namespace's cookie.
    pub cookie: u64,
    /// The link id of the agent's ingress policer there, if one runs.
    pub policer: Option<u32>,
    /// A line per change.
    pub lines: Vec<String>,
}

/// Puts the pod's QoS on its own interface inside its namespace: the
/// `ingress_rate` policer (where what it receives enters it, whichever
/// way the router delivered it) and the `egress_rate` shaper (where what
/// it sends leaves it: its TCP is then held back by its own queue instead
/// of losing segments to the host side's policer). What it no longer asks
/// for is removed. `prev`: the pod's record when it was ADDed before in
/// the same namespace. A policer someone else put on the interface
/// refuses an ingress policer before anything changes, and is left alone
/// otherwise.
pub(crate) fn apply_in_pod(p: &PodPort, prev: Option<&PodRecord>) -> Result<InPod, String> {
    let same_egress = prev.is_some_and(|r| {
        let b = &r.pod.bandwidth;
        (b.egress_rate, b.egress_burst) == (p.bandwidth.egress_rate, p.bandwidth.egress_burst)
    });
    let ours = prev.and_then(|r| r.in_pod_policer);
    let ingress = policer_config(p, Direction::Ingress)?.map(|(_, cfg)| cfg);
    let ingress_by = p.policed_by(Direction::Ingress);
    let egress = p
        .bandwidth
        .egress_rate
        .map(|r| (r, shaper_burst(r, p.bandwidth.egress_burst)));
    let ifname = p.key.ifname.clone();
    let (cookie, r) = in_netns(&p.netns, move || -> Result<_, String> {
        let mut lines = Vec::new();
        let running = peregrine_qos::attach::link_here(&ifname)
            .map_err(|e| e.to_string())?
            .map(|l| l.link_id);
        let theirs = running.filter(|id| Some(*id) != ours);
        if let (Some(id), Some(_)) = (theirs, &ingress) {
            return Err(format!(
                "{ingress_by}: a policer someone else put on {ifname} runs there (link {id}); \
                 remove it (`peregrine qos detach {ifname}` in the pod's namespace) first"
            ));
        }
        // The shaper first: a root qdisc someone else made refuses the
        // ADD before anything is put there.
        let shaped = match egress {
            Some((rate, burst)) => {
                let done =
                    shaper::shape(&ifname, rate, burst).map_err(|e| format!("egress_rate: {e}"))?;
                if done == shaper::Shaped::Added || !same_egress {
                    lines.push(format!(
                        "egress_rate {rate} bit/s shaped on {ifname} inside its namespace \
                         (burst {burst} B)"
                    ));
                }
                Some(done)
            }
            None => {
                if shaper::unshape(&ifname).map_err(|e| format!("egress_rate: {e}"))? {
                    lines.push(format!("egress_rate shaper on {ifname} removed"));
                }
                None
            }
        };
        let policer = match ingress {
            Some(cfg) => {
                let applied = peregrine_qos::attach::apply(&ifname, Hook::TC, &cfg.rules)
                    .and_then(|_| peregrine_qos::attach::link_here(&ifname));
                match applied {
                    Ok(Some(l)) => {
                        lines.push(format!(
                            "{ingress_by} policed on {ifname} inside its namespace"
                        ));
                        Some(l.link_id)
                    }
                    failed => {
                        // Nothing half-made stays: a shaper or a policer
                        // made just now goes.
                        if shaped == Some(shaper::Shaped::Added) {
                            let _ = shaper::unshape(&ifname);
                        }
                        if running.is_none() {
                            let _ = peregrine_qos::attach::detach(&ifname);
                        }
                        let why = match failed {
                            Err(e) => e.to_string(),
                            _ => "attached, but no link runs".into(),
                        };
                        return Err(format!("{ingress_by}: {why}"));
                    }
                }
            }
            // The agent's own policer, no longer asked for, goes; one it
            // could not remove stays recorded (a later DEL tries again).
            None => match running.filter(|id| Some(*id) == ours) {
                Some(id) => match peregrine_qos::attach::detach(&ifname) {
                    Ok(()) => {
                        lines.push(format!("ingress policer on {ifname} removed"));
                        None
                    }
                    Err(e) => {
                        tracing::warn!("removing the ingress policer on {ifname}: {e}");
                        Some(id)
                    }
                },
                None => None,
            },
        };
        Ok((policer, lines))
    })?;
    r.map(|(policer, lines)| InPod {
        cookie,
        policer,
        lines,
    })
    .map_err(|e| format!("{e} (on {} in {})", p.key.ifname, p.netns))
}

/// The pod's namespace's cookie and the link id of the policer that runs
/// on its interface there now: what `in_pod_pending` records.
pub(crate) fn in_pod_before(p: &PodPort) -> Result<(u64, InPodPending), String> {
    let ifname = p.key.ifname.clone();
    let (cookie, link) = in_netns(&p.netns, move || {
        peregrine_qos::attach::link_here(&ifname).map(|l| l.map(|l| l.link_id))
    })?;
    let before = link.map_err(|e| format!("{e} (on {} in {})", p.key.ifname, p.netns))?;
    Ok((cookie, InPodPending { before }))
}

/// Removes the pod's in-namespace QoS: the policer (the agent's own, by
/// its link id) and the shaper in its namespace if that is still the one
/// recorded, and the policer's pins either way (a namespace gone leaves
/// them stale; its shaper went with its interface). A line for people
/// when something went.
pub(crate) fn remove_in_pod(rec: &PodRecord) -> Result<Option<String>, String> {
    let Some(cookie) = rec.in_pod else {
        return Ok(None);
    };
    let p = &rec.pod;
    let ours = rec.in_pod_policer;
    let ifname = p.key.ifname.clone();
    let mut line = None;
    if let Ok((c, (policer, shaper))) = in_netns(&p.netns, || {
        if netns::cookie().ok() != Some(cookie) {
            return (Ok(false), false);
        }
        let running = peregrine_qos::attach::link_here(&ifname)
            .ok()
            .flatten()
            .map(|l| l.link_id);
        let policer = match ours.filter(|_| running == ours) {
            Some(_) => peregrine_qos::attach::detach(&ifname).map(|()| true),
            None => Ok(false),
        };
        (policer, shaper::unshape(&ifname).unwrap_or(false))
    }) {
        let policer =
            policer.map_err(|e| format!("{}: removing its ingress policer: {e}", p.who()))?;
        if c == cookie && (policer || shaper) {
            let what = match (policer, shaper) {
                (true, true) => "ingress policer and egress_rate shaper",
                (true, false) => "ingress policer",
                _ => "egress_rate shaper",
            };
            line = Some(format!("{}: {what} on {} removed", p.who(), p.key.ifname));
        }
    }
    for a in peregrine_qos::attach::list().into_iter().filter(|a| {
        a.cookie == cookie
            && a.iface == p.key.ifname
            && ours.is_some()
            && a.link.map(|l| l.link_id) == ours
    }) {
        peregrine_bpf::bpffs::remove_pin_dir(&a.dir)
            .map_err(|e| format!("{}: removing the pins of its ingress policer: {e}", p.who()))?;
        line.get_or_insert_with(|| {
            format!(
                "{}: ingress policer's pins removed (its namespace is gone)",
                p.who()
            )
        });
    }
    Ok(line)
}

/// The pods whose record does not say which policer inside the pod is
/// the agent's: those saved while the agent was putting it there
/// (`in_pod_pending`: a live policer there that is not the one that ran
/// before is the agent's), and, in a file of an agent that kept no link id
/// (`legacy`), those with an in-pod record and no link (the policer there
/// is the one that agent put: it replaced whatever ran there). The pending
/// mark goes either way: a record that adopted nothing says so from then
/// on (no policer of the agent's there), and is never adopted by sight.
fn adopt_unrecorded_policers(pods: &mut BTreeMap<PodKey, PodRecord>, legacy: bool) {
    let unrecorded = |r: &PodRecord| {
        r.in_pod.is_some() && (r.in_pod_pending.is_some() || (legacy && r.in_pod_policer.is_none()))
    };
    if !pods.values().any(unrecorded) {
        return;
    }
    let running = peregrine_qos::attach::list();
    for r in pods.values_mut().filter(|r| unrecorded(r)) {
        let before = r.in_pod_pending.take().and_then(|p| p.before);
        if !r.pod.polices(Direction::Ingress) {
            // The agent puts no policer in a pod not policed on ingress.
            continue;
        }
        let live = running
            .iter()
            .filter(|a| Some(a.cookie) == r.in_pod && a.iface == r.pod.key.ifname)
            .find_map(|a| a.link.filter(|l| l.live()).map(|l| l.link_id));
        if live.is_some() && live != before {
            r.in_pod_policer = live;
        }
    }
}

/// The agent's in-pod policer runs (its record's namespace cookie,
/// interface and link).
pub(crate) fn in_pod_live(rec: &PodRecord) -> bool {
    let (Some(cookie), Some(link)) = (rec.in_pod, rec.in_pod_policer) else {
        return false;
    };
    peregrine_qos::attach::list().into_iter().any(|a| {
        a.cookie == cookie
            && a.iface == rec.pod.key.ifname
            && a.link.is_some_and(|l| l.live() && l.link_id == link)
    })
}

/// The pod's egress shaper is on its interface in the namespace of
/// `cookie`.
pub(crate) fn shaper_live(p: &PodPort, cookie: u64) -> bool {
    let ifname = p.key.ifname.clone();
    in_netns(&p.netns, move || shaper::shaped(&ifname))
        .is_ok_and(|(c, r)| c == cookie && matches!(r, Ok(Some(_))))
}

/// A pod as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PodStatus {
    pub container_id: String,
    pub ifname: String,
    pub pod_namespace: Option<String>,
    pub pod_name: Option<String>,
    pub host_iface: String,
    pub ips: Vec<String>,
    /// Its host interface runs as a router port.
    pub port_live: bool,
    pub egress_rate: Option<u64>,
    pub ingress_rate: Option<u64>,
    /// Its `peregrine.io/` annotations (the deny lists).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The `pod` label of its metrics.
    pub label: String,
}

/// Every pod as `status` shows it (`ports`: the router's, as
/// `reconcile::router_ports` finds them).
pub fn status(reg: &Registry, ports: &[(String, bool)]) -> Vec<PodStatus> {
    reg.pods
        .values()
        .map(|r| {
            let p = &r.pod;
            PodStatus {
                container_id: p.key.container_id.clone(),
                ifname: p.key.ifname.clone(),
                pod_namespace: p.pod_namespace.clone(),
                pod_name: p.pod_name.clone(),
                host_iface: p.host_iface.clone(),
                ips: p.ips.clone(),
                port_live: ports.iter().any(|(i, l)| i == &p.host_iface && *l),
                egress_rate: p.bandwidth.egress_rate,
                ingress_rate: p.bandwidth.ingress_rate,
                annotations: p.annotations.clone(),
                label: p.label(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a file with no version and no record naming an in-pod link is
    /// an older agent's whose records are adopted by sight.
    #[test]
    fn a_registry_file_is_legacy_only_when_nothing_in_it_names_an_in_pod_link() {
        let file = |version: u32, recs: serde_json::Value| -> RegistryFile {
            serde_json::from_value(serde_json::json!({
                "version": version, "netns_cookie": 1, "pods": recs
            }))
            .unwrap()
        };
        let rec = |extra: serde_json::Value| {
            let mut r = serde_json::json!({"pod": {
                "container_id": "c1", "ifname": "eth0", "netns": "/run/netns/x",
                "host_iface": "veth1"
            }, "in_pod": 7});
            r.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            r
        };
        let plain = rec(serde_json::json!({}));
        let linked = rec(serde_json::json!({"in_pod_policer": 12}));
        let pending = rec(serde_json::json!({"in_pod_pending": {"before": null}}));
        assert!(file(0, serde_json::json!([plain])).legacy());
        assert!(!file(0, serde_json::json!([plain, linked])).legacy());
        assert!(!file(0, serde_json::json!([pending, plain])).legacy());
        assert!(!file(1, serde_json::json!([plain])).legacy());
    }

    #[test]
    fn bursts_hold_tcp_and_ignore_the_runtimes_no_limit() {
        // 1 Mbit/s: 200 ms is 25 kB, below a GSO packet.
        assert_eq!(
            burst_bytes(1_000_000, None),
            peregrine_qos::config::MIN_BURST_BYTES
        );
        // 10 Mbit/s and 1 Gbit/s: 200 ms of the rate.
        assert_eq!(burst_bytes(10_000_000, None), 250_000);
        assert_eq!(burst_bytes(1_000_000_000, None), 25_000_000);
        assert_eq!(burst_bytes(10_000_000, Some(8 * 400_000)), 400_000);
        assert_eq!(burst_bytes(10_000_000, Some(8 * 1000)), 250_000);
        for no_limit in [i32::MAX as u64, u32::MAX as u64, u32::MAX as u64 * 8] {
            assert_eq!(burst_bytes(10_000_000, Some(no_limit)), 250_000);
        }
    }

    #[test]
    fn egress_rate_is_one_rule_at_tc() {
        let p: PodPort = serde_json::from_value(serde_json::json!({
            "container_id": "c1", "ifname": "eth0", "netns": "/run/netns/x",
            "host_iface": "veth1", "bandwidth": {"egressRate": 10_000_000u64}
        }))
        .unwrap();
        let q = egress_qos(&p).unwrap().unwrap();
        assert_eq!(q.iface, "veth1");
        assert_eq!(q.cfg.rules.len(), 1);
        assert_eq!(q.hook(), Hook::TC);
        assert_eq!(q.cfg.rules[0].burst, 250_000);
        assert_eq!(
            q.cfg.rules[0].rate,
            peregrine_bpf::policer::Rate::Bits(10_000_000)
        );
    }

    /// A deny list's rules (rate 0) come first, in its order, then the
    /// rate's; a deny list alone makes a policer of its own; a pod with
    /// neither has none.
    #[test]
    fn deny_lists_go_in_front_of_the_rate() {
        let pod = |bw: serde_json::Value, ann: serde_json::Value| -> PodPort {
            serde_json::from_value(serde_json::json!({
                "container_id": "c1", "ifname": "eth0", "netns": "/run/netns/x",
                "host_iface": "veth1", "bandwidth": bw, "annotations": ann,
            }))
            .unwrap()
        };
        let p = pod(
            serde_json::json!({"egressRate": 10_000_000u64}),
            serde_json::json!({"peregrine.io/egress-deny": "tcp/25, 198.18.9.0/24"}),
        );
        let q = egress_qos(&p).unwrap().unwrap();
        let rules = &q.cfg.rules;
        assert_eq!(rules.len(), 3);
        assert_eq!(
            (rules[0].rate, rules[0].matches.dport),
            (Rate::Zero, Some(25))
        );
        assert_eq!(rules[1].matches.dst.unwrap().to_string(), "198.18.9.0/24");
        assert!(rules[0].priority < rules[2].priority && rules[1].priority < rules[2].priority);
        assert_eq!(rules[2].rate, Rate::Bits(10_000_000));
        assert_eq!(
            p.policed_by(Direction::Egress),
            "peregrine.io/egress-deny and egress_rate"
        );
        assert!(!p.polices(Direction::Ingress));

        let p = pod(
            serde_json::json!({}),
            serde_json::json!({"peregrine.io/ingress-deny": "udp/9"}),
        );
        assert!(egress_qos(&p).is_none());
        let (_, cfg) = policer_config(&p, Direction::Ingress).unwrap().unwrap();
        assert_eq!(cfg.rules.len(), 1);
        assert_eq!(cfg.rules[0].matches.proto, Some(17));
        assert!(policer_config(
            &pod(serde_json::json!({}), serde_json::json!({})),
            Direction::Ingress
        )
        .unwrap()
        .is_none());
    }

    #[test]
    fn cidrs() {
        assert!(check_cidr("198.18.0.2/24").is_ok());
        assert!(check_cidr("2001:db8::1/64").is_ok());
        assert!(check_cidr("198.18.0.2/33").is_err());
        assert!(check_cidr("198.18.0.2").is_err());
        assert!(check_cidr("pod").is_err());
    }
}
