//! `qos serve`: the egress scheduler on AF_XDP. The XDP policer on the
//! ingress interface forwards the packets of class rules that leave by the
//! scheduled interface (FIB lookup, TTL, MACs) to an AF_XDP socket per RX
//! queue, their class in front (`sched_meta`); this loop copies each into
//! its class's queue, asks the scheduler (`sched`) what may go now, and
//! sends that out of the egress interface from an AF_XDP socket there,
//! finishing checksums a local sender left partial on the way.
//!
//! Everything else (unclassified packets, routes elsewhere) the kernel
//! forwards as before: the bypass. If this process dies, its sockets close
//! and the program hands class traffic to the kernel too (counted
//! `unscheduled`): it fails open, never into a black hole.
//!
//! The classes live in the program's `sched_classes` map, the counters in
//! `sched_stats`: `qos class` changes a slot and bumps the generation in
//! `sched_port`, which this loop checks every `HOUSEKEEPING`; `qos stats`
//! reads the counters from any process or namespace.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::collections::VecDeque;
use std::time::Duration;

use peregrine_bpf::policer::{
    ClassCounters, ClassSlot, PolicerMaps, SchedPort, MAX_CLASSES, MAX_QUEUES,
};
use peregrine_host::cpu::monotonic_ns;
use peregrine_host::signals;
use peregrine_xsk::{Xsk, XskConfig, XskError, ZeroCopy};

use crate::attach;
pub use crate::classes::ClassChange;
use crate::classes::{class_slot, installed_classes, plan_change, slot_after};
use crate::config::{PolicerConfig, SchedulerConfig};
use crate::error::{QosError, Result};
use crate::sched::{Refused, Scheduler};

/// How often counters are published (stamped) and class changes picked
/// up. XDP trusts a `drop_ahead` for two of these.
const HOUSEKEEPING: Duration = Duration::from_millis(20);
const _: () = assert!(
    peregrine_bpf::policer::DROP_AHEAD_MS as u128 == 2 * HOUSEKEEPING.as_millis(),
    "SCHED_DROP_AHEAD_MS is two publication intervals"
);
/// Frames per ring access.
const BATCH: u32 = 64;
/// Bytes of a queued frame's slot (the UMEM frame size).
const SLOT: usize = 2048;

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Pin the loop to this CPU.
    pub cpu: Option<usize>,
    /// Set to stop the run (besides Ctrl-C and SIGTERM): for a scheduler
    /// run in a thread of a larger program (a benchmark).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl ServeOptions {
    pub(crate) fn stopped(&self) -> bool {
        signals::stop_requested()
            || self
                .stop
                .as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// What a run did, at its end.
#[derive(Debug, Clone, Default)]
pub struct ServeSummary {
    pub received: u64,
    pub sent: u64,
    pub reconfigured: u64,
}

/// Applies `change` to the scheduler running for `iface` here: checked
/// whole first (a class set the scheduler would refuse changes nothing),
/// then one slot is written and the generation bumped, which the
/// scheduler picks up within `HOUSEKEEPING`. Returns the class's id.
pub fn change_class(iface: &str, change: &ClassChange) -> Result<u32> {
    let maps = attach::maps_here(iface)?;
    let mut port = maps.sched_port()?;
    if port.egress_ifindex == 0 || attach::scheduler_owner(iface)?.is_none() {
        return Err(QosError::Other(format!(
            "no scheduler serves {iface} (`peregrine qos serve` runs one)"
        )));
    }
    let classes = installed_classes(&maps)?;
    let rules = maps.rules()?;
    let (id, ordered) = plan_change(
        iface,
        classes,
        change,
        &rules,
        port.link_bps,
        port.link_burst,
        MAX_CLASSES,
    )?;
    let slot = slot_after(change, &ordered);
    // A new class starts from zero before XDP can see it used; a deleted
    // one is zeroed once XDP no longer counts for it.
    if matches!(change, ClassChange::Add(_)) {
        maps.reset_class_counters(id)?;
    }
    maps.set_class_slot(id, &slot)?;
    if matches!(change, ClassChange::Delete(_)) {
        maps.reset_class_counters(id)?;
    }
    port.generation += 1;
    maps.set_sched_port(&port)?;
    Ok(id)
}

/// Queued frames' bytes: one slot per packet the queues can hold.
struct Slab {
    bytes: Vec<u8>,
    len: Vec<u16>,
    free: Vec<u32>,
}

impl Slab {
    fn new(slots: usize) -> Slab {
        Slab {
            bytes: vec![0; slots * SLOT],
            len: vec![0; slots],
            free: (0..slots as u32).rev().collect(),
        }
    }

    fn put(&mut self, frame: &[u8]) -> Option<u32> {
        if frame.len() > SLOT {
            return None;
        }
        let i = self.free.pop()?;
        let at = i as usize * SLOT;
        self.bytes[at..at + frame.len()].copy_from_slice(frame);
        self.len[i as usize] = frame.len() as u16;
        Some(i)
    }

    fn get(&self, i: u32) -> &[u8] {
        let at = i as usize * SLOT;
        &self.bytes[at..at + usize::from(self.len[i as usize])]
    }
}

/// The scheduler of the classes now configured, with the class id of
/// each of its indexes and the index of each id.
struct Running {
    sched: Scheduler<u32>,
    ids: Vec<u32>,
    index: Vec<Option<usize>>,
    /// Each class's sent packets at the last publication.
    published_sent: Vec<u64>,
}

impl Running {
    fn build(maps: &PolicerMaps, port: &SchedPort, now: u64) -> Result<Running> {
        let classes = installed_classes(maps)?;
        let ids: Vec<u32> = classes.iter().map(|(i, _)| *i).collect();
        let sched = Scheduler::new(
            port.link_bps,
            port.link_burst,
            classes.into_iter().map(|(_, c)| c).collect(),
            now,
        )
        .map_err(|e| QosError::Config(e.to_string()))?;
        let mut index = vec![None; MAX_CLASSES as usize];
        for (k, &id) in ids.iter().enumerate() {
            if sched.is_leaf(k) {
                index[id as usize] = Some(k);
            }
        }
        let published_sent = vec![0; ids.len()];
        Ok(Running {
            sched,
            ids,
            index,
            published_sent,
        })
    }

    /// The class names, in the scheduler's order.
    fn names(&self) -> Vec<String> {
        self.sched
            .classes()
            .map(|(n, _, _)| n.to_string())
            .collect()
    }

    /// Moves queued packets and counters from `old` to the classes of the
    /// same name here; packets of a class that is gone are dropped and
    /// freed (a class deleted and another added in one interval may have
    /// the same id: it does not get the deleted one's queue).
    fn take_over(&mut self, mut old: Running, slab: &mut Slab, lost: &mut u64) {
        let heirs = successors(&old.names(), &self.names());
        for (k, heir) in heirs.into_iter().enumerate() {
            let q = old.sched.take_queue(k);
            let stats = old.sched.stats(k);
            match heir {
                Some(n) => {
                    self.sched.carry_stats(n, stats);
                    self.published_sent[n] = old.published_sent[k];
                    for (slot, len) in q {
                        if self.sched.requeue(n, slot, len).is_err() {
                            slab.free.push(slot);
                        }
                    }
                }
                None => {
                    *lost += q.len() as u64;
                    slab.free.extend(q.into_iter().map(|(s, _)| s));
                }
            }
        }
    }

    /// Writes every class's counters, stamped with the time they were
    /// counted (a reader's rate divides by the stamps' difference, not by
    /// its own clock: a scheduler waiting for a CPU publishes late), and
    /// whether XDP may drop its arrivals until the next publication
    /// (`Scheduler::drop_ahead`).
    fn publish(&mut self, maps: &PolicerMaps, unclassified: &ClassCounters) -> Result<()> {
        let now = monotonic_ns();
        let unclassified = ClassCounters {
            counted_at_ns: now,
            ..*unclassified
        };
        maps.set_class_counters(0, &unclassified)?;
        for (k, (_, s, depth)) in self.sched.classes().enumerate() {
            let sent_since = s.sent_packets - self.published_sent[k];
            let c = ClassCounters {
                drop_ahead: u64::from(self.sched.drop_ahead(k, sent_since)),
                ..s.counters(depth as u64, now)
            };
            maps.set_class_counters(self.ids[k], &c)?;
            self.published_sent[k] = s.sent_packets;
        }
        Ok(())
    }
}

/// For each class of `old` (by name), the index of the class of the same
/// name in `new`, if it is still there.
fn successors(old: &[String], new: &[String]) -> Vec<Option<usize>> {
    old.iter()
        .map(|name| new.iter().position(|n| n == name))
        .collect()
}

/// Writes the scheduler's classes and link into a policer's maps.
fn install(maps: &PolicerMaps, cfg: &PolicerConfig, egress_ifindex: u32) -> Result<()> {
    let sc = cfg
        .scheduler
        .as_ref()
        .ok_or_else(|| QosError::Config("the file has no [scheduler]".into()))?;
    for id in 1..MAX_CLASSES {
        let slot = match sc.classes.get(id as usize - 1) {
            Some(c) => {
                let parent = c
                    .parent
                    .as_ref()
                    .and_then(|p| sc.classes.iter().position(|o| &o.name == p))
                    .map_or(0, |i| i as u32 + 1);
                class_slot(c, parent)
            }
            None => ClassSlot::default(),
        };
        maps.set_class_slot(id, &slot)?;
        maps.reset_class_counters(id)?;
    }
    maps.set_sched_port(&SchedPort {
        egress_ifindex,
        owner_pid: std::process::id(),
        generation: 1,
        link_bps: sc.link_bps,
        link_burst: sc.link_burst,
    })?;
    Ok(())
}

/// Detaches the run's policer when the run ends, however it ends. While
/// the run starts it holds the policer lock (`starting`): a start that
/// fails is undone under the same lock, never by a second `flock` of this
/// process, which would wait for the first.
struct Attached {
    iface: String,
    starting: Option<peregrine_host::fs::FileLock>,
}

impl Drop for Attached {
    fn drop(&mut self) {
        let done = match self.starting.take() {
            Some(lock) => attach::detach_locked(&lock, &self.iface),
            None => attach::detach(&self.iface),
        };
        if let Err(e) = done {
            tracing::warn!("detaching the policer of {}: {e}", self.iface);
        }
    }
}

/// The AF_XDP engine of `engine::serve`: applies `cfg` on `iface` (its
/// rules and filters at the XDP hook) and schedules the classes of `sc`
/// (`cfg`'s scheduler) out of its egress interface until a stop is
/// requested (Ctrl-C, SIGTERM); then detaches. `ready` is called once
/// traffic is being scheduled.
pub(crate) fn serve_afxdp(
    iface: &str,
    cfg: &PolicerConfig,
    sc: &SchedulerConfig,
    opts: &ServeOptions,
    ready: impl FnOnce(),
) -> Result<ServeSummary> {
    if sc.egress == iface {
        return Err(QosError::Config(format!(
            "the scheduler's egress {iface} is the interface it is fed from: traffic is \
             classified where it comes in and scheduled where it leaves"
        )));
    }
    let egress_ifindex = peregrine_bpf::link::ifindex(&sc.egress)
        .map_err(|_| QosError::Config(format!("no interface {} here", sc.egress)))?;
    // The start is one step under the policer lock, from the owner check
    // to this run recorded as the owner (`install`): another process's
    // `qos apply` in between would replace the program whose maps this
    // run feeds.
    let lock = attach::lock_changes()?;
    if let Some(pid) = attach::scheduler_owner(iface)? {
        return Err(QosError::Other(format!(
            "a scheduler (pid {pid}) already serves {iface}: stop it first"
        )));
    }
    let xcfg = XskConfig {
        zero_copy: ZeroCopy::Off,
        ..XskConfig::default()
    };
    // The egress socket first: an interface that cannot take one fails the
    // run before anything is attached.
    // Copy-mode TX moves frames only in sendto(): without the wake-up
    // flag the socket kicks after every batch that left frames waiting.
    let mut tx = Xsk::open(
        &sc.egress,
        0,
        XskConfig {
            need_wakeup: false,
            ..xcfg
        },
    )?;
    attach::apply_locked(
        &lock,
        iface,
        peregrine_bpf::Hook::Xdp(peregrine_bpf::XdpMode::Native),
        &cfg.rules,
    )?;
    let mut attached = Attached {
        iface: iface.to_string(),
        starting: Some(lock),
    };
    let maps = attach::maps_here(iface)?;
    install(&maps, cfg, egress_ifindex)?;
    // Recorded: every later `apply` refuses while this run lives, and
    // rule and class changes may go on.
    attached.starting = None;
    // A socket per RX queue (a packet reaches only a socket bound to its
    // queue): bound until the kernel says the queue does not exist, which
    // works in any namespace (sysfs shows the namespace's devices only
    // under `ip netns exec`).
    let mut rx = Vec::new();
    for q in 0..MAX_QUEUES {
        let x = match Xsk::open(iface, q, xcfg) {
            Ok(x) => x,
            Err(XskError::Sys { error, .. })
                if q > 0 && error.raw_os_error() == Some(libc::EINVAL) =>
            {
                break
            }
            Err(e) => return Err(e.into()),
        };
        maps.set_sched_socket(q, Some(x.fd()))?;
        rx.push(x);
    }
    let queues = rx.len() as u32;
    if let Some(cpu) = opts.cpu {
        peregrine_host::cpu::pin_to_cpu(cpu)?;
    }
    let mut port = maps.sched_port()?;
    let mut run = Running::build(&maps, &port, monotonic_ns())?;
    let room: usize = run
        .sched
        .classes()
        .enumerate()
        .filter(|(k, _)| run.sched.is_leaf(*k))
        .map(|(k, _)| run.sched.queue_limit(k))
        .sum();
    let mut slab = Slab::new(room + 4 * BATCH as usize);
    let mut unclassified = ClassCounters::default();
    let mut pending: VecDeque<u32> = VecDeque::new();
    let mut summary = ServeSummary::default();
    let meta_len = std::mem::size_of::<peregrine_bpf::policer::SchedMeta>();
    let mut next_housekeeping = 0u64;
    ready();
    while !opts.stopped() {
        let now = monotonic_ns();
        let mut got = 0u32;
        for x in rx.iter_mut() {
            got += x.receive(BATCH, meta_len, |meta, frame| {
                let id = meta
                    .get(..4)
                    .map_or(0, |b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
                let class = run.index.get(id as usize).copied().flatten();
                let (Some(class), Some(slot)) = (class, class.and_then(|_| slab.put(frame))) else {
                    unclassified.dropped_packets += 1;
                    unclassified.dropped_bytes += frame.len() as u64;
                    return;
                };
                match run.sched.enqueue(class, slot, frame.len()) {
                    Ok(()) => {}
                    Err(Refused::QueueFull(s)) | Err(Refused::NoClass(s)) => slab.free.push(s),
                }
            });
        }
        summary.received += u64::from(got);
        if pending.is_empty() {
            while pending.len() < BATCH as usize {
                match run.sched.dequeue(now) {
                    Some((_, slot)) => pending.push_back(slot),
                    None => break,
                }
            }
        }
        let mut sent = 0;
        if !pending.is_empty() {
            let room = tx.tx_free().min(pending.len() as u32);
            sent = tx.transmit(room, |buf| {
                let Some(slot) = pending.pop_front() else {
                    return 0;
                };
                let frame = slab.get(slot);
                let len = frame.len();
                buf[..len].copy_from_slice(frame);
                peregrine_wire::finish_partial_checksum(&mut buf[..len]);
                slab.free.push(slot);
                len
            })?;
            summary.sent += u64::from(sent);
        }
        if now >= next_housekeeping {
            next_housekeeping = now + HOUSEKEEPING.as_nanos() as u64;
            let p = maps.sched_port()?;
            if p.generation != port.generation {
                match Running::build(&maps, &p, now) {
                    Ok(new) => {
                        let old = std::mem::replace(&mut run, new);
                        run.take_over(old, &mut slab, &mut unclassified.dropped_packets);
                        summary.reconfigured += 1;
                    }
                    Err(e) => tracing::warn!("classes changed to something unusable: {e}"),
                }
                port = p;
            }
            run.publish(&maps, &unclassified)?;
        }
        if got > 0 || sent > 0 || !pending.is_empty() {
            continue;
        }
        // Nothing to do now. The loop never busy-polls: it shares its CPU
        // with the NAPI thread that feeds it, and spinning delays that
        // thread by a time slice (measured in bench qos: voice's ping p99
        // 21x its idle p99 with a 20 us spin, 2x with none). It sleeps in
        // ppoll until a frame arrives or the next packet may go; the
        // link's burst absorbs the timer's slack.
        let wait = run
            .sched
            .next_send_at(now)
            .map_or(HOUSEKEEPING.as_nanos() as u64, |t| t.saturating_sub(now))
            .min(HOUSEKEEPING.as_nanos() as u64);
        wait_for_frames(&rx, wait);
    }
    for q in 0..queues {
        let _ = maps.set_sched_socket(q, None);
    }
    let _ = run.publish(&maps, &unclassified);
    Ok(summary)
}

/// Sleeps up to `ns` or until one of `rx` has a frame.
fn wait_for_frames(rx: &[Xsk], ns: u64) {
    let mut fds: Vec<libc::pollfd> = rx
        .iter()
        .map(|x| libc::pollfd {
            fd: x.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // Safety: `fds` holds valid pollfds for the call's duration; a null
    // signal mask keeps the thread's own.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::successors;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|n| n.to_string()).collect()
    }

    /// Queued packets follow the class's name, not its id: gold deleted
    /// and bronze added within one interval (bronze taking gold's id)
    /// leaves gold's queue to be dropped, not sent as bronze's; a class
    /// that moved in the order keeps its queue.
    #[test]
    fn queues_go_to_the_class_of_the_same_name() {
        assert_eq!(
            successors(&names(&["gold", "silver"]), &names(&["bronze", "silver"])),
            [None, Some(1)]
        );
        assert_eq!(
            successors(&names(&["a", "b"]), &names(&["b", "c", "a"])),
            [Some(2), Some(0)]
        );
    }
}
