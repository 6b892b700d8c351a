//! Composition, decided in one place: which of the node's stages share an
//! interface, in which order they run there, and which pairs cannot run
//! together (refused when the declaration is checked, one line each).
//!
//! Rules (docs/AGENT.md):
//! - An interface has one XDP program. The XDP users are the router at
//!   XDP, a policer at XDP, a scheduler (`qos serve`: XDP), a function
//!   service on AF_XDP and a QUIC service on AF_XDP. Two of them on one
//!   interface of one namespace are refused.
//! - tcx ingress runs the policer first, then the router (the policer
//!   attaches at the head of the chain, the router appends; a router of
//!   cls_bpf filters, `tc_attach = "cls"`, runs after every tcx program).
//! - A router declared `hook = "auto"` may pick XDP; where another XDP user
//!   shares one of its ports, it must say `hook = "tc"`.
//! - A router port whose veth peer runs XDP (a function or QUIC service in
//!   the peer's namespace) is delivered to through that peer's XDP hook,
//!   not with bpf_redirect_peer: the router recomputes it whenever an XDP
//!   program comes or goes on a peer.
use peregrine_bpf::Hook;

use crate::decl::{NodeDecl, RouterDecl, ServiceDecl, ServiceKind};

/// A stage of the node on one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// "router", "policer", "scheduler", "function NAME", "quic NAME".
    pub what: String,
    /// "xdp" or "tc".
    pub hook: &'static str,
}

/// Whether a service attaches XDP to its interface (AF_XDP backends).
pub fn service_uses_xdp(s: &ServiceDecl) -> bool {
    let value = |flag: &str| {
        s.args
            .iter()
            .position(|a| a == flag)
            .and_then(|i| s.args.get(i + 1))
            .map(String::as_str)
    };
    match s.kind {
        ServiceKind::Function => value("--backend").is_none_or(|b| b == "afxdp"),
        ServiceKind::Quic => value("--io").is_none_or(|b| b == "afxdp"),
        ServiceKind::Scheduler => true,
    }
}

/// The stages on `iface` of the agent's namespace, in the order a frame
/// arriving there meets them (XDP first, then tcx ingress: policer, router).
pub fn stages_on(decl: &NodeDecl, iface: &str) -> Vec<Stage> {
    let mut xdp = Vec::new();
    let mut tc = Vec::new();
    for q in decl.qos.iter().filter(|q| q.iface == iface) {
        let what = if q.scheduler() {
            "scheduler"
        } else {
            "policer"
        };
        match q.hook() {
            Hook::Xdp(_) => xdp.push(what.to_string()),
            Hook::Tcx(_) => tc.push(what.to_string()),
        }
    }
    for s in decl.services.iter().filter(|s| {
        s.netns.is_none()
            && s.iface.as_deref() == Some(iface)
            && s.kind != ServiceKind::Scheduler
            && service_uses_xdp(s)
    }) {
        let kind = match s.kind {
            ServiceKind::Function => "function",
            _ => "quic",
        };
        xdp.push(format!("{kind} {}", s.name));
    }
    if let Some(r) = decl
        .router
        .as_ref()
        .filter(|r| r.ports.iter().any(|p| p == iface))
    {
        if r.hook.is_tc() {
            tc.push("router".into());
        } else {
            xdp.push("router".into());
        }
    }
    let mut out: Vec<Stage> = xdp
        .into_iter()
        .map(|what| Stage { what, hook: "xdp" })
        .collect();
    out.extend(tc.into_iter().map(|what| Stage { what, hook: "tc" }));
    out
}

/// The router as the agent attaches it: one left on `auto` whose ports
/// carry a policer at tc runs at tc, where the policer sees the frames
/// first (at XDP it would take them before the policer, and the kernel
/// link refuses the two side by side). `auto` stays `auto` elsewhere.
pub fn router_to_attach(decl: &NodeDecl) -> Option<std::borrow::Cow<'_, RouterDecl>> {
    let r = decl.router.as_ref()?;
    let policed = r.ports.iter().any(|p| {
        decl.qos
            .iter()
            .any(|q| &q.iface == p && !q.scheduler() && !q.hook().is_xdp())
    });
    if r.hook == peregrine_dataplane::HookChoice::Auto && policed {
        let mut tc = r.clone();
        tc.hook = peregrine_dataplane::HookChoice::Given(Hook::TC);
        return Some(std::borrow::Cow::Owned(tc));
    }
    Some(std::borrow::Cow::Borrowed(r))
}

/// Every interface some stage of the agent's namespace runs on.
pub fn ifaces(decl: &NodeDecl) -> Vec<String> {
    let mut v: Vec<String> = decl
        .router
        .iter()
        .flat_map(|r| r.ports.iter().cloned())
        .chain(decl.qos.iter().map(|q| q.iface.clone()))
        .chain(
            decl.services
                .iter()
                .filter(|s| s.netns.is_none())
                .filter_map(|s| s.iface.clone()),
        )
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The declaration's composition mistakes, one line each.
pub fn check(decl: &NodeDecl) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, q) in decl.qos.iter().enumerate() {
        if decl.qos[..i].iter().any(|p| p.iface == q.iface) {
            errs.push(format!(
                "[[qos]] on {} twice: one rules file per interface (merge their rules)",
                q.iface
            ));
        }
    }
    for (i, s) in decl.services.iter().enumerate() {
        if decl.services[..i].iter().any(|p| p.name == s.name) {
            errs.push(format!(
                "two services named {:?}: give each a distinct name = \"...\"",
                s.name
            ));
        }
    }
    // One XDP program per interface (per namespace).
    let mut xdp_users: Vec<(Option<String>, String, String)> = Vec::new();
    for iface in ifaces(decl) {
        for st in stages_on(decl, &iface)
            .into_iter()
            .filter(|s| s.hook == "xdp")
        {
            xdp_users.push((None, iface.clone(), st.what));
        }
    }
    for s in decl
        .services
        .iter()
        .filter(|s| s.netns.is_some() && service_uses_xdp(s))
    {
        if let Some(i) = &s.iface {
            xdp_users.push((s.netns.clone(), i.clone(), format!("service {}", s.name)));
        }
    }
    for (i, (ns, iface, what)) in xdp_users.iter().enumerate() {
        if let Some((_, _, first)) = xdp_users[..i]
            .iter()
            .find(|(n, f, _)| n == ns && f == iface)
        {
            let where_ = ns
                .as_ref()
                .map(|n| format!(" in netns {n}"))
                .unwrap_or_default();
            errs.push(format!(
                "{first} and {what} both need the XDP hook of {iface}{where_}, which runs one program: put one of them at tc (hook = \"tc\") or on another interface"
            ));
        }
    }
    // A router left to pick its hook cannot share a port with an XDP user.
    let auto = decl
        .router
        .as_ref()
        .filter(|r| r.hook == peregrine_dataplane::HookChoice::Auto);
    for p in auto.iter().flat_map(|r| &r.ports) {
        let others: Vec<String> = stages_on(decl, p)
            .into_iter()
            .filter(|s| s.hook == "xdp" && s.what != "router")
            .map(|s| s.what)
            .collect();
        if !others.is_empty() {
            errs.push(format!(
                "[router] hook = \"auto\" may pick XDP, and {} runs at XDP on port {p}: say hook = \"tc\" in [router]",
                others.join(" and ")
            ));
        }
    }
    // A policer at tc sees nothing of what an XDP stage on its interface
    // takes first (redirected by the router, handed to AF_XDP). A router
    // on "auto" takes tc there (`router_to_attach`).
    for iface in ifaces(decl) {
        let stages = stages_on(decl, &iface);
        if !stages.iter().any(|s| s.hook == "tc" && s.what == "policer") {
            continue;
        }
        for s in stages.iter().filter(|s| {
            s.hook == "xdp"
                && !matches!(s.what.as_str(), "policer" | "scheduler")
                && !(s.what == "router" && auto.is_some())
        }) {
            errs.push(format!(
                "{} at XDP on {iface} takes frames before the policer at tc there sees them: police where the traffic enters before {iface}, or run it without XDP",
                s.what
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine_dataplane::HookChoice;

    fn decl(text: &str) -> NodeDecl {
        let any: &crate::decl::ArgCheck = &|_, _| Ok(());
        crate::check::parse_many(&[("node.toml".into(), text.into())], any).unwrap()
    }

    /// A router on auto takes tc where a policer at tc is on one of its
    /// ports, and stays on auto elsewhere; a router given a hook keeps it.
    #[test]
    fn an_auto_router_beside_a_tc_policer_attaches_at_tc() {
        let policed = "[router]\nports = [\"a1\", \"b0\"]\n[[qos]]\niface = \"a1\"\n[[qos.rule]]\nrate = \"1M\"\n";
        let d = decl(policed);
        assert!(check(&d).is_empty(), "{:?}", check(&d));
        assert_eq!(
            router_to_attach(&d).unwrap().hook,
            HookChoice::Given(Hook::TC)
        );
        let elsewhere = policed.replace("iface = \"a1\"", "iface = \"c9\"");
        assert_eq!(
            router_to_attach(&decl(&elsewhere)).unwrap().hook,
            HookChoice::Auto
        );
        // Given XDP, the declaration is refused before anything changes.
        let given = policed.replace("[[qos]]", "hook = \"xdp\"\n[[qos]]");
        let any: &crate::decl::ArgCheck = &|_, _| Ok(());
        let errs = crate::check::parse_many(&[("node.toml".into(), given)], any).unwrap_err();
        assert!(
            errs.iter()
                .any(|e| e.contains("router at XDP on a1 takes frames before the policer at tc")),
            "{errs:?}"
        );
    }
}
