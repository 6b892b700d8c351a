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
use serde::Deserialize;

use peregrine_bpf::policer::{Exceed, Match, Rate, Rule};
use peregrine_units::{ByteSize, RateSetting};
use peregrine_wire::Prefix;

use crate::attach::PolicerHook;
use crate::error::{QosError, Result};

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
}

/// An IP protocol by name or number.
#[derive(Debug, Clone, Deserialize)]
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
    fn number(&self) -> std::result::Result<u8, String> {
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

/// The burst a rule gets when it names none: 10 ms at its rate, and at
/// least 64 KiB (a whole GSO packet, which the tc hook meters at once) or
/// 32 packets.
fn default_burst(rate: Rate) -> u64 {
    match rate {
        Rate::Bits(b) => (b / 8 / 100).max(64 * 1024),
        Rate::Packets(p) => (p / 100).max(32),
    }
}

fn parse_prefix(field: &str, s: &str) -> std::result::Result<Prefix, String> {
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
    pub fn to_rule(&self, default_priority: u32) -> std::result::Result<Rule, String> {
        let rate_text = self
            .rate
            .as_deref()
            .ok_or("rate missing: give rate = \"10Mbit\" (bit/s) or \"1000pps\"")?;
        let rate = match rate_text.parse::<RateSetting>()? {
            RateSetting::Bps(b) => Rate::Bits(b.round() as u64),
            RateSetting::Pps(p) => Rate::Packets(p.round() as u64),
        };
        let burst = match (&self.burst, rate) {
            (None, r) => default_burst(r),
            (Some(b), Rate::Bits(_)) => b.parse::<ByteSize>().map_err(|e| format!("burst: {e}"))?.0,
            (Some(b), Rate::Packets(_)) => b.parse::<u64>().map_err(|_| {
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
        };
        rule.check().map_err(|e| e.to_string())?;
        Ok(rule)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    hook: Option<String>,
    #[serde(default)]
    rule: Vec<RuleFields>,
}

/// A rules file, parsed and checked whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicerConfig {
    /// The hook the file asks for, if it does.
    pub hook: Option<PolicerHook>,
    pub rules: Vec<Rule>,
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
        let rules = file
            .rule
            .iter()
            .enumerate()
            .map(|(i, f)| {
                f.to_rule(i as u32 + 1)
                    .map_err(|e| QosError::Config(format!("rule {}: {e}", i + 1)))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(PolicerConfig { hook, rules })
    }

    pub fn read(path: &std::path::Path) -> Result<PolicerConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| QosError::Config(format!("reading {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| QosError::Config(format!("{}: {e}", path.display())))
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
        assert_eq!(cfg.hook, Some(PolicerHook::Xdp));
        let r = &cfg.rules;
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].rate, Rate::Bits(10_000_000));
        assert_eq!(r[0].burst, 20_000);
        assert_eq!(r[0].matches.proto, Some(17));
        assert_eq!((r[0].priority, r[1].priority, r[2].priority), (1, 2, 7));
        assert_eq!(r[1].matches.src.unwrap().len, 128);
        assert_eq!((r[1].rate, r[1].burst), (Rate::Packets(1000), 32));
        assert_eq!(r[1].exceed, Exceed::Remark(0));
        assert_eq!(r[2].burst, 1_250_000, "10 ms of 1 Gbit/s");
    }

    /// The example shipped in examples/ stays valid.
    #[test]
    fn the_example_file_parses() {
        let cfg = PolicerConfig::parse(include_str!("../../../examples/qos.toml")).unwrap();
        assert_eq!(cfg.hook, Some(PolicerHook::Tc));
        assert_eq!(cfg.rules.len(), 3);
        assert_eq!(cfg.rules[0].exceed, Exceed::Remark(0));
        assert_eq!(
            (cfg.rules[1].rate, cfg.rules[1].burst),
            (Rate::Packets(1000), 100)
        );
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
        ];
        for (text, want) in cases {
            let e = PolicerConfig::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e} (want {want})");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
