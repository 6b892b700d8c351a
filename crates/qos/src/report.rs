//! A policer's counters as one typed report, for people (tables) and
//! machines (`qos stats --json`, an agent): each rule's match as a file
//! would write it, its meter in units and its counters; the policer's own
//! counters; the scheduler's classes, if it feeds one.
use std::fmt;

use peregrine_bpf::policer::{Exceed, InstalledRule, Rate};
use peregrine_dataplane::report::{attachments_text, AttachmentRow};
use peregrine_host::netns;
use peregrine_metrics::{Counted, Counter};
use peregrine_units::Table;
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
    /// "afxdp" or "htb".
    pub engine: &'static str,
    pub egress_ifindex: u32,
    /// The serving process, when alive.
    pub owner_pid: Option<u32>,
    pub running: bool,
    pub link_bps: u64,
    pub classes: Vec<ClassReport>,
    pub unclassified_dropped_packets: u64,
    /// The htb engine: packets its classifier saw on the egress and left
    /// to no class (sent unshaped).
    pub unclassified_packets: u64,
    /// CLOCK_MONOTONIC (ns) when the class counters were counted: a rate
    /// is the difference of two reports' counters over the difference of
    /// their stamps.
    pub counted_at_ns: u64,
    /// Of the classes' `dropped_packets`, those XDP dropped before they
    /// reached the AF_XDP scheduler, its queue being full until its next
    /// look (`drop_ahead`); 0 for htb.
    pub early_dropped_packets: u64,
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
        engine: s.engine,
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
        unclassified_packets: s.unclassified.sent_packets,
        counted_at_ns: s.counted_at_ns,
        early_dropped_packets: s.early_dropped_packets,
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
        Rate::Zero => ("0 (nothing conforms)".into(), "-".into()),
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

/// The policers `qos stats` shows: tables for people, `{"policers": [...]}`
/// for scripts, counters for `--watch` and Prometheus.
pub struct Policers(pub Vec<PolicerReport>);

impl Policers {
    /// The reports of the policers of `ifaces` (`attach::policed`).
    pub fn read(ifaces: &[String]) -> crate::Result<Policers> {
        let stats = crate::attach::stats_of(ifaces)?;
        Ok(Policers(stats.iter().map(|s| s.report()).collect()))
    }
}

impl Counted for Policers {
    const PREFIX: &'static str = "peregrine_qos";
    const WHAT: &'static str =
        "seen by the policer, per interface, rule and counter (conform, exceed, unmatched, ...)";

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "policers": self.0 })
    }

    /// Per interface and rule, conform and exceed; per interface, the
    /// policer's own; per class, sent and dropped (queue depth is a gauge,
    /// in the JSON).
    fn counters(&self) -> Vec<Counter> {
        let mut out = Vec::new();
        for s in &self.0 {
            let on = |rule: &str, counter: &str, packets, bytes| {
                let labels = [
                    ("iface", s.iface.as_str()),
                    ("rule", rule),
                    ("counter", counter),
                ];
                Counter::new(&labels, packets, bytes)
            };
            for r in &s.rules {
                let id = r.id.to_string();
                out.push(on(&id, "conform", r.conform_packets, Some(r.conform_bytes)));
                out.push(on(&id, "exceed", r.exceed_packets, Some(r.exceed_bytes)));
            }
            if let Some(sc) = &s.scheduler {
                // Counted when the scheduler published them (or the htb
                // engine read the kernel's): rates over those stamps.
                let at = sc.counted_at_ns;
                for c in &sc.classes {
                    let class = format!("class:{}", c.config.name);
                    let k = &c.stats;
                    let sent = on(&class, "sent", k.sent_packets, Some(k.sent_bytes));
                    out.push(sent.with_depth(c.queue_depth).counted_at(at));
                    out.push(
                        on(&class, "dropped", k.dropped_packets, Some(k.dropped_bytes))
                            .counted_at(at),
                    );
                }
            }
            for (name, v) in [
                ("unmatched", s.unmatched),
                ("not_ip", s.not_ip),
                ("malformed", s.malformed),
                ("steered", s.steered),
                ("unscheduled", s.unscheduled),
            ] {
                out.push(on("-", name, v, None));
            }
        }
        out
    }
}

/// The rules of every policer, each scheduler's classes, each policer's
/// own counters.
impl fmt::Display for Policers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = Table::new(&[
            "iface",
            "rule",
            "match",
            "rate",
            "burst",
            "exceed",
            "conform pkts",
            "conform bytes",
            "exceed pkts",
            "exceed bytes",
        ]);
        for s in &self.0 {
            for r in &s.rules {
                t.row(vec![
                    s.iface.clone(),
                    r.id.to_string(),
                    r.matches.clone(),
                    r.rate.clone(),
                    r.burst.clone(),
                    r.exceed.clone(),
                    r.conform_packets.to_string(),
                    r.conform_bytes.to_string(),
                    r.exceed_packets.to_string(),
                    r.exceed_bytes.to_string(),
                ]);
            }
        }
        f.write_str(&t.render())?;
        for s in &self.0 {
            let Some(sc) = &s.scheduler else { continue };
            let mut t = Table::new(&[
                "iface",
                "class",
                "parent",
                "rate",
                "ceil",
                "prio",
                "weight",
                "sent pkts",
                "sent bytes",
                "borrowed",
                "dropped",
                "queued",
            ]);
            for c in &sc.classes {
                t.row(vec![
                    s.iface.clone(),
                    c.config.name.clone(),
                    c.config.parent.clone().unwrap_or_else(|| "-".into()),
                    format!("{} bit/s", c.config.rate_bps),
                    format!("{} bit/s", c.config.ceil_bps),
                    c.config.priority.to_string(),
                    c.config.weight.to_string(),
                    c.stats.sent_packets.to_string(),
                    c.stats.sent_bytes.to_string(),
                    c.stats.borrowed_packets.to_string(),
                    c.stats.dropped_packets.to_string(),
                    c.queue_depth.to_string(),
                ]);
            }
            f.write_str(&t.render())?;
            writeln!(
                f,
                "{}: scheduler ({}) {}, link {} bit/s; {} steered, {} class packets left to the kernel (unscheduled)",
                s.iface,
                sc.engine,
                sc.owner_pid
                    .map_or_else(|| "not running".to_string(), |p| format!("pid {p}")),
                sc.link_bps,
                s.steered,
                s.unscheduled
            )?;
        }
        for s in &self.0 {
            writeln!(
                f,
                "{} ({} hook): {} packets seen, {} matched no rule, {} not IP, {} malformed (passed unmetered)",
                s.iface, s.hook, s.packets, s.unmatched, s.not_ip, s.malformed
            )?;
        }
        Ok(())
    }
}

/// `qos list`: every policer on the host, `{"policers": [...]}` or a table
/// (namespace, interface, hook, program id, state).
pub fn list_text(as_json: bool) -> String {
    let names = netns::cookies();
    let rows: Vec<_> = crate::attach::list()
        .into_iter()
        .map(|a| (netns::cookie_name(&names, a.cookie), a))
        .collect();
    if as_json {
        let v: Vec<_> = rows
            .iter()
            .map(|(ns, a)| {
                serde_json::json!({
                    "namespace": ns, "netns_cookie": a.cookie, "iface": a.iface,
                    "hook": a.hook().map(|h| h.kind()),
                    "tc_order": a.tc_order().map(|o| o.0),
                    "prog_id": a.link.map(|l| l.prog_id), "stale": a.stale(),
                })
            })
            .collect();
        return format!("{}\n", serde_json::json!({ "policers": v }));
    }
    let rows = rows.into_iter().map(|(namespace, a)| {
        // At tc, where it runs among the interface's programs:
        // "tc (policer, then router)".
        let hook = match (a.hook(), a.tc_order()) {
            (Some(h), Some(o)) => format!("{} ({o})", h.kind()),
            (h, _) => h.map_or("-", |h| h.kind()).to_string(),
        };
        AttachmentRow {
            namespace,
            stale: a.stale(),
            iface: a.iface,
            hook,
            prog_id: a.link.map(|l| l.prog_id),
        }
    });
    attachments_text("policer", rows.collect())
}
