//! Prometheus counters for the commands that serve or forward (`faas serve`,
//! `router stats`, `chain stats`): output only, the counters are the
//! libraries'. The exposition server is the one in
//! `peregrine_lab::load` (`serve_metrics`), shared with `faas load`.
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;
use peregrine_lab::load::prometheus_client::metrics::counter::Counter as PromCounter;
use peregrine_lab::load::prometheus_client::metrics::family::Family;
use peregrine_lab::load::prometheus_client::metrics::gauge::Gauge as PromGauge;
use peregrine_lab::load::prometheus_client::registry::Registry;

pub type Labels = Vec<(String, String)>;
pub type CounterFamily = Family<Labels, PromCounter>;

/// Sets counter `labels` of `fam` to the absolute value `v` (counters read
/// from elsewhere only grow; a smaller value, after a reset, is ignored).
pub fn set(fam: &CounterFamily, labels: &Labels, v: u64) {
    let c = fam.get_or_create(labels);
    let cur = c.get();
    if v > cur {
        c.inc_by(v - cur);
    }
}

/// Serves `sample`'s counters at `addr` until `stop` as two families,
/// `<prefix>_packets_total` and `<prefix>_bytes_total`, labelled as the
/// counters are, and the levels some carry as the gauge
/// `<prefix>_queue_depth`; `sample` runs at every scrape.
pub fn serve_counters(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    prefix: &str,
    what: &str,
    mut sample: impl FnMut() -> Result<Vec<Counter>> + Send + 'static,
) -> Result<std::thread::JoinHandle<()>> {
    let mut reg = Registry::default();
    let packets = CounterFamily::default();
    let bytes = CounterFamily::default();
    reg.register(
        format!("{prefix}_packets"),
        format!("Packets {what}"),
        packets.clone(),
    );
    reg.register(
        format!("{prefix}_bytes"),
        format!("Bytes {what}"),
        bytes.clone(),
    );
    let depth = Family::<Labels, PromGauge>::default();
    reg.register(
        format!("{prefix}_queue_depth"),
        format!("Packets queued now, {what}"),
        depth.clone(),
    );
    let refresh = move || {
        if let Ok(cs) = sample() {
            for c in cs {
                set(&packets, &c.labels, c.packets);
                if let Some(b) = c.bytes {
                    set(&bytes, &c.labels, b);
                }
                if let Some(d) = c.depth {
                    depth.get_or_create(&c.labels).set(d as i64);
                }
            }
        }
    };
    Ok(peregrine_lab::load::serve_metrics(
        addr, stop, reg, refresh,
    )?)
}

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
    Ok(peregrine_lab::load::serve_metrics(
        addr, stop, reg, refresh,
    )?)
}

/// One counter of a sample: labels (e.g. port=in0, action=forward), packets
/// and, where counted, bytes.
#[derive(Debug, Clone)]
pub struct Counter {
    pub labels: Vec<(String, String)>,
    pub packets: u64,
    pub bytes: Option<u64>,
    /// A level beside the counts (a queue's depth, packets), exported as a
    /// gauge.
    pub depth: Option<u64>,
}

impl Counter {
    pub fn new(labels: &[(&str, &str)], packets: u64, bytes: Option<u64>) -> Counter {
        Counter {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            packets,
            bytes,
            depth: None,
        }
    }

    /// The counter with a level beside it (`depth`).
    pub fn with_depth(mut self, depth: u64) -> Counter {
        self.depth = Some(depth);
        self
    }

    pub(crate) fn name(&self) -> String {
        self.labels
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }
}
