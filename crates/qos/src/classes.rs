//! The scheduler's classes as they sit in a policer's maps: the
//! `sched_classes` slots (written by `qos serve` and `qos class`, read by
//! the scheduler when the generation changes) and the counters the
//! scheduler publishes in `sched_stats`, for `qos stats`.
use peregrine_bpf::policer::{
    ClassCounters, ClassSlot, InstalledRule, PolicerMaps, CLASS_NAME_LEN, MAX_CLASSES,
};

use crate::config::ClassIndex;
use crate::error::{QosError, Result};
use crate::sched::{ClassConfig, Scheduler};

/// The name in a class slot.
pub fn slot_name(s: &ClassSlot) -> String {
    let bytes: Vec<u8> = s
        .name
        .iter()
        .map(|&c| c as u8)
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The slot of class `c` whose parent has id `parent`.
pub fn class_slot(c: &ClassConfig, parent: u32) -> ClassSlot {
    let mut s = ClassSlot {
        used: 1,
        parent,
        rate_bps: c.rate_bps,
        ceil_bps: c.ceil_bps,
        burst: c.burst,
        weight: c.weight,
        queue_limit: c.queue_limit as u32,
        priority: c.priority,
        ..Default::default()
    };
    for (d, b) in s
        .name
        .iter_mut()
        .zip(c.name.bytes().take(CLASS_NAME_LEN - 1))
    {
        *d = b as _;
    }
    s
}

/// The classes in the maps, by id, parents before children (the order
/// the scheduler needs); a class whose parent is gone is left out.
pub fn installed_classes(maps: &PolicerMaps) -> Result<Vec<(u32, ClassConfig)>> {
    classes_in(MAX_CLASSES, |id| Ok(maps.class_slot(id)?))
}

/// The classes of a class table of ids 1..`max` read slot by slot (the
/// AF_XDP scheduler's, or the HTB classifier's), as `installed_classes`.
pub fn classes_in(
    max: u32,
    slot: impl Fn(u32) -> Result<ClassSlot>,
) -> Result<Vec<(u32, ClassConfig)>> {
    let mut slots = Vec::new();
    for id in 1..max {
        let s = slot(id)?;
        if s.used != 0 {
            slots.push((id, s));
        }
    }
    let mut out: Vec<(u32, ClassConfig)> = Vec::new();
    // The position in `out` of each id there.
    let mut placed: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    // Parents first: each pass adds the classes whose parent is in.
    while !slots.is_empty() {
        let before = slots.len();
        let mut rest = Vec::new();
        for (id, s) in slots {
            let parent = match s.parent {
                0 => Some(None),
                p => placed.get(&p).map(|&k| Some(out[k].1.name.clone())),
            };
            match parent {
                Some(parent) => {
                    placed.insert(id, out.len());
                    out.push((
                        id,
                        ClassConfig {
                            name: slot_name(&s),
                            parent,
                            rate_bps: s.rate_bps,
                            ceil_bps: s.ceil_bps,
                            burst: s.burst,
                            priority: s.priority,
                            weight: s.weight,
                            queue_limit: s.queue_limit as usize,
                        },
                    ))
                }
                None => rest.push((id, s)),
            }
        }
        if rest.len() == before {
            break;
        }
        slots = rest;
    }
    Ok(out)
}

/// The scheduler's side of `qos stats`.
#[derive(Debug, Clone)]
pub struct SchedulerStats {
    /// "afxdp" or "htb".
    pub engine: &'static str,
    pub egress_ifindex: u32,
    /// The serving process, when alive.
    pub owner: Option<u32>,
    pub link_bps: u64,
    /// (id, class, counters).
    pub classes: Vec<(u32, ClassConfig, ClassCounters)>,
    /// Steered packets of no class the scheduler knows (or with no room);
    /// the htb engine: packets its classifier left to no class, as sent.
    pub unclassified: ClassCounters,
    /// CLOCK_MONOTONIC when the counters were counted: the AF_XDP
    /// engine's last publication, the htb engine's read of the kernel.
    pub counted_at_ns: u64,
    /// Of the classes' dropped packets, those XDP dropped before they
    /// reached the scheduler (the AF_XDP engine's `drop_ahead`).
    pub early_dropped_packets: u64,
}

/// The scheduler's classes and counters in `maps`, if it has one.
pub fn scheduler_stats(maps: &PolicerMaps, owner: Option<u32>) -> Result<Option<SchedulerStats>> {
    let port = maps.sched_port()?;
    if port.egress_ifindex == 0 {
        return Ok(None);
    }
    // One publication's counters: every class carries the stamp of the
    // publication that wrote it, so a read that a publication overtook
    // (a class newer than entry 0's stamp) is read again; a class not yet
    // published (added a moment ago, stamp 0) cannot agree, hence the
    // bound.
    for attempt in 1.. {
        let unclassified = maps.class_counters(0)?;
        // A class's drops are the scheduler's and those XDP made for it
        // (`drop_ahead`, counted live): both are arrivals its full queue
        // turned away.
        let mut early_dropped_packets = 0;
        let classes = installed_classes(maps)?
            .into_iter()
            .map(|(id, c)| {
                let mut k = maps.class_counters(id)?;
                let early = maps.class_early_drops(id)?;
                k.dropped_packets += early.packets;
                k.dropped_bytes += early.bytes;
                early_dropped_packets += early.packets;
                Ok((id, c, k))
            })
            .collect::<Result<Vec<_>>>()?;
        let one_publication = classes
            .iter()
            .all(|(_, _, k)| k.counted_at_ns == unclassified.counted_at_ns);
        if one_publication || attempt == 5 {
            return Ok(Some(SchedulerStats {
                engine: "afxdp",
                egress_ifindex: port.egress_ifindex,
                owner,
                link_bps: port.link_bps,
                classes,
                counted_at_ns: unclassified.counted_at_ns,
                unclassified,
                early_dropped_packets,
            }));
        }
    }
    unreachable!("the loop returns by its fifth attempt")
}

/// A change `qos class` asks of a running scheduler.
#[derive(Debug, Clone)]
pub enum ClassChange {
    /// A new class (the next free id).
    Add(ClassConfig),
    /// New settings for the class of that name (same name, same id).
    Change(ClassConfig),
    Delete(String),
}

/// The class slot `change` leaves its class with (`ordered`: the classes
/// after the change).
pub fn slot_after(change: &ClassChange, ordered: &[(u32, ClassConfig)]) -> ClassSlot {
    match change {
        ClassChange::Delete(_) => ClassSlot::default(),
        ClassChange::Add(c) | ClassChange::Change(c) => {
            class_slot(c, ClassIndex::new(ordered).parent_id(c))
        }
    }
}

/// Checks `change` against the installed `classes` whole, as the
/// scheduler would take the result (parents, ceilings, a class one of the
/// installed `rules` still sends to): the id of the class changed, and the
/// classes after it, parents before children. A new class takes the
/// lowest free id below `max` (the engine's limit).
#[allow(clippy::too_many_arguments)]
pub fn plan_change(
    iface: &str,
    mut classes: Vec<(u32, ClassConfig)>,
    change: &ClassChange,
    rules: &[InstalledRule],
    link_bps: u64,
    link_burst: u64,
    max: u32,
) -> Result<(u32, Vec<(u32, ClassConfig)>)> {
    let index = ClassIndex::new(&classes);
    let find = |name: &str| {
        index
            .position(name)
            .ok_or_else(|| QosError::Config(format!("no class {name:?} on {iface}")))
    };
    let sending_to = |id: u32| {
        rules
            .iter()
            .find(|r| u32::from(r.class()) == id)
            .map(|r| r.id)
    };
    if let ClassChange::Add(c) | ClassChange::Change(c) = change {
        if let Some(p) = &c.parent {
            let Some(pid) = index.id(p) else {
                return Err(QosError::Config(format!(
                    "class {:?}: parent {p:?} is not defined",
                    c.name
                )));
            };
            // A class with children takes no packets of its own (a
            // file's filters name leaves only): its rules would send to
            // nothing.
            if let Some(r) = sending_to(pid) {
                return Err(QosError::Config(format!(
                    "class {:?}: rule {r} sends packets to its parent {p:?}, which would have \
                     children: `qos rule del` it first",
                    c.name
                )));
            }
        }
    }
    let id = match change {
        ClassChange::Add(c) => {
            if index.id(&c.name).is_some() {
                return Err(QosError::Config(format!("class {:?} exists", c.name)));
            }
            let id = index.free_id(max).ok_or_else(|| {
                QosError::Config(format!(
                    "every class id is in use: this engine takes at most {} classes",
                    max - 1
                ))
            })?;
            classes.push((id, c.clone()));
            id
        }
        ClassChange::Change(c) => {
            let k = find(&c.name)?;
            classes[k].1 = c.clone();
            classes[k].0
        }
        ClassChange::Delete(name) => {
            let k = find(name)?;
            if !index.is_leaf(name) {
                return Err(QosError::Config(format!(
                    "class {name:?} has child classes: delete them first"
                )));
            }
            let id = classes[k].0;
            if let Some(r) = sending_to(id) {
                return Err(QosError::Config(format!(
                    "rule {r} sends packets to class {name:?}: `qos rule del` it first"
                )));
            }
            classes.remove(k);
            id
        }
    };
    // Parents before children, as the scheduler wants them.
    let ordered = ClassIndex::parents_first(&classes)
        .ok_or_else(|| QosError::Config("a class's parent is not defined".into()))?;
    Scheduler::<()>::new(
        link_bps,
        link_burst,
        ordered.iter().map(|(_, c)| c.clone()).collect(),
        0,
    )
    .map_err(|e| QosError::Config(e.to_string()))?;
    Ok((id, ordered))
}
