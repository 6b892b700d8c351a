//! One measured trial (offer traffic for a while, count at the receiver)
//! and the RFC 2544 throughput search built from trials.
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::measure::{summarize, CpuSnapshot, CpuWait};
use crate::pacing::{Limit, Rate};
use crate::results::{DropCount, Limiter, Rfc2544, Trial, Window};
use crate::sinks::Sink;
use crate::traffic::Generator;
use peregrine_host::nl::Netlink;
use peregrine_host::signals;

/// Time allowed after the generator stops for frames in flight to arrive.
const DRAIN: Duration = Duration::from_millis(200);

/// A trial whose offered rate falls short of the request by more than this
/// share is generator-limited: its figure says nothing about the receivers.
pub const SHORTFALL: f64 = 0.01;

/// True when `offered_pps` falls short of `requested` by more than
/// `SHORTFALL`.
pub fn short_of(requested: Option<f64>, offered_pps: f64) -> bool {
    requested.is_some_and(|r| offered_pps < r * (1.0 - SHORTFALL))
}

/// One counter of dropped frames in the path, and whose limit it shows.
#[derive(Debug, Clone)]
pub struct DropPoint {
    pub ns: String,
    pub iface: String,
    pub counter: DropCounter,
    pub role: Limiter,
    /// Counters kept elsewhere, by name (a receiver's own reasons, e.g. an
    /// AF_XDP socket's full ring), that count some of this point's frames
    /// too: what they counted is taken off this point's count, so each
    /// frame is counted once, under their name (`DropProbes::between`).
    pub overlapped_by: Vec<String>,
}

impl DropPoint {
    /// `iface`'s `rx_dropped` in `ns`.
    pub fn rx(ns: impl Into<String>, iface: impl Into<String>, role: Limiter) -> DropPoint {
        DropPoint {
            ns: ns.into(),
            iface: iface.into(),
            counter: DropCounter::RxDropped,
            role,
            overlapped_by: vec![],
        }
    }

    /// This point, with the counter named `counter` (kept elsewhere)
    /// counting some of its frames too: see `overlapped_by`.
    pub fn overlapped_by(mut self, counter: impl Into<String>) -> DropPoint {
        self.overlapped_by.push(counter.into());
        self
    }

    /// `iface`'s `tx_dropped` in `ns`.
    pub fn tx(ns: impl Into<String>, iface: impl Into<String>, role: Limiter) -> DropPoint {
        DropPoint {
            counter: DropCounter::TxDropped,
            ..DropPoint::rx(ns, iface, role)
        }
    }
}

/// Which of a link's drop counters (IFLA_STATS64) a point reads. On a veth
/// pair one frame can move both: a frame XDP-redirected into the pair and
/// refused counts as the receiver's `rx_dropped` and as the sender's
/// `tx_dropped`, so a path counts each direction at one end. A skb the
/// sender's `veth_xmit` could not hand over (the receiver's ring full)
/// counts only as the sender's `tx_dropped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCounter {
    RxDropped,
    TxDropped,
}

impl DropCounter {
    fn name(self) -> &'static str {
        match self {
            DropCounter::RxDropped => "rx_dropped",
            DropCounter::TxDropped => "tx_dropped",
        }
    }
}

/// The drop counters of a lab path: each point's `rx_dropped` or
/// `tx_dropped` (IFLA_STATS64; see `DropCounter`).
/// On veth that is where a frame XDP-redirected into the link (the live
/// generator's, a router's) is counted when the receiving end refuses it:
/// `veth_xdp_xmit` (drivers/net/veth.c) puts redirected frames on the
/// receiving queue's 256-slot `xdp_ring` and adds the ones that did not fit
/// (ring full, or longer than the receiver's MTU allows) to that queue's
/// `peer_tq_xdp_xmit_err`, which `veth_get_stats64` reports as the
/// receiver's `rx_dropped` (and the sender's `tx_dropped`; `ethtool -S`
/// shows it as the sender's `tx_queue_N_xdp_xmit_errors`). Skbs the
/// receiver's NAPI could not take count there too (`rx_drops`).
/// Loss that no counter saw is put down to `remainder` (frames that went
/// into a device under test and did not come out). What a redirect can lose
/// without `rx_dropped` moving is listed in docs/LAB.md ("Where frames are
/// counted").
pub struct DropProbes {
    points: Vec<DropPoint>,
    remainder: Limiter,
    nl: Option<std::sync::Mutex<Netlink>>,
}

impl DropProbes {
    /// No counters: loss beyond the tolerance is `remainder`'s.
    pub fn none(remainder: Limiter) -> DropProbes {
        DropProbes {
            points: vec![],
            remainder,
            nl: None,
        }
    }

    pub fn new(points: Vec<DropPoint>, remainder: Limiter) -> Result<DropProbes> {
        Ok(DropProbes {
            points,
            remainder,
            nl: Some(std::sync::Mutex::new(Netlink::new()?)),
        })
    }

    /// Every point's counter now; `since` turns two of these into drops.
    pub fn snapshot(&self) -> Result<DropSnapshot> {
        let Some(nl) = &self.nl else {
            return Ok(DropSnapshot(vec![]));
        };
        let mut nl = nl.lock().unwrap_or_else(|e| e.into_inner());
        self.points
            .iter()
            .map(|p| {
                let c = nl.link_counters(&p.ns, &p.iface)?;
                Ok(match p.counter {
                    DropCounter::RxDropped => c.rx_dropped,
                    DropCounter::TxDropped => c.tx_dropped,
                })
            })
            .collect::<Result<_>>()
            .map(DropSnapshot)
    }

    /// Drops counted since `before` (a `snapshot` of these probes),
    /// non-zero ones only: for counts taken outside `measure_trial`.
    pub fn since(&self, before: &DropSnapshot) -> Result<Vec<DropCount>> {
        Ok(self.counted(before, &self.snapshot()?))
    }

    /// Drops counted between two snapshots, non-zero ones only.
    fn counted(&self, before: &DropSnapshot, after: &DropSnapshot) -> Vec<DropCount> {
        self.between(before, after, &BTreeMap::new())
    }

    /// Drops counted between two snapshots of these probes, beside the
    /// counts of the same interval kept elsewhere (`elsewhere`, by name):
    /// a point's count less what the counters it is `overlapped_by`
    /// counted (those frames are theirs, counted once), non-zero ones only.
    pub fn between(
        &self,
        before: &DropSnapshot,
        after: &DropSnapshot,
        elsewhere: &BTreeMap<String, u64>,
    ) -> Vec<DropCount> {
        self.points
            .iter()
            .zip(before.0.iter().zip(&after.0))
            .map(|(p, (b, a))| {
                let theirs: u64 = p
                    .overlapped_by
                    .iter()
                    .filter_map(|n| elsewhere.get(n))
                    .sum();
                (p, a.saturating_sub(*b).saturating_sub(theirs))
            })
            .filter(|&(_, n)| n > 0)
            .map(|(p, n)| DropCount {
                at: format!("{} of {}:{}", p.counter.name(), p.ns, p.iface),
                role: p.role,
                packets: n,
            })
            .collect()
    }
}

/// The counters of a `DropProbes` at one moment.
#[derive(Debug, Clone)]
pub struct DropSnapshot(Vec<u64>);

/// What held a trial down. Without loss beyond the tolerance: the generator
/// when it offered less than asked (or, unpaced: the figure is its own
/// ceiling), else nothing (the rate was carried). With loss: the party whose
/// counters saw most of it (loss no counter saw goes to `remainder`).
pub fn classify(
    requested: Option<f64>,
    offered_pps: f64,
    lost: u64,
    loss_ratio: f64,
    loss_tolerance: f64,
    drops: &[DropCount],
    remainder: Limiter,
) -> Limiter {
    if loss_ratio <= loss_tolerance {
        return if requested.is_none() || short_of(requested, offered_pps) {
            Limiter::Generator
        } else {
            Limiter::None
        };
    }
    // Loss: whoever dropped the frames held the delivered figure down, even
    // when the generator also fell short (that is warned about separately).
    let mut by_role: Vec<(Limiter, u64)> = Vec::new();
    for d in drops {
        match by_role.iter_mut().find(|(r, _)| *r == d.role) {
            Some((_, n)) => *n += d.packets,
            None => by_role.push((d.role, d.packets)),
        }
    }
    let counted: u64 = by_role.iter().map(|(_, n)| n).sum();
    by_role.push((remainder, lost.saturating_sub(counted)));
    by_role
        .into_iter()
        .max_by_key(|&(_, n)| n)
        .map(|(r, _)| r)
        .unwrap_or(remainder)
}

/// Everything a trial needs besides its phase and rate.
pub struct TrialSetup<'a> {
    pub gen: &'a Generator,
    pub sink: &'a dyn Sink,
    pub duration: Duration,
    pub mean_frame_bytes: f64,
    /// Loss ratio up to which a trial counts as carried (for `limited_by`).
    pub loss_tolerance: f64,
    pub drops: &'a DropProbes,
}

/// Offers `rate` for `t.duration` and counts what `t.sink` received, with
/// the drop counters read before and after and the trial's limiter worked
/// out from them. `on_window` sees each ~1 s window as it closes
/// (progress display).
pub fn measure_trial(
    t: &TrialSetup,
    phase: &str,
    rate: Rate,
    on_window: &mut dyn FnMut(&Window),
) -> Result<Trial> {
    let (gen, sink, duration) = (t.gen, t.sink, t.duration);
    let progress = Arc::new(AtomicU64::new(0));
    let drops0 = t.drops.snapshot()?;
    let before = sink.delivered()?;
    let _ = sink.take_latency();
    let cpu0 = CpuSnapshot::take();
    let mut wait0 = CpuWait::take();
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
                // Delivery first, then what was sent: a frame counted at
                // the sink was sent before, so a window never shows more
                // delivered than offered.
                let del = sink.delivered()?.packets;
                let off = gen.offered_so_far(&progress);
                let wait = CpuWait::take();
                let secs = t - last_t;
                let w = Window {
                    t_s: t,
                    seconds: secs,
                    offered_pps: off.saturating_sub(last_off) as f64 / secs,
                    delivered_pps: del.saturating_sub(last_del) as f64 / secs,
                    cpu_wait_s: wait.since(&wait0),
                };
                wait0 = wait;
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
    let drops1 = t.drops.snapshot()?;
    let cpu = CpuSnapshot::take().usage_since(&cpu0);
    let secs = offered.elapsed.as_secs_f64().max(1e-9);
    let delivered = after.packets.saturating_sub(before.packets);
    let bits = t.mean_frame_bytes * 8.0;
    let lost = offered.packets.saturating_sub(delivered);
    let loss = if offered.packets == 0 {
        0.0
    } else {
        lost as f64 / offered.packets as f64
    };
    let offered_pps = offered.packets as f64 / secs;
    let drops = t.drops.counted(&drops0, &drops1);
    let limited_by = classify(
        rate.pps(),
        offered_pps,
        lost,
        loss,
        t.loss_tolerance,
        &drops,
        t.drops.remainder,
    );
    Ok(Trial {
        phase: phase.into(),
        requested_pps: rate.pps(),
        duration_s: secs,
        offered_packets: offered.packets,
        delivered_packets: delivered,
        offered_pps,
        delivered_pps: delivered as f64 / secs,
        offered_bps: offered_pps * bits,
        delivered_bps: delivered as f64 / secs * bits,
        loss_ratio: loss,
        cpu,
        latency: sink.take_latency().as_ref().and_then(summarize),
        windows,
        limited_by: Some(limited_by),
        drops,
        wrong: None,
        repeated: 0,
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

/// RFC 2544 section 26.1 throughput by binary search on measured offered
/// rates. The first trial runs unpaced (or at `start`) to find the ceiling;
/// if it loses nothing, the device took all the generator could offer: the
/// answer is that rate, as a lower bound ("generator-limited"). Otherwise
/// the bracket [pass, fail] halves until narrower than the resolution. A
/// trial that passes while offering less than asked (by more than
/// `SHORTFALL`) ends the search the same way: the generator, not the device,
/// set the figure. The throughput is the highest *offered* rate of a passing
/// trial, never a requested one. Every trial is returned.
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
    let passes = |t: &Trial| t.loss_ratio <= p.loss_tolerance;
    // The bracket is in requested rates (so it halves); the figure is the
    // best measured offered rate among passing trials.
    let mut lo = 0.0f64;
    let mut hi = first.offered_pps;
    let mut best: f64 = 0.0;
    let mut generator_limited = false;
    let mut limited_by = first.limited_by;
    if passes(&first) {
        best = first.offered_pps;
        lo = hi;
        generator_limited = true;
        limited_by = Some(Limiter::Generator);
    }
    trials.push(first);
    while !generator_limited
        && lo < hi
        && hi - lo > p.resolution_pps
        && trials.len() <= p.max_trials
    {
        signals::check()?;
        let mid = (lo + hi) / 2.0;
        let t = trial("search", Rate::Pps(mid))?;
        let short = short_of(Some(mid), t.offered_pps);
        if passes(&t) {
            best = best.max(t.offered_pps);
            lo = mid;
            if short {
                generator_limited = true;
                limited_by = Some(Limiter::Generator);
            }
        } else {
            // A failing trial bounds the answer at what it really offered.
            hi = if short { t.offered_pps.min(mid) } else { mid };
            limited_by = t.limited_by;
        }
        trials.push(t);
    }
    let summary = Rfc2544 {
        loss_tolerance: p.loss_tolerance,
        resolution_pps: p.resolution_pps,
        trial_s: p.trial.as_secs_f64(),
        throughput_pps: best,
        throughput_bps: best * mean_frame_bytes * 8.0,
        generator_limited,
        limited_by,
    };
    Ok((summary, trials))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated path: the generator offers at most `gen_max` pps (and
    /// that when unpaced), the device under test carries at most
    /// `capacity`.
    fn fake(gen_max: f64, capacity: f64, rate: Rate) -> Trial {
        let offered = rate.pps().unwrap_or(gen_max).min(gen_max);
        let delivered = offered.min(capacity);
        let lost = (offered - delivered) as u64;
        let loss = (offered - delivered) / offered;
        Trial {
            limited_by: Some(classify(
                rate.pps(),
                offered,
                lost,
                loss,
                0.0,
                &[],
                Limiter::Dut,
            )),
            ..Trial::of_rates("x", rate.pps(), offered, delivered)
        }
    }

    fn params(start: Rate) -> SearchParams {
        SearchParams {
            loss_tolerance: 0.0,
            resolution_pps: 1000.0,
            trial: Duration::from_secs(1),
            max_trials: 40,
            start,
        }
    }

    #[test]
    fn search_converges_below_capacity() {
        let (s, trials) =
            rfc2544_search(params(Rate::Max), 64.0, |_, r| Ok(fake(2e6, 1e6, r))).unwrap();
        assert!(s.throughput_pps <= 1_000_000.0);
        assert!(
            s.throughput_pps > 1_000_000.0 - 1000.0,
            "{}",
            s.throughput_pps
        );
        assert!(!s.generator_limited);
        assert_eq!(s.limited_by, Some(Limiter::Dut));
        assert!(trials.len() < 20);
        // The figure is a measured offered rate of a passing trial.
        assert!(trials
            .iter()
            .any(|t| t.loss_ratio == 0.0 && t.offered_pps == s.throughput_pps));
    }

    #[test]
    fn lossless_ceiling_is_a_generator_limited_lower_bound() {
        let (s, trials) =
            rfc2544_search(params(Rate::Max), 64.0, |_, r| Ok(fake(2e6, f64::MAX, r))).unwrap();
        assert_eq!(trials.len(), 1);
        assert_eq!(s.throughput_pps, trials[0].offered_pps);
        assert!(s.generator_limited);
        assert_eq!(s.limited_by, Some(Limiter::Generator));
        assert!(
            s.describe().starts_with(">= 2.000 Mpps"),
            "{}",
            s.describe()
        );
    }

    /// The bug this guards against: unpaced the generator offers 4 Mpps
    /// (and loses some), but paced at 3.5 Mpps it offers only 2.645 Mpps
    /// and loses nothing. The old search reported 3.5 Mpps (requested).
    #[test]
    fn a_generator_that_falls_short_stops_the_search_at_what_it_offered() {
        let mut calls = 0;
        let (s, trials) = rfc2544_search(params(Rate::Max), 64.0, |_, r| {
            calls += 1;
            Ok(match r {
                // Unpaced: 4 Mpps offered, 3 Mpps carried.
                Rate::Max => fake(4e6, 3e6, r),
                // Paced: the generator tops out at 2.645 Mpps.
                Rate::Pps(_) => fake(2.645e6, 3e6, r),
            })
        })
        .unwrap();
        assert_eq!(calls, trials.len());
        assert!(s.generator_limited, "{s:?}");
        assert_eq!(s.throughput_pps, 2.645e6);
        assert_eq!(s.limited_by, Some(Limiter::Generator));
        let last = trials.last().unwrap();
        assert_eq!(last.limited_by, Some(Limiter::Generator));
        assert!(last.requested_pps.unwrap() > s.throughput_pps);
        // Nothing above what was really offered is claimed.
        assert!(trials
            .iter()
            .filter(|t| t.loss_ratio == 0.0)
            .all(|t| t.offered_pps <= s.throughput_pps));
    }

    #[test]
    fn a_short_saturation_trial_that_loses_nothing_is_generator_limited() {
        let (s, trials) =
            rfc2544_search(params(Rate::Pps(3e6)), 64.0, |_, r| Ok(fake(1.5e6, 2e6, r))).unwrap();
        assert_eq!(trials.len(), 1);
        assert!(s.generator_limited);
        assert_eq!(s.throughput_pps, 1.5e6);
    }

    /// A frame refused at an AF_XDP socket's full ring counts as the
    /// receiver's own reason and as the veth's rx_dropped: the point that
    /// names the other counter leaves those frames to it, the rest stay.
    #[test]
    fn a_point_leaves_what_an_overlapping_counter_counted_to_it() {
        let full = "invoker: xsk_rx_ring_full";
        let probes = DropProbes {
            points: vec![
                DropPoint::rx("pg-x-sink", "eth0", Limiter::Sink).overlapped_by(full),
                DropPoint::rx("pg-x-dut", "in0", Limiter::Dut),
            ],
            remainder: Limiter::Unattributed,
            nl: None,
        };
        let (before, after) = (DropSnapshot(vec![10, 5]), DropSnapshot(vec![110, 12]));
        let elsewhere = |n: u64| BTreeMap::from([(full.to_string(), n)]);
        let counts = |n| {
            probes
                .between(&before, &after, &elsewhere(n))
                .into_iter()
                .map(|d| (d.at, d.packets))
                .collect::<Vec<_>>()
        };
        let dut = ("rx_dropped of pg-x-dut:in0".to_string(), 7);
        // All 100 were the ring's: none left at the veth.
        assert_eq!(counts(100), vec![dut.clone()]);
        // 60 of them: 40 the veth's own.
        assert_eq!(
            counts(60),
            vec![("rx_dropped of pg-x-sink:eth0".to_string(), 40), dut]
        );
        // Without the other count, and with another counter's only.
        assert_eq!(probes.counted(&before, &after).len(), 2);
        let other = BTreeMap::from([("invoker: something else".to_string(), 100)]);
        assert_eq!(probes.between(&before, &after, &other)[0].packets, 100);
    }

    #[test]
    fn loss_goes_to_whoever_counted_most_of_it() {
        let d = |role, packets| DropCount {
            at: "x".into(),
            role,
            packets,
        };
        let c = |drops: &[DropCount], lost| {
            classify(Some(1e6), 1e6, lost, 0.1, 0.0, drops, Limiter::Dut)
        };
        assert_eq!(c(&[d(Limiter::Sink, 900)], 1000), Limiter::Sink);
        assert_eq!(c(&[d(Limiter::Sink, 100)], 1000), Limiter::Dut);
        assert_eq!(
            c(&[d(Limiter::Dut, 400), d(Limiter::Sink, 500)], 900),
            Limiter::Sink
        );
        // Offered short of the request: the generator when nothing was
        // lost; with loss, whoever dropped.
        assert_eq!(
            classify(Some(1e6), 0.98e6, 0, 0.0, 0.0, &[], Limiter::Dut),
            Limiter::Generator
        );
        assert_eq!(
            classify(Some(1e6), 0.98e6, 5, 0.1, 0.0, &[], Limiter::Dut),
            Limiter::Dut
        );
        // Within 1% is not short; carried within the tolerance: nothing.
        assert_eq!(
            classify(Some(1e6), 0.995e6, 0, 0.0, 0.0, &[], Limiter::Dut),
            Limiter::None
        );
        assert_eq!(
            classify(None, 5e6, 0, 0.0, 0.0, &[], Limiter::Dut),
            Limiter::Generator
        );
    }
}
