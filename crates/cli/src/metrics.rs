//! Prometheus counters for the commands that serve or forward (`faas serve`,
//! `router stats`, `chain stats`). The exposition server is the one in
//! `peregrine_lab::load` (`serve_metrics`), shared with `faas load`.
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Result;
use peregrine_lab::load::prometheus_client::metrics::counter::Counter as PromCounter;
use peregrine_lab::load::prometheus_client::metrics::family::Family;
use peregrine_lab::load::prometheus_client::metrics::gauge::Gauge as PromGauge;
use peregrine_lab::load::prometheus_client::registry::Registry;

use crate::watch::Counter;

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

/// Serves the load client's metrics at `addr` until `stop`.
pub fn serve_load(
    m: &Arc<peregrine_lab::load::LoadMetrics>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let mut reg = Registry::default();
    m.register(&mut reg);
    Ok(peregrine_lab::load::serve_metrics(addr, stop, reg, || {})?)
}
