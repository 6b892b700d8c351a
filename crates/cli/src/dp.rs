//! `peregrine router ...` and `peregrine chain ...`: the XDP data plane,
//! attached and left running (pinned) until detached or removed.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use peregrine_bpf::nf::NfStats;
use peregrine_bpf::router::{action_name, read_pinned_stats, FibMode, PortStats, ACTIONS};
use peregrine_bpf::XdpMode;
use peregrine_dataplane::pins::{pinned_nf_stats, pinned_ports};
use peregrine_dataplane::{Dataplane, DataplaneConfig, NfConfig, PinScope};
use peregrine_host::netns;
use peregrine_lab::lab;

use crate::scope::Scope;
use crate::table::Table;
use crate::usage;
use crate::usage::UsageError;
use crate::watch::{Counter, WatchArgs};

#[derive(Subcommand)]
pub enum RouterCmd {
    /// Attach the XDP router to interfaces and leave it running.
    Attach {
        /// Interfaces (router ports) of the namespace to route between.
        #[arg(required = true)]
        ifaces: Vec<String>,
        /// XDP mode: native (driver) or generic (skb).
        #[arg(long, default_value = "native")]
        mode: XdpMode,
        /// FIB lookup: full (policy rules) or direct (main table).
        #[arg(long, default_value = "full")]
        fib: FibMode,
        #[command(flatten)]
        scope: Scope,
    },
    /// Detach the router (all its ports).
    Detach {
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
pub struct StatsOutput {
    #[command(flatten)]
    watch: WatchArgs,
    /// Serve the counters to Prometheus here while watching (implies
    /// --watch), e.g. 127.0.0.1:9466.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// JSON: one object, or with --watch one object per sample (JSON lines).
    #[arg(long)]
    json: bool,
}

impl StatsOutput {
    /// Print the counters once (no --watch, no --metrics).
    fn once(&self) -> bool {
        !self.watch.on() && self.metrics.is_none()
    }

    /// Watches `sample`'s counters, serving them to Prometheus at --metrics
    /// (named `prefix`_..., described by `what`) while watching.
    fn watch(
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

fn ensure_free(dir: &Path) -> Result<()> {
    if dir.exists() {
        bail!(
            "a data plane is already attached here ({}); detach or remove it first",
            dir.display()
        );
    }
    Ok(())
}

/// Pins a fresh deployment; on failure nothing stays attached or pinned
/// (the unpinned links close when `dp` drops).
fn pin_or_undo(mut dp: Dataplane, scope: &Scope) -> Result<()> {
    let dir = peregrine_bpf::bpffs::pin_dir(&scope.pins().subdir())?;
    if let Err(e) = dp.pin(&dir) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e.into());
    }
    Ok(())
}

/// Checks that every port of a freshly pinned router runs an XDP program
/// (the attachment took); if one does not, removes the pins and fails.
fn verify_attached(ns: Option<&str>, ifaces: &[String], dir: &Path) -> Result<()> {
    for i in ifaces {
        let id = netns::run_in_opt(ns, || {
            peregrine_bpf::link::ifindex(i).and_then(peregrine_bpf::xdp::attached_prog_id)
        })??;
        if id.is_none() {
            let _ = std::fs::remove_dir_all(dir);
            bail!("the router did not take on {i}: no XDP program is attached there after attaching; nothing left attached");
        }
    }
    Ok(())
}

pub fn router(cmd: RouterCmd) -> Result<()> {
    match cmd {
        RouterCmd::Attach {
            ifaces,
            mode,
            fib,
            scope,
        } => {
            let dir = scope.pins().dir();
            ensure_free(&dir)?;
            let ns = scope.ns()?;
            let mut seen = std::collections::BTreeSet::new();
            for i in &ifaces {
                if !seen.insert(i) {
                    usage!("interface {i} is given twice");
                }
                if netns::run_in_opt(ns.as_deref(), || peregrine_bpf::link::ifindex(i))?.is_err() {
                    usage!("no interface {i:?} in {}", scope.pins().describe());
                }
            }
            let mut dp = Dataplane::router(ns.as_deref(), &ifaces, mode, fib, false)?;
            if let (Some(l), Some(h)) = (&scope.lab, &scope.host) {
                dp.prepare_peers(&lab::state(l)?.topology, h)?;
            }
            pin_or_undo(dp, &scope)?;
            verify_attached(ns.as_deref(), &ifaces, &dir)?;
            println!(
                "router attached ({mode}, fib {}) to {}",
                format!("{fib:?}").to_lowercase(),
                ifaces.join(" ")
            );
            Ok(())
        }
        RouterCmd::Detach { scope } => {
            let dir = scope.pins().dir();
            if !dir.exists() {
                bail!(
                    "no router attached in {} ({} does not exist)",
                    scope.pins().describe(),
                    dir.display()
                );
            }
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            println!("router detached");
            Ok(())
        }
        RouterCmd::Stats { scope, out } => stats(&scope, &out),
    }
}

fn read_all(dir: &Path, ns: Option<&str>) -> Result<Vec<(String, u32, PortStats)>> {
    pinned_ports(dir, ns)?
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
    let dir = scope.pins().dir();
    let ns = scope.ns()?;
    if !dir.exists() {
        bail!(
            "no router attached in {} ({} does not exist); attach one with `router attach`",
            scope.pins().describe(),
            dir.display()
        );
    }
    let now = read_all(&dir, ns.as_deref())?;
    if out.once() {
        if out.json {
            println!("{}", stats_json(&now));
        } else {
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
            print!("{}", t.render());
        }
        return Ok(());
    }
    out.watch(
        "peregrine_router",
        "seen by the XDP router, per port and counter (rx_<action>, tx)",
        move || Ok(router_counters(&read_all(&dir, ns.as_deref())?)),
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
    if out.once() {
        if out.json {
            let fs: Vec<_> = now
                .iter()
                .map(|(n, s)| {
                    serde_json::json!({
                        "host": n.host, "iface": n.iface, "kind": n.kind.name(),
                        "packets": s.packets, "bytes": s.bytes, "sent": s.sent,
                        "dropped": s.dropped, "ip": s.ip,
                    })
                })
                .collect();
            println!("{}", serde_json::json!({ "lab": cfg.lab, "functions": fs }));
        } else {
            let mut t = Table::new(&["function", "kind", "received", "bytes", "sent", "dropped"]);
            for (n, s) in &now {
                t.row(vec![
                    format!("{}:{}", n.host, n.iface),
                    n.kind.name().to_string(),
                    s.packets.to_string(),
                    s.bytes.to_string(),
                    s.sent.to_string(),
                    s.dropped.to_string(),
                ]);
            }
            print!("{}", t.render());
        }
        return Ok(());
    }
    out.watch(
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
            let topo = lab::state(&cfg.lab)?.topology;
            let scope = Scope {
                lab: Some(cfg.lab.clone()),
                host: Some(cfg.router.clone()),
            };
            let dir = scope.pins().dir();
            ensure_free(&dir)?;
            let dp = Dataplane::deploy(&topo, &cfg)?;
            let nfs: Vec<String> = dp
                .nfs
                .iter()
                .map(|n| format!("{}:{}", n.host, n.iface))
                .collect();
            pin_or_undo(dp, &scope)?;
            println!(
                "applied: router on {}:{}, functions {}, chains {}",
                cfg.lab,
                cfg.router,
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
            let dir = PinScope::of(&cfg).dir();
            if !dir.exists() {
                bail!(
                    "nothing applied from {} ({} does not exist)",
                    file.display(),
                    dir.display()
                );
            }
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            println!("removed");
            Ok(())
        }
    }
}
