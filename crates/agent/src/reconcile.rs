//! One reconcile pass: the running data plane of the agent's namespace
//! brought to the declaration, through the same library calls the one-shot
//! commands make (`dataplane::router`, `qos::attach`), touching only what
//! the agent owns (`state::Owned`). Each pass reports what it changed;
//! drift (a program detached by hand, a port re-created) is repaired and
//! counted.
use peregrine_bpf::Hook;
use peregrine_dataplane::router::{self, AttachConfig, Site};
use peregrine_dataplane::{cls_port, pins, HookChoice, TcAttach};
use serde::Serialize;

use crate::cluster::{Cidr, ClusterDecl, PeerNode, ROUTE_PROTO};
use crate::decl::{NodeDecl, QosDecl, RouterDecl};
use crate::state::{text_hash, Owned};
use peregrine_host::nl::NetlinkHere;

/// What one pass did and found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pass {
    /// Changes made, one line each.
    pub changed: Vec<String>,
    /// Declared, not there yet (a port whose interface does not exist).
    pub waiting: Vec<String>,
    /// What could not be applied, one line each.
    pub errors: Vec<String>,
    /// Drift repaired in this pass.
    pub repairs: u64,
    /// Seconds each phase took.
    pub phases: Vec<(String, f64)>,
}

fn exists(iface: &str) -> bool {
    peregrine_bpf::link::ifindex(iface).is_ok()
}

/// The router of the agent's namespace as pinned, read once (reading it
/// opens every port's link pin: a pass reads it again only after changing
/// it).
#[derive(Debug, Clone, Default)]
pub struct RouterView {
    /// (iface, live) per port.
    pub ports: Vec<(String, bool)>,
    /// The hook kind ("xdp"/"tc") it runs at, if one runs.
    pub hook: Option<&'static str>,
    /// Its ports at tc are cls_bpf filters (tcx links otherwise).
    pub cls: bool,
}

impl RouterView {
    pub fn read() -> RouterView {
        let Ok(dir) = Site::here().dir() else {
            return RouterView::default();
        };
        if !dir.exists() {
            return RouterView::default();
        }
        let ports = pins::attachment(&dir).ports;
        // A cls_bpf port's record reads live until its interface goes; its
        // filter, taken off by hand (`tc filter del`, the clsact deleted),
        // is looked for in the kernel: one filter dump a port.
        let tc = ports
            .iter()
            .any(|p| p.cls)
            .then(peregrine_host::tc::Tc::open)
            .and_then(|r| r.ok());
        let lives: Vec<bool> = ports
            .iter()
            .map(|p| {
                p.link.is_some_and(|l| l.live())
                    && (!p.cls
                        || tc.as_ref().is_none_or(|tc| {
                            cls_port::running(tc, &pins::port_cls(&dir, &p.iface)).unwrap_or(true)
                        }))
            })
            .collect();
        let live = ports.iter().zip(&lives).find(|(_, l)| **l).map(|(p, _)| p);
        RouterView {
            hook: live.and_then(|p| p.link).map(|l| l.hook_kind()),
            cls: live.is_some_and(|p| p.cls),
            ports: ports.into_iter().map(|p| p.iface).zip(lives).collect(),
        }
    }
}

/// The hook kind ("xdp"/"tc") router port `iface` of the agent's
/// namespace runs at; None when it does not run. One pin read, whatever
/// the number of ports.
pub fn router_port(iface: &str) -> Option<&'static str> {
    let dir = Site::here().dir().ok()?;
    pins::live_port_link(&dir, iface).map(|l| l.hook_kind())
}

/// Brings the router of this namespace to `want`.
pub fn router(want: Option<&RouterDecl>, owned: &mut Owned, pass: &mut Pass) {
    let site = Site::here();
    let mut view = RouterView::read();
    if !view.ports.is_empty() && !owned.router && view.ports.iter().all(|p| !p.1) {
        // Pins of a router none of whose ports runs any more (its process
        // and interfaces gone, the agent's record lost): nothing of it
        // runs, and `router attach` would take them away too.
        if let Ok(dir) = site.dir() {
            if pins::remove(&dir).is_ok() {
                pass.changed.push(format!(
                    "router: stale pins of a router with no live port removed ({})",
                    view.ports
                        .iter()
                        .map(|p| p.0.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
            }
        }
        view = RouterView::read();
    }
    if !view.ports.is_empty() && !owned.router {
        if want.is_some() {
            pass.errors.push(format!(
                "router: a router attached by hand runs in this namespace (ports {}); the agent leaves it: `peregrine router detach` it to let the agent attach the declared one",
                view.ports.iter().map(|p| p.0.as_str()).collect::<Vec<_>>().join(" ")
            ));
        }
        return;
    }
    let Some(want) = want else {
        if owned.router && !view.ports.is_empty() {
            match router::detach(&site, &[]) {
                Ok(_) => pass
                    .changed
                    .push("router: detached (no longer declared)".into()),
                Err(e) => pass.errors.push(format!("router: detaching: {e}")),
            }
        }
        owned.router = false;
        owned.router_ports.clear();
        return;
    };
    // A router at the other hook than the one declared, or at tc attached
    // the other way, goes whole first.
    let cls_now = view.hook == Some("tc") && view.cls;
    let cls_wanted = view.hook == Some("tc") && want.tc_attach == TcAttach::Cls;
    if cls_now != cls_wanted {
        match router::detach(&site, &[]) {
            Ok(_) => {
                // Taken out on purpose: no port of it is drift.
                owned.router_ports.clear();
                pass.changed.push(format!(
                    "router: detached to attach its ports at tc as {}",
                    want.tc_attach
                ))
            }
            Err(e) => {
                pass.errors.push(format!("router: detaching: {e}"));
                return;
            }
        }
        view = RouterView::read();
    }
    if let (Some(kind), HookChoice::Given(h)) = (view.hook, want.hook) {
        if kind != h.kind() {
            match router::detach(&site, &[]) {
                Ok(_) => {
                    owned.router_ports.clear();
                    pass.changed.push(format!(
                        "router: detached from {kind} to move it to {}",
                        h.kind()
                    ))
                }
                Err(e) => {
                    pass.errors
                        .push(format!("router: detaching from {kind}: {e}"));
                    return;
                }
            }
            view = RouterView::read();
        }
    }
    let running = view.ports;
    let all_dead = !running.is_empty() && running.iter().all(|p| !p.1);
    // Ports to take out: not declared any more, or whose link died (the
    // interface went, or its program was detached by hand).
    let out: Vec<String> = running
        .iter()
        .filter(|(i, live)| !want.ports.contains(i) || !live)
        .map(|(i, _)| i.clone())
        .collect();
    if all_dead {
        // Nothing of it runs: its pins go whole (what `attach` would do).
        if let Ok(dir) = site.dir() {
            let _ = pins::remove(&dir);
        }
    } else if !out.is_empty() {
        match router::detach(&site, &out) {
            Ok(_) => {}
            Err(e) => pass
                .errors
                .push(format!("router: taking out {}: {e}", out.join(" "))),
        }
    }
    // Ports the agent attached that are gone from the pins while their
    // interface is there: taken off by hand.
    for i in &owned.router_ports {
        if want.ports.contains(i) && !running.iter().any(|(r, _)| r == i) && exists(i) {
            pass.repairs += 1;
            pass.changed.push(format!(
                "router: port {i} had been taken out behind the agent: repaired"
            ));
        }
    }
    for (i, live) in &running {
        if want.ports.contains(i) && !live && exists(i) {
            pass.repairs += 1;
            pass.changed
                .push(format!("router: port {i} had lost its program: repaired"));
        } else if !want.ports.contains(i) {
            pass.changed
                .push(format!("router: port {i} taken out (no longer declared)"));
        } else if !live {
            pass.changed
                .push(format!("router: port {i} is gone: cleaned up"));
        }
    }
    // As pinned now: read again only where something was taken out.
    let now_pinned = if all_dead || !out.is_empty() {
        RouterView::read().ports
    } else {
        running
    };
    let now: Vec<String> = now_pinned
        .into_iter()
        .filter(|p| p.1)
        .map(|p| p.0)
        .collect();
    let add: Vec<String> = want
        .ports
        .iter()
        .filter(|p| !now.contains(p))
        .filter(|p| {
            let there = exists(p);
            if !there {
                pass.waiting
                    .push(format!("router port {p}: no such interface yet"));
            }
            there
        })
        .cloned()
        .collect();
    owned.router = !now.is_empty();
    owned.router_ports = now.clone();
    if add.is_empty() {
        return;
    }
    let cfg = AttachConfig {
        ports: add.clone(),
        hook: want.hook,
        mode: want.mode,
        tc_attach: want.tc_attach,
        fib: want.fib,
        // The agent rechecks every port's peer delivery once a second
        // (`agent::peer`), so a join does not.
        refresh_running: false,
    };
    match router::attach(&site, &cfg) {
        Ok(a) => {
            owned.router = true;
            owned.router_ports.extend(add.iter().cloned());
            let how = match &a.joined {
                Some(_) => "joined the router",
                None => "attached",
            };
            pass.changed
                .push(format!("router: {} {how} at {}", add.join(" "), a.hook));
        }
        Err(e) => pass
            .errors
            .push(format!("router: attaching {}: {e}", add.join(" "))),
    }
}

/// A policer of this namespace: (live, its pin directory exists).
fn policer_here(iface: &str, cookie: u64) -> Option<bool> {
    peregrine_qos::attach::list()
        .into_iter()
        .find(|a| a.cookie == cookie && a.iface == iface)
        .map(|a| a.link.is_some_and(|l| l.live()))
}

/// The policer on `iface` of namespace `cookie` runs.
pub fn policer_live(iface: &str, cookie: u64) -> bool {
    policer_here(iface, cookie) == Some(true)
}

/// Brings the policers (rules without a scheduler) of this namespace to
/// `want`.
pub fn policers(want: &[QosDecl], owned: &mut Owned, pass: &mut Pass) {
    let cookie = owned.netns_cookie;
    // Owned policers no longer declared (or now a scheduler's) go.
    let gone: Vec<String> = owned
        .policers
        .keys()
        .filter(|i| !want.iter().any(|q| &q.iface == *i && !q.scheduler()))
        .cloned()
        .collect();
    for i in gone {
        owned.policers.remove(&i);
        if policer_here(&i, cookie).is_some() {
            match peregrine_qos::attach::detach(&i) {
                Ok(()) => pass
                    .changed
                    .push(format!("qos {i}: policer detached (no longer declared)")),
                Err(e) => pass.errors.push(format!("qos {i}: detaching: {e}")),
            }
        }
    }
    for q in want.iter().filter(|q| !q.scheduler()) {
        let hash = text_hash(&q.file);
        let here = policer_here(&q.iface, cookie);
        let ours = owned.policers.contains_key(&q.iface);
        if here.is_some() && !ours {
            pass.errors.push(format!(
                "qos {}: a policer applied by hand runs there; the agent leaves it: `peregrine qos detach {}` to let the agent apply the declared rules",
                q.iface, q.iface
            ));
            continue;
        }
        if !exists(&q.iface) {
            if here.is_some() {
                let _ = peregrine_qos::attach::detach(&q.iface);
                pass.changed
                    .push(format!("qos {}: interface gone: cleaned up", q.iface));
            }
            owned.policers.remove(&q.iface);
            pass.waiting
                .push(format!("qos {}: no such interface yet", q.iface));
            continue;
        }
        match here {
            Some(true) if owned.policers.get(&q.iface) == Some(&hash) => continue,
            Some(false) if ours => {
                // Its link died under it (detached by hand): a new one.
                let _ = peregrine_qos::attach::detach(&q.iface);
                pass.repairs += 1;
                pass.changed.push(format!(
                    "qos {}: policer had lost its program: repaired",
                    q.iface
                ));
            }
            _ => {}
        }
        let hook: Hook = q.hook();
        match peregrine_qos::attach::apply(&q.iface, hook, &q.cfg.rules) {
            Ok(a) => {
                owned.policers.insert(q.iface.clone(), hash);
                pass.changed.push(format!(
                    "qos {}: {} rule(s) {} at {}",
                    q.iface,
                    a.rules,
                    if a.replaced { "replaced" } else { "applied" },
                    a.hook
                ));
            }
            Err(e) => pass.errors.push(format!("qos {}: {e}", q.iface)),
        }
    }
}

/// Brings the agent's routes (protocol `ROUTE_PROTO`, main table) to the
/// other nodes' pod CIDRs: missing ones added (also after being removed by
/// hand: drift), changed next hops replaced, undeclared ones removed.
pub fn cluster_routes(want: Option<&ClusterDecl>, pass: &mut Pass) {
    let nodes: &[PeerNode] = want.map_or(&[], |c| &c.nodes);
    let nl = match NetlinkHere::open() {
        Ok(n) => n,
        Err(e) => {
            pass.errors.push(format!("cluster routes: {e}"));
            return;
        }
    };
    let have = match nl.routes_of(ROUTE_PROTO) {
        Ok(h) => h,
        Err(e) => {
            pass.errors.push(format!("cluster routes: {e}"));
            return;
        }
    };
    for (dst, plen, _) in &have {
        let c = Cidr {
            addr: *dst,
            plen: *plen,
        };
        if !nodes.iter().any(|n| n.pod_cidr == c) {
            match nl.del_route(*dst, *plen, ROUTE_PROTO) {
                Ok(()) => pass.changed.push(format!(
                    "cluster: route to {c} removed (no longer declared)"
                )),
                Err(e) => pass.errors.push(format!("cluster: {e}")),
            }
        }
    }
    for n in nodes {
        let c = n.pod_cidr;
        let now = have
            .iter()
            .find(|(d, p, _)| *d == c.addr && *p == c.plen)
            .map(|h| h.2);
        if now == Some(Some(n.address)) {
            continue;
        }
        match nl.replace_route(c.addr, c.plen, n.address, ROUTE_PROTO) {
            Ok(()) => pass.changed.push(match now {
                None => format!(
                    "cluster: route to node {}'s pods {c} via {}",
                    n.name, n.address
                ),
                Some(_) => format!(
                    "cluster: route to {c} now via {} (node {})",
                    n.address, n.name
                ),
            }),
            // The next hop is not reachable yet (its interface or address
            // comes later): a later pass adds it.
            Err(e) => pass.waiting.push(format!(
                "cluster: node {}'s pods {c} via {}: {e}",
                n.name, n.address
            )),
        }
    }
}

/// The data-plane part of a pass (router, then policers: a policer at tc
/// goes to the head of tcx ingress whichever came first; then the routes
/// to the other nodes' pods).
pub fn dataplane(decl: &NodeDecl, owned: &mut Owned) -> Pass {
    let mut pass = Pass::default();
    let t0 = std::time::Instant::now();
    let r = crate::compose::router_to_attach(decl);
    router(r.as_deref(), owned, &mut pass);
    let t1 = std::time::Instant::now();
    policers(&decl.qos, owned, &mut pass);
    let t2 = std::time::Instant::now();
    cluster_routes(decl.cluster.as_ref(), &mut pass);
    pass.phases.push(("router".into(), (t1 - t0).as_secs_f64()));
    pass.phases
        .push(("policers".into(), (t2 - t1).as_secs_f64()));
    pass.phases
        .push(("cluster routes".into(), t2.elapsed().as_secs_f64()));
    pass
}
