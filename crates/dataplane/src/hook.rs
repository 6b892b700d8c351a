//! Which hook the router runs at on a host's ports: XDP, or tc (tcx).
//!
//! XDP sees raw frames. What a local sender hands a veth with TX checksum
//! offload on carries a *partial* checksum (CHECKSUM_PARTIAL) and, with
//! GSO, can be a super-packet; an XDP redirect drops that state and the
//! receiver discards the frames (TCP stalls after a few packets). The tc
//! hook keeps the skb, and with it that state. So `auto` looks at the
//! veth peer of every port (the sending side, possibly in another
//! namespace) and picks tc when any of them has either offload on.
use std::fmt;

use peregrine_bpf::{Hook, XdpMode};
use peregrine_host::veth;

use crate::error::{DataplaneError, Result};

/// The hook asked for (`--hook`, the declaration's `hook`): `auto`, or one
/// hook (`peregrine_bpf::Hook`, parsed by its one `FromStr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookChoice {
    /// tc where XDP would corrupt or drop traffic, XDP otherwise.
    #[default]
    Auto,
    Given(Hook),
}

impl HookChoice {
    /// tc was asked for.
    pub fn is_tc(self) -> bool {
        matches!(self, HookChoice::Given(Hook::Tcx(_)))
    }
}

impl std::str::FromStr for HookChoice {
    type Err = DataplaneError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(HookChoice::Auto),
            _ => s.parse().map(HookChoice::Given).map_err(|_| {
                DataplaneError::Config(format!("unknown hook {s:?}: expected xdp, tc or auto"))
            }),
        }
    }
}

impl fmt::Display for HookChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookChoice::Auto => f.write_str("auto"),
            HookChoice::Given(h) => f.write_str(h.kind()),
        }
    }
}

/// How the router's ports at tc ingress are attached (`--tc-attach`, the
/// declaration's `tc_attach`): the same program either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TcAttach {
    /// A tcx link per port (Linux 6.6+): ordered with the other tcx
    /// programs (a policer runs first), taken back from its pin. Each
    /// attach and detach waits out an RCU grace period.
    #[default]
    Tcx,
    /// A cls_bpf filter per port in a clsact qdisc, recorded beside it
    /// (`cls_port`): one netlink request a port. Runs after every tcx
    /// program of the port.
    Cls,
}

impl std::str::FromStr for TcAttach {
    type Err = DataplaneError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tcx" => Ok(TcAttach::Tcx),
            "cls" | "cls_bpf" => Ok(TcAttach::Cls),
            _ => Err(DataplaneError::Config(format!(
                "unknown tc attachment {s:?}: expected tcx or cls"
            ))),
        }
    }
}

impl fmt::Display for TcAttach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TcAttach::Tcx => "tcx",
            TcAttach::Cls => "cls",
        })
    }
}

/// The hook picked, why (one line), and a warning when XDP was asked for
/// on ports whose peers send what XDP cannot redirect intact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub hook: Hook,
    pub why: String,
    pub warning: Option<String>,
}

/// A port whose veth peer sends partial checksums or GSO packets:
/// "tx-checksumming, generic-segmentation-offload on peer eth0 of a1".
fn risky(port: &str) -> std::result::Result<Option<String>, String> {
    match veth::peer_of(port) {
        Ok(Some(p)) => {
            let on = p.offloads.on();
            if on.is_empty() {
                return Ok(None);
            }
            let ns = p.ns.map(|n| format!(" (in {n})")).unwrap_or_default();
            Ok(Some(format!(
                "{} on peer {}{ns} of {port}",
                on.join(", "),
                p.name
            )))
        }
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The first few of `ports`' findings, then how many more there are: a
/// router of 100 ports gets one line, not 100 clauses.
fn first_of(found: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut line = found[..found.len().min(SHOWN)].join("; ");
    if found.len() > SHOWN {
        line.push_str(&format!("; and on {} more ports", found.len() - SHOWN));
    }
    line
}

/// Picks the hook for `ports` (interfaces of the calling thread's
/// namespace). `mode`: the XDP mode asked for, if one was (tc takes none).
pub fn pick(choice: HookChoice, mode: Option<XdpMode>, ports: &[String]) -> Result<Pick> {
    let xdp = Hook::Xdp(mode.unwrap_or_default());
    match choice {
        HookChoice::Given(Hook::Tcx(_)) => {
            if let Some(m) = mode {
                return Err(DataplaneError::Config(format!(
                    "--mode {m} is an XDP mode; the tc hook takes none (leave --mode out or use --hook xdp)"
                )));
            }
            Ok(Pick {
                hook: Hook::TC,
                why: "asked for".into(),
                warning: None,
            })
        }
        HookChoice::Given(Hook::Xdp(_)) => {
            let mut bad = Vec::new();
            for p in ports {
                if let Ok(Some(r)) = risky(p) {
                    bad.push(r);
                }
            }
            let warning = (!bad.is_empty()).then(|| {
                format!(
                    "peregrine: warning: {}: XDP redirects what that peer sends with partial checksums or as GSO packets, which the receiver drops (TCP stalls); use --hook tc, or turn them off on the peer (ethtool -K <peer> tx off gso off)",
                    first_of(&bad)
                )
            });
            Ok(Pick {
                hook: xdp,
                why: "asked for".into(),
                warning,
            })
        }
        HookChoice::Auto => {
            for p in ports {
                match risky(p) {
                    Ok(Some(r)) if mode.is_some() => {
                        return Err(DataplaneError::Config(format!(
                            "--mode asks for XDP, but {r} (XDP would drop what it sends); use --hook tc, or --hook xdp to attach XDP anyway"
                        )))
                    }
                    Ok(Some(r)) => {
                        return Ok(Pick {
                            hook: Hook::TC,
                            why: format!("{r}: XDP would drop what it sends"),
                            warning: None,
                        })
                    }
                    Ok(None) => {}
                    Err(e) if mode.is_some() => {
                        tracing::warn!("cannot read the offloads of {p}'s peer: {e}");
                    }
                    Err(e) => {
                        return Ok(Pick {
                            hook: Hook::TC,
                            why: format!("cannot read the offloads of {p}'s veth peer ({e}); tc is safe either way"),
                            warning: None,
                        })
                    }
                }
            }
            Ok(Pick {
                hook: xdp,
                why: "no port's veth peer has tx-checksumming or generic-segmentation-offload on"
                    .into(),
                warning: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_of;

    #[test]
    fn many_risky_ports_make_one_short_warning() {
        let found: Vec<String> = (0..100)
            .map(|i| format!("tx-checksumming on peer f{i} of p{i}"))
            .collect();
        let line = first_of(&found);
        assert_eq!(
            line,
            "tx-checksumming on peer f0 of p0; tx-checksumming on peer f1 of p1; \
             tx-checksumming on peer f2 of p2; and on 97 more ports"
        );
        assert_eq!(first_of(&found[..2]), found[..2].join("; "));
    }
}
