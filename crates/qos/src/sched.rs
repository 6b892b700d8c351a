//! The egress scheduler's core, sans I/O (time is passed in, as quinn's
//! protocol core takes it): a class hierarchy with an assured rate and a
//! ceiling per class (borrowing from the parent like HTB), strict priority
//! between priority levels, deficit round robin by weight within a level,
//! shaping to the link rate, and a queue limit per class with every drop
//! counted. The AF_XDP worker that feeds it frames and transmits what it
//! dequeues is separate; this part is tested alone with simulated time.
//!
//! Model. Every class has two token buckets in bytes, `rate` and `ceil`,
//! refilled from elapsed time (no timers). A leaf with a queued packet may
//! send it when the link has the credit and either
//! - its `rate` bucket covers the packet (it sends within its assurance), or
//! - its `ceil` bucket covers it and some ancestor's `rate` bucket does
//!   (it borrows that ancestor's spare assurance), every ancestor up to
//!   that one also within its `ceil`; a top-level class borrows from the
//!   link itself (HTB's root classes cannot: there the link is one more
//!   class whose rate the top classes share).
//!
//! Sending charges the leaf's and every ancestor's buckets (both), as HTB
//! does. Among leaves that may send, those within their assurance go
//! first; then the lowest priority value; then deficit round robin by
//! weight among leaves of that level. A bucket that is not in debt lets a
//! whole packet go and may fall below zero by it; the debt is repaid
//! before its class sends again, so no packet is ever split or starved
//! and the long-run rate is exact.
use std::collections::VecDeque;

use peregrine_bpf::policer::ClassCounters;

/// Nanoseconds on the caller's monotonic clock.
pub type Nanos = u64;

/// A class as configured. Rates in bit/s of frames (Ethernet header
/// included, no FCS); bursts in bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ClassConfig {
    pub name: String,
    /// The parent's name; None for a child of the root (the link).
    pub parent: Option<String>,
    /// Assured rate.
    pub rate_bps: u64,
    /// The most it may use, borrowing (>= rate).
    pub ceil_bps: u64,
    /// Bucket depth of both rate and ceil, bytes.
    pub burst: u64,
    /// Lower is served first (strict); leaves only.
    pub priority: u8,
    /// DRR weight within a priority level (quantum = weight x 1514 B).
    pub weight: u32,
    /// Most packets queued; beyond, arrivals are dropped (counted).
    pub queue_limit: usize,
}

/// Counters of one class (in the policer's maps as `ClassCounters`, with
/// the queue's depth beside them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassStats {
    pub enqueued_packets: u64,
    pub sent_packets: u64,
    pub sent_bytes: u64,
    pub dropped_packets: u64,
    pub dropped_bytes: u64,
    /// Packets sent beyond the class's own rate (borrowed).
    pub borrowed_packets: u64,
}

impl ClassStats {
    /// The counters as the policer's maps keep them, with `queue_depth`,
    /// as counted at `counted_at_ns` (CLOCK_MONOTONIC).
    pub fn counters(&self, queue_depth: u64, counted_at_ns: u64) -> ClassCounters {
        ClassCounters {
            enqueued_packets: self.enqueued_packets,
            sent_packets: self.sent_packets,
            sent_bytes: self.sent_bytes,
            dropped_packets: self.dropped_packets,
            dropped_bytes: self.dropped_bytes,
            borrowed_packets: self.borrowed_packets,
            queue_depth,
            counted_at_ns,
            drop_ahead: 0,
        }
    }

    /// The counters read back from the policer's maps (without the depth).
    pub fn from_counters(c: &ClassCounters) -> ClassStats {
        ClassStats {
            enqueued_packets: c.enqueued_packets,
            sent_packets: c.sent_packets,
            sent_bytes: c.sent_bytes,
            dropped_packets: c.dropped_packets,
            dropped_bytes: c.dropped_bytes,
            borrowed_packets: c.borrowed_packets,
        }
    }
}

/// A token bucket, refilled from elapsed time. Tokens are kept in
/// byte-nanoseconds x 8 (bytes x 8e9) so a refill of `bps` x `dt` is exact:
/// no fraction of a byte is ever lost between calls.
#[derive(Debug, Clone)]
struct Bucket {
    bps: u64,
    depth: i128,
    tokens: i128,
    last: Nanos,
}

/// One byte in bucket units.
const BYTE: i128 = 8_000_000_000;

impl Bucket {
    fn new(bps: u64, depth_bytes: u64, now: Nanos) -> Bucket {
        let depth = i128::from(depth_bytes) * BYTE;
        Bucket {
            bps,
            depth,
            tokens: depth,
            last: now,
        }
    }

    fn refill(&mut self, now: Nanos) {
        if now > self.last {
            let add = i128::from(self.bps) * i128::from(now - self.last);
            self.tokens = (self.tokens + add).min(self.depth);
            self.last = now;
        }
    }

    /// The bucket is not in debt: a packet may go, taking it (by at most
    /// that packet) below zero; the debt is repaid before the next.
    fn covers(&self) -> bool {
        self.tokens > 0
    }

    fn charge(&mut self, len: usize) {
        self.tokens -= len as i128 * BYTE;
    }

    /// When the bucket is out of debt (tokens > 0), refilled at `now`.
    fn ready_at(&self, now: Nanos) -> Nanos {
        if self.tokens > 0 {
            return now;
        }
        let need = 1 - self.tokens;
        let bps = i128::from(self.bps.max(1));
        let ns = (need + bps - 1) / bps;
        now.saturating_add(ns.min(i128::from(u64::MAX)) as u64)
    }
}

struct Class<P> {
    cfg: ClassConfig,
    parent: Option<usize>,
    rate: Bucket,
    ceil: Bucket,
    queue: VecDeque<(P, usize)>,
    deficit: i64,
    stats: ClassStats,
    is_leaf: bool,
}

/// Why a packet was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused<P> {
    /// The class's queue was full; the packet is handed back (and counted).
    QueueFull(P),
    /// No such leaf class.
    NoClass(P),
}

/// The scheduler. `P` is whatever the caller queues (a frame, a UMEM
/// address).
pub struct Scheduler<P> {
    classes: Vec<Class<P>>,
    link: Bucket,
    /// DRR turn per priority level: the index of the leaf to look at first.
    turn: Vec<usize>,
}

/// A configuration the scheduler refuses, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedError(pub String);

impl std::fmt::Display for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SchedError {}

const QUANTUM: i64 = 1514;

impl<P> Scheduler<P> {
    /// A scheduler shaping to `link_bps` (burst `link_burst` bytes) with
    /// `classes` (parents listed before their children).
    pub fn new(
        link_bps: u64,
        link_burst: u64,
        classes: Vec<ClassConfig>,
        now: Nanos,
    ) -> Result<Scheduler<P>, SchedError> {
        if link_bps == 0 {
            return Err(SchedError("the link rate must be above 0".into()));
        }
        let mut out: Vec<Class<P>> = Vec::with_capacity(classes.len());
        // Index by name: thousands of classes (the htb engine's) are
        // checked in linear time.
        let mut by_name: std::collections::HashMap<String, usize> =
            std::collections::HashMap::with_capacity(classes.len());
        for c in classes {
            if c.rate_bps == 0 || c.ceil_bps < c.rate_bps {
                return Err(SchedError(format!(
                    "class {:?}: rate must be above 0 and ceil at least the rate",
                    c.name
                )));
            }
            if c.weight == 0 || c.queue_limit == 0 || c.burst == 0 {
                return Err(SchedError(format!(
                    "class {:?}: weight, queue limit and burst must be above 0",
                    c.name
                )));
            }
            if by_name.contains_key(&c.name) {
                return Err(SchedError(format!("class {:?} is defined twice", c.name)));
            }
            let parent = match &c.parent {
                None => None,
                Some(p) => Some(by_name.get(p).copied().ok_or_else(|| {
                    SchedError(format!(
                        "class {:?}: parent {p:?} is not defined before it",
                        c.name
                    ))
                })?),
            };
            if let Some(p) = parent {
                out[p].is_leaf = false;
            }
            by_name.insert(c.name.clone(), out.len());
            out.push(Class {
                rate: Bucket::new(c.rate_bps, c.burst, now),
                ceil: Bucket::new(c.ceil_bps, c.burst, now),
                parent,
                queue: VecDeque::new(),
                deficit: 0,
                stats: ClassStats::default(),
                is_leaf: true,
                cfg: c,
            });
        }
        if out.is_empty() {
            return Err(SchedError("at least one class is needed".into()));
        }
        Ok(Scheduler {
            classes: out,
            link: Bucket::new(link_bps, link_burst.max(1514), now),
            turn: vec![0; 256],
        })
    }

    /// The index of leaf class `name`.
    pub fn class(&self, name: &str) -> Option<usize> {
        self.classes
            .iter()
            .position(|c| c.cfg.name == name && c.is_leaf)
    }

    pub fn stats(&self, class: usize) -> ClassStats {
        self.classes[class].stats
    }

    /// Packets queued in `class`.
    pub fn depth(&self, class: usize) -> usize {
        self.classes[class].queue.len()
    }

    /// Every class's name and counters, in configuration order (index =
    /// the class's index), interior classes included.
    pub fn classes(&self) -> impl Iterator<Item = (&str, ClassStats, usize)> {
        self.classes
            .iter()
            .map(|c| (c.cfg.name.as_str(), c.stats, c.queue.len()))
    }

    /// Whether class `class` is a leaf (takes packets).
    pub fn is_leaf(&self, class: usize) -> bool {
        self.classes[class].is_leaf
    }

    pub fn queue_limit(&self, class: usize) -> usize {
        self.classes[class].cfg.queue_limit
    }

    /// Whether arrivals for leaf `class` may be dropped before they reach
    /// the scheduler until it next looks (`drop_ahead` in the policer's
    /// maps): its queue is full (within a sixteenth of its limit) and
    /// holds at least twice the packets it sent in the last interval
    /// (`sent_since`), so at that pace it cannot run dry before the next
    /// look, and what arrives meanwhile would only be dropped here. A
    /// class that sent nothing (starved by higher priorities) qualifies:
    /// its queue stays full. After a starved class's turn comes, it may
    /// idle for the rest of one interval: the one cost, once per change.
    pub fn drop_ahead(&self, class: usize, sent_since: u64) -> bool {
        let c = &self.classes[class];
        let depth = c.queue.len();
        let limit = c.cfg.queue_limit;
        c.is_leaf && depth >= limit - limit / 16 && depth as u64 >= 2 * sent_since
    }

    /// Queues a packet moved from a scheduler this one replaces: like
    /// `enqueue`, but not counted as enqueued again.
    pub fn requeue(&mut self, class: usize, pkt: P, len: usize) -> Result<(), Refused<P>> {
        let r = self.enqueue(class, pkt, len);
        if r.is_ok() {
            self.classes[class].stats.enqueued_packets -= 1;
        }
        r
    }

    /// Takes every packet queued in `class` out, oldest first: a
    /// reconfiguration moves them to the new scheduler's class.
    pub fn take_queue(&mut self, class: usize) -> VecDeque<(P, usize)> {
        std::mem::take(&mut self.classes[class].queue)
    }

    /// Adds counters a class had in a scheduler this one replaces.
    pub fn carry_stats(&mut self, class: usize, s: ClassStats) {
        let c = &mut self.classes[class].stats;
        c.enqueued_packets += s.enqueued_packets;
        c.sent_packets += s.sent_packets;
        c.sent_bytes += s.sent_bytes;
        c.dropped_packets += s.dropped_packets;
        c.dropped_bytes += s.dropped_bytes;
        c.borrowed_packets += s.borrowed_packets;
    }

    /// Queues `pkt` (`len` bytes) in leaf `class`, or hands it back.
    pub fn enqueue(&mut self, class: usize, pkt: P, len: usize) -> Result<(), Refused<P>> {
        let Some(c) = self.classes.get_mut(class).filter(|c| c.is_leaf) else {
            return Err(Refused::NoClass(pkt));
        };
        if c.queue.len() >= c.cfg.queue_limit {
            c.stats.dropped_packets += 1;
            c.stats.dropped_bytes += len as u64;
            return Err(Refused::QueueFull(pkt));
        }
        c.stats.enqueued_packets += 1;
        c.queue.push_back((pkt, len));
        Ok(())
    }

    fn refill(&mut self, now: Nanos) {
        self.link.refill(now);
        for c in &mut self.classes {
            c.rate.refill(now);
            c.ceil.refill(now);
        }
    }

    /// Whether leaf `i` may send now: Some(false) within its rate,
    /// Some(true) borrowing, None not at all.
    fn may_send(&self, i: usize) -> Option<bool> {
        let c = &self.classes[i];
        if c.rate.covers() && c.ceil.covers() {
            // Its ancestors' ceilings bound it too.
            let mut a = c.parent;
            while let Some(p) = a {
                if !self.classes[p].ceil.covers() {
                    return None;
                }
                a = self.classes[p].parent;
            }
            return Some(false);
        }
        if !c.ceil.covers() {
            return None;
        }
        let mut a = c.parent;
        while let Some(p) = a {
            let pc = &self.classes[p];
            if !pc.ceil.covers() {
                return None;
            }
            if pc.rate.covers() {
                return Some(true);
            }
            a = pc.parent;
        }
        // Above the top class is the link (checked by the caller): a class
        // without a parent borrows from it, up to its ceiling.
        if c.parent.is_none() {
            return Some(true);
        }
        None
    }

    /// The next packet to send at `now`, if the link and some class may
    /// send one; its class.
    pub fn dequeue(&mut self, now: Nanos) -> Option<(usize, P)> {
        self.refill(now);
        if !self.link.covers() {
            return None;
        }
        // Candidates: (borrowing, priority, index).
        let mut best: Option<(bool, u8)> = None;
        for i in 0..self.classes.len() {
            let c = &self.classes[i];
            if !c.is_leaf || c.queue.is_empty() {
                continue;
            }
            if let Some(b) = self.may_send(i) {
                let key = (b, c.cfg.priority);
                if best.is_none_or(|k| key < k) {
                    best = Some(key);
                }
            }
        }
        let (borrow, prio) = best?;
        // DRR among the leaves of that (borrowing, priority) level: walk
        // from the level's turn, topping up deficits, until one can send.
        let level: Vec<usize> = (0..self.classes.len())
            .filter(|&i| {
                let c = &self.classes[i];
                c.is_leaf
                    && !c.queue.is_empty()
                    && c.cfg.priority == prio
                    && self.may_send(i) == Some(borrow)
            })
            .collect();
        let slot = usize::from(prio);
        let start = level
            .iter()
            .position(|&i| i >= self.turn[slot])
            .unwrap_or(0);
        let n = level.len();
        // Bounded: each lap adds a quantum to every deficit, and a packet
        // is at most 64 KiB, so 64 laps always find one.
        for step in 0..n * 64 {
            let i = level[(start + step) % n];
            let len = self.classes[i].queue.front().map_or(0, |p| p.1) as i64;
            if self.classes[i].deficit >= len {
                self.classes[i].deficit -= len;
                if self.classes[i].queue.len() == 1 {
                    // Emptied: DRR forgets an idle class's deficit.
                    self.classes[i].deficit = 0;
                }
                self.turn[slot] = i;
                return Some(self.send(i, borrow));
            }
            let w = i64::from(self.classes[i].cfg.weight);
            self.classes[i].deficit += w * QUANTUM;
            // The next leaf's turn once this one's deficit is topped up.
            self.turn[slot] = level[(start + step + 1) % n];
        }
        None
    }

    fn send(&mut self, i: usize, borrowed: bool) -> (usize, P) {
        let (pkt, len) = self.classes[i].queue.pop_front().expect("a queued packet");
        self.link.charge(len);
        let mut a = Some(i);
        while let Some(k) = a {
            let c = &mut self.classes[k];
            c.rate.charge(len);
            c.ceil.charge(len);
            a = c.parent;
        }
        let s = &mut self.classes[i].stats;
        s.sent_packets += 1;
        s.sent_bytes += len as u64;
        if borrowed {
            s.borrowed_packets += 1;
        }
        (i, pkt)
    }

    /// When `dequeue` may next return a packet, if anything is queued: not
    /// later than the next packet can go (it may be earlier, when a
    /// higher class's ceiling still holds it: the caller asks again).
    pub fn next_send_at(&mut self, now: Nanos) -> Option<Nanos> {
        self.refill(now);
        let mut leaf = None::<Nanos>;
        for c in self
            .classes
            .iter()
            .filter(|c| c.is_leaf && !c.queue.is_empty())
        {
            // Its ceiling must clear, and its own or an ancestor's rate.
            let mut rate = c.rate.ready_at(now);
            if c.parent.is_none() {
                // It may borrow from the link.
                rate = rate.min(self.link.ready_at(now));
            }
            let mut a = c.parent;
            while let Some(p) = a {
                rate = rate.min(self.classes[p].rate.ready_at(now));
                a = self.classes[p].parent;
            }
            let t = c.ceil.ready_at(now).max(rate);
            leaf = Some(leaf.map_or(t, |l| l.min(t)));
        }
        leaf.map(|t| t.max(self.link.ready_at(now)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const SEC: Nanos = 1_000_000_000;

    fn class(
        name: &str,
        parent: Option<&str>,
        rate: u64,
        ceil: u64,
        prio: u8,
        weight: u32,
    ) -> ClassConfig {
        ClassConfig {
            name: name.into(),
            parent: parent.map(Into::into),
            rate_bps: rate,
            ceil_bps: ceil,
            burst: 15_140,
            priority: prio,
            weight,
            queue_limit: 1000,
        }
    }

    /// Runs the scheduler for `secs` of simulated time: every tick (10 µs)
    /// each source offers what its rate allows (`offer`: class name, bit/s,
    /// frame bytes; u64::MAX = keep the queue full), then the link sends
    /// what it may. Returns bytes sent per class and the worst queueing
    /// delay (ns) seen per class.
    fn simulate(
        s: &mut Scheduler<Nanos>,
        offer: &[(&str, u64, usize)],
        secs: f64,
    ) -> Vec<(u64, Nanos)> {
        let ids: Vec<usize> = offer.iter().map(|o| s.class(o.0).unwrap()).collect();
        let mut credit = vec![0f64; offer.len()];
        let mut out = vec![(0u64, 0u64); offer.len()];
        let tick = 10_000;
        let end = (secs * SEC as f64) as Nanos;
        let mut now = 0;
        while now < end {
            for (k, &(_, bps, len)) in offer.iter().enumerate() {
                if bps == u64::MAX {
                    while s.depth(ids[k]) < 100 {
                        s.enqueue(ids[k], now, len).unwrap();
                    }
                    continue;
                }
                credit[k] += bps as f64 / 8.0 * tick as f64 / 1e9;
                while credit[k] >= len as f64 {
                    credit[k] -= len as f64;
                    let _ = s.enqueue(ids[k], now, len);
                }
            }
            while let Some((c, queued_at)) = s.dequeue(now) {
                let k = ids.iter().position(|&i| i == c).unwrap();
                out[k].1 = out[k].1.max(now - queued_at);
            }
            now += tick;
        }
        for (k, &i) in ids.iter().enumerate() {
            out[k].0 = s.stats(i).sent_bytes;
        }
        out
    }

    fn mbit(bytes: u64, secs: f64) -> f64 {
        bytes as f64 * 8.0 / secs / 1e6
    }

    /// Two classes of one level, weights 80 and 20, both saturating a
    /// 100 Mbit/s link (assured rates tiny, ceilings the link): the link
    /// is shared 80/20 within a point, and never exceeded.
    #[test]
    fn drr_shares_follow_weights() {
        let mut s = Scheduler::new(
            100_000_000,
            15_140,
            vec![
                class("root", None, 100_000_000, 100_000_000, 0, 1),
                class("a", Some("root"), 1_000_000, 100_000_000, 1, 80),
                class("b", Some("root"), 1_000_000, 100_000_000, 1, 20),
            ],
            0,
        )
        .unwrap();
        let out = simulate(&mut s, &[("a", u64::MAX, 1514), ("b", u64::MAX, 1514)], 2.0);
        let (a, b) = (mbit(out[0].0, 2.0), mbit(out[1].0, 2.0));
        assert!(a + b <= 100.0 * 1.001 + 0.1, "link exceeded: {a} + {b}");
        assert!(a + b >= 99.0, "link not filled: {a} + {b}");
        let share = a / (a + b);
        eprintln!("drr 80/20: a {a:.2} Mbit/s, b {b:.2}, a's share {share:.4}");
        assert!((share - 0.8).abs() <= 0.01, "a's share {share:.4}");
    }

    /// Without a parent class, classes borrow from the link itself: two
    /// top-level classes with tiny assured rates still fill the link, 80/20.
    #[test]
    fn top_level_classes_borrow_from_the_link() {
        let mut s = Scheduler::new(
            100_000_000,
            15_140,
            vec![
                class("a", None, 1_000_000, 100_000_000, 1, 80),
                class("b", None, 1_000_000, 100_000_000, 1, 20),
            ],
            0,
        )
        .unwrap();
        let out = simulate(&mut s, &[("a", u64::MAX, 1514), ("b", u64::MAX, 1514)], 2.0);
        let (a, b) = (mbit(out[0].0, 2.0), mbit(out[1].0, 2.0));
        eprintln!("top level: a {a:.2} b {b:.2}");
        assert!(a + b >= 99.0 && a + b <= 100.2, "{a} + {b}");
        // Each first gets its own 1 Mbit/s, the rest goes 80/20.
        let share = a / (a + b);
        assert!((share - 0.794).abs() <= 0.01, "a's share {share:.4}");
    }

    /// A high-priority class offered less than its rate keeps all of it,
    /// with at most a few packets of queueing, under a saturating
    /// low-priority class.
    #[test]
    fn strict_priority_keeps_the_high_class_whole_and_fast() {
        let mut s = Scheduler::new(
            100_000_000,
            15_140,
            vec![
                class("root", None, 100_000_000, 100_000_000, 0, 1),
                class("voice", Some("root"), 20_000_000, 100_000_000, 0, 1),
                class("bulk", Some("root"), 1_000_000, 100_000_000, 7, 1),
            ],
            0,
        )
        .unwrap();
        let out = simulate(
            &mut s,
            &[("voice", 10_000_000, 200), ("bulk", u64::MAX, 1514)],
            2.0,
        );
        let voice = s.stats(s.class("voice").unwrap());
        assert_eq!(voice.dropped_packets, 0);
        assert!(
            voice.enqueued_packets - voice.sent_packets <= 2,
            "{voice:?}"
        );
        assert!(out[0].1 <= 300_000, "voice waited {} ns", out[0].1);
        let bulk = mbit(out[1].0, 2.0);
        eprintln!(
            "priority: voice {:.2} Mbit/s, worst wait {} us, {voice:?}; bulk {bulk:.2} Mbit/s",
            mbit(out[0].0, 2.0),
            out[0].1 / 1000
        );
        assert!(bulk >= 88.0, "bulk gets the rest: {bulk}");
    }

    /// HTB's borrowing: alone, a class borrows up to its ceiling; both
    /// busy, each gets its assured rate (30/70); a ceiling below the link
    /// holds a class alone to it.
    #[test]
    fn classes_borrow_up_to_their_ceiling() {
        let cfg = |ceil_a: u64| {
            vec![
                class("root", None, 100_000_000, 100_000_000, 0, 1),
                class("a", Some("root"), 30_000_000, ceil_a, 1, 1),
                class("b", Some("root"), 70_000_000, 100_000_000, 1, 1),
            ]
        };
        let mut s = Scheduler::new(100_000_000, 15_140, cfg(100_000_000), 0).unwrap();
        let alone = simulate(&mut s, &[("a", u64::MAX, 1514)], 1.0);
        assert!(
            (mbit(alone[0].0, 1.0) - 100.0).abs() <= 1.5,
            "{}",
            mbit(alone[0].0, 1.0)
        );

        let mut s = Scheduler::new(100_000_000, 15_140, cfg(100_000_000), 0).unwrap();
        let both = simulate(&mut s, &[("a", u64::MAX, 1514), ("b", u64::MAX, 1514)], 2.0);
        let (a, b) = (mbit(both[0].0, 2.0), mbit(both[1].0, 2.0));
        eprintln!(
            "borrowing: a alone {:.2} Mbit/s; both busy a {a:.2} b {b:.2}",
            mbit(alone[0].0, 1.0)
        );
        assert!(
            (a - 30.0).abs() <= 1.5 && (b - 70.0).abs() <= 1.5,
            "{a} / {b}"
        );

        let mut s = Scheduler::new(100_000_000, 15_140, cfg(40_000_000), 0).unwrap();
        let capped = simulate(&mut s, &[("a", u64::MAX, 1514)], 1.0);
        let a = mbit(capped[0].0, 1.0);
        eprintln!("ceil 40 Mbit/s alone: {a:.2}");
        assert!((39.0..=40.0 * 1.01 + 0.2).contains(&a), "{a}");
    }

    /// Early drops are allowed only while a queue is full and holds at
    /// least twice what its class sent in the last interval: it cannot
    /// run dry before the next look. An empty, a half-full or a fast-
    /// draining queue never qualifies; an interior class never does.
    #[test]
    fn drop_ahead_only_for_a_full_queue_that_cannot_run_dry() {
        let mut leaf = class("leaf", Some("all"), 1_000_000, 1_000_000, 0, 1);
        leaf.queue_limit = 32;
        let all = class("all", None, 1_000_000, 1_000_000, 0, 1);
        let mut s: Scheduler<u32> = Scheduler::new(1_000_000, 1514, vec![all, leaf], 0).unwrap();
        let (all, leaf) = (0, s.class("leaf").unwrap());
        assert!(!s.drop_ahead(leaf, 0), "empty");
        for p in 0..16 {
            s.enqueue(leaf, p, 100).unwrap();
        }
        assert!(!s.drop_ahead(leaf, 0), "half full");
        for p in 16..30 {
            s.enqueue(leaf, p, 100).unwrap();
        }
        // 30 of 32: within a sixteenth (2) of the limit.
        assert!(s.drop_ahead(leaf, 0), "full, and it sent nothing");
        assert!(s.drop_ahead(leaf, 15), "full, twice what it sent");
        assert!(
            !s.drop_ahead(leaf, 16),
            "it would drain below half before the next look"
        );
        assert!(!s.drop_ahead(all, 0), "an interior class takes no packets");
    }

    /// A full queue refuses arrivals, hands them back and counts every
    /// one: enqueued + dropped = offered, exactly.
    #[test]
    fn queue_limits_drop_and_count() {
        let mut cfg = class("a", None, 1_000_000, 1_000_000, 0, 1);
        cfg.queue_limit = 10;
        let mut s: Scheduler<u32> = Scheduler::new(1_000_000, 1514, vec![cfg], 0).unwrap();
        let a = s.class("a").unwrap();
        let mut refused = 0;
        for p in 0..25u32 {
            match s.enqueue(a, p, 1000) {
                Ok(()) => {}
                Err(Refused::QueueFull(back)) => {
                    assert_eq!(back, p, "the refused packet comes back");
                    refused += 1;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        let st = s.stats(a);
        assert_eq!(
            (st.enqueued_packets, st.dropped_packets, refused),
            (10, 15, 15)
        );
        assert_eq!(st.dropped_bytes, 15_000);
        assert!(matches!(s.enqueue(99, 1, 1), Err(Refused::NoClass(1))));
        // In order, paced: at 1 Mbit/s, the burst then one 1000 B packet
        // per 8 ms.
        let mut got = Vec::new();
        let mut now = 0;
        while got.len() < 10 && now < 200 * MS {
            while let Some((_, p)) = s.dequeue(now) {
                got.push((p, now));
            }
            now += MS / 10;
        }
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            (0..10).collect::<Vec<_>>()
        );
        let span = got[9].1 - got[2].1;
        assert!(
            (55 * MS..=57 * MS).contains(&span),
            "7 packets took {span} ns after the burst"
        );
    }

    /// Configurations that cannot work are refused in one line.
    #[test]
    fn bad_configurations_are_refused() {
        let ok = class("a", None, 10, 10, 0, 1);
        let cases = [
            (
                vec![class("a", None, 10, 5, 0, 1)],
                "ceil at least the rate",
            ),
            (vec![class("a", None, 0, 5, 0, 1)], "rate must be above 0"),
            (vec![ok.clone(), ok.clone()], "defined twice"),
            (vec![class("b", Some("x"), 10, 10, 0, 1)], "parent \"x\""),
            (vec![class("a", None, 10, 10, 0, 0)], "weight"),
            (vec![], "at least one class"),
        ];
        for (cfg, want) in cases {
            let e = Scheduler::<u8>::new(1000, 1514, cfg, 0)
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains(want), "{e} (want {want})");
            assert!(!e.contains('\n'));
        }
    }

    /// `next_send_at` says when to come back: never earlier than a packet
    /// can go, and a dequeue at that time succeeds.
    #[test]
    fn next_send_at_is_when_the_next_packet_goes() {
        let mut s: Scheduler<u8> = Scheduler::new(
            8_000_000,
            1514,
            vec![class("a", None, 8_000_000, 8_000_000, 0, 1)],
            0,
        )
        .unwrap();
        let a = s.class("a").unwrap();
        assert_eq!(s.next_send_at(0), None, "nothing queued");
        for _ in 0..5 {
            s.enqueue(a, 0, 1000).unwrap();
        }
        let mut now = 0;
        let mut sent = 0;
        while sent < 5 {
            let t = s.next_send_at(now).unwrap();
            assert!(t >= now);
            now = t;
            if s.dequeue(now).is_some() {
                sent += 1;
            } else {
                now += 1_000;
            }
            assert!(now < SEC, "stuck at {now}");
        }
        // 8 Mbit/s = 1 byte/us: 5000 B, the first 1514 B in the burst.
        assert!(now <= 4_000 * 1_000, "done at {now} ns");
    }
}
