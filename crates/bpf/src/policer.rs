//! Control side of `bpf/dataplane/policer.bpf.c`: the QoS policer (one
//! loaded object with an XDP and a tc program sharing every map), its rules
//! as users write them, and every change and read of its maps, whether the
//! maps come from a program just loaded or from pins another process made.
use std::net::IpAddr;

use libbpf_rs::{MapCore, MapFlags, MapHandle};
use peregrine_wire::Prefix;

use crate::error::{BpfError, Result};
use crate::link::{Hook, Link, Placement};
use crate::loader::{open_and_load, Loaded};
use crate::maps;
use crate::pod::Pod;
use crate::skel::policer::types::{
    policer_exceed, policer_key, policer_limits, policer_mask, policer_rule, policer_state,
    policer_unit, sched_limits,
};
use crate::skel::policer::{PolicerSkel, PolicerSkelBuilder};

pub use crate::skel::policer::types::{
    policer_counters as RuleCounters, policer_totals as PolicerTotals, sched_class as ClassSlot,
    sched_counters as ClassCounters, sched_early as EarlyDrops, sched_meta as SchedMeta,
    sched_port as SchedPort,
};

pub const MAX_RULES: u32 = policer_limits::POLICER_MAX_RULES.0;
pub const MAX_MASKS: u32 = policer_limits::POLICER_MAX_MASKS.0;
const COST_SHIFT: u32 = policer_limits::POLICER_COST_SHIFT.0;
/// The AF_XDP scheduler's class ids are 1..MAX_CLASSES (0: no class);
/// its `sched_classes` and `sched_stats` have that many slots.
pub const MAX_CLASSES: u32 = sched_limits::SCHED_MAX_CLASSES.0;
/// How long XDP trusts a class's `drop_ahead` after its publication.
pub const DROP_AHEAD_MS: u32 = sched_limits::SCHED_DROP_AHEAD_MS.0;
/// The htb engine's class ids are 1..HTB_MAX_CLASSES (0: no class): the
/// slots of the classifier's `htb_classes` (classify.bpf.c).
pub const HTB_MAX_CLASSES: u32 = crate::skel::classify::types::htb_limits::HTB_MAX_CLASSES.0;
/// The class id a rule may name, below this: either engine's (the AF_XDP
/// engine's rules only name its own classes, the ids of its table).
pub const RULE_MAX_CLASSES: u32 = if HTB_MAX_CLASSES > MAX_CLASSES {
    HTB_MAX_CLASSES
} else {
    MAX_CLASSES
};
/// RX queues of an interface the scheduler can be fed from.
pub const MAX_QUEUES: u32 = sched_limits::SCHED_MAX_QUEUES.0;
/// Bytes of a class name, NUL included.
pub const CLASS_NAME_LEN: usize = sched_limits::SCHED_NAME_LEN.0 as usize;

/// The names of the policer's maps (as the kernel keeps them; 15
/// characters at most).
pub const MAP_NAMES: [&str; 8] = [
    "policer_masks",
    "policer_rules",
    "policer_state",
    "policer_totals",
    "sched_port",
    "sched_xsks",
    "sched_classes",
    "sched_stats",
];
/// The scheduler's early-drop counters: a map a policer loaded by an
/// older peregrine lacks (its XDP never drops early; read as zeros).
const EARLY_MAP: &str = "sched_early";

/// What a rule matches; `None` matches anything. Ports need `proto` TCP or
/// UDP; prefixes say the family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Match {
    pub family: Option<u8>,
    pub src: Option<Prefix>,
    pub dst: Option<Prefix>,
    pub proto: Option<u8>,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
    pub dscp: Option<u8>,
}

/// A rate: of Ethernet frame bits (header included, no FCS or preamble) or
/// of packets, per second; or none (a filter: counts and steers to a
/// scheduler class, never drops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    Bits(u64),
    Packets(u64),
    Unmetered,
    /// A rate of 0: nothing conforms, every packet the rule matches takes
    /// its exceed action (a deny rule, or one that re-marks everything).
    Zero,
}

/// What a packet that exceeds its rule's rate gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Exceed {
    #[default]
    Drop,
    /// Its DSCP set to this value, then passed on.
    Remark(u8),
}

/// One rule: match, meter (rate and burst: bytes for a bit rate, packets
/// for a packet rate), what happens on exceed, its priority among rules
/// that match the same packet (lower wins), and the scheduler class its
/// conforming packets go to (0: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub matches: Match,
    pub rate: Rate,
    pub burst: u64,
    pub exceed: Exceed,
    pub priority: u32,
    pub class: u16,
}

fn invalid(msg: String) -> BpfError {
    BpfError::Invalid(msg)
}

/// A rule refused because the rule map is full (`MAX_RULES`), whether
/// counted before or found by the kernel (E2BIG: another process added
/// the last one in between).
fn rules_full() -> BpfError {
    BpfError::Limit(format!(
        "the policer is full: its rule map (policer_rules) holds at most {MAX_RULES} rules; \
         remove one first (qos rule del)"
    ))
}

fn family_of(a: &IpAddr) -> u8 {
    if a.is_ipv4() {
        4
    } else {
        6
    }
}

/// Sets the first `bits` bits of `out` (a prefix mask).
fn prefix_bits(out: &mut [u8; 16], bits: u8) {
    for (i, b) in out.iter_mut().enumerate() {
        let left = (bits as usize).saturating_sub(i * 8).min(8);
        *b = if left == 0 { 0 } else { 0xffu8 << (8 - left) };
    }
}

fn addr_bytes(a: &IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match a {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out = v6.octets(),
    }
    out
}

impl Match {
    /// The family the match implies (its prefixes' or its own), after the
    /// checks of `check`.
    fn family(&self) -> Option<u8> {
        self.family
            .or(self.src.map(|p| family_of(&p.addr)))
            .or(self.dst.map(|p| family_of(&p.addr)))
    }

    /// Refuses what could never match or is out of range, naming it.
    pub fn check(&self) -> Result<()> {
        if let Some(f) = self.family {
            if f != 4 && f != 6 {
                return Err(invalid(format!("family {f}: expected 4 or 6")));
            }
        }
        let mut fam = self.family;
        for (what, p) in [("source", self.src), ("destination", self.dst)] {
            let Some(Prefix { addr, len }) = p else {
                continue;
            };
            let f = family_of(&addr);
            let max = if f == 4 { 32 } else { 128 };
            if len > max {
                return Err(invalid(format!(
                    "{what} prefix {addr}/{len}: longer than {max} bits"
                )));
            }
            if fam.is_some_and(|g| g != f) {
                return Err(invalid(format!(
                    "{what} prefix {addr}/{len} is IPv{f}, the rule's other addresses are IPv{}",
                    fam.unwrap_or(0)
                )));
            }
            fam = Some(f);
        }
        if (self.sport.is_some() || self.dport.is_some()) && !matches!(self.proto, Some(6 | 17)) {
            return Err(invalid(
                "ports match only TCP or UDP: give proto = \"tcp\" or \"udp\"".into(),
            ));
        }
        if let Some(d) = self.dscp {
            if d > 63 {
                return Err(invalid(format!("DSCP {d}: at most 63")));
            }
        }
        Ok(())
    }

    /// The mask (which bits are compared) and the key (the values, already
    /// masked) of this match.
    fn mask_and_key(&self) -> (policer_key, policer_key) {
        let mut m = policer_key::default();
        let mut k = policer_key::default();
        if let Some(f) = self.family() {
            m.family = 0xff;
            k.family = f;
        }
        if let Some(p) = self.proto {
            m.proto = 0xff;
            k.proto = p;
        }
        if let Some(d) = self.dscp {
            m.dscp = 0xff;
            k.dscp = d;
        }
        if let Some(p) = self.sport {
            m.sport = 0xffff;
            k.sport = p.to_be();
        }
        if let Some(p) = self.dport {
            m.dport = 0xffff;
            k.dport = p.to_be();
        }
        for (p, mask, key) in [
            (self.src, &mut m.src, &mut k.src),
            (self.dst, &mut m.dst, &mut k.dst),
        ] {
            if let Some(Prefix { addr, len }) = p {
                prefix_bits(mask, len);
                let a = addr_bytes(&addr);
                for i in 0..16 {
                    key[i] = a[i] & mask[i];
                }
            }
        }
        (m, k)
    }
}

impl Rule {
    /// The settings the program's meter reads: nanoseconds per unit
    /// (fixed point) and the burst as nanoseconds of rate.
    fn meter(&self) -> Result<policer_rule> {
        if u32::from(self.class) >= RULE_MAX_CLASSES {
            return Err(invalid(format!(
                "class {}: ids run from 1 to {}",
                self.class,
                RULE_MAX_CLASSES - 1
            )));
        }
        if self.rate == Rate::Unmetered {
            if self.class == 0 {
                return Err(invalid(
                    "a rule without a rate must name a class (a filter)".into(),
                ));
            }
            // Cost 0: no credit is ever spent, every packet conforms.
            return Ok(policer_rule {
                priority: self.priority,
                class_id: self.class,
                ..Default::default()
            });
        }
        let (exceed, remark_dscp) = match self.exceed {
            Exceed::Drop => (policer_exceed::POLICER_EXCEED_DROP, 0),
            Exceed::Remark(d) if d > 63 => {
                return Err(invalid(format!("re-mark to DSCP {d}: at most 63")))
            }
            Exceed::Remark(d) => (policer_exceed::POLICER_EXCEED_REMARK, d),
        };
        if self.rate == Rate::Zero {
            if self.class != 0 {
                return Err(invalid(
                    "rate 0 lets nothing conform: such a rule cannot name a class".into(),
                ));
            }
            return Ok(policer_rule {
                priority: self.priority,
                unit: policer_unit::POLICER_NONE.0 as u8,
                exceed: exceed.0 as u8,
                remark_dscp,
                ..Default::default()
            });
        }
        let (unit, per_second, ns_per_unit_of_burst) = match self.rate {
            // A bit rate meters bits; its burst is given in bytes.
            Rate::Bits(bps) => (policer_unit::POLICER_BITS, bps, 8u64),
            Rate::Packets(pps) => (policer_unit::POLICER_PACKETS, pps, 1u64),
            Rate::Unmetered | Rate::Zero => unreachable!("returned above"),
        };
        match self.rate {
            Rate::Bits(b) if !(1_000..=1_000_000_000_000).contains(&b) => {
                return Err(invalid(format!(
                    "rate {b} bit/s: between 1 kbit/s and 1 Tbit/s"
                )))
            }
            Rate::Packets(p) if !(1..=1_000_000_000).contains(&p) => {
                return Err(invalid(format!(
                    "rate {p} packets/s: between 1 and 1,000,000,000"
                )))
            }
            _ => {}
        }
        if self.burst == 0 {
            return Err(invalid(
                "burst 0: a rule must let at least one packet through".into(),
            ));
        }
        let cost = ((1_000_000_000u128 << COST_SHIFT) / u128::from(per_second)) as u64;
        let tolerance =
            (u128::from(self.burst) * u128::from(ns_per_unit_of_burst) * u128::from(cost))
                >> COST_SHIFT;
        let tolerance_ns = u64::try_from(tolerance)
            .map_err(|_| invalid(format!("burst {}: too large for this rate", self.burst)))?;
        Ok(policer_rule {
            priority: self.priority,
            class_id: self.class,
            unit: unit.0 as u8,
            exceed: exceed.0 as u8,
            remark_dscp,
            cost,
            tolerance_ns,
            ..Default::default()
        })
    }

    /// Everything `check` refuses about the rule, as one line.
    pub fn check(&self) -> Result<()> {
        self.matches.check()?;
        self.meter().map(|_| ())
    }
}

/// A rule as it sits in the maps: its id (the index of its meter and
/// counters), what it matches (mask, key) and its meter settings.
#[derive(Debug, Clone, Copy)]
pub struct InstalledRule {
    pub id: u32,
    pub priority: u32,
    mask: policer_key,
    key: policer_key,
    meter: policer_rule,
}

impl InstalledRule {
    /// The rule's match, read back from its mask and key.
    pub fn matches(&self) -> Match {
        let (m, k) = (&self.mask, &self.key);
        let prefix = |mask: &[u8; 16], key: &[u8; 16], fam: u8| -> Option<Prefix> {
            let bits: u32 = mask.iter().map(|b| b.count_ones()).sum();
            if bits == 0 {
                return None;
            }
            let addr = if fam == 4 {
                IpAddr::from(<[u8; 4]>::try_from(&key[..4]).expect("4 bytes"))
            } else {
                IpAddr::from(*key)
            };
            Some(Prefix {
                addr,
                len: bits as u8,
            })
        };
        let fam = if m.family != 0 { k.family } else { 0 };
        Match {
            family: (m.family != 0).then_some(k.family),
            src: prefix(&m.src, &k.src, fam),
            dst: prefix(&m.dst, &k.dst, fam),
            proto: (m.proto != 0).then_some(k.proto),
            sport: (m.sport != 0).then_some(u16::from_be(k.sport)),
            dport: (m.dport != 0).then_some(u16::from_be(k.dport)),
            dscp: (m.dscp != 0).then_some(k.dscp),
        }
    }

    /// The rate, burst and exceed action, read back.
    pub fn meter(&self) -> (Rate, u64, Exceed) {
        let exceed = if self.meter.exceed == policer_exceed::POLICER_EXCEED_REMARK.0 as u8 {
            Exceed::Remark(self.meter.remark_dscp)
        } else {
            Exceed::Drop
        };
        if self.meter.unit == policer_unit::POLICER_NONE.0 as u8 {
            return (Rate::Zero, 0, exceed);
        }
        if self.meter.cost == 0 {
            return (Rate::Unmetered, 0, Exceed::Drop);
        }
        let per_second =
            ((1_000_000_000u128 << COST_SHIFT) / u128::from(self.meter.cost.max(1))) as u64;
        let (rate, per) = if self.meter.unit == policer_unit::POLICER_PACKETS.0 as u8 {
            (Rate::Packets(per_second), 1u128)
        } else {
            (Rate::Bits(per_second), 8u128)
        };
        let units = (u128::from(self.meter.tolerance_ns) << COST_SHIFT)
            / u128::from(self.meter.cost.max(1))
            / per;
        (rate, units as u64, exceed)
    }
}

impl InstalledRule {
    /// The scheduler class its conforming packets go to (0: none).
    pub fn class(&self) -> u16 {
        self.meter.class_id
    }
}

/// The policer's maps, of a program just loaded or of the one a link runs. Every change and
/// read of the rules goes through here, so the rules a file installs and
/// those `qos rule add` adds later follow one set of invariants: a rule's
/// mask is in the mask table before the rule, and leaves it after the last
/// rule using it; a rule's meter and counters start at zero.
pub struct PolicerMaps {
    masks: MapHandle,
    rules: MapHandle,
    state: MapHandle,
    totals: MapHandle,
    /// The scheduler's maps: the XDP program's only (the tc program steers
    /// nothing, so a tc policer's program holds none of them).
    sched: Option<SchedMaps>,
}

struct SchedMaps {
    port: MapHandle,
    xsks: MapHandle,
    classes: MapHandle,
    stats: MapHandle,
    early: Option<MapHandle>,
}

fn libbpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    BpfError::libbpf(what)
}

impl PolicerMaps {
    /// The maps of the policer program `prog_id` (the one a link runs): a
    /// later command finds them from the link, so they are always the
    /// running program's, also right after `apply` swapped it.
    pub fn of_program(prog_id: u32) -> Result<PolicerMaps> {
        let mut found = crate::maps::maps_of_program(prog_id)?;
        let mut take = |name: &str| {
            let i = found.iter().position(|(n, _)| n == name).ok_or_else(|| {
                invalid(format!(
                    "program {prog_id} has no map {name}: not a policer"
                ))
            })?;
            Ok::<_, BpfError>(found.swap_remove(i).1)
        };
        Ok(PolicerMaps {
            masks: take(MAP_NAMES[0])?,
            rules: take(MAP_NAMES[1])?,
            state: take(MAP_NAMES[2])?,
            totals: take(MAP_NAMES[3])?,
            sched: match take(MAP_NAMES[4]) {
                Ok(port) => Some(SchedMaps {
                    port,
                    xsks: take(MAP_NAMES[5])?,
                    classes: take(MAP_NAMES[6])?,
                    stats: take(MAP_NAMES[7])?,
                    early: take(EARLY_MAP).ok(),
                }),
                Err(_) => None,
            },
        })
    }

    /// The mask table and the rules' hash, for a program that matches on
    /// them too (the HTB classifier shares them by fd).
    pub fn rule_maps(&self) -> (&MapHandle, &MapHandle) {
        (&self.masks, &self.rules)
    }

    /// The mask table: (slot, mask) of each slot in use.
    fn masks(&self) -> Result<Vec<(u32, policer_key)>> {
        let mut out = Vec::new();
        for slot in 0..MAX_MASKS {
            let v = self
                .masks
                .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
                .map_err(libbpf("reading the policer's masks"))?
                .and_then(|b| policer_mask::from_bytes(&b))
                .unwrap_or_default();
            if v.used != 0 {
                out.push((slot, v.bits));
            }
        }
        Ok(out)
    }

    /// Every installed rule, by id.
    pub fn rules(&self) -> Result<Vec<InstalledRule>> {
        let masks = self.masks()?;
        let mut out = Vec::new();
        for kb in self.rules.keys() {
            let Some(key) = policer_key::from_bytes(&kb) else {
                continue;
            };
            let Some(meter) = self
                .rules
                .lookup(&kb, MapFlags::ANY)
                .map_err(libbpf("reading the policer's rules"))?
                .and_then(|b| policer_rule::from_bytes(&b))
            else {
                continue;
            };
            let mask = masks
                .iter()
                .find(|(s, _)| *s == key.mask_id)
                .map(|(_, m)| *m)
                .unwrap_or_default();
            out.push(InstalledRule {
                id: meter.id,
                priority: meter.priority,
                mask,
                key,
                meter,
            });
        }
        out.sort_by_key(|r| r.id);
        Ok(out)
    }

    /// Installs `rules` into maps that hold none yet (a program just
    /// loaded), with ids 0, 1, ... in order. Checks every rule and the mask
    /// count before writing anything.
    pub fn install_fresh(&self, rules: &[Rule]) -> Result<()> {
        let (masks, entries) = plan_rules(rules)?;
        for (slot, mask) in masks.iter().enumerate() {
            self.set_mask(slot as u32, Some(mask))?;
        }
        for (key, meter) in &entries {
            self.rules
                .update(key.as_bytes(), meter.as_bytes(), MapFlags::NO_EXIST)
                .map_err(libbpf(format!("adding policer rule {}", meter.id)))?;
        }
        Ok(())
    }

    fn set_mask(&self, slot: u32, mask: Option<&policer_key>) -> Result<()> {
        let v = policer_mask {
            used: u32::from(mask.is_some()),
            bits: mask.copied().unwrap_or_default(),
            ..Default::default()
        };
        self.masks
            .update(&slot.to_ne_bytes(), v.as_bytes(), MapFlags::ANY)
            .map_err(libbpf("writing the policer's mask table"))
    }

    /// Adds one rule to a running policer; returns its id. Nothing changes
    /// when it is refused.
    pub fn add(&self, rule: &Rule) -> Result<u32> {
        let mut meter = rule.meter()?;
        rule.matches.check()?;
        let installed = self.rules()?;
        if installed.len() >= MAX_RULES as usize {
            return Err(rules_full());
        }
        let (mask, mut key) = rule.matches.mask_and_key();
        let masks = self.masks()?;
        let slot = match masks.iter().find(|(_, m)| m.as_bytes() == mask.as_bytes()) {
            Some((s, _)) => *s,
            None => {
                let free = (0..MAX_MASKS)
                    .find(|s| !masks.iter().any(|(u, _)| u == s))
                    .ok_or_else(|| {
                        BpfError::Limit(format!(
                            "the policer's mask map (policer_masks) is full: its rules may use \
                             at most {MAX_MASKS} distinct match shapes (which fields and prefix \
                             lengths a rule compares) and this rule needs another"
                        ))
                    })?;
                self.set_mask(free, Some(&mask))?;
                free
            }
        };
        key.mask_id = slot;
        let mut used: Vec<u32> = installed.iter().map(|r| r.id).collect();
        used.sort_unstable();
        let id = (0u32..)
            .zip(&used)
            .find(|(i, u)| i != *u)
            .map_or(used.len() as u32, |(i, _)| i);
        meter.id = id;
        // A new rule's meter starts full and its counters at zero.
        self.state
            .update(
                &id.to_ne_bytes(),
                policer_state::default().as_bytes(),
                MapFlags::LOCK,
            )
            .map_err(libbpf(format!("resetting the meter of rule {id}")))?;
        if let Err(e) = self
            .rules
            .update(key.as_bytes(), meter.as_bytes(), MapFlags::NO_EXIST)
        {
            self.release_mask(slot)?;
            return Err(if e.kind() == libbpf_rs::ErrorKind::AlreadyExists {
                invalid("a rule with exactly this match is already installed".into())
            } else if e.kind() == libbpf_rs::ErrorKind::TooBig {
                rules_full()
            } else {
                BpfError::libbpf("adding a policer rule")(e)
            });
        }
        Ok(id)
    }

    /// Frees mask `slot` when no rule uses it any more.
    fn release_mask(&self, slot: u32) -> Result<()> {
        if self.rules()?.iter().all(|r| r.key.mask_id != slot) {
            self.set_mask(slot, None)?;
        }
        Ok(())
    }

    /// Removes rule `id` from a running policer.
    pub fn remove(&self, id: u32) -> Result<()> {
        let rule = self
            .rules()?
            .into_iter()
            .find(|r| r.id == id)
            .ok_or_else(|| invalid(format!("no policer rule {id}")))?;
        self.rules
            .delete(rule.key.as_bytes())
            .map_err(libbpf(format!("removing policer rule {id}")))?;
        self.release_mask(rule.key.mask_id)
    }

    /// Rule `id`'s counters, read under its meter's lock (one consistent
    /// snapshot).
    pub fn counters(&self, id: u32) -> Result<RuleCounters> {
        Ok(self
            .state
            .lookup(&id.to_ne_bytes(), MapFlags::LOCK)
            .map_err(libbpf(format!("reading the counters of rule {id}")))?
            .and_then(|b| policer_state::from_bytes(&b))
            .unwrap_or_default()
            .counters)
    }

    /// The program's own counters, summed over CPUs.
    pub fn totals(&self) -> Result<PolicerTotals> {
        crate::maps::read_per_cpu(&self.totals, &0u32.to_ne_bytes())
    }

    /// The scheduler's maps, for a change: a tc policer has none.
    fn sched(&self) -> Result<&SchedMaps> {
        self.sched.as_ref().ok_or_else(|| {
            invalid(
                "the policer runs at the tc hook, which steers nothing: classes need the XDP hook"
                    .into(),
            )
        })
    }

    /// Where class traffic goes (egress_ifindex 0: nowhere; always so for a
    /// tc policer).
    pub fn sched_port(&self) -> Result<SchedPort> {
        match &self.sched {
            Some(m) => maps::read(&m.port, &0u32.to_ne_bytes(), "reading the scheduler's port"),
            None => Ok(SchedPort::default()),
        }
    }

    pub fn set_sched_port(&self, port: &SchedPort) -> Result<()> {
        maps::update(
            &self.sched()?.port,
            &0u32.to_ne_bytes(),
            port.as_bytes(),
            "writing the scheduler's port",
        )
    }

    /// Feeds RX queue `queue`'s class traffic to AF_XDP socket `fd` (None:
    /// to nobody; it goes to the kernel, counted unscheduled).
    pub fn set_sched_socket(&self, queue: u32, fd: Option<std::os::fd::RawFd>) -> Result<()> {
        let key = queue.to_ne_bytes();
        let xsks = &self.sched()?.xsks;
        match fd {
            Some(fd) => maps::update(
                xsks,
                &key,
                &(fd as u32).to_ne_bytes(),
                &format!("giving RX queue {queue} to the scheduler's socket"),
            ),
            None => match xsks.delete(&key) {
                Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => Err(BpfError::libbpf(
                    format!("taking RX queue {queue} from the scheduler"),
                )(e)),
                _ => Ok(()),
            },
        }
    }

    /// Class slot `id` (`used` 0: free; always so for a tc policer).
    pub fn class_slot(&self, id: u32) -> Result<ClassSlot> {
        match &self.sched {
            Some(m) => {
                let doing = format!("reading scheduler class {id}");
                maps::read(&m.classes, &id.to_ne_bytes(), &doing)
            }
            None => Ok(ClassSlot::default()),
        }
    }

    pub fn set_class_slot(&self, id: u32, slot: &ClassSlot) -> Result<()> {
        let doing = format!("writing scheduler class {id}");
        maps::update(
            &self.sched()?.classes,
            &id.to_ne_bytes(),
            slot.as_bytes(),
            &doing,
        )
    }

    /// Class `id`'s counters, as the scheduler last wrote them.
    pub fn class_counters(&self, id: u32) -> Result<ClassCounters> {
        match &self.sched {
            Some(m) => {
                let doing = format!("reading the counters of class {id}");
                maps::read(&m.stats, &id.to_ne_bytes(), &doing)
            }
            None => Ok(ClassCounters::default()),
        }
    }

    /// Zeroes class `id`'s counters and early drops: a class added or
    /// deleted starts from nothing (ids are re-used), and no `drop_ahead`
    /// of the class that had the id before outlives it.
    pub fn reset_class_counters(&self, id: u32) -> Result<()> {
        self.set_class_counters(id, &ClassCounters::default())?;
        if let Some(m) = self.sched.as_ref().and_then(|m| m.early.as_ref()) {
            let doing = format!("zeroing the early drops of class {id}");
            crate::maps::zero_per_cpu(m, &id.to_ne_bytes(), &doing)?;
        }
        Ok(())
    }

    /// Class `id`'s arrivals XDP dropped early (`drop_ahead`), summed
    /// over CPUs.
    pub fn class_early_drops(&self, id: u32) -> Result<EarlyDrops> {
        match self.sched.as_ref().and_then(|m| m.early.as_ref()) {
            Some(m) => crate::maps::read_per_cpu(m, &id.to_ne_bytes()),
            None => Ok(EarlyDrops::default()),
        }
    }

    pub fn set_class_counters(&self, id: u32, c: &ClassCounters) -> Result<()> {
        let doing = format!("writing the counters of class {id}");
        maps::update(
            &self.sched()?.stats,
            &id.to_ne_bytes(),
            c.as_bytes(),
            &doing,
        )
    }
}

/// The loaded policer: one object, an XDP and a tc program, shared maps.
pub struct PolicerProgram {
    skel: Loaded<PolicerSkel<'static>>,
}

impl PolicerProgram {
    pub fn load() -> Result<PolicerProgram> {
        let skel = open_and_load::<PolicerSkelBuilder>("policer.bpf.o", |_| Ok(()))?;
        Ok(PolicerProgram { skel })
    }

    /// The program for `hook`: `policer` at XDP, `policer_tc` at tcx.
    pub fn prog(&self, hook: Hook) -> &libbpf_rs::ProgramMut<'static> {
        match hook {
            Hook::Xdp(_) => &self.skel.progs.policer,
            Hook::Tcx(_) => &self.skel.progs.policer_tc,
        }
    }

    /// Attaches the program for `hook` to `iface`. At tcx it goes first
    /// (`Placement::First`): it meters what arrives before a router (or
    /// anything else) redirects it, whichever was attached first.
    pub fn attach(&self, iface: &str, hook: Hook) -> Result<Link> {
        Link::attach_with(self.prog(hook), iface, hook, Placement::First)
    }

    /// Handles on this program's maps (they stay valid after it is dropped
    /// while pinned or attached).
    pub fn maps(&self) -> Result<PolicerMaps> {
        let m = &self.skel.maps;
        let handle = |map: &libbpf_rs::MapMut<'static>| {
            MapHandle::try_from(map).map_err(libbpf("taking a handle of a policer map"))
        };
        Ok(PolicerMaps {
            masks: handle(&m.policer_masks)?,
            rules: handle(&m.policer_rules)?,
            state: handle(&m.policer_state)?,
            totals: handle(&m.policer_totals)?,
            sched: Some(SchedMaps {
                port: handle(&m.sched_port)?,
                xsks: handle(&m.sched_xsks)?,
                classes: handle(&m.sched_classes)?,
                stats: handle(&m.sched_stats)?,
                early: Some(handle(&m.sched_early)?),
            }),
        })
    }
}

/// Checks a whole rule set as `install_fresh` would install it, writing
/// nothing: each rule's meter and match, the rule count, the distinct
/// match shapes, and no rule matching exactly what an earlier one does.
pub fn check_rules(rules: &[Rule]) -> Result<()> {
    plan_rules(rules).map(|_| ())
}

type Planned = (Vec<policer_key>, Vec<(policer_key, policer_rule)>);

/// `check_rules`, returning the masks and the (key, meter) entries in
/// rule order.
fn plan_rules(rules: &[Rule]) -> Result<Planned> {
    if rules.len() > MAX_RULES as usize {
        return Err(invalid(format!(
            "{} rules: the policer holds at most {MAX_RULES}",
            rules.len()
        )));
    }
    let mut masks: Vec<policer_key> = Vec::new();
    let mut entries = Vec::with_capacity(rules.len());
    let mut seen = std::collections::HashSet::new();
    for (i, r) in rules.iter().enumerate() {
        let mut meter = r
            .meter()
            .map_err(|e| invalid(format!("rule {}: {e}", i + 1)))?;
        r.matches
            .check()
            .map_err(|e| invalid(format!("rule {}: {e}", i + 1)))?;
        let (mask, mut key) = r.matches.mask_and_key();
        let slot = match masks.iter().position(|m| m.as_bytes() == mask.as_bytes()) {
            Some(s) => s,
            None if masks.len() < MAX_MASKS as usize => {
                masks.push(mask);
                masks.len() - 1
            }
            None => {
                return Err(invalid(format!(
                    "rule {}: more than {MAX_MASKS} distinct match shapes (which fields and \
                         prefix lengths a rule compares); rules must share them",
                    i + 1
                )))
            }
        };
        key.mask_id = slot as u32;
        if !seen.insert(key.as_bytes().to_vec()) {
            return Err(invalid(format!(
                "rule {}: matches exactly what an earlier rule matches",
                i + 1
            )));
        }
        meter.id = i as u32;
        entries.push((key, meter));
    }
    Ok((masks, entries))
}

#[cfg(test)]
mod fixtures {
    use super::*;
    use crate::fixture::frames::{
        arp_request, garbage, ip4_fragment, ip_first_byte, udp_ports, vlan, with_dscp,
        with_protocol,
    };
    use crate::fixture::{
        assert_passed, check_table, skb_runnable, truncations, Case, Expect, Fixture, TcAction,
        Verdict,
    };
    use crate::XdpAction;
    use crate::XdpMode;
    use peregrine_testbed::testing::privileged;
    use peregrine_wire::{ethertype, MacAddr};

    /// What a frame moved: the winning rule's conform and exceed packets
    /// and bytes, and the program's unmatched, not-IP and malformed counts.
    type Effect = [u64; 7];

    fn state(maps: &PolicerMaps, id: u32) -> Effect {
        let c = maps.counters(id).unwrap();
        let t = maps.totals().unwrap();
        [
            c.conform_packets,
            c.conform_bytes,
            c.exceed_packets,
            c.exceed_bytes,
            t.unmatched,
            t.not_ip,
            t.malformed,
        ]
    }

    fn moved(b: &Effect, a: &Effect) -> Effect {
        std::array::from_fn(|i| a[i] - b[i])
    }

    fn conform(len: usize) -> Effect {
        [1, len as u64, 0, 0, 0, 0, 0]
    }
    fn exceed(len: usize) -> Effect {
        [0, 0, 1, len as u64, 0, 0, 0]
    }
    const UNMATCHED: Effect = [0, 0, 0, 0, 1, 0, 0];
    const NOT_IP: Effect = [0, 0, 0, 0, 0, 1, 0];
    const MALFORMED: Effect = [0, 0, 0, 0, 0, 0, 1];

    /// The hook's verdicts: (pass on, drop).
    fn verdicts(tc: bool) -> (Verdict, Verdict) {
        if tc {
            (TcAction::Next.into(), TcAction::Shot.into())
        } else {
            (XdpAction::Pass.into(), XdpAction::Drop.into())
        }
    }

    fn udp_to(dst: &str, dport: u16) -> Vec<u8> {
        let src = if dst.contains(':') {
            "2001:db8::1"
        } else {
            "198.18.0.1"
        };
        udp_ports((src, dst), (1000, dport), 100, b"policed")
    }

    /// 1 kbit/s: a frame's worth of credit takes ~0.5 s to come back, so
    /// back-to-back runs see the burst edge exactly.
    fn slow(matches: Match, burst_bytes: u64, exceed: Exceed, priority: u32) -> Rule {
        Rule {
            matches,
            rate: Rate::Bits(1_000),
            burst: burst_bytes,
            exceed,
            priority,
            class: 0,
        }
    }

    fn udp9(dst: (&str, u8)) -> Match {
        Match {
            dst: Some(format!("{}/{}", dst.0, dst.1).parse().unwrap()),
            proto: Some(17),
            dport: Some(9),
            ..Default::default()
        }
    }

    fn run(tc: bool, rules: &[Rule], watch: u32, cases: Vec<Case<Effect>>) {
        let p = PolicerProgram::load().unwrap();
        let maps = p.maps().unwrap();
        maps.install_fresh(rules).unwrap();
        let hook = if tc {
            Hook::Tcx(crate::TcxDirection::Ingress)
        } else {
            Hook::Xdp(XdpMode::Native)
        };
        let cases: Vec<_> = cases
            .into_iter()
            .filter(|c| !tc || skb_runnable(&c.fixture.input))
            .collect();
        let bad = check_table(p.prog(hook), &cases, || state(&maps, watch), moved);
        assert_passed(if tc { "policer_tc" } else { "policer" }, &bad);
    }

    /// A burst of exactly three frames passes, the fourth exceeds and is
    /// dropped (nothing spent on it), at both hooks.
    #[test]
    fn burst_edge_conform_then_exceed() {
        if !privileged("burst_edge_conform_then_exceed") {
            return;
        }
        for tc in [false, true] {
            let (pass, drop) = verdicts(tc);
            let f = udp_to("198.19.0.1", 9);
            let n = f.len();
            let rule = slow(udp9(("198.19.0.0", 16)), 3 * n as u64, Exceed::Drop, 0);
            let mut cases: Vec<_> = (1..=3)
                .map(|i| {
                    Case::new(
                        Fixture::new(
                            format!("frame {i} within the burst"),
                            f.clone(),
                            pass,
                            Expect::Unchanged,
                        ),
                        conform(n),
                    )
                })
                .collect();
            for i in 4..=5 {
                cases.push(Case::new(
                    Fixture::new(
                        format!("frame {i} beyond it"),
                        f.clone(),
                        drop,
                        Expect::Unchanged,
                    ),
                    exceed(n),
                ));
            }
            run(tc, &[rule], 0, cases);
        }
    }

    /// At tc a GSO super-packet is charged what its segments put on the
    /// wire: skb->len plus the headers (Ethernet, IP, TCP with its options
    /// or UDP) of every segment after the first, as a qdisc is charged.
    /// A plain frame, and one whose transport header is cut short, is
    /// charged skb->len.
    #[test]
    fn gso_packets_are_charged_their_segments_headers_at_tc() {
        if !privileged("gso_packets_are_charged_their_segments_headers_at_tc") {
            return;
        }
        let (pass, _) = verdicts(true);
        let every = Match::default();
        let rule = slow(every, 1_000_000, Exceed::Drop, 0);
        // A TCP frame with 12 bytes of options (doff 8): the UDP frame's
        // protocol changed, the TCP header's length set.
        let tcp = |src: &str, dst: &str, l3: usize| {
            let mut f = with_protocol(&udp_ports((src, dst), (1000, 9), 1400, b"segmented"), 6);
            f[14 + l3 + 12] = 8 << 4;
            f
        };
        let tcp4 = tcp("198.18.0.1", "198.19.0.1", 20);
        let tcp6 = tcp("2001:db8::1", "2001:db8:2::1", 40);
        let udp4 = udp_ports(("198.18.0.1", "198.19.0.1"), (1000, 9), 1400, b"x");
        // The IP datagram ends 10 bytes into the TCP header.
        let cut = with_protocol(
            &udp_ports(("198.18.0.1", "198.19.0.1"), (1000, 9), 14 + 20 + 10, b""),
            6,
        );
        let case = |name: &str, f: &Vec<u8>, segs: u32, charged: usize| {
            Case::new(
                Fixture::new(name, f.clone(), pass, Expect::Unchanged).gso(segs, 1000),
                conform(charged),
            )
        };
        let cases = vec![
            case(
                "tcp v4, 3 segments",
                &tcp4,
                3,
                tcp4.len() + 2 * (14 + 20 + 32),
            ),
            case("tcp v6, 2 segments", &tcp6, 2, tcp6.len() + (14 + 40 + 32)),
            case(
                "udp v4, 4 segments",
                &udp4,
                4,
                udp4.len() + 3 * (14 + 20 + 8),
            ),
            case("tcp v4, not gso", &tcp4, 1, tcp4.len()),
            case("tcp v4, its header cut short", &cut, 3, cut.len()),
        ];
        run(true, &[rule], 0, cases);
    }

    /// At tc a GSO super-packet conforms while the bucket holds any credit
    /// and is charged in full, into debt; a plain frame needs its whole
    /// cost, so nothing passes again until the debt is paid.
    #[test]
    fn gso_packets_conform_on_any_credit_and_are_charged_whole() {
        if !privileged("gso_packets_conform_on_any_credit_and_are_charged_whole") {
            return;
        }
        let (pass, drop) = verdicts(true);
        let f = udp_ports(("198.18.0.1", "198.19.0.1"), (1000, 9), 1400, b"x");
        let n = f.len();
        let charged = n + 2 * (14 + 20 + 8);
        // Credit for half a frame: less than the 3-segment packet costs.
        let rule = slow(Match::default(), n as u64 / 2, Exceed::Drop, 0);
        let gso = |name: &str, verdict, effect| {
            Case::new(
                Fixture::new(name, f.clone(), verdict, Expect::Unchanged).gso(3, 1000),
                effect,
            )
        };
        let cases = vec![
            gso(
                "gso, 3 segments, on half a frame of credit",
                pass,
                conform(charged),
            ),
            Case::new(
                Fixture::new(
                    "a frame behind it, in debt",
                    f.clone(),
                    drop,
                    Expect::Unchanged,
                ),
                exceed(n),
            ),
            gso("gso again, still in debt", drop, exceed(charged)),
        ];
        run(true, &[rule], 0, cases);
    }

    /// A packet rate counts packets whatever their size.
    #[test]
    fn packet_rate_counts_packets() {
        if !privileged("packet_rate_counts_packets") {
            return;
        }
        for tc in [false, true] {
            let (pass, drop) = verdicts(tc);
            let small = udp_to("198.19.0.1", 9);
            let big = udp_ports(("198.18.0.1", "198.19.0.1"), (1000, 9), 1400, b"x");
            let rule = Rule {
                matches: udp9(("198.19.0.1", 32)),
                rate: Rate::Packets(1),
                burst: 2,
                exceed: Exceed::Drop,
                priority: 0,
                class: 0,
            };
            let cases = vec![
                Case::new(
                    Fixture::new("big", big.clone(), pass, Expect::Unchanged),
                    conform(big.len()),
                ),
                Case::new(
                    Fixture::new("small", small.clone(), pass, Expect::Unchanged),
                    conform(small.len()),
                ),
                Case::new(
                    Fixture::new("third", small.clone(), drop, Expect::Unchanged),
                    exceed(small.len()),
                ),
            ];
            run(tc, &[rule], 0, cases);
        }
    }

    /// Exceeding frames of a re-marking rule pass with the new DSCP (IPv4
    /// checksum patched to what a fresh header would have; IPv6's traffic
    /// class changed, flow label kept).
    #[test]
    fn exceed_remarks_dscp() {
        if !privileged("exceed_remarks_dscp") {
            return;
        }
        for tc in [false, true] {
            let (pass, _) = verdicts(tc);
            for dst in ["198.19.0.1", "2001:db8:2::1"] {
                let f = with_dscp(&udp_to(dst, 9), 10);
                let n = f.len();
                let plen = if dst.contains(':') { 128 } else { 32 };
                let rule = slow(udp9((dst, plen)), n as u64, Exceed::Remark(46), 0);
                let cases = vec![
                    Case::new(
                        Fixture::new(
                            format!("{dst} conforms"),
                            f.clone(),
                            pass,
                            Expect::Unchanged,
                        ),
                        conform(n),
                    ),
                    Case::new(
                        Fixture::new(
                            format!("{dst} re-marked"),
                            f.clone(),
                            pass,
                            Expect::Frame(with_dscp(&f, 46)),
                        ),
                        exceed(n),
                    ),
                ];
                run(tc, &[rule], 0, cases);
            }
        }
    }

    /// A rate of 0 lets nothing conform: every frame it matches exceeds,
    /// the first one too (an empty bucket, not a small one), and is dropped
    /// or re-marked; frames it does not match pass, unmatched. A rule of
    /// rate 0 before a metered one (a deny list in front of a pod's rate)
    /// drops what it names whatever the other's credit.
    #[test]
    fn rate_zero_denies_every_frame_it_matches() {
        if !privileged("rate_zero_denies_every_frame_it_matches") {
            return;
        }
        let zero = |matches: Match, exceed: Exceed, priority: u32| Rule {
            matches,
            rate: Rate::Zero,
            burst: 0,
            exceed,
            priority,
            class: 0,
        };
        for tc in [false, true] {
            let (pass, drop) = verdicts(tc);
            for dst in ["198.19.0.1", "2001:db8:2::1"] {
                let plen = if dst.contains(':') { 128 } else { 32 };
                let f = udp_to(dst, 9);
                let other = udp_to(dst, 10);
                let n = f.len();
                let mut cases: Vec<_> = (1..=3)
                    .map(|i| {
                        Case::new(
                            Fixture::new(
                                format!("{dst} frame {i} denied"),
                                f.clone(),
                                drop,
                                Expect::Unchanged,
                            ),
                            exceed(n),
                        )
                    })
                    .collect();
                cases.push(Case::new(
                    Fixture::new(
                        format!("{dst} port 10 not named"),
                        other,
                        pass,
                        Expect::Unchanged,
                    ),
                    UNMATCHED,
                ));
                run(tc, &[zero(udp9((dst, plen)), Exceed::Drop, 0)], 0, cases);

                let f = with_dscp(&f, 10);
                let cases = vec![Case::new(
                    Fixture::new(
                        format!("{dst} re-marked, never conforming"),
                        f.clone(),
                        pass,
                        Expect::Frame(with_dscp(&f, 46)),
                    ),
                    exceed(n),
                )];
                run(
                    tc,
                    &[zero(udp9((dst, plen)), Exceed::Remark(46), 0)],
                    0,
                    cases,
                );

                // Deny first, then a generous rate for everything else.
                let every = Match::default();
                let rules = [
                    zero(udp9((dst, plen)), Exceed::Drop, 1),
                    slow(every, 1_000_000, Exceed::Drop, 2),
                ];
                let cases = vec![Case::new(
                    Fixture::new(
                        format!("{dst} denied before the rate rule"),
                        udp_to(dst, 9),
                        drop,
                        Expect::Unchanged,
                    ),
                    exceed(n),
                )];
                run(tc, &rules, 0, cases);
            }
        }
    }

    /// Of overlapping rules the lowest priority wins, whatever the order of
    /// their masks; a DSCP match sees the frame's DSCP.
    #[test]
    fn lowest_priority_wins_and_dscp_matches() {
        if !privileged("lowest_priority_wins_and_dscp_matches") {
            return;
        }
        let f = udp_to("198.19.0.1", 9);
        let n = f.len();
        let wide = Rule {
            rate: Rate::Bits(1_000_000_000),
            burst: 1 << 20,
            ..slow(udp9(("198.19.0.0", 16)), 0, Exceed::Drop, 10)
        };
        let narrow = slow(udp9(("198.19.0.1", 32)), n as u64, Exceed::Drop, 1);
        let ef = slow(
            Match {
                dscp: Some(46),
                family: Some(4),
                ..Default::default()
            },
            n as u64,
            Exceed::Drop,
            0,
        );
        for tc in [false, true] {
            let (pass, drop) = verdicts(tc);
            // Watch the narrow rule (id 1): it wins over the wide one.
            let cases = vec![
                Case::new(
                    Fixture::new("narrow conforms", f.clone(), pass, Expect::Unchanged),
                    conform(n),
                ),
                Case::new(
                    Fixture::new("narrow exceeds", f.clone(), drop, Expect::Unchanged),
                    exceed(n),
                ),
                // DSCP 46: the EF rule (priority 0) takes it, not rule 1.
                Case::new(
                    Fixture::new("EF frame", with_dscp(&f, 46), pass, Expect::Unchanged),
                    [0; 7],
                ),
                Case::new(
                    Fixture::new(
                        "other port: no rule",
                        udp_to("198.19.0.1", 10),
                        pass,
                        Expect::Unchanged,
                    ),
                    UNMATCHED,
                ),
            ];
            run(tc, &[wide.clone(), narrow.clone(), ef.clone()], 1, cases);
        }
    }

    /// Frames the policer cannot judge pass unmetered and are counted:
    /// non-IP, cut inside Ethernet or the IP header, a bad version or IHL;
    /// cut inside the ports they match no port rule; tagged frames and
    /// first fragments are policed, later fragments match no port rule.
    #[test]
    fn malformed_and_unmatched_frames_pass_counted() {
        if !privileged("malformed_and_unmatched_frames_pass_counted") {
            return;
        }
        for tc in [false, true] {
            let (pass, _) = verdicts(tc);
            for dst in ["198.19.0.1", "2001:db8:2::1"] {
                let f = udp_to(dst, 9);
                let ip_end = 14 + if dst.contains(':') { 40 } else { 20 };
                let plen = if dst.contains(':') { 128 } else { 32 };
                // A rule generous enough that every whole frame conforms.
                let rule = Rule {
                    rate: Rate::Bits(1_000_000_000),
                    burst: 1 << 20,
                    ..slow(udp9((dst, plen)), 0, Exceed::Drop, 0)
                };
                let mut cases = vec![
                    Case::new(
                        Fixture::new("whole", f.clone(), pass, Expect::Unchanged),
                        conform(f.len()),
                    ),
                    Case::new(
                        Fixture::new(
                            "tagged",
                            vlan(&f, ethertype::VLAN, 7),
                            pass,
                            Expect::Unchanged,
                        ),
                        conform(f.len() + 4),
                    ),
                    Case::new(
                        Fixture::new(
                            "arp",
                            arp_request(
                                MacAddr([2, 0, 0, 0, 0, 1]),
                                "198.18.0.1".parse().unwrap(),
                                "198.18.0.2".parse().unwrap(),
                            ),
                            pass,
                            Expect::Unchanged,
                        ),
                        NOT_IP,
                    ),
                    Case::new(
                        Fixture::new("garbage", garbage(60), pass, Expect::Unchanged),
                        NOT_IP,
                    ),
                    Case::new(
                        Fixture::new(
                            "bad version",
                            ip_first_byte(&f, 0x95),
                            pass,
                            Expect::Unchanged,
                        ),
                        MALFORMED,
                    ),
                ];
                if !dst.contains(':') {
                    cases.push(Case::new(
                        Fixture::new("ihl 4", ip_first_byte(&f, 0x44), pass, Expect::Unchanged),
                        MALFORMED,
                    ));
                    let first = ip4_fragment(&f, true, 0);
                    cases.push(Case::new(
                        Fixture::new("first fragment", first.clone(), pass, Expect::Unchanged),
                        conform(first.len()),
                    ));
                    cases.push(Case::new(
                        Fixture::new(
                            "later fragment",
                            ip4_fragment(&f, false, 64),
                            pass,
                            Expect::Unchanged,
                        ),
                        UNMATCHED,
                    ));
                }
                for (cut, frame) in truncations(&f, ip_end + 4) {
                    let effect = if cut < ip_end { MALFORMED } else { UNMATCHED };
                    cases.push(Case::new(
                        Fixture::new(
                            format!("{dst} cut at {cut}"),
                            frame,
                            pass,
                            Expect::Unchanged,
                        ),
                        effect,
                    ));
                }
                run(tc, &[rule], 0, cases);
            }
        }
    }

    /// A filter (a rule with a class and no rate) counts every packet as
    /// conforming and never drops. At XDP, with no scheduler socket on the
    /// queue (BPF_PROG_RUN has none), its packets go to the kernel
    /// untouched and are counted unscheduled, whether or not a scheduler
    /// port is set; at tc classes do not apply (nothing is steered there).
    #[test]
    fn filters_count_and_pass_untouched_without_a_scheduler_socket() {
        if !privileged("filters_count_and_pass_untouched_without_a_scheduler_socket") {
            return;
        }
        for tc in [false, true] {
            let (pass, _) = verdicts(tc);
            let p = PolicerProgram::load().unwrap();
            let maps = p.maps().unwrap();
            let filter = |dst: (&str, u8)| Rule {
                rate: Rate::Unmetered,
                burst: 0,
                class: 1,
                ..slow(udp9(dst), 0, Exceed::Drop, 0)
            };
            maps.install_fresh(&[filter(("198.19.0.0", 16)), filter(("2001:db8:2::", 48))])
                .unwrap();
            let hook = if tc {
                Hook::Tcx(crate::TcxDirection::Ingress)
            } else {
                Hook::Xdp(XdpMode::Native)
            };
            // [conform packets, conform bytes of rule 0 + 1, steered, unscheduled]
            let read = || {
                let (a, b) = (maps.counters(0).unwrap(), maps.counters(1).unwrap());
                let t = maps.totals().unwrap();
                [
                    a.conform_packets + b.conform_packets,
                    a.conform_bytes + b.conform_bytes,
                    a.exceed_packets + b.exceed_packets,
                    t.steered,
                    t.unscheduled,
                ]
            };
            let moved =
                |b: &[u64; 5], a: &[u64; 5]| -> [u64; 5] { std::array::from_fn(|i| a[i] - b[i]) };
            let unsched = u64::from(!tc);
            let mut cases = Vec::new();
            // A class marked drop_ahead a moment ago: with no socket to
            // steer to, XDP passes its packets to the kernel all the same.
            for (setting, port, class_used, drop_ahead) in [
                ("no scheduler port", 0u32, 1u32, false),
                ("a port, no socket", 1, 1, false),
                ("a port, no socket, drop_ahead", 1, 1, true),
                ("a deleted class", 1, 0, false),
            ] {
                for dst in ["198.19.0.1", "2001:db8:2::1"] {
                    let f = udp_to(dst, 9);
                    cases.push((
                        setting,
                        port,
                        class_used,
                        drop_ahead,
                        Case::new(
                            Fixture::new(
                                format!("{setting}, {dst}"),
                                f.clone(),
                                pass,
                                Expect::Unchanged,
                            ),
                            [1, f.len() as u64, 0, 0, unsched],
                        ),
                    ));
                }
            }
            for (_, port, used, drop_ahead, case) in cases {
                let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
                maps.set_class_counters(
                    1,
                    &ClassCounters {
                        drop_ahead: u64::from(drop_ahead),
                        counted_at_ns: now.tv_sec() as u64 * 1_000_000_000 + now.tv_nsec() as u64,
                        ..Default::default()
                    },
                )
                .unwrap();
                maps.set_sched_port(&SchedPort {
                    egress_ifindex: port,
                    ..Default::default()
                })
                .unwrap();
                maps.set_class_slot(
                    1,
                    &ClassSlot {
                        used,
                        ..Default::default()
                    },
                )
                .unwrap();
                let bad = check_table(p.prog(hook), std::slice::from_ref(&case), read, moved);
                assert_passed(if tc { "policer_tc" } else { "policer" }, &bad);
            }
            let back = maps.rules().unwrap();
            assert_eq!(back[0].class(), 1);
            assert_eq!(back[0].meter().0, Rate::Unmetered);
        }
    }

    /// Rules read back as written; a second rule with the same match is
    /// refused and changes nothing; removing the last rule of a mask frees
    /// it; a 17th distinct match shape is refused.
    #[test]
    fn rules_round_trip_and_refusals_change_nothing() {
        if !privileged("rules_round_trip_and_refusals_change_nothing") {
            return;
        }
        let p = PolicerProgram::load().unwrap();
        let maps = p.maps().unwrap();
        let r = Rule {
            matches: Match {
                src: Some("2001:db8::/48".parse().unwrap()),
                proto: Some(6),
                sport: Some(443),
                dscp: Some(10),
                ..Default::default()
            },
            rate: Rate::Bits(10_000_000),
            burst: 64_000,
            exceed: Exceed::Remark(0),
            priority: 5,
            class: 0,
        };
        let id = maps.add(&r).unwrap();
        assert_eq!(id, 0);
        let back = &maps.rules().unwrap()[0];
        let want = Match {
            family: Some(6),
            ..r.matches.clone()
        };
        assert_eq!(back.matches(), want);
        let (rate, burst, exceed) = back.meter();
        assert_eq!((rate, exceed, back.priority), (r.rate, r.exceed, 5));
        assert!(burst.abs_diff(64_000) <= 1, "burst {burst}");
        let err = maps.add(&r).unwrap_err().to_string();
        assert!(err.contains("already installed"), "{err}");
        assert_eq!(maps.rules().unwrap().len(), 1);
        assert_eq!(maps.masks().unwrap().len(), 1);
        // Fill the mask table with other shapes (prefix lengths 1..=15).
        let ids: Vec<u32> = (1..MAX_MASKS as u8)
            .map(|len| {
                maps.add(&Rule {
                    matches: Match {
                        dst: Some(Prefix {
                            addr: "198.0.0.0".parse().unwrap(),
                            len,
                        }),
                        ..Default::default()
                    },
                    ..r.clone()
                })
                .unwrap()
            })
            .collect();
        assert_eq!(maps.masks().unwrap().len(), MAX_MASKS as usize);
        let err = maps
            .add(&Rule {
                matches: Match {
                    dst: Some("198.0.0.0/20".parse().unwrap()),
                    ..Default::default()
                },
                ..r.clone()
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("distinct match shapes"), "{err}");
        for id in ids {
            maps.remove(id).unwrap();
        }
        maps.remove(id).unwrap();
        assert!(maps.rules().unwrap().is_empty());
        assert!(
            maps.masks().unwrap().is_empty(),
            "masks freed with their rules"
        );
        assert!(maps
            .remove(id)
            .unwrap_err()
            .to_string()
            .contains("no policer rule"));
    }

    /// Bad rules are refused with the reason, before anything is written.
    #[test]
    fn bad_rules_are_refused() {
        let base = Rule {
            matches: Match::default(),
            rate: Rate::Bits(1_000_000),
            burst: 10_000,
            exceed: Exceed::Drop,
            priority: 0,
            class: 0,
        };
        let cases = [
            (
                Match {
                    dport: Some(53),
                    ..Default::default()
                },
                "ports match only TCP or UDP",
            ),
            (
                Match {
                    src: Some(Prefix {
                        addr: "198.18.0.0".parse().unwrap(),
                        len: 33,
                    }),
                    ..Default::default()
                },
                "longer than 32 bits",
            ),
            (
                Match {
                    src: Some("198.18.0.0/16".parse().unwrap()),
                    dst: Some("2001:db8::/32".parse().unwrap()),
                    ..Default::default()
                },
                "is IPv6",
            ),
            (
                Match {
                    dscp: Some(64),
                    ..Default::default()
                },
                "DSCP 64",
            ),
        ];
        for (m, want) in cases {
            let err = Rule {
                matches: m,
                ..base.clone()
            }
            .check()
            .unwrap_err()
            .to_string();
            assert!(err.contains(want), "{err} (want {want})");
        }
        let err = Rule {
            rate: Rate::Bits(10),
            ..base.clone()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(err.contains("1 kbit/s"), "{err}");
        let err = Rule {
            burst: 0,
            ..base.clone()
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(err.contains("burst 0"), "{err}");
        let err = Rule {
            exceed: Exceed::Remark(70),
            ..base
        }
        .check()
        .unwrap_err()
        .to_string();
        assert!(err.contains("DSCP 70"), "{err}");
    }
}
