//! `peregrine chain ...`: a data plane declaration (router, network
//! functions, chains) applied and left running until removed; its
//! lifecycle is `peregrine_dataplane::router::{apply, remove}`.
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Subcommand;
use peregrine_bpf::nf::NfStats;
use peregrine_dataplane::pins::pinned_nf_stats;
use peregrine_dataplane::router;
use peregrine_dataplane::{DataplaneConfig, NamedNamespaces, NfConfig, PinScope};
use peregrine_host::caps::require_bpf;
use peregrine_lab::lab;

use crate::table::Table;
use crate::usage::UsageError;
use crate::watch::{Counter, StatsOutput};

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
    let cfg = read_config(file)?;
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

/// A declaration file; what is wrong with it is a usage error.
fn read_config(file: &Path) -> Result<DataplaneConfig> {
    DataplaneConfig::from_file(file).map_err(|e| anyhow::Error::new(UsageError(e.to_string())))
}

pub fn chain(cmd: ChainCmd) -> Result<()> {
    match cmd {
        ChainCmd::Stats { file, out } => chain_stats(&file, &out),
        ChainCmd::Apply { file } => {
            let cfg = read_config(&file)?;
            require_bpf("chain apply")?;
            let a = match &cfg.lab {
                Some(l) => router::apply(&cfg, &lab::state(l)?.topology)?,
                None => router::apply(&cfg, &NamedNamespaces)?,
            };
            if let Some(d) = &a.removed_stale {
                eprintln!(
                    "removed a stale router attachment ({})",
                    peregrine_bpf::bpffs::display(d)
                );
            }
            println!(
                "applied: router ({}) in {}, functions {}, chains {}",
                a.hook,
                PinScope::of(&cfg).describe(),
                a.nfs.join(" "),
                cfg.chains
                    .iter()
                    .map(|c| format!("{} ({} -> {})", c.name, c.matches, c.hops.join(" -> ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            Ok(())
        }
        ChainCmd::Remove { file } => {
            let cfg = read_config(&file)?;
            if router::remove(&cfg)?.is_none() {
                bail!(
                    "nothing applied from {} ({} does not exist)",
                    file.display(),
                    peregrine_bpf::bpffs::display(&PinScope::of(&cfg).dir()?)
                );
            }
            println!("removed");
            Ok(())
        }
    }
}
