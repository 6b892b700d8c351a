//! `peregrine router ...` and `peregrine chain ...`: the data plane (XDP or
//! tc), attached and left running (pinned in the host's bpffs) until
//! detached or removed.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use peregrine_bpf::nf::NfStats;
use peregrine_bpf::router::{action_name, read_pinned_stats, FibMode, PortStats, ACTIONS};
use peregrine_bpf::XdpMode;
use peregrine_dataplane::pins::{self, pinned_nf_stats, pinned_ports};
use peregrine_dataplane::{
    hook, Dataplane, DataplaneConfig, HookChoice, NamedNamespaces, NfConfig, Pick, PinScope,
    RouterHook, RunningRouter,
};
use peregrine_host::netns;
use peregrine_lab::lab;

use crate::scope::Scope;
use crate::table::Table;
use crate::usage;
use crate::usage::UsageError;
use crate::watch::{Counter, WatchArgs};

#[derive(Subcommand)]
pub enum RouterCmd {
    /// Attach the router to interfaces and leave it running (pinned in the
    /// host's bpffs, keyed by this network namespace); where a router runs
    /// already, the interfaces join it as ports.
    Attach {
        /// Interfaces (router ports) of the namespace to route between.
        #[arg(required = true)]
        ifaces: Vec<String>,
        /// Hook: xdp, tc, or auto (tc where a port's veth peer has
        /// tx-checksumming or GSO on, which XDP would break; XDP otherwise).
        #[arg(long, default_value = "auto")]
        hook: HookChoice,
        /// XDP mode: native (driver, the default) or generic (skb); XDP only.
        #[arg(long)]
        mode: Option<XdpMode>,
        /// FIB lookup: full (policy rules) or direct (main table).
        #[arg(long, default_value = "full")]
        fib: FibMode,
        #[command(flatten)]
        scope: Scope,
    },
    /// Detach the router of this namespace (all its ports, or only the
    /// ports named), or with --all every router attachment on the host
    /// (stale ones included).
    Detach {
        /// Ports to take out of the router (the others keep forwarding);
        /// none: the whole router.
        #[arg(conflicts_with = "all")]
        ifaces: Vec<String>,
        /// Every router attached outside labs, in any namespace, and what
        /// killed runs or removed namespaces left behind.
        #[arg(long, conflicts_with_all = ["lab", "host"])]
        all: bool,
        #[command(flatten)]
        scope: Scope,
    },
    /// Per-port, per-action counters; --watch prints rates per interval.
    Stats {
        #[command(flatten)]
        scope: Scope,
        #[command(flatten)]
        out: StatsOutput,
    },
    /// Every router attachment on the host: namespace, interface, hook,
    /// program id, and whether it is stale.
    List {
        /// One JSON object: {"attachments": [...]}.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum ChainCmd {
    /// Attach the router, network functions and chains a file declares.
    Apply {
        /// The data plane declaration (TOML; see docs/DATAPLANE.md).
        file: PathBuf,
    },
    /// Remove everything the file's deployment attached.
    Remove {
        /// The declaration that was applied.
        file: PathBuf,
    },
    /// Per-function counters of the chain's network functions (received,
    /// sent on, dropped by the ACL); --watch prints rates per interval.
    Stats {
        /// The declaration that was applied.
        file: PathBuf,
        #[command(flatten)]
        out: StatsOutput,
    },
}

/// How counters are shown: once, watched, served to Prometheus, as JSON.
#[derive(Args, Clone)]
pub(crate) struct StatsOutput {
    #[command(flatten)]
    watch: WatchArgs,
    /// Serve the counters to Prometheus here while watching (implies
    /// --watch), e.g. 127.0.0.1:9466.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// JSON: one object, or with --watch one object per sample (JSON lines).
    #[arg(long)]
    pub(crate) json: bool,
}

impl StatsOutput {
    /// Print the counters once (no --watch, no --metrics).
    pub(crate) fn once(&self) -> bool {
        !self.watch.on() && self.metrics.is_none()
    }

    /// Prints the counters once (`json`, or `table` rendered) when `once`;
    /// else watches them as `watch` does.
    pub(crate) fn show(
        &self,
        json: impl FnOnce() -> serde_json::Value,
        table: impl FnOnce() -> Table,
        prefix: &str,
        what: &str,
        sample: impl FnMut() -> Result<Vec<Counter>> + Clone + Send + 'static,
    ) -> Result<()> {
        if !self.once() {
            return self.watch(prefix, what, sample);
        }
        if self.json {
            println!("{}", json());
        } else {
            print!("{}", table().render());
        }
        Ok(())
    }

    /// Watches `sample`'s counters, serving them to Prometheus at --metrics
    /// (named `prefix`_..., described by `what`) while watching.
    pub(crate) fn watch(
        &self,
        prefix: &str,
        what: &str,
        sample: impl FnMut() -> Result<Vec<Counter>> + Clone + Send + 'static,
    ) -> Result<()> {
        let stop = Arc::new(AtomicBool::new(false));
        let server = match self.metrics {
            Some(a) => {
                let t =
                    crate::metrics::serve_counters(a, stop.clone(), prefix, what, sample.clone())?;
                eprintln!("metrics on http://{a}/metrics");
                Some(t)
            }
            None => None,
        };
        let r = crate::watch::watch(&self.watch, self.json, sample);
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = server {
            let _ = t.join();
        }
        r
    }
}

/// Refuses to deploy over a live data plane; removes a stale one.
fn ensure_free(dir: &Path) -> Result<()> {
    if running_router(dir)?.is_some() {
        bail!(
            "a data plane is already attached here ({}); detach or remove it first",
            peregrine_bpf::bpffs::display(dir)
        );
    }
    Ok(())
}

/// The live router of this namespace, if one runs (new ports join it);
/// removes a stale one (its interfaces are gone, or a killed run left it
/// half-made).
fn running_router(dir: &Path) -> Result<Option<RunningRouter>> {
    if !dir.exists() {
        return Ok(None);
    }
    if pins::attachment(dir).stale() {
        pins::remove(dir)?;
        eprintln!(
            "removed a stale router attachment ({})",
            peregrine_bpf::bpffs::display(dir)
        );
        return Ok(None);
    }
    Ok(Some(RunningRouter::open(dir)?))
}

/// `router attach` where a router runs: the interfaces join it as ports,
/// at its hook. An explicit --hook naming the other hook, or `auto` on a
/// port that needs tc next to an XDP router, is refused in one line.
fn add_ports(
    r: &RunningRouter,
    ns: Option<&str>,
    ifaces: &[String],
    choice: HookChoice,
    mode: Option<XdpMode>,
    pick: Pick,
    dir: &Path,
) -> Result<()> {
    let running_tc = r.hook_kind() == "tc";
    if running_tc && mode.is_some() {
        usage!("--mode is an XDP mode and the router here runs at tc; leave --mode out");
    }
    let hook = match (choice, pick.hook, running_tc) {
        (HookChoice::Auto, RouterHook::Tc, false) => usage!(
            "the router here runs at the XDP hook (on {}), and {} needs tc: {}; detach it and attach every port with --hook tc",
            r.ports.join(" "),
            ifaces.join(" "),
            pick.why
        ),
        (HookChoice::Auto, _, true) => RouterHook::Tc,
        (HookChoice::Xdp, _, true) | (HookChoice::Tc, _, false) => usage!(
            "the router here runs at the {} hook (on {}); new ports join it there: leave --hook out or give --hook {}",
            r.hook_kind(),
            r.ports.join(" "),
            r.hook_kind()
        ),
        (_, h, _) => h,
    };
    if let Some(w) = &pick.warning {
        eprintln!("{w}");
    }
    r.add_ports(ns, ifaces, hook)?;
    if let Err(e) = verify_attached(ifaces, dir) {
        let _ = r.remove_ports(ns, ifaces);
        return Err(e);
    }
    println!(
        "added to the router ({hook}) here: {}; its ports: {} {}",
        ifaces.join(" "),
        r.ports.join(" "),
        ifaces.join(" ")
    );
    say_peer_delivery(&r.peer_delivered(ifaces));
    Ok(())
}

/// Pins a fresh deployment; on failure nothing stays attached or pinned
/// (the unpinned links close when `dp` drops).
fn pin_or_undo(mut dp: Dataplane, dir: &Path) -> Result<()> {
    peregrine_bpf::bpffs::ensure_mounted()?;
    let made = std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", peregrine_bpf::bpffs::display(dir)));
    if let Err(e) = made.and_then(|()| Ok(dp.pin(dir)?)) {
        let _ = pins::remove(dir);
        return Err(e);
    }
    Ok(())
}

/// Checks that every port in `ifaces` of the router pinned in `dir` runs
/// its program (the attachment took).
fn verify_attached(ifaces: &[String], dir: &Path) -> Result<()> {
    let a = pins::attachment(dir);
    for i in ifaces {
        let live = a
            .ports
            .iter()
            .any(|p| &p.iface == i && p.link.is_some_and(|l| l.live()));
        if !live {
            bail!("the router did not take on {i}: its link is not attached after attaching; nothing of this command left attached");
        }
    }
    Ok(())
}

/// Missing capabilities (by name) among those `router` commands need.
fn missing_caps() -> Vec<&'static str> {
    use peregrine_bpf::skel::uapi::types::peregrine_cap;
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

/// One line instead of libbpf's log when the caller may not use BPF.
pub(crate) fn require_caps(cmd: &str) -> Result<()> {
    let missing = missing_caps();
    if !missing.is_empty() {
        bail!(
            "{cmd} needs root (CAP_BPF and CAP_NET_ADMIN); this process lacks {}",
            missing.join(" and ")
        );
    }
    Ok(())
}

/// Checks the ports: each exists, none twice (also under another name).
fn check_ports(ns: Option<&str>, ifaces: &[String], scope: &Scope) -> Result<()> {
    let mut seen: Vec<(u32, &String)> = Vec::new();
    for i in ifaces {
        let idx = match netns::run_in_opt(ns, || peregrine_bpf::link::ifindex(i))? {
            Ok(idx) => idx,
            Err(_) => usage!("no interface {i:?} in {}", scope.pins().describe()),
        };
        if let Some((_, first)) = seen.iter().find(|(s, _)| *s == idx) {
            usage!(
                "same interface twice: {first} and {i} are both ifindex {idx}; give each port once"
            );
        }
        seen.push((idx, i));
    }
    Ok(())
}

fn attach(
    ifaces: &[String],
    hook: HookChoice,
    mode: Option<XdpMode>,
    fib: FibMode,
    scope: &Scope,
) -> Result<()> {
    require_caps("router attach")?;
    let ns = scope.ns()?;
    check_ports(ns.as_deref(), ifaces, scope)?;
    if hook == HookChoice::Tc && mode.is_some() {
        usage!("--mode is an XDP mode; --hook tc takes none (leave --mode out or use --hook xdp)");
    }
    let dir = netns::run_in_opt(ns.as_deref(), || scope.pins().dir())??;
    let running = running_router(&dir)?;
    let pick = netns::run_in_opt(ns.as_deref(), || hook::pick(hook, mode, ifaces))??;
    if let Some(r) = running {
        return add_ports(&r, ns.as_deref(), ifaces, hook, mode, pick, &dir);
    }
    if hook == HookChoice::Auto {
        println!("hook: {} ({})", pick.hook, pick.why);
    }
    if let Some(w) = &pick.warning {
        eprintln!("{w}");
    }
    let mut dp = Dataplane::router(ns.as_deref(), ifaces, pick.hook, fib, false)?;
    let peer: Vec<String> = dp
        .ports
        .iter()
        .filter(|(_, l)| dp.router.peer_delivery(l.ifindex).unwrap_or(false))
        .map(|(n, _)| n.clone())
        .collect();
    match (&scope.lab, &scope.host) {
        (Some(l), Some(h)) => dp.prepare_peers(&lab::state(l)?.topology, h)?,
        _ => dp.prepare_peers_here()?,
    }
    pin_or_undo(dp, &dir)?;
    if let Err(e) = verify_attached(ifaces, &dir) {
        let _ = pins::remove(&dir);
        return Err(e);
    }
    println!(
        "router attached ({}, fib {}) to {}",
        pick.hook,
        format!("{fib:?}").to_lowercase(),
        ifaces.join(" ")
    );
    say_peer_delivery(&peer);
    Ok(())
}

/// Names the ports the tc router delivers through with bpf_redirect_peer,
/// and what that means for an XDP program attached to their peers later.
fn say_peer_delivery(ports: &[String]) {
    if !ports.is_empty() {
        println!(
            "delivering into the peer's namespace with bpf_redirect_peer on {} (its veth peer runs no XDP; one attached there later is bypassed by routed traffic until the port is attached again)",
            ports.join(" ")
        );
    }
}

/// The pin directory of the router attached in `scope`'s namespace; an
/// error, ending with `hint`, when there is none.
fn attached_dir(scope: &Scope, hint: &str) -> Result<PathBuf> {
    let ns = scope.ns()?;
    let dir = netns::run_in_opt(ns.as_deref(), || scope.pins().dir())??;
    if !dir.exists() {
        bail!(
            "no router attached in {} ({} does not exist){hint}",
            scope.pins().describe(),
            peregrine_bpf::bpffs::display(&dir)
        );
    }
    Ok(dir)
}

fn detach(all: bool, ifaces: &[String], scope: &Scope) -> Result<()> {
    require_caps("router detach")?;
    if all {
        let n = pins::remove_all_outside_labs()?;
        let labs: Vec<_> = pins::list_attachments()
            .into_iter()
            .filter(|a| a.lab_host.is_some())
            .collect();
        for a in &labs {
            pins::remove(&a.dir)?;
        }
        println!("detached {} router attachment(s)", n + labs.len());
        return Ok(());
    }
    let dir = attached_dir(scope, "")?;
    if !ifaces.is_empty() {
        let r = RunningRouter::open(&dir)?;
        let ns = scope.ns()?;
        r.remove_ports(ns.as_deref(), ifaces)?;
        let left: Vec<&str> = r
            .ports
            .iter()
            .filter(|p| !ifaces.contains(p))
            .map(|s| s.as_str())
            .collect();
        if !left.is_empty() {
            println!(
                "removed from the router: {}; its ports: {}",
                ifaces.join(" "),
                left.join(" ")
            );
            return Ok(());
        }
        // Every port named: the router goes as a whole, maps and all.
    }
    pins::remove(&dir)?;
    println!("router detached");
    Ok(())
}

/// One attachment as `router list` shows it.
struct Listed {
    namespace: String,
    cookie: Option<u64>,
    iface: String,
    hook: &'static str,
    prog_id: Option<u32>,
    ifindex: u32,
    stale: bool,
}

fn list(json: bool) -> Result<()> {
    require_caps("router list")?;
    let names = netns::cookies();
    let mut rows = Vec::new();
    for a in pins::list_attachments() {
        let stale = a.stale();
        let namespace = match (&a.lab_host, a.cookie) {
            (Some((l, h)), _) => format!("lab {l} host {h}"),
            (None, Some(c)) => names
                .iter()
                .find(|(_, nc)| *nc == c)
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| format!("netns cookie {c}")),
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
                hook: p.link.map(|l| l.hook_kind()).unwrap_or("-"),
                prog_id: p.link.map(|l| l.prog_id),
                ifindex: p.link.map(|l| l.ifindex).unwrap_or(0),
                stale: stale || !p.link.is_some_and(|l| l.live()),
            });
        }
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "namespace": r.namespace, "netns_cookie": r.cookie, "iface": r.iface,
                    "ifindex": r.ifindex, "hook": r.hook, "prog_id": r.prog_id, "stale": r.stale,
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "attachments": v }));
        return Ok(());
    }
    print_attachments(
        "router",
        rows.into_iter()
            .map(|r| (r.namespace, r.iface, r.hook.to_string(), r.prog_id, r.stale))
            .collect(),
    );
    Ok(())
}

/// The table a list command prints: one attachment a row (namespace,
/// iface, hook, program id, stale), or that no `what` is attached.
pub(crate) fn print_attachments(
    what: &str,
    rows: Vec<(String, String, String, Option<u32>, bool)>,
) {
    if rows.is_empty() {
        println!("no {what} attached");
        return;
    }
    let mut t = Table::new(&["namespace", "iface", "hook", "prog id", "state"]);
    for (namespace, iface, hook, prog_id, stale) in rows {
        t.row(vec![
            namespace,
            iface,
            hook,
            prog_id.map_or_else(|| "-".into(), |i| i.to_string()),
            if stale { "stale" } else { "attached" }.to_string(),
        ]);
    }
    print!("{}", t.render());
}

pub fn router(cmd: RouterCmd) -> Result<()> {
    match cmd {
        RouterCmd::Attach {
            ifaces,
            hook,
            mode,
            fib,
            scope,
        } => attach(&ifaces, hook, mode, fib, &scope),
        RouterCmd::Detach { all, ifaces, scope } => detach(all, &ifaces, &scope),
        RouterCmd::Stats { scope, out } => stats(&scope, &out),
        RouterCmd::List { json } => list(json),
    }
}

fn read_all(dir: &Path) -> Result<Vec<(String, u32, PortStats)>> {
    pinned_ports(dir)?
        .into_iter()
        .map(|(n, i)| Ok((n, i, read_pinned_stats(dir, i)?)))
        .collect()
}

fn stats_json(ports: &[(String, u32, PortStats)]) -> serde_json::Value {
    let ports: Vec<_> = ports
        .iter()
        .map(|(n, i, s)| {
            let actions: serde_json::Map<String, serde_json::Value> = (0..ACTIONS)
                .map(|a| (action_name(a).to_string(), serde_json::json!({"packets": s.packets[a], "bytes": s.bytes[a]})))
                .collect();
            serde_json::json!({"port": n, "ifindex": i, "rx": actions, "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes})
        })
        .collect();
    serde_json::json!({ "ports": ports })
}

/// The router's counters as watch/metrics counters: per port, rx per action
/// (`rx_forward`, `rx_pass_local`, ...) and `tx`.
fn router_counters(ports: &[(String, u32, PortStats)]) -> Vec<Counter> {
    let mut out = Vec::new();
    for (n, _, s) in ports {
        for a in 0..ACTIONS {
            let c = format!("rx_{}", action_name(a));
            out.push(Counter::new(
                &[("port", n), ("counter", &c)],
                s.packets[a],
                Some(s.bytes[a]),
            ));
        }
        out.push(Counter::new(
            &[("port", n), ("counter", "tx")],
            s.tx_packets,
            Some(s.tx_bytes),
        ));
    }
    out
}

fn stats(scope: &Scope, out: &StatsOutput) -> Result<()> {
    require_caps("router stats")?;
    let dir = attached_dir(scope, "; attach one with `router attach`")?;
    let now = read_all(&dir)?;
    out.show(
        || stats_json(&now),
        || {
            let mut t = Table::new(&["port", "counter", "packets", "bytes"]);
            for (n, _, s) in &now {
                t.row(vec![
                    n.clone(),
                    "tx".into(),
                    s.tx_packets.to_string(),
                    s.tx_bytes.to_string(),
                ]);
                for a in (0..ACTIONS).filter(|&a| s.packets[a] > 0) {
                    t.row(vec![
                        n.clone(),
                        format!("rx {}", action_name(a)),
                        s.packets[a].to_string(),
                        s.bytes[a].to_string(),
                    ]);
                }
            }
            t
        },
        "peregrine_router",
        "seen by the router, per port and counter (rx_<action>, tx)",
        move || Ok(router_counters(&read_all(&dir)?)),
    )
}

fn nf_counters(nfs: &[(NfConfig, NfStats)]) -> Vec<Counter> {
    let mut out = Vec::new();
    for (n, s) in nfs {
        let f = format!("{}:{}", n.host, n.iface);
        // Bytes are counted on receive only.
        for (counter, value, bytes) in [
            ("received", s.packets, Some(s.bytes)),
            ("sent", s.sent, None),
            ("dropped", s.dropped, None),
            ("csum_completed", s.csum_completed, None),
        ] {
            out.push(Counter::new(
                &[
                    ("function", &f),
                    ("kind", n.kind.name()),
                    ("counter", counter),
                ],
                value,
                bytes,
            ));
        }
    }
    out
}

fn chain_stats(file: &Path, out: &StatsOutput) -> Result<()> {
    let cfg = DataplaneConfig::from_file(file)
        .map_err(|e| anyhow::Error::new(UsageError(e.to_string())))?;
    let now = pinned_nf_stats(&cfg)?;
    let lab = cfg.lab.clone();
    out.show(
        || {
            let fs: Vec<_> = now
                .iter()
                .map(|(n, s)| {
                    serde_json::json!({
                        "host": n.host, "iface": n.iface, "kind": n.kind.name(),
                        "packets": s.packets, "bytes": s.bytes, "sent": s.sent,
                        "dropped": s.dropped, "ip": s.ip, "csum_completed": s.csum_completed,
                    })
                })
                .collect();
            serde_json::json!({ "lab": lab, "functions": fs })
        },
        || {
            let mut t = Table::new(&[
                "function",
                "kind",
                "received",
                "bytes",
                "sent",
                "dropped",
                "csum completed",
            ]);
            for (n, s) in &now {
                t.row(vec![
                    format!("{}:{}", n.host, n.iface),
                    n.kind.name().to_string(),
                    s.packets.to_string(),
                    s.bytes.to_string(),
                    s.sent.to_string(),
                    s.dropped.to_string(),
                    s.csum_completed.to_string(),
                ]);
            }
            t
        },
        "peregrine_nf",
        "of the chain's network functions, per function and counter (received, sent, dropped)",
        move || Ok(nf_counters(&pinned_nf_stats(&cfg)?)),
    )
}

pub fn chain(cmd: ChainCmd) -> Result<()> {
    match cmd {
        ChainCmd::Stats { file, out } => chain_stats(&file, &out),
        ChainCmd::Apply { file } => {
            let cfg = DataplaneConfig::from_file(&file)
                .map_err(|e| anyhow::Error::new(UsageError(e.to_string())))?;
            require_caps("chain apply")?;
            let pin_scope = PinScope::of(&cfg);
            let dir = pin_scope.dir()?;
            ensure_free(&dir)?;
            let dp = match &cfg.lab {
                Some(l) => Dataplane::deploy(&lab::state(l)?.topology, &cfg)?,
                None => Dataplane::deploy(&NamedNamespaces, &cfg)?,
            };
            let nfs: Vec<String> = dp
                .nfs
                .iter()
                .map(|n| format!("{}:{}", n.host, n.iface))
                .collect();
            let hook = dp.hook;
            pin_or_undo(dp, &dir)?;
            println!(
                "applied: router ({hook}) in {}, functions {}, chains {}",
                pin_scope.describe(),
                nfs.join(" "),
                cfg.chains
                    .iter()
                    .map(|c| format!("{} ({} -> {})", c.name, c.matches, c.hops.join(" -> ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            Ok(())
        }
        ChainCmd::Remove { file } => {
            let cfg = DataplaneConfig::from_file(&file)
                .map_err(|e| anyhow::Error::new(UsageError(e.to_string())))?;
            let dir = PinScope::of(&cfg).dir()?;
            if !dir.exists() {
                bail!(
                    "nothing applied from {} ({} does not exist)",
                    file.display(),
                    peregrine_bpf::bpffs::display(&dir)
                );
            }
            pins::remove(&dir)?;
            println!("removed");
            Ok(())
        }
    }
}
