//! `peregrine chain ...`: a data plane declaration (router, network
//! functions, chains) applied and left running until removed; its
//! lifecycle is `peregrine_dataplane::router::{apply, remove}`.
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::Subcommand;
use peregrine_dataplane::{report, router, ChainStats, DataplaneConfig, NamedNamespaces, PinScope};
use peregrine_host::caps::require_bpf;
use peregrine_lab::lab;

use crate::metrics::StatsOutput;
use crate::usage::UsageError;

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

fn chain_stats(file: &Path, out: &StatsOutput) -> Result<()> {
    let cfg = read_config(file)?;
    out.show(ChainStats::read(&cfg)?, move || Ok(ChainStats::read(&cfg)?))
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
            if let Some(l) = report::stale_note(&a.removed_stale) {
                eprintln!("{l}");
            }
            println!("{}", a.describe(&cfg));
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
