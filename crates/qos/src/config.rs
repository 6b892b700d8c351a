//! The policer's rules as users write them: a TOML file (`qos apply`) or
//! one rule's fields (`qos rule add`), parsed once into
//! `peregrine_bpf::policer::Rule`s. Every error names the rule and the field.
//!
//! ```toml
//! hook = "tc"                 # or "xdp"; default tc
//!
//! [[rule]]                    # first rule: priority 1 (file order = priority)
//! dst = "198.19.0.0/16"       # prefixes: src, dst (v4 or v6)
//! proto = "udp"               # tcp, udp, icmp, icmpv6 or a number
//! dport = 9                   # sport, dport: need tcp or udp
//! dscp = 46                   # 0..63
//! rate = "10Mbit"             # bit/s of Ethernet frames, or "1000pps"
//! burst = "64KiB"             # bytes for a bit rate, packets for a packet rate
//! exceed = "drop"             # or "remark:0" (set DSCP 0, pass)
//! ```
use std::collections::{HashMap, HashSet};

use serde::Deserialize;

use peregrine_bpf::policer::{Exceed, Match, Rate, Rule};
use peregrine_units::{ByteSize, RateSetting};
use peregrine_wire::Prefix;

use crate::error::{QosError, Result};
use crate::sched::ClassConfig;
use peregrine_bpf::Hook;

/// One rule's fields, as text: a `[[rule]]` table of a file, or `qos rule
/// add`'s flags.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFields {
    pub src: Option<String>,
    pub dst: Option<String>,
    /// 4 or 6, for rules without prefixes.
    pub family: Option<u8>,
    pub proto: Option<Proto>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub dscp: Option<u8>,
    pub rate: Option<String>,
    pub burst: Option<String>,
    pub exceed: Option<String>,
    /// Lower wins among rules that match one packet; default: the rule's
    /// position in its file counted from 1 (earlier wins), 0 for `rule
    /// add` (a rule added at runtime overrides the file's).
    pub priority: Option<u32>,
    /// The scheduler class conforming packets go to (`qos serve`).
    pub class: Option<String>,
}

/// An IP protocol by name or number.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Proto {
    Number(u8),
    Name(String),
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Proto, String> {
        Ok(match s.parse::<u8>() {
            Ok(n) => Proto::Number(n),
            Err(_) => Proto::Name(s.to_string()),
        })
    }
}

impl Proto {
    /// The protocol's number; a name other than tcp, udp, icmp or icmpv6
    /// is refused in one line.
    pub fn number(&self) -> std::result::Result<u8, String> {
        match self {
            Proto::Number(n) => Ok(*n),
            Proto::Name(s) => match s.to_ascii_lowercase().as_str() {
                "tcp" => Ok(6),
                "udp" => Ok(17),
                "icmp" => Ok(1),
                "icmpv6" | "ipv6-icmp" => Ok(58),
                _ => Err(format!(
                    "proto {s:?}: expected tcp, udp, icmp, icmpv6 or a protocol number"
                )),
            },
        }
    }
}

/// Linux TCP's minimum retransmission timeout (`TCP_RTO_MIN`, 200 ms).
pub const TCP_RTO_MIN_MS: u64 = 200;

/// The smallest burst of a bit rate: a whole GSO packet (64 KiB), which
/// the tc hook meters at once.
pub const MIN_BURST_BYTES: u64 = 64 * 1024;

/// The burst a rule gets when it names none. A bit rate: what the rate
/// earns over TCP's minimum retransmission timeout, at least
/// `MIN_BURST_BYTES`. A TCP flow whose loss the sender only learns of by a
/// timeout sends nothing for at least that long; a smaller bucket would
/// throw away the credit of the wait, and the flow would get about
/// burst / (rate x 200 ms) of the rate (measured: 0.25-0.27 at 50 ms,
/// 0.99 at 200 ms; docs/QOS.md). A packet rate: 10 ms of it, at least 32
/// packets.
pub fn default_burst(rate: Rate) -> u64 {
    match rate {
        Rate::Bits(b) => (b / 8 * TCP_RTO_MIN_MS / 1000).max(MIN_BURST_BYTES),
        Rate::Packets(p) => (p / 100).max(32),
        Rate::Unmetered | Rate::Zero => 0,
    }
}

/// A prefix, or a bare address as its host prefix; errors start with
/// `field`.
pub fn parse_prefix(field: &str, s: &str) -> std::result::Result<Prefix, String> {
    // A bare address is a host prefix.
    let text = if s.contains('/') {
        s.to_string()
    } else if s.contains(':') {
        format!("{s}/128")
    } else {
        format!("{s}/32")
    };
    text.parse().map_err(|e: String| format!("{field}: {e}"))
}

impl RuleFields {
    /// The rule these fields describe; `default_priority` when they give
    /// none. Errors are one line, without the rule's position.
    /// `classes`: the scheduler's classes by id (a file's, or a running
    /// scheduler's), for a rule that names one.
    pub fn to_rule(
        &self,
        default_priority: u32,
        classes: &[(u32, ClassConfig)],
    ) -> std::result::Result<Rule, String> {
        self.to_rule_in(default_priority, &ClassIndex::new(classes))
    }

    /// `to_rule` with the classes indexed once (a file's many rules).
    pub fn to_rule_in(
        &self,
        default_priority: u32,
        classes: &ClassIndex,
    ) -> std::result::Result<Rule, String> {
        let class = match &self.class {
            None => 0,
            Some(name) => classes.leaf_id(name)?,
        };
        let rate = match (self.rate.as_deref(), class) {
            (None, 0) => {
                return Err("rate missing: give rate = \"10Mbit\" (bit/s) or \"1000pps\"".into())
            }
            (None, _) => Rate::Unmetered,
            // Nothing conforms: every packet takes the exceed action.
            (Some("0"), _) => Rate::Zero,
            (Some(text), _) => match text.parse::<RateSetting>()? {
                RateSetting::Bps(b) => Rate::Bits(b.round() as u64),
                RateSetting::Pps(p) => Rate::Packets(p.round() as u64),
            },
        };
        let burst = match (&self.burst, rate) {
            (_, Rate::Unmetered) if self.burst.is_some() || self.exceed.is_some() => {
                return Err("burst and exceed need a rate".into())
            }
            (_, Rate::Unmetered) => 0,
            (Some(_), Rate::Zero) => {
                return Err("burst with rate \"0\": nothing conforms, there is no bucket".into())
            }
            (None, r) => default_burst(r),
            (Some(b), Rate::Bits(_)) => b.parse::<ByteSize>().map_err(|e| format!("burst: {e}"))?.0,
            (Some(b), _) => b.parse::<u64>().map_err(|_| {
                format!("burst {b:?}: a packet rate's burst is a whole number of packets")
            })?,
        };
        let exceed = match self.exceed.as_deref() {
            None | Some("drop") => Exceed::Drop,
            Some(s) => {
                let dscp = s
                    .strip_prefix("remark:")
                    .and_then(|d| d.trim().parse::<u8>().ok())
                    .ok_or_else(|| {
                        format!("exceed {s:?}: expected \"drop\" or \"remark:<DSCP 0..63>\"")
                    })?;
                Exceed::Remark(dscp)
            }
        };
        let matches = Match {
            family: self.family,
            src: self
                .src
                .as_deref()
                .map(|s| parse_prefix("src", s))
                .transpose()?,
            dst: self
                .dst
                .as_deref()
                .map(|s| parse_prefix("dst", s))
                .transpose()?,
            proto: self.proto.as_ref().map(Proto::number).transpose()?,
            sport: self.sport,
            dport: self.dport,
            dscp: self.dscp,
        };
        let rule = Rule {
            matches,
            rate,
            burst,
            exceed,
            priority: self.priority.unwrap_or(default_priority),
            class,
        };
        rule.check().map_err(|e| e.to_string())?;
        Ok(rule)
    }
}

/// The scheduler's classes by name, built once and asked many times (a
/// file of 100,000 rules over 10,000 classes looks each name up once; a
/// tree of 16,383 classes finds each parent once): each name's id, its
/// position, whether a class names it as parent (a leaf: none does); and
/// the ids in use.
#[derive(Debug, Default)]
pub struct ClassIndex {
    /// name -> its class (a name defined twice, refused later: the first)
    by_name: HashMap<String, Indexed>,
    /// The ids of the classes.
    ids: HashSet<u32>,
}

/// One name's class in a `ClassIndex`.
#[derive(Debug, Clone, Copy)]
struct Indexed {
    id: u32,
    /// Its position in the classes indexed.
    at: usize,
    /// A class names it as parent.
    has_children: bool,
}

impl ClassIndex {
    /// `classes`: the scheduler's classes by id (a file's, or a running
    /// scheduler's).
    pub fn new(classes: &[(u32, ClassConfig)]) -> ClassIndex {
        let mut by_name = HashMap::with_capacity(classes.len());
        let mut ids = HashSet::with_capacity(classes.len());
        for (at, (id, c)) in classes.iter().enumerate() {
            by_name.entry(c.name.clone()).or_insert(Indexed {
                id: *id,
                at,
                has_children: false,
            });
            ids.insert(*id);
        }
        for (_, c) in classes {
            if let Some(p) = c.parent.as_deref().and_then(|p| by_name.get_mut(p)) {
                p.has_children = true;
            }
        }
        ClassIndex { by_name, ids }
    }

    /// The id of class `name`.
    pub fn id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).map(|e| e.id)
    }

    /// The position of class `name` in the classes indexed.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).map(|e| e.at)
    }

    /// The id of `c`'s parent; 0 (the link) when it has none or its
    /// parent is not among the classes.
    pub fn parent_id(&self, c: &ClassConfig) -> u32 {
        c.parent.as_deref().and_then(|p| self.id(p)).unwrap_or(0)
    }

    /// No class names `name` as parent.
    pub fn is_leaf(&self, name: &str) -> bool {
        !self.by_name.get(name).is_some_and(|e| e.has_children)
    }

    /// The lowest id of 1..`max` no class has.
    pub fn free_id(&self, max: u32) -> Option<u32> {
        (1..max).find(|i| !self.ids.contains(i))
    }

    /// `classes` with parents before children (the order the scheduler
    /// takes them in): pass after pass over them in their order, each
    /// taking the classes whose parent is in; None when a class's parent
    /// never is (not defined, or a cycle).
    pub fn parents_first(classes: &[(u32, ClassConfig)]) -> Option<Vec<(u32, ClassConfig)>> {
        let index = ClassIndex::new(classes);
        let mut placed = vec![false; classes.len()];
        let mut ordered = Vec::with_capacity(classes.len());
        while ordered.len() < classes.len() {
            let before = ordered.len();
            for (k, (i, c)) in classes.iter().enumerate() {
                let parent_in = c
                    .parent
                    .as_deref()
                    .is_none_or(|p| index.position(p).is_some_and(|at| placed[at]));
                if parent_in && !placed[k] {
                    placed[k] = true;
                    ordered.push((*i, c.clone()));
                }
            }
            if ordered.len() == before {
                return None;
            }
        }
        Some(ordered)
    }

    /// The id of leaf class `name`.
    fn leaf_id(&self, name: &str) -> std::result::Result<u16, String> {
        match self.by_name.get(name) {
            None => Err(format!("class {name:?} is not defined")),
            Some(e) if e.has_children => Err(format!(
                "class {name:?} has child classes: packets go to leaf classes"
            )),
            Some(e) => Ok(e.id as u16),
        }
    }
}

/// The scheduler's link: `[scheduler]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerFields {
    /// The interface class traffic leaves by.
    pub egress: String,
    /// The rate the link is shaped to (bit/s of frames).
    pub rate: String,
    pub burst: Option<String>,
    /// "afxdp" (default: the AF_XDP scheduler) or "htb" (the kernel's HTB,
    /// built by peregrine through netlink).
    pub engine: Option<String>,
}

/// Which engine schedules a file's classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// The AF_XDP scheduler (`serve_afxdp`), fed by the XDP policer.
    #[default]
    Afxdp,
    /// The kernel's HTB on the egress, classified by the tc-egress
    /// classifier (`htb`); the rules' meters run at the tc hook.
    Htb,
}

impl std::str::FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Engine, String> {
        match s {
            "afxdp" => Ok(Engine::Afxdp),
            "htb" => Ok(Engine::Htb),
            _ => Err(format!("engine {s:?}: expected \"afxdp\" or \"htb\"")),
        }
    }
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Afxdp => "afxdp",
            Engine::Htb => "htb",
        }
    }

    /// Class ids of this engine run 1..max_classes() (0: no class): the
    /// AF_XDP scheduler's `SCHED_MAX_CLASSES`, the htb classifier's
    /// `HTB_MAX_CLASSES` (C headers, generated into `peregrine_bpf`).
    pub fn max_classes(self) -> u32 {
        match self {
            Engine::Afxdp => peregrine_bpf::policer::MAX_CLASSES,
            Engine::Htb => peregrine_bpf::policer::HTB_MAX_CLASSES,
        }
    }

    /// Refuses `n` classes when that is more than this engine takes (ids
    /// 1..max_classes()), in one line naming the engine and its limit.
    pub fn check_class_count(self, n: usize) -> std::result::Result<(), String> {
        if n >= self.max_classes() as usize {
            return Err(format!(
                "{n} classes: the {} engine takes at most {}",
                self.as_str(),
                self.max_classes() - 1
            ));
        }
        Ok(())
    }
}

/// One class: a `[[class]]` table, or `qos class add`'s flags.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassFields {
    pub name: String,
    pub parent: Option<String>,
    /// Assured rate.
    pub rate: Option<String>,
    /// The most it may take, borrowing (default: its rate).
    pub ceil: Option<String>,
    /// Bucket depth of rate and ceil (default: 10 ms of the ceiling, at
    /// least ten 1514-byte frames).
    pub burst: Option<String>,
    /// Lower is served first (strict), default 0.
    pub priority: Option<u8>,
    /// DRR weight within a priority level, default 1.
    pub weight: Option<u32>,
    /// Packets queued at most, default 1000.
    pub queue: Option<usize>,
}

fn bit_rate(field: &str, text: &str) -> std::result::Result<u64, String> {
    match text.parse::<RateSetting>()? {
        RateSetting::Bps(b) => Ok(b.round() as u64),
        RateSetting::Pps(_) => Err(format!(
            "{field} {text:?}: a class is shaped in bit/s, not packets"
        )),
    }
}

impl ClassFields {
    /// The class as the scheduler takes it.
    pub fn to_class(&self) -> std::result::Result<ClassConfig, String> {
        if self.name.is_empty() || self.name.len() >= peregrine_bpf::policer::CLASS_NAME_LEN {
            return Err(format!(
                "class name {:?}: 1 to {} characters",
                self.name,
                peregrine_bpf::policer::CLASS_NAME_LEN - 1
            ));
        }
        let rate = bit_rate(
            "rate",
            self.rate
                .as_deref()
                .ok_or("rate missing: give rate = \"10Mbit\"")?,
        )?;
        let ceil = match &self.ceil {
            Some(c) => bit_rate("ceil", c)?,
            None => rate,
        };
        let burst = match &self.burst {
            Some(b) => b.parse::<ByteSize>().map_err(|e| format!("burst: {e}"))?.0,
            None => (ceil / 8 / 100).max(10 * 1514),
        };
        Ok(ClassConfig {
            name: self.name.clone(),
            parent: self.parent.clone(),
            rate_bps: rate,
            ceil_bps: ceil,
            burst,
            priority: self.priority.unwrap_or(0),
            weight: self.weight.unwrap_or(1),
            queue_limit: self.queue.unwrap_or(1000),
        })
    }
}

/// The scheduler's part of a file: its link and its classes (class id =
/// position + 1).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    pub engine: Engine,
    pub egress: String,
    pub link_bps: u64,
    pub link_burst: u64,
    pub classes: Vec<ClassConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    hook: Option<String>,
    #[serde(default)]
    rule: Vec<RuleFields>,
    scheduler: Option<SchedulerFields>,
    #[serde(default)]
    class: Vec<ClassFields>,
    /// Rules that only steer to a class: no rate, a class.
    #[serde(default)]
    filter: Vec<RuleFields>,
}

/// A rules file, parsed and checked whole.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicerConfig {
    /// The hook the file asks for, if it does.
    pub hook: Option<Hook>,
    /// Rules, then filters (file order: default priorities 1, 2, ...).
    pub rules: Vec<Rule>,
    pub scheduler: Option<SchedulerConfig>,
}

impl PolicerConfig {
    pub fn parse(text: &str) -> Result<PolicerConfig> {
        let file: FileToml = toml::from_str(text).map_err(|e| {
            // toml's message spans lines (source excerpt); keep the first.
            let msg = e.message().lines().next().unwrap_or("").to_string();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            QosError::Config(format!("rules file: {msg}{at}"))
        })?;
        let hook = file.hook.as_deref().map(str::parse).transpose()?;
        let cfg_err = |what: String| QosError::Config(what);
        let classes = file
            .class
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.to_class()
                    .map(|c| (i as u32 + 1, c))
                    .map_err(|e| cfg_err(format!("class {:?}: {e}", c.name)))
            })
            .collect::<Result<Vec<_>>>()?;
        // The engine's class limit before the rules: a file over it is
        // refused for that, not for a rule naming an id past it.
        if let Some(s) = &file.scheduler {
            let engine = match &s.engine {
                Some(e) => e.parse::<Engine>().ok(),
                None => Some(Engine::Afxdp),
            };
            if let Some(engine) = engine {
                engine
                    .check_class_count(file.class.len())
                    .map_err(cfg_err)?;
            }
        }
        let index = ClassIndex::new(&classes);
        let mut rules = file
            .rule
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.to_rule_in(i as u32 + 1, &index)
                    .map_err(|e| cfg_err(format!("rule {}: {e}", i + 1)))
            })
            .collect::<Result<Vec<_>>>()?;
        for (i, f) in file.filter.iter().enumerate() {
            let what = |e: String| cfg_err(format!("filter {}: {e}", i + 1));
            if f.class.is_none() || f.rate.is_some() {
                return Err(what(
                    "a filter names a class and no rate (a rate makes it a [[rule]])".into(),
                ));
            }
            let priority = (file.rule.len() + i) as u32 + 1;
            rules.push(f.to_rule_in(priority, &index).map_err(what)?);
        }
        let scheduler = match (&file.scheduler, file.class.is_empty()) {
            (None, true) => None,
            (None, false) => {
                return Err(cfg_err(
                    "classes need a [scheduler] table (egress, rate)".into(),
                ))
            }
            (Some(_), true) => {
                return Err(cfg_err("[scheduler] needs at least one [[class]]".into()))
            }
            (Some(s), false) => {
                let engine = match &s.engine {
                    Some(e) => e
                        .parse::<Engine>()
                        .map_err(|e| cfg_err(format!("[scheduler]: {e}")))?,
                    None => Engine::Afxdp,
                };
                if engine == Engine::Htb && hook.is_some_and(|h: Hook| h.is_xdp()) {
                    return Err(cfg_err(
                        "the htb engine meters its rules at the tc hook: hook = \"tc\" (or leave it out)"
                            .into(),
                    ));
                }
                if engine == Engine::Htb {
                    if let Some(c) = file.class.iter().find(|c| c.priority.unwrap_or(0) > 7) {
                        return Err(cfg_err(format!(
                            "class {:?}: priority {}: the htb engine has priorities 0..7",
                            c.name,
                            c.priority.unwrap_or(0)
                        )));
                    }
                }
                if engine == Engine::Afxdp && hook.is_some_and(|h: Hook| !h.is_xdp()) {
                    return Err(cfg_err(
                        "the scheduler is fed at the XDP hook: hook = \"xdp\" (or leave it out)"
                            .into(),
                    ));
                }
                let link_bps =
                    bit_rate("rate", &s.rate).map_err(|e| cfg_err(format!("[scheduler]: {e}")))?;
                let link_burst = match &s.burst {
                    Some(b) => {
                        b.parse::<ByteSize>()
                            .map_err(|e| cfg_err(format!("[scheduler]: burst: {e}")))?
                            .0
                    }
                    None => (link_bps / 8 / 1000).max(10 * 1514),
                };
                let classes: Vec<ClassConfig> = classes.into_iter().map(|(_, c)| c).collect();
                // The scheduler's own checks (parents, ceilings), now,
                // so a bad file changes nothing.
                crate::sched::Scheduler::<()>::new(link_bps, link_burst, classes.clone(), 0)
                    .map_err(|e| cfg_err(e.to_string()))?;
                Some(SchedulerConfig {
                    engine,
                    egress: s.egress.clone(),
                    link_bps,
                    link_burst,
                    classes,
                })
            }
        };
        if scheduler.is_none() {
            if let Some(i) = file.rule.iter().position(|r| r.class.is_some()) {
                return Err(cfg_err(format!(
                    "rule {}: names a class, but the file has no [scheduler]",
                    i + 1
                )));
            }
        }
        // The rule set as the policer will install it (distinct matches,
        // match shapes, count), now: the error then names the file.
        peregrine_bpf::policer::check_rules(&rules).map_err(|e| cfg_err(e.to_string()))?;
        Ok(PolicerConfig {
            hook,
            rules,
            scheduler,
        })
    }

    pub fn read(path: &std::path::Path) -> Result<PolicerConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| QosError::Config(format!("reading {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| QosError::Config(format!("{}: {e}", path.display())))
    }

    /// The file for `qos serve` (`scheduler`: it must have a [scheduler])
    /// or `qos apply` (it must not), on `iface` of the calling thread's
    /// namespace. A missing interface and the wrong kind of file are
    /// `Request` errors.
    pub fn read_for(path: &std::path::Path, iface: &str, scheduler: bool) -> Result<PolicerConfig> {
        let cfg = Self::read(path)?;
        interface_here(iface)?;
        match (scheduler, cfg.scheduler.is_some()) {
            (true, false) => Err(QosError::Request(format!(
                "{}: no [scheduler] table; `qos apply` installs rules alone",
                path.display()
            ))),
            (false, true) => Err(QosError::Request(format!(
                "{}: has a [scheduler] and classes: run it with `peregrine qos serve`",
                path.display()
            ))),
            _ => Ok(cfg),
        }
    }
}

/// `iface` exists in the calling thread's namespace, or a `Request` error
/// that says it does not.
pub(crate) fn interface_here(iface: &str) -> Result<()> {
    match peregrine_bpf::link::ifindex(iface) {
        Ok(_) => Ok(()),
        Err(_) => Err(QosError::Request(format!(
            "no interface {iface:?} in this network namespace"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_parses_into_rules_in_priority_order() {
        let cfg = PolicerConfig::parse(
            r#"
hook = "xdp"
[[rule]]
dst = "198.19.0.0/16"
proto = "udp"
dport = 9
rate = "10Mbit"
burst = "20k"
[[rule]]
src = "2001:db8::1"
rate = "1000pps"
exceed = "remark:0"
[[rule]]
dscp = 46
family = 4
rate = "1Gbit"
priority = 7
"#,
        )
        .unwrap();
        assert_eq!(cfg.hook, Some(Hook::Xdp(peregrine_bpf::XdpMode::Native)));
        let r = &cfg.rules;
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].rate, Rate::Bits(10_000_000));
        assert_eq!(r[0].burst, 20_000);
        assert_eq!(r[0].matches.proto, Some(17));
        assert_eq!((r[0].priority, r[1].priority, r[2].priority), (1, 2, 7));
        assert_eq!(r[1].matches.src.unwrap().len, 128);
        assert_eq!((r[1].rate, r[1].burst), (Rate::Packets(1000), 32));
        assert_eq!(r[1].exceed, Exceed::Remark(0));
        assert_eq!(r[2].burst, 25_000_000, "200 ms of 1 Gbit/s");
    }

    /// The example shipped in examples/ stays valid.
    #[test]
    fn the_example_file_parses() {
        let cfg = PolicerConfig::parse(include_str!("../../../examples/qos.toml")).unwrap();
        assert_eq!(cfg.hook, Some(Hook::TC));
        assert_eq!(cfg.rules.len(), 3);
        assert_eq!(cfg.rules[0].exceed, Exceed::Remark(0));
        assert_eq!(
            (cfg.rules[1].rate, cfg.rules[1].burst),
            (Rate::Packets(1000), 100)
        );
    }

    #[test]
    fn a_scheduler_file_parses_into_classes_and_filters() {
        let cfg = PolicerConfig::parse(
            r#"
[scheduler]
egress = "b0"
rate = "1Gbit"
[[class]]
name = "all"
rate = "1Gbit"
[[class]]
name = "voice"
parent = "all"
rate = "100Mbit"
ceil = "1Gbit"
priority = 0
[[class]]
name = "bulk"
parent = "all"
rate = "10Mbit"
ceil = "1Gbit"
priority = 7
weight = 3
queue = 200
[[rule]]
dst = "198.19.0.0/16"
rate = "500Mbit"
class = "bulk"
[[filter]]
class = "voice"
dscp = 46
"#,
        )
        .unwrap();
        let s = cfg.scheduler.unwrap();
        assert_eq!((s.egress.as_str(), s.link_bps), ("b0", 1_000_000_000));
        assert_eq!(s.classes.len(), 3);
        assert_eq!(s.classes[2].parent.as_deref(), Some("all"));
        assert_eq!((s.classes[2].weight, s.classes[2].queue_limit), (3, 200));
        assert_eq!(
            s.classes[0].ceil_bps, 1_000_000_000,
            "ceil defaults to rate"
        );
        assert_eq!(cfg.rules.len(), 2);
        assert_eq!((cfg.rules[0].class, cfg.rules[0].priority), (3, 1));
        assert_eq!(cfg.rules[1].rate, Rate::Unmetered);
        assert_eq!((cfg.rules[1].class, cfg.rules[1].priority), (2, 2));
    }

    /// `rate = "0"` is a deny rule (or one that re-marks everything): no
    /// bucket, every packet it matches exceeds.
    #[test]
    fn rate_zero_is_a_rule_nothing_conforms_to() {
        let cfg = PolicerConfig::parse(
            "[[rule]]\nproto = \"tcp\"\ndport = 23\nrate = \"0\"\n[[rule]]\nrate = \"0\"\nexceed = \"remark:0\"\n",
        )
        .unwrap();
        assert_eq!(cfg.rules[0].rate, Rate::Zero);
        assert_eq!((cfg.rules[0].burst, cfg.rules[0].exceed), (0, Exceed::Drop));
        assert_eq!(cfg.rules[1].exceed, Exceed::Remark(0));
    }

    /// The scheduler example shipped in examples/ stays valid.
    #[test]
    fn the_scheduler_example_parses() {
        let cfg =
            PolicerConfig::parse(include_str!("../../../examples/qos-scheduler.toml")).unwrap();
        let s = cfg.scheduler.unwrap();
        assert_eq!((s.egress.as_str(), s.classes.len()), ("b0", 4));
        assert_eq!(cfg.rules.len(), 3);
        assert_eq!(cfg.rules[0].class, 4, "the rule steers to bulk");
        assert_eq!(cfg.rules[1].class, 2, "dscp 46 to voice");
    }

    #[test]
    fn one_file_serves_both_engines() {
        let body = "egress = \"b0\"\nrate = \"50Mbit\"\n[[class]]\nname = \"a\"\nrate = \"40Mbit\"\npriority = 7\n[[filter]]\nclass = \"a\"\ndscp = 46\n";
        for (engine, want) in [
            ("", Engine::Afxdp),
            ("engine = \"afxdp\"\n", Engine::Afxdp),
            ("engine = \"htb\"\n", Engine::Htb),
        ] {
            let cfg = PolicerConfig::parse(&format!("[scheduler]\n{engine}{body}")).unwrap();
            let s = cfg.scheduler.unwrap();
            assert_eq!(s.engine, want);
            assert_eq!((s.classes.len(), cfg.rules[0].class), (1, 1));
        }
        let tc = PolicerConfig::parse(&format!(
            "hook = \"tc\"\n[scheduler]\nengine = \"htb\"\n{body}"
        ))
        .unwrap();
        assert_eq!(tc.hook, Some(Hook::TC));
    }

    #[test]
    fn bad_scheduler_files_are_refused_in_one_line() {
        let head = "[scheduler]\negress = \"b0\"\nrate = \"100Mbit\"\n";
        let class = "[[class]]\nname = \"a\"\nrate = \"10Mbit\"\n";
        let cases = [
            (class.to_string(), "classes need a [scheduler]"),
            (head.to_string(), "at least one [[class]]"),
            (format!("{head}{class}[[filter]]\nclass = \"b\"\n"), "class \"b\" is not defined"),
            (format!("{head}{class}[[filter]]\nclass = \"a\"\nrate = \"1M\"\n"), "a filter names a class and no rate"),
            (format!("{head}{class}[[class]]\nname = \"c\"\nparent = \"a\"\nrate = \"1Mbit\"\n[[filter]]\nclass = \"a\"\n"), "has child classes"),
            (format!("{head}[[class]]\nname = \"a\"\nrate = \"10Mbit\"\nceil = \"1Mbit\"\n"), "ceil at least the rate"),
            (format!("{head}[[class]]\nname = \"a\"\nrate = \"10kpps\"\n"), "bit/s, not packets"),
            (format!("hook = \"tc\"\n{head}{class}"), "fed at the XDP hook"),
            (format!("{head}{class}[[rule]]\nclass = \"a\"\nburst = \"1k\"\n"), "burst and exceed need a rate"),
            ("[[rule]]\nrate = \"1M\"\nclass = \"a\"\n".to_string(), "class \"a\" is not defined"),
            (format!("{head}engine = \"hfsc\"\n{class}"), "engine \"hfsc\""),
            (format!("{head}engine = \"htb\"\n{class}priority = 8\n"), "priority 8"),
            (format!("hook = \"xdp\"\n{head}engine = \"htb\"\n{class}"), "at the tc hook"),
        ];
        for (text, want) in cases {
            let e = PolicerConfig::parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e} (want {want})");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    fn class(name: &str, parent: Option<&str>) -> ClassConfig {
        ClassConfig {
            name: name.into(),
            parent: parent.map(Into::into),
            rate_bps: 1_000_000,
            ceil_bps: 1_000_000,
            burst: 15_140,
            priority: 0,
            weight: 1,
            queue_limit: 1000,
        }
    }

    #[test]
    fn the_class_index_knows_ids_parents_and_leaves() {
        // Ids need not follow positions; a child may stand before its parent.
        let classes = vec![
            (7, class("voice", Some("all"))),
            (3, class("all", None)),
            (9, class("bulk", Some("all"))),
            (1, class("bulk-low", Some("bulk"))),
            (4, class("stray", Some("gone"))),
        ];
        let index = ClassIndex::new(&classes);
        assert_eq!((index.id("all"), index.id("gone")), (Some(3), None));
        assert_eq!(
            (index.position("bulk"), index.position("gone")),
            (Some(2), None)
        );
        let parents: Vec<u32> = classes.iter().map(|(_, c)| index.parent_id(c)).collect();
        assert_eq!(parents, [3, 0, 3, 9, 0], "0: none, or not defined");
        let leaves: Vec<bool> = classes
            .iter()
            .map(|(_, c)| index.is_leaf(&c.name))
            .collect();
        assert_eq!(leaves, [true, false, false, true, true]);
        assert_eq!((index.free_id(10), index.free_id(2)), (Some(2), None));
        assert_eq!(index.leaf_id("voice"), Ok(7));
        assert!(index
            .leaf_id("all")
            .unwrap_err()
            .contains("has child classes"));
        assert!(index
            .leaf_id("gone")
            .unwrap_err()
            .contains("is not defined"));

        assert_eq!(ClassIndex::parents_first(&classes), None, "stray's parent");
        let ordered = ClassIndex::parents_first(&classes[..4]).unwrap();
        let ids: Vec<u32> = ordered.iter().map(|(i, _)| *i).collect();
        assert_eq!(ids, [3, 9, 1, 7], "pass by pass, each in file order");
    }

    #[test]
    fn each_engine_refuses_more_classes_than_it_takes_in_one_message() {
        for engine in [Engine::Afxdp, Engine::Htb] {
            let max = engine.max_classes() as usize;
            assert_eq!(engine.check_class_count(max - 1), Ok(()));
            assert_eq!(
                engine.check_class_count(max),
                Err(format!(
                    "{max} classes: the {} engine takes at most {}",
                    engine.as_str(),
                    max - 1
                ))
            );
        }
        assert_eq!(Engine::Htb.max_classes(), 16384);
    }

    #[test]
    fn bad_files_name_rule_and_field_in_one_line() {
        let cases = [
            (
                "[[rule]]\ndst = \"198.19.0.0/16\"\n",
                "rule 1: rate missing",
            ),
            ("[[rule]]\nrate = \"fast\"\n", "rule 1: rate \"fast\""),
            (
                "[[rule]]\nrate = \"1M\"\ndport = 9\n",
                "ports match only TCP or UDP",
            ),
            (
                "[[rule]]\nrate = \"1M\"\nproto = \"sctpx\"\n",
                "proto \"sctpx\"",
            ),
            (
                "[[rule]]\nrate = \"1M\"\n[[rule]]\nrate = \"1M\"\ndst = \"198.19.0.0/33\"\n",
                "rule 2: dst",
            ),
            ("[[rule]]\nrate = \"1Mbit\"\nburst = \"lots\"\n", "burst"),
            (
                "[[rule]]\nrate = \"1M\"\nexceed = \"remark\"\n",
                "exceed \"remark\"",
            ),
            (
                "[[rule]]\nrate = \"1M\"\ncolour = \"red\"\n",
                "unknown field",
            ),
            ("hook = \"ebpf\"\n", "unknown hook"),
            (
                "[[rule]]\nrate = \"0\"\nburst = \"1KiB\"\n",
                "rule 1: burst with rate \"0\"",
            ),
            (
                "[[rule]]\nrate = \"0bit\"\n",
                "rate \"0bit\": must be above 0",
            ),
        ];
        for (text, want) in cases {
            let e = PolicerConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e} (want {want})");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
