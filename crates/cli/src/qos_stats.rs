//! `peregrine qos stats` and `qos list`: what `peregrine_qos` reports
//! (`report::PolicerReport`, `attach::list`), as tables, JSON and watched
//! counters.
use anyhow::Result;
use peregrine_host::caps::require_bpf;
use peregrine_host::netns;
use peregrine_qos::attach;
use peregrine_qos::report::PolicerReport;

use crate::table::Table;
use crate::watch::{Counter, StatsOutput};

/// Counters for --watch and Prometheus: per interface and rule, conform
/// and exceed; per interface, the policer's own; per class, sent and
/// dropped (queue depth is a gauge, in --json).
fn counters(all: &[PolicerReport]) -> Vec<Counter> {
    let mut out = Vec::new();
    for s in all {
        let on = |rule: &str, counter: &str, packets, bytes| {
            Counter::new(
                &[("iface", &s.iface), ("rule", rule), ("counter", counter)],
                packets,
                bytes,
            )
        };
        for r in &s.rules {
            let id = r.id.to_string();
            out.push(on(&id, "conform", r.conform_packets, Some(r.conform_bytes)));
            out.push(on(&id, "exceed", r.exceed_packets, Some(r.exceed_bytes)));
        }
        for c in s.scheduler.iter().flat_map(|sc| &sc.classes) {
            let class = format!("class:{}", c.config.name);
            out.push(
                on(
                    &class,
                    "sent",
                    c.stats.sent_packets,
                    Some(c.stats.sent_bytes),
                )
                .with_depth(c.queue_depth),
            );
            out.push(on(
                &class,
                "dropped",
                c.stats.dropped_packets,
                Some(c.stats.dropped_bytes),
            ));
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

fn read(ifaces: &[String]) -> Result<Vec<PolicerReport>> {
    Ok(attach::stats_of(ifaces)?
        .iter()
        .map(|s| s.report())
        .collect())
}

pub(crate) fn stats(iface: Option<String>, out: &StatsOutput) -> Result<()> {
    require_bpf("qos stats")?;
    let ifaces = attach::policed(iface)?;
    let now = read(&ifaces)?;
    if !out.once() {
        return out.watch(
            "peregrine_qos",
            "seen by the policer, per interface, rule and counter (conform, exceed, unmatched, ...)",
            move || Ok(counters(&read(&ifaces)?)),
        );
    }
    if out.json {
        println!("{}", serde_json::json!({ "policers": now }));
        return Ok(());
    }
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
    for s in &now {
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
    print!("{}", t.render());
    for s in &now {
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
        print!("{}", t.render());
        println!(
            "{}: scheduler {}, link {} bit/s; {} steered, {} class packets left to the kernel (unscheduled)",
            s.iface,
            sc.owner_pid
                .map_or_else(|| "not running".to_string(), |p| format!("pid {p}")),
            sc.link_bps,
            s.steered,
            s.unscheduled
        );
    }
    for s in &now {
        println!(
            "{} ({} hook): {} packets seen, {} matched no rule, {} not IP, {} malformed (passed unmetered)",
            s.iface, s.hook, s.packets, s.unmatched, s.not_ip, s.malformed
        );
    }
    Ok(())
}

pub(crate) fn list(json: bool) -> Result<()> {
    require_bpf("qos list")?;
    let gone = attach::detach_gone_namespaces()?;
    if gone > 0 {
        eprintln!("removed {gone} policer(s) of network namespaces that no longer exist");
    }
    let names = netns::cookies();
    let rows: Vec<_> = attach::list()
        .into_iter()
        .map(|a| (netns::cookie_name(&names, a.cookie), a))
        .collect();
    if json {
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
        println!("{}", serde_json::json!({ "policers": v }));
        return Ok(());
    }
    crate::dp::print_attachments(
        "policer",
        rows.into_iter()
            .map(|(ns, a)| {
                // At tc, where it runs among the interface's programs:
                // "tc (policer, then router)".
                let hook = match (a.hook(), a.tc_order()) {
                    (Some(h), Some(o)) => format!("{} ({o})", h.kind()),
                    (h, _) => h.map_or("-", |h| h.kind()).to_string(),
                };
                let stale = a.stale();
                (ns, a.iface, hook, a.link.map(|l| l.prog_id), stale)
            })
            .collect(),
    );
    Ok(())
}
