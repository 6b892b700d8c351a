//! Counters watched (`router stats --watch`, `qos stats --watch`, ...): a
//! sample every interval, rates computed between samples (packets/s and
//! bit/s per counter), printed as a table or JSON lines, and served to
//! Prometheus meanwhile when asked.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_units::si;

use crate::{serve_counters, Counter, MetricsError};

/// How to watch: every `interval`, `count` samples at most, as JSON lines
/// or a table, served at `metrics` meanwhile.
#[derive(Clone, Debug)]
pub struct Watch {
    pub interval: Duration,
    pub count: Option<u64>,
    pub json: bool,
    pub metrics: Option<SocketAddr>,
}

/// Rates of `now` against `prev` over `dt` seconds: (pps, bit/s) per counter
/// (counters matched by labels; a counter new in `now` counts from 0). A
/// counter stamped in both samples (`Counter::counted_at_ns`) is divided
/// by the time between its stamps instead.
pub fn rates(prev: &[Counter], now: &[Counter], dt: f64) -> Vec<(f64, Option<f64>)> {
    now.iter()
        .map(|c| {
            let p = prev.iter().find(|p| p.labels == c.labels);
            let dp = c.packets.saturating_sub(p.map_or(0, |p| p.packets));
            let db = c
                .bytes
                .map(|b| b.saturating_sub(p.and_then(|p| p.bytes).unwrap_or(0)));
            let dt = match (p.and_then(|p| p.counted_at_ns), c.counted_at_ns) {
                // 0: not counted yet (a scheduler before its first
                // publication).
                (Some(a), Some(b)) if a > 0 && b > a => (b - a) as f64 / 1e9,
                _ => dt,
            };
            let dt = dt.max(1e-9);
            (dp as f64 / dt, db.map(|b| b as f64 * 8.0 / dt))
        })
        .collect()
}

impl Watch {
    /// Samples with `sample` every interval and prints one block (a table,
    /// or one JSON object per line) per sample, until `wait` (which sleeps
    /// the interval) says stop or `count` samples; `sample`'s counters are
    /// served at `metrics` (named `prefix`_..., described by `what`)
    /// meanwhile. Counters idle since the start are left out of the table,
    /// not of the JSON.
    pub fn run<E: From<MetricsError>>(
        &self,
        prefix: &str,
        what: &str,
        mut wait: impl FnMut(Duration) -> bool,
        mut sample: impl FnMut() -> Result<Vec<Counter>, E> + Clone + Send + 'static,
    ) -> Result<(), E> {
        let stop = Arc::new(AtomicBool::new(false));
        let server = match self.metrics {
            Some(a) => {
                let t = serve_counters(a, stop.clone(), prefix, what, sample.clone())?;
                eprintln!("metrics on http://{a}/metrics");
                Some(t)
            }
            None => None,
        };
        let r = (|| {
            let start = Instant::now();
            let first = sample()?;
            let mut prev = first.clone();
            let mut last = start;
            let mut n = 0u64;
            while self.count.is_none_or(|c| n < c) && wait(self.interval) {
                let now = sample()?;
                let t = Instant::now();
                let dt = t.duration_since(last).as_secs_f64();
                let elapsed = t.duration_since(start).as_secs_f64();
                let r = rates(&prev, &now, dt);
                if self.json {
                    println!("{}", json_line(&now, &r, elapsed, dt));
                } else {
                    print!("{}", text(&first, &now, &r, elapsed, n == 0));
                }
                prev = now;
                last = t;
                n += 1;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        if let Some(t) = server {
            let _ = t.join();
        }
        r
    }
}

/// One sample as a JSON line: its time and every counter with its rates.
fn json_line(now: &[Counter], r: &[(f64, Option<f64>)], elapsed: f64, dt: f64) -> String {
    let counters: Vec<serde_json::Value> = now
        .iter()
        .zip(r)
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
    serde_json::json!({
        "time": elapsed, "unix_time": unix, "interval_s": dt, "counters": counters,
    })
    .to_string()
}

/// One sample as table rows (the header first with `header`): the counters
/// that moved since the first sample, or "idle".
fn text(
    first: &[Counter],
    now: &[Counter],
    r: &[(f64, Option<f64>)],
    elapsed: f64,
    header: bool,
) -> String {
    let mut out = String::new();
    if header {
        out += &format!(
            "{:>8}  {:<28} {:>10} {:>10} {:>14}\n",
            "time", "counter", "packets/s", "bit/s", "packets"
        );
    }
    let mut any = false;
    for (c, (pps, bps)) in now.iter().zip(r) {
        let f = first
            .iter()
            .find(|f| f.labels == c.labels)
            .map_or(0, |f| f.packets);
        if c.packets == f && *pps == 0.0 {
            continue;
        }
        any = true;
        out += &format!(
            "{:>8}  {:<28} {:>10} {:>10} {:>14}\n",
            format!("{elapsed:.2}s"),
            c.name(),
            si(*pps),
            bps.map_or("-".into(), si),
            c.packets
        );
    }
    if !any {
        out += &format!("{:>8}  idle\n", format!("{elapsed:.2}s"));
    }
    out
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
        // Stamped where counted, 1.6 s apart though the reader slept 2 s:
        // the stamps' difference, for that counter alone.
        let stamped = |c: &[Counter], at: u64| -> Vec<Counter> {
            let mut c = c.to_vec();
            c[0] = c[0].clone().counted_at(at);
            c
        };
        let rs = rates(
            &stamped(&a, 1_000_000_000),
            &stamped(&b, 2_600_000_000),
            2.0,
        );
        assert_eq!(rs[0], (625.0, Some(320000.0)));
        assert_eq!(rs[1], (25.0, None));
        // Not counted yet (stamp 0): the reader's interval.
        let rz = rates(&stamped(&a, 0), &stamped(&b, 2_600_000_000), 2.0);
        assert_eq!(rz[0], (500.0, Some(256000.0)));
        let t = text(&a, &b, &r, 1.0, false);
        assert!(
            t.contains("in0") && t.contains("500") && t.contains("256.0k"),
            "{t}"
        );
    }
}
