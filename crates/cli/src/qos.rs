//! `peregrine qos ...`: the policer, attached per interface in the network
//! namespace the command runs in and left running (pinned) until detached;
//! the scheduler (`qos serve`) running in the foreground, its classes
//! changed from other commands (`qos class`).
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use peregrine_bpf::policer::{Exceed, InstalledRule, Rate};
use peregrine_host::netns;
use peregrine_qos::attach::{self, PolicerHook, PolicerStats};
use peregrine_qos::classes::{installed_classes, SchedulerStats};
use peregrine_qos::config::Proto;
use peregrine_qos::serve::{self, ClassChange};
use peregrine_qos::{ClassFields, PolicerConfig, RuleFields};

use crate::dp::{require_caps, StatsOutput};
use crate::table::Table;
use crate::usage;
use crate::watch::Counter;

#[derive(Subcommand)]
pub enum QosCmd {
    /// Put a rules file's policer on an interface, or replace a running
    /// one's rules in one step (a bad file changes nothing).
    Apply {
        /// The rules (TOML; see docs/QOS.md).
        file: PathBuf,
        /// The interface whose incoming traffic is policed.
        #[arg(long)]
        iface: String,
        /// xdp or tc; default: the file's `hook`, else tc.
        #[arg(long)]
        hook: Option<PolicerHook>,
    },
    /// Apply a file with a [scheduler] and classes and run the egress
    /// scheduler (AF_XDP) in the foreground until Ctrl-C or SIGTERM; then
    /// detach. Class rules on IFACE feed it; the rest bypasses it.
    Serve {
        /// The rules, filters and classes (TOML; see docs/QOS.md).
        file: PathBuf,
        /// The interface class traffic comes in by (the policer's, XDP).
        #[arg(long)]
        iface: String,
        /// Pin the scheduler's loop to this CPU.
        #[arg(long)]
        cpu: Option<usize>,
    },
    /// Add or remove one rule of a running policer.
    #[command(subcommand)]
    Rule(RuleCmd),
    /// Add, change or delete a class of a running scheduler.
    #[command(subcommand)]
    Class(ClassCmd),
    /// Per-rule counters (conforming and exceeding packets and bytes) and
    /// the policer's own; --watch prints rates per interval.
    Stats {
        /// The interface; default: every policer in this namespace.
        #[arg(long)]
        iface: Option<String>,
        #[command(flatten)]
        out: StatsOutput,
    },
    /// Every policer on the host: namespace, interface, hook, program id.
    List {
        /// One JSON object: {"policers": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Detach the policer of an interface here, or with --all every
    /// policer on the host (stale ones included).
    Detach {
        /// The interface whose policer goes.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        iface: Option<String>,
        /// Every policer on the host, in any namespace, live or stale.
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
pub enum RuleCmd {
    /// Add a rule; prints its id.
    Add {
        /// The interface whose running policer gets the rule.
        #[arg(long)]
        iface: String,
        #[command(flatten)]
        rule: RuleArgs,
    },
    /// Remove rule ID (as `qos stats` lists it).
    Del {
        /// The interface whose running policer loses the rule.
        #[arg(long)]
        iface: String,
        /// The rule's id.
        id: u32,
    },
}

#[derive(Subcommand)]
pub enum ClassCmd {
    /// Add a class; prints its id.
    Add(ClassOn),
    /// Change a class's settings (every setting, as for add).
    Change(ClassOn),
    /// Delete a class (no rule may send to it, it may have no children).
    Del {
        /// The interface whose scheduler has the class.
        #[arg(long)]
        iface: String,
        /// The class's name.
        name: String,
    },
}

/// A class and the interface whose scheduler has it (or gets it).
#[derive(Args, Clone)]
pub struct ClassOn {
    /// The interface whose scheduler has the class.
    #[arg(long)]
    iface: String,
    #[command(flatten)]
    class: ClassArgs,
}

/// One class's fields as flags; the same names as a file's `[[class]]`.
#[derive(Args, Clone)]
pub struct ClassArgs {
    /// The class's name.
    name: String,
    /// The parent class's name (default: the link).
    #[arg(long)]
    parent: Option<String>,
    /// Assured rate, bit/s of frames (10Mbit).
    #[arg(long)]
    rate: String,
    /// The most it may take, borrowing (default: its rate).
    #[arg(long)]
    ceil: Option<String>,
    /// Bucket depth (default: 10 ms of the ceiling, at least 15140 B).
    #[arg(long)]
    burst: Option<String>,
    /// Lower is served first (default 0).
    #[arg(long)]
    priority: Option<u8>,
    /// DRR weight within its priority level (default 1).
    #[arg(long)]
    weight: Option<u32>,
    /// Packets queued at most (default 1000).
    #[arg(long)]
    queue: Option<usize>,
}

impl ClassArgs {
    fn config(&self) -> Result<peregrine_qos::sched::ClassConfig> {
        ClassFields {
            name: self.name.clone(),
            parent: self.parent.clone(),
            rate: Some(self.rate.clone()),
            ceil: self.ceil.clone(),
            burst: self.burst.clone(),
            priority: self.priority,
            weight: self.weight,
            queue: self.queue,
        }
        .to_class()
        .map_err(|e| anyhow::Error::new(usage::UsageError(format!("class {:?}: {e}", self.name))))
    }
}

/// One rule's fields as flags; the same names and values as a file's
/// `[[rule]]` table.
#[derive(Args, Clone)]
pub struct RuleArgs {
    /// Source prefix (198.18.0.0/15, 2001:db8::/32) or address.
    #[arg(long)]
    src: Option<String>,
    /// Destination prefix or address.
    #[arg(long)]
    dst: Option<String>,
    /// 4 or 6, for rules without prefixes.
    #[arg(long)]
    family: Option<u8>,
    /// tcp, udp, icmp, icmpv6 or a protocol number.
    #[arg(long)]
    proto: Option<String>,
    /// Source port (with --proto tcp or udp).
    #[arg(long)]
    sport: Option<u16>,
    /// Destination port (with --proto tcp or udp).
    #[arg(long)]
    dport: Option<u16>,
    /// DSCP 0..63.
    #[arg(long)]
    dscp: Option<u8>,
    /// 10Mbit (bit/s of Ethernet frames) or 1000pps; none: a filter
    /// (needs --class).
    #[arg(long, required_unless_present = "class")]
    rate: Option<String>,
    /// The scheduler class conforming packets go to (`qos serve`).
    #[arg(long)]
    class: Option<String>,
    /// Bytes (64KiB) for a bit rate, packets for a packet rate; default 10
    /// ms of the rate, at least 64 KiB or 32 packets.
    #[arg(long)]
    burst: Option<String>,
    /// drop, or remark:<DSCP> (set the DSCP and pass).
    #[arg(long)]
    exceed: Option<String>,
    /// Lower wins among rules matching one packet (default 0).
    #[arg(long)]
    priority: Option<u32>,
}

impl RuleArgs {
    fn fields(&self) -> Result<RuleFields> {
        Ok(RuleFields {
            src: self.src.clone(),
            dst: self.dst.clone(),
            family: self.family,
            proto: self
                .proto
                .as_deref()
                .map(str::parse::<Proto>)
                .transpose()
                .map_err(anyhow::Error::msg)?,
            sport: self.sport,
            dport: self.dport,
            dscp: self.dscp,
            rate: self.rate.clone(),
            burst: self.burst.clone(),
            exceed: self.exceed.clone(),
            priority: self.priority,
            class: self.class.clone(),
        })
    }
}

fn check_iface(iface: &str) -> Result<()> {
    if peregrine_bpf::link::ifindex(iface).is_err() {
        usage!("no interface {iface:?} in this network namespace");
    }
    Ok(())
}

/// The file for `qos serve` (`scheduler`: it must have a [scheduler]) or
/// `qos apply` (it must not), on `iface` here.
fn read_for(file: &std::path::Path, iface: &str, scheduler: bool) -> Result<PolicerConfig> {
    let cfg = PolicerConfig::read(file)?;
    check_iface(iface)?;
    match (scheduler, cfg.scheduler.is_some()) {
        (true, false) => usage!(
            "{}: no [scheduler] table; `qos apply` installs rules alone",
            file.display()
        ),
        (false, true) => usage!(
            "{}: has a [scheduler] and classes: run it with `peregrine qos serve`",
            file.display()
        ),
        _ => Ok(cfg),
    }
}

pub fn run(cmd: QosCmd) -> Result<()> {
    match cmd {
        QosCmd::Apply { file, iface, hook } => {
            require_caps("qos apply")?;
            let cfg = read_for(&file, &iface, false)?;
            let hook = hook.or(cfg.hook).unwrap_or_default();
            let a = attach::apply(&iface, hook, &cfg.rules)?;
            println!(
                "policer {} on {iface} ({} hook): {} rule(s)",
                if a.replaced {
                    "rules replaced"
                } else {
                    "attached"
                },
                a.hook,
                a.rules
            );
            Ok(())
        }
        QosCmd::Serve { file, iface, cpu } => {
            require_caps("qos serve")?;
            let cfg = read_for(&file, &iface, true)?;
            peregrine_host::signals::install();
            let opts = serve::ServeOptions {
                cpu,
                ..Default::default()
            };
            let sum = serve::serve(&iface, &cfg, &opts, || {
                let sc = cfg.scheduler.as_ref().expect("checked above");
                println!(
                    "scheduling {} class(es) from {iface} out of {} at {} bit/s; Ctrl-C stops",
                    sc.classes.len(),
                    sc.egress,
                    sc.link_bps
                );
            })?;
            println!(
                "scheduler stopped: {} packets received, {} sent, {} reconfiguration(s); detached from {iface}",
                sum.received, sum.sent, sum.reconfigured
            );
            Ok(())
        }
        QosCmd::Class(cmd) => {
            require_caps("qos class")?;
            let (iface, change) = match cmd {
                ClassCmd::Add(on) => (on.iface, ClassChange::Add(on.class.config()?)),
                ClassCmd::Change(on) => (on.iface, ClassChange::Change(on.class.config()?)),
                ClassCmd::Del { iface, name } => (iface, ClassChange::Delete(name)),
            };
            let id = serve::change_class(&iface, &change)?;
            let (what, name) = match &change {
                ClassChange::Add(c) => ("added", &c.name),
                ClassChange::Change(c) => ("changed", &c.name),
                ClassChange::Delete(n) => ("deleted", n),
            };
            println!("class {name} (id {id}) {what} on {iface}");
            Ok(())
        }
        QosCmd::Rule(RuleCmd::Add { iface, rule }) => {
            require_caps("qos rule add")?;
            let classes = match attach::maps_here(&iface) {
                Ok(m) => installed_classes(&m)?,
                Err(_) => Vec::new(),
            };
            let r = rule
                .fields()?
                .to_rule(0, &classes)
                .map_err(|e| anyhow::Error::new(usage::UsageError(e)))?;
            let id = attach::add_rule(&iface, &r)?;
            println!("rule {id} added on {iface}");
            Ok(())
        }
        QosCmd::Rule(RuleCmd::Del { iface, id }) => {
            require_caps("qos rule del")?;
            attach::remove_rule(&iface, id)?;
            println!("rule {id} removed from {iface}");
            Ok(())
        }
        QosCmd::Stats { iface, out } => stats(iface, &out),
        QosCmd::List { json } => list(json),
        QosCmd::Detach { iface, all } => {
            require_caps("qos detach")?;
            if all {
                let n = attach::detach_all()?;
                println!("detached {n} policer(s)");
            } else if let Some(i) = iface {
                attach::detach(&i)?;
                println!("policer detached from {i}");
            }
            Ok(())
        }
    }
}

/// A rule's match, as a file would write it.
fn describe_match(r: &InstalledRule) -> String {
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

fn describe_meter(r: &InstalledRule) -> (String, String, String) {
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

fn stats_json(all: &[PolicerStats]) -> serde_json::Value {
    let v: Vec<_> = all
        .iter()
        .map(|s| {
            let rules: Vec<_> = s
                .rules
                .iter()
                .map(|(r, c)| {
                    let (rate, burst, exceed) = describe_meter(r);
                    serde_json::json!({
                        "id": r.id, "priority": r.priority, "match": describe_match(r),
                        "class": class_name(s.scheduler.as_ref(), r.class()),
                        "rate": rate, "burst": burst, "exceed": exceed,
                        "conform_packets": c.conform_packets, "conform_bytes": c.conform_bytes,
                        "exceed_packets": c.exceed_packets, "exceed_bytes": c.exceed_bytes,
                    })
                })
                .collect();
            let t = &s.totals;
            serde_json::json!({
                "iface": s.iface, "hook": s.hook.to_string(),
                "packets": t.packets, "unmatched": t.unmatched, "not_ip": t.not_ip,
                "malformed": t.malformed, "steered": t.steered, "unscheduled": t.unscheduled,
                "rules": rules,
                "scheduler": s.scheduler.as_ref().map(scheduler_json),
            })
        })
        .collect();
    serde_json::json!({ "policers": v })
}

/// The name of class `id` (None: no class).
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

fn scheduler_json(s: &SchedulerStats) -> serde_json::Value {
    let classes: Vec<_> = s
        .classes
        .iter()
        .map(|(id, c, k)| {
            serde_json::json!({
                "id": id, "name": c.name, "parent": c.parent,
                "rate_bps": c.rate_bps, "ceil_bps": c.ceil_bps, "burst": c.burst,
                "priority": c.priority, "weight": c.weight, "queue_limit": c.queue_limit,
                "enqueued_packets": k.enqueued_packets, "sent_packets": k.sent_packets,
                "sent_bytes": k.sent_bytes, "dropped_packets": k.dropped_packets,
                "dropped_bytes": k.dropped_bytes, "borrowed_packets": k.borrowed_packets,
                "queue_depth": k.queue_depth,
            })
        })
        .collect();
    serde_json::json!({
        "egress_ifindex": s.egress_ifindex, "owner_pid": s.owner, "running": s.owner.is_some(),
        "link_bps": s.link_bps, "classes": classes,
        "unclassified_dropped_packets": s.unclassified.dropped_packets,
    })
}

/// Counters for --watch and Prometheus: per interface and rule, conform
/// and exceed; per interface, the policer's own; per class, sent and
/// dropped (queue depth is a gauge, in --json).
fn counters(all: &[PolicerStats]) -> Vec<Counter> {
    let mut out = Vec::new();
    for s in all {
        for (r, c) in &s.rules {
            let id = r.id.to_string();
            out.push(Counter::new(
                &[("iface", &s.iface), ("rule", &id), ("counter", "conform")],
                c.conform_packets,
                Some(c.conform_bytes),
            ));
            out.push(Counter::new(
                &[("iface", &s.iface), ("rule", &id), ("counter", "exceed")],
                c.exceed_packets,
                Some(c.exceed_bytes),
            ));
        }
        if let Some(sc) = &s.scheduler {
            for (_, c, k) in &sc.classes {
                let class = format!("class:{}", c.name);
                out.push(
                    Counter::new(
                        &[("iface", &s.iface), ("rule", &class), ("counter", "sent")],
                        k.sent_packets,
                        Some(k.sent_bytes),
                    )
                    .with_depth(k.queue_depth),
                );
                out.push(Counter::new(
                    &[
                        ("iface", &s.iface),
                        ("rule", &class),
                        ("counter", "dropped"),
                    ],
                    k.dropped_packets,
                    Some(k.dropped_bytes),
                ));
            }
        }
        let t = &s.totals;
        for (name, v) in [
            ("unmatched", t.unmatched),
            ("not_ip", t.not_ip),
            ("malformed", t.malformed),
            ("steered", t.steered),
            ("unscheduled", t.unscheduled),
        ] {
            out.push(Counter::new(
                &[("iface", &s.iface), ("rule", "-"), ("counter", name)],
                v,
                None,
            ));
        }
    }
    out
}

fn read(ifaces: &[String]) -> Result<Vec<PolicerStats>> {
    ifaces.iter().map(|i| Ok(attach::stats(i)?)).collect()
}

fn stats(iface: Option<String>, out: &StatsOutput) -> Result<()> {
    require_caps("qos stats")?;
    let ifaces = match iface {
        Some(i) => vec![i],
        None => attach::ifaces_here()?,
    };
    if ifaces.is_empty() {
        bail!("no policer in this network namespace (`peregrine qos apply` puts one there)");
    }
    let now = read(&ifaces)?;
    if out.once() {
        if out.json {
            println!("{}", stats_json(&now));
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
            for (r, c) in &s.rules {
                let (rate, burst, exceed) = describe_meter(r);
                t.row(vec![
                    s.iface.clone(),
                    r.id.to_string(),
                    describe_match(r),
                    rate,
                    burst,
                    exceed,
                    c.conform_packets.to_string(),
                    c.conform_bytes.to_string(),
                    c.exceed_packets.to_string(),
                    c.exceed_bytes.to_string(),
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
            for (_, c, k) in &sc.classes {
                t.row(vec![
                    s.iface.clone(),
                    c.name.clone(),
                    c.parent.clone().unwrap_or_else(|| "-".into()),
                    format!("{} bit/s", c.rate_bps),
                    format!("{} bit/s", c.ceil_bps),
                    c.priority.to_string(),
                    c.weight.to_string(),
                    k.sent_packets.to_string(),
                    k.sent_bytes.to_string(),
                    k.borrowed_packets.to_string(),
                    k.dropped_packets.to_string(),
                    k.queue_depth.to_string(),
                ]);
            }
            print!("{}", t.render());
            println!(
                "{}: scheduler {}, link {} bit/s; {} steered, {} class packets left to the kernel (unscheduled)",
                s.iface,
                sc.owner
                    .map_or_else(|| "not running".to_string(), |p| format!("pid {p}")),
                sc.link_bps,
                s.totals.steered,
                s.totals.unscheduled
            );
        }
        for s in &now {
            let t = &s.totals;
            println!(
                "{} ({} hook): {} packets seen, {} matched no rule, {} not IP, {} malformed (passed unmetered)",
                s.iface, s.hook, t.packets, t.unmatched, t.not_ip, t.malformed
            );
        }
        return Ok(());
    }
    out.watch(
        "peregrine_qos",
        "seen by the policer, per interface, rule and counter (conform, exceed, unmatched, ...)",
        move || Ok(counters(&read(&ifaces)?)),
    )
}

fn list(json: bool) -> Result<()> {
    require_caps("qos list")?;
    let names = netns::cookies();
    let rows: Vec<_> = attach::list()
        .into_iter()
        .map(|a| {
            let ns = names
                .iter()
                .find(|(_, c)| *c == a.cookie)
                .map(|(n, _)| n.clone())
                .unwrap_or_else(|| format!("netns cookie {}", a.cookie));
            (ns, a)
        })
        .collect();
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(ns, a)| {
                serde_json::json!({
                    "namespace": ns, "netns_cookie": a.cookie, "iface": a.iface,
                    "hook": a.hook().map(|h| h.to_string()),
                    "prog_id": a.link.map(|l| l.prog_id), "stale": a.stale(),
                })
            })
            .collect();
        println!("{}", serde_json::json!({ "policers": v }));
        return Ok(());
    }
    if rows.is_empty() {
        println!("no policer attached");
        return Ok(());
    }
    let mut t = Table::new(&["namespace", "iface", "hook", "prog id", "state"]);
    for (ns, a) in rows {
        t.row(vec![
            ns,
            a.iface.clone(),
            a.hook()
                .map(|h| h.to_string())
                .unwrap_or_else(|| "-".into()),
            a.link
                .map(|l| l.prog_id.to_string())
                .unwrap_or_else(|| "-".into()),
            if a.stale() { "stale" } else { "attached" }.into(),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}
