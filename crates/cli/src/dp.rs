//! `peregrine router ...` and `peregrine chain ...`: the XDP data plane,
//! attached and left running (pinned) until detached or removed.
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use peregrine_bpf::router::{action_name, read_pinned_stats, FibMode, PortStats, ACTIONS};
use peregrine_bpf::XdpMode;
use peregrine_lab::dataplane::{pinned_ports, Dataplane, DataplaneConfig};
use peregrine_lab::{lab, signals};

#[derive(Args, Clone)]
pub struct Scope {
    /// Lab of the router host (with --host); default: this namespace.
    #[arg(long, requires = "host")]
    pub lab: Option<String>,
    /// Host (namespace) of the lab that runs the router.
    #[arg(long, requires = "lab")]
    pub host: Option<String>,
}

impl Scope {
    fn ns(&self) -> Result<Option<String>> {
        match (&self.lab, &self.host) {
            (Some(l), Some(h)) => {
                let st = lab::state(l)?;
                if st.topology.host(h).is_none() {
                    bail!("lab {l} has no host {h:?}");
                }
                Ok(Some(lab::ns_name(l, h)))
            }
            _ => Ok(None),
        }
    }

    /// Pin directory below /sys/fs/bpf/peregrine: `<lab>/dp-<host>` (the
    /// same place `chain apply` uses), or `_root/dp` outside labs.
    fn pin_sub(&self) -> String {
        match (&self.lab, &self.host) {
            (Some(l), Some(h)) => format!("{l}/dp-{h}"),
            _ => "_root/dp".into(),
        }
    }

    fn pin_dir(&self) -> PathBuf {
        Path::new(peregrine_bpf::bpffs::PIN_ROOT).join(self.pin_sub())
    }
}

#[derive(Subcommand)]
pub enum RouterCmd {
    /// Attach the XDP router to interfaces and leave it running.
    Attach {
        #[arg(required = true)]
        ifaces: Vec<String>,
        #[arg(long, default_value = "native")]
        mode: String,
        /// FIB lookup: full (policy rules) or direct (main table).
        #[arg(long, default_value = "full")]
        fib: String,
        #[command(flatten)]
        scope: Scope,
    },
    /// Detach the router (all its ports).
    Detach {
        #[command(flatten)]
        scope: Scope,
    },
    /// Per-port, per-action counters; --watch shows rates every second.
    Stats {
        #[command(flatten)]
        scope: Scope,
        #[arg(long)]
        watch: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum ChainCmd {
    /// Attach the router, network functions and chains a file declares.
    Apply { file: PathBuf },
    /// Remove everything the file's deployment attached.
    Remove { file: PathBuf },
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
    let dir = peregrine_bpf::bpffs::pin_dir(&scope.pin_sub())?;
    if let Err(e) = dp.pin(&dir) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e.into());
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
            let dir = scope.pin_dir();
            ensure_free(&dir)?;
            let mode: XdpMode = mode.parse()?;
            let fib: FibMode = fib.parse()?;
            let ns = scope.ns()?;
            let mut dp = Dataplane::router(ns.as_deref(), &ifaces, mode, fib, false)?;
            if let (Some(l), Some(h)) = (&scope.lab, &scope.host) {
                dp.prepare_peers(&lab::state(l)?.topology, h)?;
            }
            pin_or_undo(dp, &scope)?;
            println!(
                "router attached ({mode}, fib {fib:?}) to {}",
                ifaces.join(" ")
            );
            Ok(())
        }
        RouterCmd::Detach { scope } => {
            let dir = scope.pin_dir();
            if !dir.exists() {
                bail!("no router attached here ({} does not exist)", dir.display());
            }
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            println!("router detached");
            Ok(())
        }
        RouterCmd::Stats { scope, watch, json } => stats(&scope, watch, json),
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

fn stats(scope: &Scope, watch: bool, json: bool) -> Result<()> {
    let dir = scope.pin_dir();
    let ns = scope.ns()?;
    if !dir.exists() {
        bail!("no router attached here ({} does not exist)", dir.display());
    }
    let mut prev = read_all(&dir, ns.as_deref())?;
    if !watch {
        if json {
            println!("{}", stats_json(&prev));
        } else {
            for (n, i, s) in &prev {
                println!(
                    "{n} (ifindex {i}): tx {} packets {} bytes",
                    s.tx_packets, s.tx_bytes
                );
                for a in (0..ACTIONS).filter(|&a| s.packets[a] > 0) {
                    println!(
                        "  {:<18} {:>14} packets {:>16} bytes",
                        action_name(a),
                        s.packets[a],
                        s.bytes[a]
                    );
                }
            }
        }
        return Ok(());
    }
    while !signals::stop_requested() {
        signals::sleep(Duration::from_secs(1));
        let now = read_all(&dir, ns.as_deref())?;
        if json {
            println!("{}", stats_json(&now));
        } else {
            for ((n, _, s), (_, _, p)) in now.iter().zip(prev.iter()) {
                let rates: Vec<String> = (0..ACTIONS)
                    .filter(|&a| s.packets[a] > p.packets[a])
                    .map(|a| {
                        format!(
                            "{} {:.3} Mpps",
                            action_name(a),
                            (s.packets[a] - p.packets[a]) as f64 / 1e6
                        )
                    })
                    .collect();
                println!(
                    "{n}: tx {:.3} Mpps; rx {}",
                    (s.tx_packets - p.tx_packets) as f64 / 1e6,
                    if rates.is_empty() {
                        "idle".into()
                    } else {
                        rates.join(", ")
                    }
                );
            }
        }
        prev = now;
    }
    Ok(())
}

pub fn chain(cmd: ChainCmd) -> Result<()> {
    match cmd {
        ChainCmd::Apply { file } => {
            let cfg = DataplaneConfig::from_file(&file)?;
            let topo = lab::state(&cfg.lab)?.topology;
            let scope = Scope {
                lab: Some(cfg.lab.clone()),
                host: Some(cfg.router.clone()),
            };
            let dir = scope.pin_dir();
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
                    .map(|c| format!(
                        "{} ({} -> {})",
                        c.name,
                        peregrine_lab::dataplane::describe_match(&c.matches),
                        c.hops.join(" -> ")
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            Ok(())
        }
        ChainCmd::Remove { file } => {
            let cfg = DataplaneConfig::from_file(&file)?;
            let dir = peregrine_lab::dataplane::pin_dir(&cfg);
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
