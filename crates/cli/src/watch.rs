//! `--watch`, `--interval`, `--count` for every command that shows
//! counters; the watching is `peregrine_metrics::Watch`'s.
use std::time::Duration;

use clap::Args;

use crate::units::DurationArg;

#[derive(Args, Clone, Debug, Default)]
pub struct WatchArgs {
    /// Keep printing: a sample every --interval with packets/s and bit/s
    /// per counter, until Ctrl-C or --count samples.
    #[arg(long)]
    pub watch: bool,
    /// Time between samples, e.g. 1s, 500ms (implies --watch; default 1s).
    #[arg(short = 'i', long, value_name = "DURATION")]
    pub interval: Option<DurationArg>,
    /// Stop after N samples (implies --watch).
    #[arg(short = 'c', long, value_name = "N", value_parser = sample_count)]
    pub count: Option<u64>,
}

impl WatchArgs {
    /// Whether to watch (any of --watch, --interval, --count).
    pub fn on(&self) -> bool {
        self.watch || self.interval.is_some() || self.count.is_some()
    }

    pub fn interval(&self) -> Duration {
        self.interval.map(|d| d.0).unwrap_or(Duration::from_secs(1))
    }
}

fn sample_count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "{s:?}: expected a whole number of samples, at least 1"
        )),
    }
}
