//! `peregrine qos ...`: the policer, attached per interface in the network
//! namespace the command runs in and left running (pinned) until detached;
//! the scheduler (`qos serve`) running in the foreground, its classes
//! changed from other commands (`qos class`).
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use peregrine_host::caps::require_bpf;
use peregrine_qos::attach;
use peregrine_qos::config::Proto;
use peregrine_qos::engine;
use peregrine_qos::serve::{self, ClassChange};
use peregrine_qos::{ClassFields, Hook, PolicerConfig, RuleFields};

use crate::metrics::StatsOutput;
use crate::usage;

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
        hook: Option<Hook>,
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

pub fn run(cmd: QosCmd) -> Result<()> {
    match cmd {
        QosCmd::Apply { file, iface, hook } => {
            require_bpf("qos apply")?;
            crate::agent::refuse_beside_agent("policer", None)?;
            let cfg = PolicerConfig::read_for(&file, &iface, false)?;
            let hook = hook.or(cfg.hook).unwrap_or(attach::DEFAULT_HOOK);
            let a = attach::apply(&iface, hook, &cfg.rules)?;
            let what = if a.replaced {
                "rules replaced"
            } else {
                "attached"
            };
            let (hook, n) = (a.hook.kind(), a.rules);
            println!("policer {what} on {iface} ({hook} hook): {n} rule(s)");
        }
        QosCmd::Serve { file, iface, cpu } => {
            require_bpf("qos serve")?;
            crate::agent::refuse_beside_agent("scheduler", None)?;
            let cfg = PolicerConfig::read_for(&file, &iface, true)?;
            peregrine_host::signals::install();
            let opts = serve::ServeOptions {
                cpu,
                ..Default::default()
            };
            let sum = engine::serve(&iface, &cfg, &opts, || {
                let sc = cfg.scheduler.as_ref().expect("checked above");
                println!(
                    "scheduling {} class(es) from {iface} out of {} at {} bit/s ({} engine); Ctrl-C stops",
                    sc.classes.len(),
                    sc.egress,
                    sc.link_bps,
                    sc.engine.as_str()
                );
            })?;
            println!(
                "scheduler stopped: {} packets received, {} sent, {} reconfiguration(s); detached from {iface}",
                sum.received, sum.sent, sum.reconfigured
            );
        }
        QosCmd::Class(cmd) => {
            require_bpf("qos class")?;
            crate::agent::refuse_beside_agent("scheduler's classes", None)?;
            let (iface, change) = match cmd {
                ClassCmd::Add(on) => (on.iface, ClassChange::Add(on.class.config()?)),
                ClassCmd::Change(on) => (on.iface, ClassChange::Change(on.class.config()?)),
                ClassCmd::Del { iface, name } => (iface, ClassChange::Delete(name)),
            };
            let id = engine::change_class(&iface, &change)?;
            let (what, name) = match &change {
                ClassChange::Add(c) => ("added", &c.name),
                ClassChange::Change(c) => ("changed", &c.name),
                ClassChange::Delete(n) => ("deleted", n),
            };
            println!("class {name} (id {id}) {what} on {iface}");
        }
        QosCmd::Rule(RuleCmd::Add { iface, rule }) => {
            require_bpf("qos rule add")?;
            crate::agent::refuse_beside_agent("policer's rules", None)?;
            let id = attach::add_rule_fields(&iface, &rule.fields()?)?;
            println!("rule {id} added on {iface}");
        }
        QosCmd::Rule(RuleCmd::Del { iface, id }) => {
            require_bpf("qos rule del")?;
            crate::agent::refuse_beside_agent("policer's rules", None)?;
            attach::remove_rule(&iface, id)?;
            println!("rule {id} removed from {iface}");
        }
        QosCmd::Stats { iface, out } => return crate::qos_stats::stats(iface, &out),
        QosCmd::List { json } => return crate::qos_stats::list(json),
        QosCmd::Detach { iface, all } => {
            require_bpf("qos detach")?;
            if all {
                println!("detached {} policer(s)", attach::detach_all()?);
            } else if let Some(i) = iface {
                attach::detach(&i)?;
                println!("policer detached from {i}");
            }
        }
    }
    Ok(())
}
