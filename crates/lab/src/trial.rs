//! One measured trial (offer traffic for a while, count at the receiver)
//! and the RFC 2544 throughput search built from trials.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::measure::{summarize, CpuSnapshot};
use crate::pacing::{Limit, Rate};
use crate::results::{Rfc2544, Trial, Window};
use crate::signals;
use crate::sinks::Sink;
use crate::traffic::Generator;

/// Time allowed after the generator stops for frames in flight to arrive.
const DRAIN: Duration = Duration::from_millis(200);

/// Offers `rate` for `duration` and counts what `sink` received.
/// `on_window` sees each ~1 s window as it closes (progress display).
pub fn run_trial(
    gen: &Generator,
    sink: &dyn Sink,
    phase: &str,
    rate: Rate,
    duration: Duration,
    mean_frame_bytes: f64,
    on_window: &mut dyn FnMut(&Window),
) -> Result<Trial> {
    let progress = Arc::new(AtomicU64::new(0));
    let before = sink.delivered()?;
    let _ = sink.take_latency();
    let cpu0 = CpuSnapshot::take();
    let start = Instant::now();
    let mut windows = Vec::new();
    let offered = std::thread::scope(|s| -> Result<_> {
        let p = progress.clone();
        let h = s.spawn(move || {
            gen.run(
                rate,
                Limit {
                    count: None,
                    duration: Some(duration),
                },
                &p,
            )
        });
        let (mut last_t, mut last_off, mut last_del) = (0.0f64, 0u64, before.packets);
        let mut next = Duration::from_secs(1);
        while !h.is_finished() {
            std::thread::sleep(Duration::from_millis(10));
            let el = start.elapsed();
            if el >= next {
                next += Duration::from_secs(1);
                let t = el.as_secs_f64();
                let off = progress.load(Ordering::Relaxed);
                let del = sink.delivered()?.packets;
                let secs = t - last_t;
                let w = Window {
                    t_s: t,
                    seconds: secs,
                    offered_pps: (off - last_off) as f64 / secs,
                    delivered_pps: del.saturating_sub(last_del) as f64 / secs,
                };
                on_window(&w);
                windows.push(w);
                (last_t, last_off, last_del) = (t, off, del);
            }
        }
        h.join()
            .unwrap_or_else(|_| Err(crate::LabError::Other("generator panicked".into())))
    })?;
    signals::sleep(DRAIN);
    let after = sink.delivered()?;
    let cpu = CpuSnapshot::take().usage_since(&cpu0);
    let secs = offered.elapsed.as_secs_f64().max(1e-9);
    let delivered = after.packets.saturating_sub(before.packets);
    let bits = mean_frame_bytes * 8.0;
    let loss = if offered.packets == 0 {
        0.0
    } else {
        offered.packets.saturating_sub(delivered) as f64 / offered.packets as f64
    };
    Ok(Trial {
        phase: phase.into(),
        requested_pps: rate.pps(),
        duration_s: secs,
        offered_packets: offered.packets,
        delivered_packets: delivered,
        offered_pps: offered.packets as f64 / secs,
        delivered_pps: delivered as f64 / secs,
        offered_bps: offered.packets as f64 / secs * bits,
        delivered_bps: delivered as f64 / secs * bits,
        loss_ratio: loss,
        cpu,
        latency: sink.take_latency().as_ref().and_then(summarize),
        windows,
    })
}

#[derive(Debug, Clone, Copy)]
pub struct SearchParams {
    /// Highest loss ratio a passing trial may have (RFC 2544: 0).
    pub loss_tolerance: f64,
    /// Stop when the pass/fail bracket is narrower than this (pps).
    pub resolution_pps: f64,
    pub trial: Duration,
    /// Upper bound on search trials (the bracket halves each time).
    pub max_trials: usize,
    /// The first trial's rate: unpaced (`Rate::Max`, phase "max"), or a
    /// set rate above the device's capacity (phase "saturate") where going
    /// flat out would overload the sender itself.
    pub start: Rate,
}

/// RFC 2544 section 26.1 throughput by binary search: the first trial runs
/// unpaced (or at `start`) to find the ceiling; if it loses nothing that is the answer.
/// Otherwise the bracket [pass, fail] halves until narrower than the
/// resolution. Every trial is returned.
pub fn rfc2544_search(
    p: SearchParams,
    mean_frame_bytes: f64,
    mut trial: impl FnMut(&str, Rate) -> Result<Trial>,
) -> Result<(Rfc2544, Vec<Trial>)> {
    let mut trials = Vec::new();
    let first = match p.start {
        Rate::Max => trial("max", Rate::Max)?,
        r => trial("saturate", r)?,
    };
    let ceiling = first.offered_pps;
    let mut pass = 0.0f64;
    let mut fail = ceiling;
    if first.loss_ratio <= p.loss_tolerance {
        pass = first.offered_pps;
    }
    trials.push(first);
    while pass < fail && fail - pass > p.resolution_pps && trials.len() <= p.max_trials {
        signals::check()?;
        let mid = (pass + fail) / 2.0;
        let t = trial("search", Rate::Pps(mid))?;
        if t.loss_ratio <= p.loss_tolerance {
            pass = mid;
        } else {
            fail = mid;
        }
        trials.push(t);
    }
    let summary = Rfc2544 {
        loss_tolerance: p.loss_tolerance,
        resolution_pps: p.resolution_pps,
        trial_s: p.trial.as_secs_f64(),
        throughput_pps: pass,
        throughput_bps: pass * mean_frame_bytes * 8.0,
    };
    Ok((summary, trials))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(capacity: f64, rate: Rate) -> Trial {
        // Unpaced, the generator offers 2 Mpps.
        let offered = rate.pps().unwrap_or(2_000_000.0);
        let delivered = offered.min(capacity);
        Trial {
            phase: "x".into(),
            requested_pps: rate.pps(),
            duration_s: 1.0,
            offered_packets: offered as u64,
            delivered_packets: delivered as u64,
            offered_pps: offered,
            delivered_pps: delivered,
            offered_bps: 0.0,
            delivered_bps: 0.0,
            loss_ratio: (offered - delivered) / offered,
            cpu: vec![],
            latency: None,
            windows: vec![],
        }
    }

    #[test]
    fn search_converges_below_capacity() {
        let p = SearchParams {
            loss_tolerance: 0.0,
            resolution_pps: 1000.0,
            trial: Duration::from_secs(1),
            max_trials: 40,
            start: Rate::Max,
        };
        let (s, trials) = rfc2544_search(p, 64.0, |_, r| Ok(fake(1_000_000.0, r))).unwrap();
        assert!(s.throughput_pps <= 1_000_000.0);
        assert!(
            s.throughput_pps > 1_000_000.0 - 1000.0,
            "{}",
            s.throughput_pps
        );
        assert!(trials.len() < 20);
    }

    #[test]
    fn lossless_ceiling_ends_the_search() {
        let p = SearchParams {
            loss_tolerance: 0.0,
            resolution_pps: 1000.0,
            trial: Duration::from_secs(1),
            max_trials: 40,
            start: Rate::Max,
        };
        let (s, trials) = rfc2544_search(p, 64.0, |_, r| Ok(fake(f64::MAX, r))).unwrap();
        assert_eq!(trials.len(), 1);
        assert_eq!(s.throughput_pps, trials[0].offered_pps);
    }
}
