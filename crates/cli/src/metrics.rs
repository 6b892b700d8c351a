//! Prometheus counters for the commands that serve or forward (`faas serve`,
//! `router stats`, `chain stats`): output only, the counters are the
//! libraries'. The exposition server and the counter sample are
//! `peregrine_metrics`'s, shared with `faas load` and the agent.
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;
use peregrine_metrics::prometheus_client::registry::Registry;
pub use peregrine_metrics::{serve_counters, set, Counter, CounterFamily, Labels};

/// Serves a `faas serve` server's counters at `addr` until `stop`
/// (prefix `peregrine_faas_invoker`; labels: backend; function and port
/// per function, for the functions served at each scrape).
pub fn serve_invoker(
    server: &peregrine_faas::Server,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    let mut reg = Registry::default();
    let (c, live) = (server.counters().clone(), server.live().clone());
    let backend = server.backend().as_str();
    let sub = reg.sub_registry_with_prefix("peregrine_faas_invoker");
    let requests = CounterFamily::default();
    let replies = CounterFamily::default();
    let dropped = CounterFamily::default();
    let per_fn = CounterFamily::default();
    sub.register("requests", "Requests received", requests.clone());
    sub.register("replies", "Replies sent", replies.clone());
    let reasons: Vec<&str> = c.drop_reasons().iter().map(|(r, _)| *r).collect();
    sub.register(
        "dropped",
        format!("Requests dropped, by reason ({})", reasons.join(", ")),
        dropped.clone(),
    );
    sub.register(
        "function_replies",
        "Requests answered per function",
        per_fn.clone(),
    );
    let refresh = move || {
        let get = |x: &std::sync::atomic::AtomicU64| x.load(Ordering::Relaxed);
        let b: Labels = vec![("backend".into(), backend.into())];
        set(&requests, &b, get(&c.requests));
        set(&replies, &b, get(&c.replies));
        for (reason, v) in c.drop_reasons() {
            let mut l = b.clone();
            l.push(("reason".into(), reason.into()));
            set(&dropped, &l, get(v));
        }
        // The functions served now (deploys come and go while serving).
        // Each deployment's own count (a redeploy starts again at 0).
        for (port, d) in live.current().entries() {
            let mut l = b.clone();
            l.push(("function".into(), d.function.name().to_string()));
            l.push(("port".into(), port.to_string()));
            set(&per_fn, &l, d.answered());
        }
    };
    Ok(peregrine_metrics::serve_metrics(addr, stop, reg, refresh)?)
}
