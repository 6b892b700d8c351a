//! What changing one declaration into another changes, one line each
//! (`peregrine diff`, and what `apply` reports): `+` added, `-` removed,
//! `~` changed.
use crate::decl::NodeDecl;

pub fn diff(old: &NodeDecl, new: &NodeDecl) -> Vec<String> {
    let mut out = Vec::new();
    match (&old.router, &new.router) {
        (None, Some(r)) => out.push(format!("+ router {} (hook {})", r.ports.join(" "), r.hook)),
        (Some(r), None) => out.push(format!("- router {}", r.ports.join(" "))),
        (Some(a), Some(b)) => {
            for p in b.ports.iter().filter(|p| !a.ports.contains(p)) {
                out.push(format!("+ router port {p}"));
            }
            for p in a.ports.iter().filter(|p| !b.ports.contains(p)) {
                out.push(format!("- router port {p}"));
            }
            if a.hook != b.hook || a.mode != b.mode || a.fib != b.fib {
                out.push(format!(
                    "~ router hook {} -> {} (every port re-attached)",
                    a.hook, b.hook
                ));
            }
            if a.tc_attach != b.tc_attach {
                out.push(format!(
                    "~ router tc_attach {} -> {} (every port at tc re-attached)",
                    a.tc_attach, b.tc_attach
                ));
            }
        }
        (None, None) => {}
    }
    for q in &new.qos {
        match old.qos.iter().find(|o| o.iface == q.iface) {
            None => out.push(format!("+ qos {} ({} rule(s))", q.iface, q.cfg.rules.len())),
            Some(o) if o.file != q.file => out.push(format!(
                "~ qos {}: {} rule(s) -> {} rule(s)",
                q.iface,
                o.cfg.rules.len(),
                q.cfg.rules.len()
            )),
            Some(_) => {}
        }
    }
    for o in old
        .qos
        .iter()
        .filter(|o| !new.qos.iter().any(|q| q.iface == o.iface))
    {
        out.push(format!("- qos {}", o.iface));
    }
    for s in &new.services {
        match old.services.iter().find(|o| o.name == s.name) {
            None => out.push(format!(
                "+ service {} ({})",
                s.name,
                s.kind.command().join(" ")
            )),
            Some(o) if o != s => out.push(format!("~ service {} (restarted)", s.name)),
            Some(_) => {}
        }
    }
    for o in old
        .services
        .iter()
        .filter(|o| !new.services.iter().any(|s| s.name == o.name))
    {
        out.push(format!("- service {}", o.name));
    }
    let nodes = |d: &NodeDecl| {
        d.cluster
            .as_ref()
            .map(|c| c.nodes.clone())
            .unwrap_or_default()
    };
    let (was, now) = (nodes(old), nodes(new));
    for n in &now {
        match was.iter().find(|o| o.name == n.name) {
            None => out.push(format!(
                "+ node {} (pods {} via {})",
                n.name, n.pod_cidr, n.address
            )),
            Some(o) if o != n => out.push(format!(
                "~ node {}: pods {} via {} -> {} via {}",
                n.name, o.pod_cidr, o.address, n.pod_cidr, n.address
            )),
            Some(_) => {}
        }
    }
    for o in was.iter().filter(|o| !now.iter().any(|n| n.name == o.name)) {
        out.push(format!("- node {}", o.name));
    }
    if out.is_empty() {
        out.push("no changes".into());
    }
    out
}
