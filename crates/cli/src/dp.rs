//! `peregrine router ...`: the router (XDP or tc), attached and left
//! running (pinned in the host's bpffs) until detached; its lifecycle is
//! `peregrine_dataplane::router`.
use anyhow::Result;
use clap::Subcommand;
use peregrine_bpf::router::FibMode;
use peregrine_bpf::XdpMode;
use peregrine_dataplane::router::{self, AttachConfig, Detached};
use peregrine_dataplane::{report, HookChoice, RouterStats, TcAttach};
use peregrine_host::caps::require_bpf;
use peregrine_lab::lab;

use crate::metrics::StatsOutput;
use crate::scope::Scope;

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
        /// How ports at tc are attached: tcx (a link per port) or cls (a
        /// cls_bpf filter per port in a clsact qdisc: one netlink request,
        /// no RCU wait). Ports joining a running router are attached as
        /// its ports are.
        #[arg(long, default_value = "tcx")]
        tc_attach: TcAttach,
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

fn attach(cfg: AttachConfig, scope: &Scope) -> Result<()> {
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
    let plan = router::plan(&site, &cfg)?;
    if let Some(l) = report::stale_note(&plan.removed_stale) {
        eprintln!("{l}");
    }
    if let Some(why) = &plan.picked {
        println!("hook: {} ({why})", plan.hook);
    }
    if let Some(w) = &plan.warning {
        eprintln!("{w}");
    }
    print!("{}", plan.attach()?);
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
    print!("{}", report::list_text(router::list(), json));
    Ok(())
}

pub fn router(cmd: RouterCmd) -> Result<()> {
    match cmd {
        RouterCmd::Attach {
            ifaces,
            hook,
            mode,
            tc_attach,
            fib,
            scope,
        } => attach(
            AttachConfig {
                ports: ifaces,
                hook,
                mode,
                tc_attach,
                fib,
                refresh_running: true,
            },
            &scope,
        ),
        RouterCmd::Detach { all, ifaces, scope } => detach(all, &ifaces, &scope),
        RouterCmd::Stats { scope, out } => stats(&scope, &out),
        RouterCmd::List { json } => list(json),
    }
}

fn stats(scope: &Scope, out: &StatsOutput) -> Result<()> {
    require_bpf("router stats")?;
    let dir = scope
        .site()?
        .attached_dir("; attach one with `router attach`")?;
    out.show(RouterStats::read(&dir)?, move || {
        Ok(RouterStats::read(&dir)?)
    })
}
