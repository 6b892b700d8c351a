//! The scheduler's classes as they sit in a policer's maps: the
//! `sched_classes` slots (written by `qos serve` and `qos class`, read by
//! the scheduler when the generation changes) and the counters the
//! scheduler publishes in `sched_stats`, for `qos stats`.
use peregrine_bpf::policer::{ClassCounters, ClassSlot, PolicerMaps, CLASS_NAME_LEN, MAX_CLASSES};

use crate::error::Result;
use crate::sched::ClassConfig;

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
    let mut slots = Vec::new();
    for id in 1..MAX_CLASSES {
        let s = maps.class_slot(id)?;
        if s.used != 0 {
            slots.push((id, s));
        }
    }
    let mut out: Vec<(u32, ClassConfig)> = Vec::new();
    // Parents first: each pass adds the classes whose parent is in.
    while !slots.is_empty() {
        let before = slots.len();
        let mut rest = Vec::new();
        for (id, s) in slots {
            let parent = match s.parent {
                0 => Some(None),
                p => out
                    .iter()
                    .find(|(i, _)| *i == p)
                    .map(|(_, c)| Some(c.name.clone())),
            };
            match parent {
                Some(parent) => out.push((
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
                )),
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
    pub egress_ifindex: u32,
    /// The serving process, when alive.
    pub owner: Option<u32>,
    pub link_bps: u64,
    /// (id, class, counters).
    pub classes: Vec<(u32, ClassConfig, ClassCounters)>,
    /// Steered packets of no class the scheduler knows (or with no room).
    pub unclassified: ClassCounters,
}

/// The scheduler's classes and counters in `maps`, if it has one.
pub fn scheduler_stats(maps: &PolicerMaps, owner: Option<u32>) -> Result<Option<SchedulerStats>> {
    let port = maps.sched_port()?;
    if port.egress_ifindex == 0 {
        return Ok(None);
    }
    let classes = installed_classes(maps)?
        .into_iter()
        .map(|(id, c)| Ok((id, c, maps.class_counters(id)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(SchedulerStats {
        egress_ifindex: port.egress_ifindex,
        owner,
        link_bps: port.link_bps,
        classes,
        unclassified: maps.class_counters(0)?,
    }))
}
