//! A policer's counters as one typed report, for people (tables) and
//! machines (`qos stats --json`, an agent): each rule's match as a file
//! would write it, its meter in units and its counters; the policer's own
//! counters; the scheduler's classes, if it feeds one.
use peregrine_bpf::policer::{Exceed, InstalledRule, Rate};
use serde::Serialize;

use crate::attach::PolicerStats;
use crate::classes::SchedulerStats;
use crate::sched::{ClassConfig, ClassStats};

/// One policer: interface, hook ("xdp" or "tc"), counters, rules, scheduler.
#[derive(Debug, Clone, Serialize)]
pub struct PolicerReport {
    pub iface: String,
    pub hook: &'static str,
    pub packets: u64,
    pub unmatched: u64,
    pub not_ip: u64,
    pub malformed: u64,
    pub steered: u64,
    pub unscheduled: u64,
    pub rules: Vec<RuleReport>,
    pub scheduler: Option<SchedulerReport>,
}

/// One rule: match, class, meter ("10000000 bit/s", "65536 B", "drop";
/// "-" unmetered) and counters.
#[derive(Debug, Clone, Serialize)]
pub struct RuleReport {
    pub id: u32,
    pub priority: u32,
    #[serde(rename = "match")]
    pub matches: String,
    pub class: Option<String>,
    pub rate: String,
    pub burst: String,
    pub exceed: String,
    pub conform_packets: u64,
    pub conform_bytes: u64,
    pub exceed_packets: u64,
    pub exceed_bytes: u64,
}

/// The scheduler a policer feeds (`qos serve`).
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerReport {
    pub egress_ifindex: u32,
    /// The serving process, when alive.
    pub owner_pid: Option<u32>,
    pub running: bool,
    pub link_bps: u64,
    pub classes: Vec<ClassReport>,
    pub unclassified_dropped_packets: u64,
}

/// One class: its settings (flattened: `name`, `rate_bps`, ...) and
/// counters.
#[derive(Debug, Clone, Serialize)]
pub struct ClassReport {
    pub id: u32,
    #[serde(flatten)]
    pub config: ClassConfig,
    #[serde(flatten)]
    pub stats: ClassStats,
    /// Packets queued now (a gauge).
    pub queue_depth: u64,
}

impl PolicerStats {
    /// The report of these counters.
    pub fn report(&self) -> PolicerReport {
        let t = &self.totals;
        let sched = self.scheduler.as_ref();
        PolicerReport {
            iface: self.iface.clone(),
            hook: self.hook.kind(),
            packets: t.packets,
            unmatched: t.unmatched,
            not_ip: t.not_ip,
            malformed: t.malformed,
            steered: t.steered,
            unscheduled: t.unscheduled,
            rules: self
                .rules
                .iter()
                .map(|(r, c)| {
                    let (rate, burst, exceed) = describe_meter(r);
                    RuleReport {
                        id: r.id,
                        priority: r.priority,
                        matches: describe_match(r),
                        class: class_name(sched, r.class()),
                        rate,
                        burst,
                        exceed,
                        conform_packets: c.conform_packets,
                        conform_bytes: c.conform_bytes,
                        exceed_packets: c.exceed_packets,
                        exceed_bytes: c.exceed_bytes,
                    }
                })
                .collect(),
            scheduler: sched.map(scheduler_report),
        }
    }
}

fn scheduler_report(s: &SchedulerStats) -> SchedulerReport {
    SchedulerReport {
        egress_ifindex: s.egress_ifindex,
        owner_pid: s.owner,
        running: s.owner.is_some(),
        link_bps: s.link_bps,
        classes: s
            .classes
            .iter()
            .map(|(id, c, k)| ClassReport {
                id: *id,
                config: c.clone(),
                stats: ClassStats::from_counters(k),
                queue_depth: k.queue_depth,
            })
            .collect(),
        unclassified_dropped_packets: s.unclassified.dropped_packets,
    }
}

/// A rule's match, as a file would write it.
pub fn describe_match(r: &InstalledRule) -> String {
    let m = r.matches();
    let mut parts = Vec::new();
    if let Some(p) = m.src {
        parts.push(format!("src {p}"));
    }
    if let Some(p) = m.dst {
        parts.push(format!("dst {p}"));
    }
    if let (Some(f), None, None) = (m.family, m.src, m.dst) {
        parts.push(format!("ipv{f}"));
    }
    if let Some(p) = m.proto {
        parts.push(match p {
            6 => "tcp".into(),
            17 => "udp".into(),
            n => format!("proto {n}"),
        });
    }
    if let Some(p) = m.sport {
        parts.push(format!("sport {p}"));
    }
    if let Some(p) = m.dport {
        parts.push(format!("dport {p}"));
    }
    if let Some(d) = m.dscp {
        parts.push(format!("dscp {d}"));
    }
    if parts.is_empty() {
        "any".into()
    } else {
        parts.join(" ")
    }
}

/// A rule's meter: rate, burst and what exceeding does ("-" unmetered).
pub fn describe_meter(r: &InstalledRule) -> (String, String, String) {
    let (rate, burst, exceed) = r.meter();
    let (rate, burst) = match rate {
        Rate::Bits(b) => (format!("{b} bit/s"), format!("{burst} B")),
        Rate::Packets(p) => (format!("{p} pps"), format!("{burst} packets")),
        Rate::Unmetered => return ("-".into(), "-".into(), "-".into()),
    };
    let exceed = match exceed {
        Exceed::Drop => "drop".to_string(),
        Exceed::Remark(d) => format!("remark:{d}"),
    };
    (rate, burst, exceed)
}

/// The name of class `id` (None: no class; "#id" when the scheduler does
/// not know it).
fn class_name(sched: Option<&SchedulerStats>, id: u16) -> Option<String> {
    if id == 0 {
        return None;
    }
    Some(
        sched
            .and_then(|s| s.classes.iter().find(|(i, _, _)| *i == u32::from(id)))
            .map_or_else(|| format!("#{id}"), |(_, c, _)| c.name.clone()),
    )
}
