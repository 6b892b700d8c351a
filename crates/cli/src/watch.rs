//! `--watch` for every command that shows counters: a sample every
//! `--interval`, rates computed between samples (packets/s and bit/s per
//! counter), until Ctrl-C or `--count` samples; JSON lines with `--json`.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use peregrine_host::signals;

use crate::table::{si, Table};
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

pub use crate::metrics::Counter;

/// Rates of `now` against `prev` over `dt` seconds: (pps, bit/s) per counter
/// (counters matched by labels; a counter new in `now` counts from 0).
fn rates(prev: &[Counter], now: &[Counter], dt: f64) -> Vec<(f64, Option<f64>)> {
    now.iter()
        .map(|c| {
            let p = prev.iter().find(|p| p.labels == c.labels);
            let dp = c.packets.saturating_sub(p.map_or(0, |p| p.packets));
            let db = c
                .bytes
                .map(|b| b.saturating_sub(p.and_then(|p| p.bytes).unwrap_or(0)));
            let dt = dt.max(1e-9);
            (dp as f64 / dt, db.map(|b| b as f64 * 8.0 / dt))
        })
        .collect()
}

/// Samples with `sample` every interval and prints one block (a table, or
/// with `json` one JSON object per line) per sample. Counters idle since
/// the start are left out of the table, not of the JSON.
pub fn watch(
    args: &WatchArgs,
    json: bool,
    mut sample: impl FnMut() -> Result<Vec<Counter>>,
) -> Result<()> {
    let start = Instant::now();
    let first = sample()?;
    let mut prev = first.clone();
    let mut last = start;
    let mut n = 0u64;
    while !signals::stop_requested() && args.count.is_none_or(|c| n < c) {
        signals::sleep(args.interval());
        if signals::stop_requested() {
            break;
        }
        let now = sample()?;
        let t = Instant::now();
        let dt = t.duration_since(last).as_secs_f64();
        let elapsed = t.duration_since(start).as_secs_f64();
        let r = rates(&prev, &now, dt);
        if json {
            let counters: Vec<serde_json::Value> = now
                .iter()
                .zip(&r)
                .map(|(c, (pps, bps))| {
                    let mut o = serde_json::Map::new();
                    for (k, v) in &c.labels {
                        o.insert(k.clone(), v.clone().into());
                    }
                    o.insert("packets".into(), c.packets.into());
                    o.insert("pps".into(), (*pps).into());
                    if let (Some(b), Some(bps)) = (c.bytes, bps) {
                        o.insert("bytes".into(), b.into());
                        o.insert("bits_per_s".into(), (*bps).into());
                    }
                    o.into()
                })
                .collect();
            let unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            println!(
                "{}",
                serde_json::json!({
                    "time": elapsed, "unix_time": unix, "interval_s": dt, "counters": counters,
                })
            );
        } else {
            if n == 0 {
                println!(
                    "{:>8}  {:<28} {:>10} {:>10} {:>14}",
                    "time", "counter", "packets/s", "bit/s", "packets"
                );
            }
            let mut any = false;
            for ((c, (pps, bps)), f) in now.iter().zip(&r).zip(first_of(&first, &now)) {
                if c.packets == f && *pps == 0.0 {
                    continue;
                }
                any = true;
                println!(
                    "{:>8}  {:<28} {:>10} {:>10} {:>14}",
                    format!("{elapsed:.2}s"),
                    c.name(),
                    si(*pps),
                    bps.map_or("-".into(), si),
                    c.packets
                );
            }
            if !any {
                println!("{:>8}  idle", format!("{elapsed:.2}s"));
            }
        }
        prev = now;
        last = t;
        n += 1;
    }
    Ok(())
}

/// Each of `now`'s counters' packets in the first sample (0 if absent).
fn first_of<'a>(first: &'a [Counter], now: &'a [Counter]) -> impl Iterator<Item = u64> + 'a {
    now.iter().map(move |c| {
        first
            .iter()
            .find(|f| f.labels == c.labels)
            .map_or(0, |f| f.packets)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_between_samples() {
        let a = vec![Counter::new(&[("port", "in0")], 100, Some(6400))];
        let b = vec![
            Counter::new(&[("port", "in0")], 1100, Some(70400)),
            Counter::new(&[("port", "in1")], 50, None),
        ];
        let r = rates(&a, &b, 2.0);
        assert_eq!(r[0], (500.0, Some(256000.0)));
        assert_eq!(r[1], (25.0, None));
    }
}

/// How counters are shown: once, watched, served to Prometheus, as JSON.
#[derive(Args, Clone)]
pub(crate) struct StatsOutput {
    #[command(flatten)]
    pub(crate) watch: WatchArgs,
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
        let r = watch(&self.watch, self.json, sample);
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = server {
            let _ = t.join();
        }
        r
    }
}
