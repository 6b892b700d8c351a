//! A server's counters for Prometheus (`faas serve --metrics`): prefix
//! `peregrine_faas_invoker`; labels: backend; function and port per
//! function, for the functions served at each scrape.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use peregrine_metrics::prometheus_client::registry::Registry;
use peregrine_metrics::{serve_metrics, set, CounterFamily, Labels, MetricsError};

use crate::invoker::Counters;
use crate::live::Live;

/// Serves a server's counters `c` and the functions it serves (`live`) at
/// `addr` until `stop`, labelled with its `backend`.
pub fn serve(
    c: Arc<Counters>,
    live: Arc<Live>,
    backend: &'static str,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, MetricsError> {
    let mut reg = Registry::default();
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
        let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
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
    serve_metrics(addr, stop, reg, refresh)
}
