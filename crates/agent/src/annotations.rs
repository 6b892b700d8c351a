//! A pod's `peregrine.io/...` annotations. containerd hands a pod's
//! annotations to plugins whose configuration declares the capability
//! `io.kubernetes.cri.pod-annotations` (runtimeConfig); the plugin passes
//! on those under `peregrine.io/`. Two are read, both stateless deny lists
//! (docs/KUBERNETES.md, "Pod annotations"):
//!
//! - `peregrine.io/ingress-deny`: what may not reach the pod.
//! - `peregrine.io/egress-deny`: what the pod may not send.
//!
//! Entries are separated by commas; an entry is one or more of, separated
//! by spaces: a prefix or an address (the sender's for ingress, the
//! destination's for egress), a protocol (`tcp`, `udp`, `icmp`, `icmpv6`
//! or a number), `tcp/PORT` or `udp/PORT` (the destination port: the
//! pod's own for ingress). `"tcp/23, udp/9, 198.18.7.0/24, 198.19.0.0/16
//! tcp/80"` denies telnet and discard from anywhere, everything from
//! 198.18.7.0/24, and port 80 from 198.19.0.0/16.
//!
//! Each entry becomes a policer rule of rate 0 (nothing conforms: dropped
//! and counted) in front of the pod's rate rule of the same direction, on
//! the same policer: ingress on the pod's own interface inside its
//! namespace, egress on its host interface.
use std::collections::BTreeMap;

use peregrine_qos::config::{parse_prefix, Proto};
use peregrine_wire::Prefix;

pub const INGRESS_DENY: &str = "peregrine.io/ingress-deny";
pub const EGRESS_DENY: &str = "peregrine.io/egress-deny";
const KNOWN: [&str; 2] = [INGRESS_DENY, EGRESS_DENY];

/// Which way a deny list looks at the pod's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// What reaches the pod: a prefix is the sender's.
    Ingress,
    /// What the pod sends: a prefix is the destination's.
    Egress,
}

impl Direction {
    pub fn annotation(self) -> &'static str {
        match self {
            Direction::Ingress => INGRESS_DENY,
            Direction::Egress => EGRESS_DENY,
        }
    }
}

/// One entry of a deny list: what it matches (None: anything).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Deny {
    pub prefix: Option<Prefix>,
    /// A protocol the qos rules file knows: a name or a number.
    pub proto: Option<Proto>,
    pub port: Option<u16>,
}

impl Deny {
    /// The entry as a qos rules file's `[[rule]]` of rate 0. Every value
    /// was checked to be a prefix, a number or a protocol name, so none
    /// needs quoting beyond TOML's plain string.
    pub fn rule(&self, dir: Direction) -> String {
        let mut s = String::from("[[rule]]\n");
        if let Some(p) = &self.prefix {
            let field = match dir {
                Direction::Ingress => "src",
                Direction::Egress => "dst",
            };
            s.push_str(&format!("{field} = \"{p}\"\n"));
        }
        match &self.proto {
            // A number is a TOML integer, a name a string.
            Some(Proto::Number(n)) => s.push_str(&format!("proto = {n}\n")),
            Some(Proto::Name(p)) => s.push_str(&format!("proto = \"{p}\"\n")),
            None => {}
        }
        if let Some(p) = self.port {
            s.push_str(&format!("dport = {p}\n"));
        }
        s.push_str("rate = \"0\"\n");
        s
    }
}

/// Refuses a `peregrine.io/` annotation peregrine does not read (a typo
/// would otherwise leave the pod open without a word), and any deny list
/// that does not parse.
pub fn check(annotations: &BTreeMap<String, String>) -> Result<(), String> {
    if let Some(k) = annotations
        .keys()
        .find(|k| k.starts_with("peregrine.io/") && !KNOWN.contains(&k.as_str()))
    {
        return Err(format!(
            "annotation {k}: unknown (peregrine reads {})",
            KNOWN.join(" and ")
        ));
    }
    for dir in [Direction::Ingress, Direction::Egress] {
        denies(annotations, dir)?;
    }
    Ok(())
}

/// The deny list of `dir`, in the annotation's order (empty without one).
/// Every entry it gives is a rule the policer takes (`Deny::rule`; the
/// fuzz target `agent_inputs` holds it to that).
pub fn denies(annotations: &BTreeMap<String, String>, dir: Direction) -> Result<Vec<Deny>, String> {
    let key = dir.annotation();
    let Some(text) = annotations.get(key) else {
        return Ok(Vec::new());
    };
    let entries: Vec<&str> = text.split(',').map(str::trim).collect();
    if entries.iter().all(|e| e.is_empty()) {
        return Err(format!(
            "annotation {key}: empty (give entries such as \"tcp/23, 198.18.7.0/24\")"
        ));
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| entry(e).map_err(|why| format!("annotation {key}, entry {}: {why}", i + 1)))
        .collect()
}

fn entry(text: &str) -> Result<Deny, String> {
    if text.is_empty() {
        return Err("empty (two commas in a row?)".into());
    }
    let mut d = Deny::default();
    for token in text.split_whitespace() {
        if let Some((proto, port)) = token
            .split_once('/')
            .filter(|(p, _)| !p.contains(['.', ':']))
        {
            if !matches!(proto, "tcp" | "udp") {
                return Err(format!("{token:?}: a port goes with tcp or udp (tcp/80)"));
            }
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{token:?}: the port is 1 to 65535"))?;
            set(&mut d.proto, Proto::Name(proto.to_string()), "protocol")?;
            set(&mut d.port, port, "port")?;
        } else if token.contains(['.', ':']) {
            let prefix = parse_prefix(&format!("{token:?}"), token)?;
            set(&mut d.prefix, prefix, "prefix")?;
        } else if let Some(proto) = token.parse::<Proto>().ok().filter(|p| p.number().is_ok()) {
            set(&mut d.proto, proto, "protocol")?;
        } else {
            return Err(format!(
                "{token:?}: not a prefix, a protocol (tcp, udp, icmp, icmpv6, a number) or tcp/PORT"
            ));
        }
    }
    Ok(d)
}

fn set<T>(slot: &mut Option<T>, v: T, what: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("two of a kind: one {what} per entry"));
    }
    *slot = Some(v);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(k: &str, v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(k.to_string(), v.to_string())])
    }

    #[test]
    fn entries_read_prefixes_protocols_and_ports() {
        let a = ann(
            INGRESS_DENY,
            "tcp/23, udp, 198.18.7.0/24 , 2001:db8::5, 198.19.0.0/16 tcp/80, 47",
        );
        let d = denies(&a, Direction::Ingress).unwrap();
        assert_eq!(d.len(), 6);
        let tcp = Some(Proto::Name("tcp".into()));
        assert_eq!((&d[0].proto, d[0].port), (&tcp, Some(23)));
        assert_eq!(
            (&d[1].proto, d[1].port),
            (&Some(Proto::Name("udp".into())), None)
        );
        assert_eq!(d[2].prefix.unwrap().to_string(), "198.18.7.0/24");
        assert_eq!(d[3].prefix.unwrap().len, 128);
        assert_eq!(
            d[4].rule(Direction::Ingress),
            "[[rule]]\nsrc = \"198.19.0.0/16\"\nproto = \"tcp\"\ndport = 80\nrate = \"0\"\n"
        );
        assert!(d[4]
            .rule(Direction::Egress)
            .contains("dst = \"198.19.0.0/16\""));
        assert_eq!(d[5].proto, Some(Proto::Number(47)));
        assert!(denies(&a, Direction::Egress).unwrap().is_empty());
        check(&a).unwrap();
    }

    #[test]
    fn bad_annotations_are_refused_in_one_line() {
        for (k, v, want) in [
            (
                "peregrine.io/ingress-allow",
                "tcp/80",
                "unknown (peregrine reads",
            ),
            (INGRESS_DENY, "", "empty"),
            (INGRESS_DENY, "tcp/23,,udp", "entry 2: empty"),
            (INGRESS_DENY, "icmp/8", "a port goes with tcp or udp"),
            (INGRESS_DENY, "tcp/0", "the port is 1 to 65535"),
            (INGRESS_DENY, "tcp/http", "the port is 1 to 65535"),
            (EGRESS_DENY, "198.18.0.0/33", "entry 1: \"198.18.0.0/33\""),
            (EGRESS_DENY, "tcp udp", "one protocol per entry"),
            (EGRESS_DENY, "198.18.0.1 198.18.0.2", "one prefix per entry"),
            (EGRESS_DENY, "\"tcp\"\n", "not a prefix, a protocol"),
        ] {
            let e = check(&ann(k, v)).unwrap_err();
            assert!(e.contains(want), "{k}={v:?}: {e} (want {want})");
            assert!(e.starts_with("annotation "), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        // Other annotations are not peregrine's to judge.
        check(&ann("kubernetes.io/egress-bandwidth", "10M")).unwrap();
    }
}
