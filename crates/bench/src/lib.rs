//! Benchmark orchestration: `peregrine bench gen|router|faas|qos`, the `gen`
//! command, `report` and the showcase. Each one builds its lab, runs every
//! contender in the same run, prints a table (or JSON), writes the result
//! file and plots, and removes the lab. Each configuration is the command
//! line's arguments too (it derives `clap::Args`: flags, defaults, help);
//! the CLI parses into it and calls the benchmark, [`BenchCmd::run`].
use std::fmt;

/// A setting the caller gave that cannot work (a CPU this machine lacks, a
/// loss share out of range): the CLI reports it as a usage error (exit 2).
#[derive(Debug)]
pub struct BadSetting(pub String);

impl fmt::Display for BadSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadSetting {}

/// Returns early with a [`BadSetting`], like `anyhow::bail!` (defined
/// before the modules, which use it by name).
macro_rules! bad_setting {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::BadSetting(format!($($t)*))))
    };
}

pub mod agent;
pub mod cni;
mod command;
pub mod common;
pub mod faas;
pub mod gen;
pub mod netmodes;
pub mod qos;
mod qos_scale;
mod qos_sched;
pub mod quic;
pub mod redraw;
pub mod report;
pub mod router;
pub mod saturation;
pub mod showcase;
pub mod soak;
pub mod tcp;

pub use command::BenchCmd;
pub use common::{command_line, PlacementConfig, RateSetting, ResultOutput, DEFAULT_OUT};
