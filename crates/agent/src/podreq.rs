//! The CNI plugin's requests on the control socket (`pod_add`, `pod_del`,
//! `pod_check`, `pod_gc`), served against the pod registry (`pods`) with a
//! reconcile pass of the node's declaration plus its pods.
use crate::annotations::Direction;
use crate::control::{Reply, Request};
use crate::decl::NodeDecl;
use crate::pods::*;
use crate::reconcile::{self, Pass};

/// What the agent needs of its loop to serve the pod requests.
pub trait Host {
    /// The node's declaration as its files say it (without pods).
    fn declared(&self) -> &NodeDecl;
    fn registry(&mut self) -> &mut Registry;
    /// One reconcile pass of the effective declaration (`effective`).
    fn reconcile_now(&mut self, why: &str) -> Pass;
    /// The agent's network namespace.
    fn netns_cookie(&self) -> u64;
}

fn reply(ok: bool, lines: Vec<String>) -> Reply {
    Reply {
        ok,
        lines,
        status: None,
    }
}

/// Serves `pod_add`, `pod_del`, `pod_check` and `pod_gc`; every request
/// and its outcome logged.
pub fn handle(h: &mut impl Host, req: Request) -> Reply {
    match req {
        Request::PodAdd { pod } => {
            let who = pod.who();
            let r = add(h, *pod);
            log("pod_add", &who, &r);
            r
        }
        Request::PodDel { key } => {
            let who = h
                .registry()
                .pods
                .get(&key)
                .map(|r| r.pod.who())
                .unwrap_or_else(|| format!("pod {key}"));
            let r = del(h, &key);
            log("pod_del", &who, &r);
            r
        }
        Request::PodCheck { key } => {
            let r = check(h, &key);
            log("pod_check", &format!("pod {key}"), &r);
            r
        }
        Request::PodGc { keep } => {
            let r = gc(h, &keep);
            log("pod_gc", &format!("{} kept", keep.len()), &r);
            r
        }
        other => reply(false, vec![format!("not a pod request: {other:?}")]),
    }
}

fn log(op: &str, who: &str, r: &Reply) {
    if r.ok {
        tracing::info!(
            op,
            "{who}: ok{}",
            if r.lines.is_empty() {
                String::new()
            } else {
                format!(": {}", r.lines.join("; "))
            }
        );
    } else {
        tracing::error!(op, "{who}: {}", r.lines.join("; "));
    }
}

/// Why the pod's host side does not run as recorded, one line; None when
/// it does.
fn host_side_missing(p: &PodPort, cookie: u64, pass: &Pass) -> Option<String> {
    let iface = &p.host_iface;
    let mentions = |l: &&String| {
        l.split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_' || c == '.' || c == '@'))
            .any(|w| w == iface)
    };
    let port_hook = reconcile::router_port(iface);
    if port_hook.is_none() {
        let why = pass
            .errors
            .iter()
            .chain(pass.waiting.iter())
            .find(mentions)
            .cloned()
            .unwrap_or_else(|| format!("router port {iface} is not running"));
        return Some(why);
    }
    if p.polices(Direction::Egress) {
        let by = p.policed_by(Direction::Egress);
        if port_hook == Some("xdp") {
            return Some(format!(
                "the router runs at XDP, whose redirects skip the {by} policer at tc on {iface}: declare [router] hook = \"tc\" to police pods"
            ));
        }
        if !reconcile::policer_live(iface, cookie) {
            let why = pass
                .errors
                .iter()
                .find(mentions)
                .cloned()
                .unwrap_or_else(|| format!("the {by} policer on {iface} is not running"));
            return Some(why);
        }
    }
    None
}

fn add(h: &mut impl Host, pod: PodPort) -> Reply {
    let who = pod.who();
    let declared = h.declared().clone();
    if let Err(e) = validate(&pod, &declared, h.registry()) {
        return reply(false, vec![format!("{who}: {e}")]);
    }
    let cookie = h.netns_cookie();
    let prev = h.registry().pods.get(&pod.key).cloned();
    // The in-pod policer stays recorded while its namespace is the same.
    let same_ns = prev.as_ref().filter(|p| p.pod.netns == pod.netns);
    let rec = PodRecord {
        pod: pod.clone(),
        in_pod: same_ns.and_then(|p| p.in_pod),
        in_pod_policer: same_ns.and_then(|p| p.in_pod_policer),
        in_pod_pending: None,
    };
    h.registry().pods.insert(pod.key.clone(), rec.clone());
    if let Err(e) = h.registry().save() {
        restore(h, &pod.key, prev);
        return reply(false, vec![format!("{who}: {e}")]);
    }
    let pass = h.reconcile_now("pod add");
    let mut lines = pass.changed.clone();
    let mut failed = host_side_missing(&pod, cookie, &pass);
    let mut rec = rec;
    let in_pod_wanted = pod.polices(Direction::Ingress) || pod.bandwidth.egress_rate.is_some();
    if failed.is_none() {
        if in_pod_wanted {
            match mark_in_pod(h, &mut rec).and_then(|()| apply_in_pod(&pod, same_ns)) {
                Ok(put) => {
                    lines.extend(put.lines.into_iter().map(|l| format!("{who}: {l}")));
                    rec.in_pod = Some(put.cookie);
                    rec.in_pod_policer = put.policer;
                    rec.in_pod_pending = None;
                }
                Err(e) => failed = Some(e),
            }
        } else if let Ok(Some(l)) = remove_in_pod(&rec) {
            // A re-ADD without the bandwidth or deny list the pod had.
            lines.push(l);
            rec.in_pod = None;
            rec.in_pod_policer = None;
        }
    }
    if let Some(why) = failed {
        restore(h, &pod.key, prev);
        let _ = h.registry().save();
        let undo = h.reconcile_now("pod add undone");
        for l in &undo.changed {
            tracing::info!("{who}: undone: {l}");
        }
        return reply(false, vec![format!("{who}: {why}")]);
    }
    h.registry().pods.insert(pod.key.clone(), rec);
    if let Err(e) = h.registry().save() {
        tracing::error!("{who}: {e}");
    }
    // A re-ADD in another namespace: the old one's in-pod policer goes.
    if let Some(old) = prev.as_ref().filter(|p| p.pod.netns != pod.netns) {
        match remove_in_pod(old) {
            Ok(Some(l)) => lines.push(l),
            Ok(None) => {}
            Err(e) => tracing::error!("{who}: {e}"),
        }
    }
    let bw = match pod.bandwidth.egress_rate {
        Some(r) => format!(
            ", egress_rate {r} bit/s policed here too (burst {} B)",
            burst_bytes(r, pod.bandwidth.egress_burst)
        ),
        None if pod.polices(Direction::Egress) => {
            format!(", {} policed here", pod.policed_by(Direction::Egress))
        }
        None => String::new(),
    };
    lines.push(format!(
        "{who}: {} is a router port{bw}{}",
        pod.host_iface,
        if prev.is_some() { " (re-added)" } else { "" }
    ));
    reply(true, lines)
}

/// Saves `rec` as being put inside its pod (its namespace and what
/// policer ran there before) before anything is put there: a restarted
/// agent then knows which policer there is its own.
fn mark_in_pod(h: &mut impl Host, rec: &mut PodRecord) -> Result<(), String> {
    let (cookie, pending) = in_pod_before(&rec.pod)?;
    rec.in_pod = Some(cookie);
    rec.in_pod_pending = Some(pending);
    h.registry().pods.insert(rec.pod.key.clone(), rec.clone());
    h.registry().save()
}

fn restore(h: &mut impl Host, key: &PodKey, prev: Option<PodRecord>) {
    match prev {
        Some(p) => {
            h.registry().pods.insert(key.clone(), p);
        }
        None => {
            h.registry().pods.remove(key);
        }
    }
}

/// The host interfaces and policers the node still wants without the
/// removed pods: what must not run after a DEL.
fn leftovers(h: &mut impl Host, gone: &[PodRecord]) -> Vec<String> {
    let want = effective(&h.declared().clone(), h.registry());
    let cookie = h.netns_cookie();
    let mut out = Vec::new();
    for r in gone {
        let i = &r.pod.host_iface;
        let wanted = want.router.as_ref().is_some_and(|r| r.ports.contains(i));
        if !wanted && reconcile::router_port(i).is_some() {
            out.push(format!(
                "{}: router port {i} is still attached",
                r.pod.who()
            ));
        }
        let policed = want.qos.iter().any(|q| &q.iface == i);
        if !policed && r.pod.polices(Direction::Egress) && reconcile::policer_live(i, cookie) {
            out.push(format!("{}: the policer on {i} still runs", r.pod.who()));
        }
    }
    out
}

/// Removes `keys`' records, reconciles once and removes their in-pod
/// policers: (lines, errors).
fn remove(h: &mut impl Host, keys: &[PodKey], why: &str) -> (Vec<String>, Vec<String>) {
    let gone: Vec<PodRecord> = keys
        .iter()
        .filter_map(|k| h.registry().pods.remove(k))
        .collect();
    let mut errors = Vec::new();
    if let Err(e) = h.registry().save() {
        errors.push(e);
    }
    let pass = h.reconcile_now(why);
    let mut lines = pass.changed;
    for r in &gone {
        match remove_in_pod(r) {
            Ok(Some(l)) => lines.push(l),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    errors.extend(leftovers(h, &gone));
    (lines, errors)
}

fn del(h: &mut impl Host, key: &PodKey) -> Reply {
    let Some(who) = h.registry().pods.get(key).map(|r| r.pod.who()) else {
        return reply(
            true,
            vec![format!(
                "pod {key}: not known to the agent: nothing to remove"
            )],
        );
    };
    let (mut lines, errors) = remove(h, std::slice::from_ref(key), "pod del");
    if !errors.is_empty() {
        return reply(false, vec![errors.join("; ")]);
    }
    lines.push(format!("{who}: removed"));
    reply(true, lines)
}

fn check(h: &mut impl Host, key: &PodKey) -> Reply {
    let cookie = h.netns_cookie();
    let Some(rec) = h.registry().pods.get(key).cloned() else {
        return reply(
            false,
            vec![format!(
                "pod {key}: not known to the agent (no ADD, or DEL'd)"
            )],
        );
    };
    let p = &rec.pod;
    let mut missing = Vec::new();
    if reconcile::router_port(&p.host_iface).is_none() {
        missing.push(format!("router port {} is not running", p.host_iface));
    }
    if p.polices(Direction::Egress) && !reconcile::policer_live(&p.host_iface, cookie) {
        missing.push(format!(
            "the {} policer on {} is not running",
            p.policed_by(Direction::Egress),
            p.host_iface
        ));
    }
    if p.polices(Direction::Ingress) && !in_pod_live(&rec) {
        missing.push(format!(
            "the {} policer on {} in {} is not running",
            p.policed_by(Direction::Ingress),
            p.key.ifname,
            p.netns
        ));
    }
    if p.bandwidth.egress_rate.is_some() && !rec.in_pod.is_some_and(|c| shaper_live(p, c)) {
        missing.push(format!(
            "the egress_rate shaper on {} in {} is not there",
            p.key.ifname, p.netns
        ));
    }
    if missing.is_empty() {
        reply(true, vec![format!("{}: ok", p.who())])
    } else {
        reply(false, vec![format!("{}: {}", p.who(), missing.join(", "))])
    }
}

fn gc(h: &mut impl Host, keep: &[PodKey]) -> Reply {
    let keys: Vec<PodKey> = h
        .registry()
        .pods
        .keys()
        .filter(|k| !keep.contains(k))
        .cloned()
        .collect();
    if keys.is_empty() {
        return reply(true, vec!["gc: nothing to remove".into()]);
    }
    let whos: Vec<String> = keys
        .iter()
        .filter_map(|k| h.registry().pods.get(k).map(|r| r.pod.who()))
        .collect();
    let (mut lines, errors) = remove(h, &keys, "pod gc");
    if !errors.is_empty() {
        return reply(false, vec![errors.join("; ")]);
    }
    lines.extend(whos.into_iter().map(|w| format!("{w}: removed (gc)")));
    reply(true, lines)
}
