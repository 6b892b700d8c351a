//! What the router and the chains report, for people (tables), scripts
//! (JSON) and `--watch`/Prometheus (counters): the router's per-port
//! counters, the chain's network functions' counters, the attachment lists.
use std::fmt;

use peregrine_bpf::nf::NfStats;
use peregrine_bpf::router::{action_name, PortStats, ACTIONS};
use peregrine_metrics::{Counted, Counter};
use peregrine_units::Table;
use serde_json::{json, Value};

use crate::config::{DataplaneConfig, NfConfig};
use crate::error::Result;
use crate::pins::pinned_nf_stats;
use crate::pins::PinScope;
use crate::router::{self, Applied, Attached, Listed};

/// The router's counters: (port, ifindex, counters) per port.
pub struct RouterStats(pub Vec<(String, u32, PortStats)>);

impl RouterStats {
    /// The counters of the router pinned in `dir` (`Site::attached_dir`).
    pub fn read(dir: &std::path::Path) -> Result<RouterStats> {
        Ok(RouterStats(router::stats(dir)?))
    }
}

impl Counted for RouterStats {
    const PREFIX: &'static str = "peregrine_router";
    const WHAT: &'static str = "seen by the router, per port and counter (rx_<action>, tx)";

    fn to_json(&self) -> Value {
        let ports: Vec<_> = self
            .0
            .iter()
            .map(|(n, i, s)| {
                let actions: serde_json::Map<String, Value> = (0..ACTIONS)
                    .map(|a| (action_name(a).to_string(), json!({"packets": s.packets[a], "bytes": s.bytes[a]})))
                    .collect();
                json!({"port": n, "ifindex": i, "rx": actions, "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes})
            })
            .collect();
        json!({ "ports": ports })
    }

    /// Per port, rx per action (`rx_forward`, `rx_pass_local`, ...) and `tx`.
    fn counters(&self) -> Vec<Counter> {
        let mut out = Vec::new();
        for (n, _, s) in &self.0 {
            for a in 0..ACTIONS {
                let c = format!("rx_{}", action_name(a));
                let labels = [("port", n.as_str()), ("counter", &c)];
                out.push(Counter::new(&labels, s.packets[a], Some(s.bytes[a])));
            }
            let labels = [("port", n.as_str()), ("counter", "tx")];
            out.push(Counter::new(&labels, s.tx_packets, Some(s.tx_bytes)));
        }
        out
    }
}

/// A table: per port, tx and the rx actions that counted anything.
impl fmt::Display for RouterStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = Table::new(&["port", "counter", "packets", "bytes"]);
        for (n, _, s) in &self.0 {
            let (p, b) = (s.tx_packets, s.tx_bytes);
            t.row(vec![n.clone(), "tx".into(), p.to_string(), b.to_string()]);
            for a in (0..ACTIONS).filter(|&a| s.packets[a] > 0) {
                t.row(vec![
                    n.clone(),
                    format!("rx {}", action_name(a)),
                    s.packets[a].to_string(),
                    s.bytes[a].to_string(),
                ]);
            }
        }
        f.write_str(&t.render())
    }
}

/// The counters of a declaration's network functions.
pub struct ChainStats {
    pub lab: Option<String>,
    pub functions: Vec<(NfConfig, NfStats)>,
}

impl ChainStats {
    /// The counters of what `cfg`'s deployment pinned.
    pub fn read(cfg: &DataplaneConfig) -> Result<ChainStats> {
        Ok(ChainStats {
            lab: cfg.lab.clone(),
            functions: pinned_nf_stats(cfg)?,
        })
    }
}

impl Counted for ChainStats {
    const PREFIX: &'static str = "peregrine_nf";
    const WHAT: &'static str =
        "of the chain's network functions, per function and counter (received, sent, dropped)";

    fn to_json(&self) -> Value {
        let fs: Vec<_> = self
            .functions
            .iter()
            .map(|(n, s)| {
                json!({
                    "host": n.host, "iface": n.iface, "kind": n.kind.name(),
                    "packets": s.packets, "bytes": s.bytes, "sent": s.sent,
                    "dropped": s.dropped, "ip": s.ip, "csum_completed": s.csum_completed,
                })
            })
            .collect();
        json!({ "lab": self.lab, "functions": fs })
    }

    fn counters(&self) -> Vec<Counter> {
        let mut out = Vec::new();
        for (n, s) in &self.functions {
            let f = format!("{}:{}", n.host, n.iface);
            // Bytes are counted on receive only.
            for (counter, value, bytes) in [
                ("received", s.packets, Some(s.bytes)),
                ("sent", s.sent, None),
                ("dropped", s.dropped, None),
                ("csum_completed", s.csum_completed, None),
            ] {
                let labels = [
                    ("function", f.as_str()),
                    ("kind", n.kind.name()),
                    ("counter", counter),
                ];
                out.push(Counter::new(&labels, value, bytes));
            }
        }
        out
    }
}

impl fmt::Display for ChainStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = Table::new(&[
            "function",
            "kind",
            "received",
            "bytes",
            "sent",
            "dropped",
            "csum completed",
        ]);
        for (n, s) in &self.functions {
            t.row(vec![
                format!("{}:{}", n.host, n.iface),
                n.kind.name().to_string(),
                s.packets.to_string(),
                s.bytes.to_string(),
                s.sent.to_string(),
                s.dropped.to_string(),
                s.csum_completed.to_string(),
            ]);
        }
        f.write_str(&t.render())
    }
}

/// One row of a list of attachments (the router's, the policers').
pub struct AttachmentRow {
    pub namespace: String,
    pub iface: String,
    pub hook: String,
    pub prog_id: Option<u32>,
    pub stale: bool,
}

/// The table a list command prints: one attachment a row (namespace,
/// iface, hook, program id, stale), or that no `what` is attached.
pub fn attachments_text(what: &str, rows: Vec<AttachmentRow>) -> String {
    if rows.is_empty() {
        return format!("no {what} attached\n");
    }
    let mut t = Table::new(&["namespace", "iface", "hook", "prog id", "state"]);
    for r in rows {
        t.row(vec![
            r.namespace,
            r.iface,
            r.hook,
            r.prog_id.map_or_else(|| "-".into(), |i| i.to_string()),
            if r.stale { "stale" } else { "attached" }.to_string(),
        ]);
    }
    t.render()
}

/// `router list`: {"attachments": [...]}, or a table.
pub fn list_text(rows: Vec<Listed>, as_json: bool) -> String {
    if as_json {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "namespace": r.namespace, "netns_cookie": r.cookie, "iface": r.iface,
                    "ifindex": r.ifindex, "hook": r.hook, "prog_id": r.prog_id, "stale": r.stale,
                })
            })
            .collect();
        return format!("{}\n", json!({ "attachments": v }));
    }
    let rows = rows.into_iter().map(|r| AttachmentRow {
        namespace: r.namespace,
        iface: r.iface,
        hook: r.hook.to_string(),
        prog_id: r.prog_id,
        stale: r.stale,
    });
    attachments_text("router", rows.collect())
}

/// What a command says on stderr when it removed a stale router first.
pub fn stale_note(removed: &Option<std::path::PathBuf>) -> Option<String> {
    let d = removed.as_ref()?;
    Some(format!(
        "removed a stale router attachment ({})",
        peregrine_bpf::bpffs::display(d)
    ))
}

/// `router attach`'s lines: what the ports joined or the router attached,
/// and how they deliver into their peers.
impl fmt::Display for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ports = self.ports.join(" ");
        match &self.joined {
            Some(running) => writeln!(
                f,
                "added to the router ({}{}) here: {ports}; its ports: {} {ports}",
                self.hook,
                if self.cls { " as cls_bpf filters" } else { "" },
                running.join(" "),
            )?,
            None => writeln!(
                f,
                "router attached ({}{}, fib {}) to {ports}",
                self.hook,
                if self.cls { " as cls_bpf filters" } else { "" },
                format!("{:?}", self.fib).to_lowercase(),
            )?,
        }
        if !self.peer_delivered.is_empty() {
            writeln!(
                f,
                "delivering into the peer's namespace with bpf_redirect_peer on {} (its veth peer runs no XDP; while faas serve, the AF_XDP stack or qos serve runs XDP there, the port delivers through the veth instead)",
                self.peer_delivered.join(" ")
            )?;
        }
        if !self.refreshed.is_empty() {
            writeln!(
                f,
                "delivery to the peer rechecked on {} (an XDP program came or went there)",
                self.refreshed.join(" ")
            )?;
        }
        Ok(())
    }
}

impl Applied {
    /// `chain apply`'s line: the router, where, its functions and `cfg`'s
    /// chains.
    pub fn describe(&self, cfg: &DataplaneConfig) -> String {
        let chains: Vec<String> = cfg
            .chains
            .iter()
            .map(|c| format!("{} ({} -> {})", c.name, c.matches, c.hops.join(" -> ")))
            .collect();
        format!(
            "applied: router ({}) in {}, functions {}, chains {}",
            self.hook,
            PinScope::of(cfg).describe(),
            self.nfs.join(" "),
            chains.join("; ")
        )
    }
}
