//! `peregrine router ...`: the router (XDP or tc), attached and left
//! running (pinned in the host's bpffs) until detached; its lifecycle is
//! `peregrine_dataplane::router`.
use anyhow::Result;
use clap::Subcommand;
use peregrine_bpf::router::{action_name, FibMode, PortStats, ACTIONS};
use peregrine_bpf::XdpMode;
use peregrine_dataplane::router::{self, AttachConfig, Detached};
use peregrine_dataplane::HookChoice;
use peregrine_host::caps::require_bpf;
use peregrine_lab::lab;

use crate::scope::Scope;
use crate::table::Table;
use crate::watch::{Counter, StatsOutput};

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

fn attach(
    ifaces: Vec<String>,
    hook: HookChoice,
    mode: Option<XdpMode>,
    fib: FibMode,
    scope: &Scope,
) -> Result<()> {
    require_bpf("router attach")?;
    crate::agent::refuse_beside_agent("router", scope.ns()?.as_deref())?;
    let state = match &scope.lab {
        Some(l) => Some(lab::state(l)?),
        None => None,
    };
    let mut site = scope.site()?;
    if let (Some(st), Some(h)) = (&state, &scope.host) {
        site.hosts = Some((&st.topology, h.clone()));
    }
    let cfg = AttachConfig {
        ports: ifaces,
        hook,
        mode,
        fib,
    };
    let plan = router::plan(&site, &cfg)?;
    if let Some(d) = &plan.removed_stale {
        eprintln!(
            "removed a stale router attachment ({})",
            peregrine_bpf::bpffs::display(d)
        );
    }
    if let Some(why) = &plan.picked {
        println!("hook: {} ({why})", plan.hook);
    }
    if let Some(w) = &plan.warning {
        eprintln!("{w}");
    }
    let a = plan.attach()?;
    match &a.joined {
        Some(running) => println!(
            "added to the router ({}) here: {}; its ports: {} {}",
            a.hook,
            a.ports.join(" "),
            running.join(" "),
            a.ports.join(" ")
        ),
        None => println!(
            "router attached ({}, fib {}) to {}",
            a.hook,
            format!("{:?}", a.fib).to_lowercase(),
            a.ports.join(" ")
        ),
    }
    if !a.peer_delivered.is_empty() {
        println!(
            "delivering into the peer's namespace with bpf_redirect_peer on {} (its veth peer runs no XDP; while faas serve, the AF_XDP stack or qos serve runs XDP there, the port delivers through the veth instead)",
            a.peer_delivered.join(" ")
        );
    }
    if !a.refreshed.is_empty() {
        println!(
            "delivery to the peer rechecked on {} (an XDP program came or went there)",
            a.refreshed.join(" ")
        );
    }
    Ok(())
}

fn detach(all: bool, ifaces: &[String], scope: &Scope) -> Result<()> {
    require_bpf("router detach")?;
    if all {
        println!("detached {} router attachment(s)", router::detach_all()?);
        return Ok(());
    }
    match router::detach(&scope.site()?, ifaces)? {
        Detached::Ports { removed, left } => println!(
            "removed from the router: {}; its ports: {}",
            removed.join(" "),
            left.join(" ")
        ),
        Detached::Router { .. } => println!("router detached"),
    }
    Ok(())
}

fn list(json: bool) -> Result<()> {
    require_bpf("router list")?;
    let gone = peregrine_dataplane::pins::remove_of_gone_namespaces()?;
    if gone > 0 {
        eprintln!("removed {gone} router attachment(s) of network namespaces that no longer exist");
    }
    let rows = router::list();
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
        } => attach(ifaces, hook, mode, fib, &scope),
        RouterCmd::Detach { all, ifaces, scope } => detach(all, &ifaces, &scope),
        RouterCmd::Stats { scope, out } => stats(&scope, &out),
        RouterCmd::List { json } => list(json),
    }
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
    require_bpf("router stats")?;
    let dir = scope
        .site()?
        .attached_dir("; attach one with `router attach`")?;
    let now = router::stats(&dir)?;
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
        move || Ok(router_counters(&router::stats(&dir)?)),
    )
}
