//! The node as the agent sees it: what `status` prints, `/readyz` and the
//! metrics read.
use serde::Serialize;

use crate::services::ServiceStatus;

/// A port's stages in the order frames meet them.
#[derive(Debug, Clone, Serialize)]
pub struct Order {
    pub iface: String,
    pub stages: Vec<String>,
}

/// The node as `status` shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub pid: u32,
    /// The agent's network namespace (one-shot commands there refuse).
    pub netns_cookie: u64,
    pub config: String,
    pub ready: bool,
    pub reconciles: u64,
    pub repairs: u64,
    /// The last pass's.
    pub errors: Vec<String>,
    pub waiting: Vec<String>,
    /// The last changes made (most recent last, at most 50).
    pub changes: Vec<String>,
    pub router: Option<RouterStatus>,
    pub qos: Vec<QosStatus>,
    pub order: Vec<Order>,
    pub services: Vec<ServiceStatus>,
    /// The pods the CNI plugin handed over.
    pub pods: Vec<crate::pods::PodStatus>,
    /// Seconds the last reconcile took.
    pub last_reconcile_seconds: f64,
    /// And each of its phases (router, policers, services, peer delivery).
    pub last_reconcile_phases: Vec<(String, f64)>,
    /// With `nodes_from = "kubernetes"`: the other nodes the API server
    /// listed last, and why the last list failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<crate::kube::Discovered>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RouterStatus {
    pub hook: String,
    pub declared: Vec<String>,
    /// (port, live)
    pub ports: Vec<(String, bool)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QosStatus {
    pub iface: String,
    pub hook: String,
    pub rules: usize,
    pub scheduler: bool,
    pub live: bool,
}

/// `peregrine status` for people: the agent, its router, policers, stage
/// order, services, and what waits or failed, from the status as the
/// control socket gives it (`Status`, as JSON).
pub fn text(s: &serde_json::Value) -> String {
    use serde_json::Value;
    use std::fmt::Write;
    let mut out = String::new();
    let get = |k: &str| s.get(k).cloned().unwrap_or_default();
    let yes = |v: &Value| v.as_bool() == Some(true);
    let str = |v: &Value| v.as_str().unwrap_or("?").to_string();
    let ready = if yes(&get("ready")) {
        "ready"
    } else {
        "not ready"
    };
    let _ = writeln!(
        out,
        "agent pid {} ({}): {ready}, {} reconciles, {} repairs, last took {:.1} ms",
        get("pid"),
        get("config").as_str().unwrap_or(""),
        get("reconciles"),
        get("repairs"),
        get("last_reconcile_seconds").as_f64().unwrap_or(0.0) * 1e3
    );
    if let Some(r) = s.get("router").filter(|r| !r.is_null()) {
        let ports: Vec<String> = (r["ports"].as_array().into_iter().flatten())
            .map(|p| format!("{}{}", str(&p[0]), if yes(&p[1]) { "" } else { " (down)" }))
            .collect();
        let hook = r["hook"].as_str().unwrap_or("-");
        let _ = writeln!(out, "router at {hook}: {}", ports.join(", "));
    }
    for q in get("qos").as_array().into_iter().flatten() {
        let sched = yes(&q["scheduler"]);
        let _ = writeln!(
            out,
            "qos {}: {} rule(s) at {}{}{}",
            str(&q["iface"]),
            q["rules"],
            str(&q["hook"]),
            if sched { ", scheduler" } else { "" },
            if yes(&q["live"]) || sched {
                ""
            } else {
                " (not running)"
            }
        );
    }
    for o in get("order").as_array().into_iter().flatten() {
        let st: Vec<&str> = (o["stages"].as_array().into_iter().flatten())
            .filter_map(|x| x.as_str())
            .collect();
        let _ = writeln!(out, "order on {}: {}", str(&o["iface"]), st.join(" -> "));
    }
    for v in get("services").as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "service {} ({}): {} pid {}, {} restarts{}",
            str(&v["name"]),
            str(&v["kind"]),
            str(&v["state"]),
            v["pid"],
            v["restarts"],
            if yes(&v["adopted"]) { ", adopted" } else { "" }
        );
    }
    if let Some(k) = s.get("kubernetes").filter(|k| !k.is_null()) {
        let nodes: Vec<String> = (k["nodes"].as_array().into_iter().flatten())
            .map(|n| {
                format!(
                    "{} ({} via {})",
                    str(&n["name"]),
                    str(&n["pod_cidr"]),
                    str(&n["address"])
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "Node objects: {} list(s); other nodes: {}{}",
            k["lists"],
            if nodes.is_empty() {
                "none".to_string()
            } else {
                nodes.join(", ")
            },
            k["error"]
                .as_str()
                .map(|e| format!("; last list failed: {e}"))
                .unwrap_or_default()
        );
    }
    for p in get("pods").as_array().into_iter().flatten() {
        let name = match (p["pod_namespace"].as_str(), p["pod_name"].as_str()) {
            (Some(ns), Some(n)) => format!("{ns}/{n} "),
            (None, Some(n)) => format!("{n} "),
            _ => String::new(),
        };
        let id: String = str(&p["container_id"]).chars().take(12).collect();
        let ips: Vec<&str> = (p["ips"].as_array().into_iter().flatten())
            .filter_map(|x| x.as_str())
            .collect();
        let mut bw = String::new();
        for (k, what) in [("egress_rate", "egress"), ("ingress_rate", "ingress")] {
            if let Some(r) = p[k].as_u64() {
                let _ = write!(bw, ", {what} {r} bit/s");
            }
        }
        for (k, v) in p["annotations"].as_object().into_iter().flatten() {
            let _ = write!(bw, ", {k}: {}", v.as_str().unwrap_or(""));
        }
        let _ = writeln!(
            out,
            "pod {name}({id}/{}): host iface {}{}, {}{bw}",
            str(&p["ifname"]),
            str(&p["host_iface"]),
            if yes(&p["port_live"]) { "" } else { " (down)" },
            if ips.is_empty() {
                "no ips".to_string()
            } else {
                ips.join(" ")
            },
        );
    }
    for k in ["waiting", "errors"] {
        for l in get(k).as_array().into_iter().flatten() {
            let what = k.trim_end_matches('s');
            let _ = writeln!(out, "{what}: {}", l.as_str().unwrap_or(""));
        }
    }
    out
}
