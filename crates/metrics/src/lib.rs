//! Prometheus exposition for every component of peregrine (the agent, the
//! invoker, the router's and policer's counters, the load client): the
//! text format 0.0.4, one small HTTP server per process with `/metrics`
//! and, where a process has them, `/healthz` and `/readyz`, and counters
//! read from elsewhere (BPF maps, worker atomics) set at each scrape.
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use prometheus_client;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter as PromCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PromGauge;
use prometheus_client::registry::Registry;

mod watch;
pub use watch::{rates, Watch};

/// The metrics address could not be listened on.
#[derive(Debug, thiserror::Error)]
#[error("--metrics {addr}: cannot listen there: {cause}")]
pub struct MetricsError {
    pub addr: SocketAddr,
    pub cause: std::io::Error,
}

/// Content type of [`text_format`]: the Prometheus text format 0.0.4 (what
/// `promtool check metrics` and every Prometheus server read).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `reg` in the Prometheus text format 0.0.4. prometheus-client writes
/// OpenMetrics, where a counter's HELP and TYPE name the family (`x`) and
/// its sample `x_total`, and the text ends in `# EOF`; the 0.0.4 format
/// names the sample in HELP and TYPE and has no EOF marker.
pub fn text_format(reg: &Registry) -> String {
    let mut om = String::new();
    if encode(&mut om, reg).is_err() {
        return String::new();
    }
    let mut counters = std::collections::HashSet::new();
    for l in om.lines() {
        if let Some(name) = l
            .strip_prefix("# TYPE ")
            .and_then(|t| t.strip_suffix(" counter"))
        {
            counters.insert(name.to_string());
        }
    }
    let mut out = String::with_capacity(om.len() + 64);
    for l in om.lines() {
        if l == "# EOF" || l.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find(|p| l.starts_with(p));
        match meta {
            Some(p) => {
                let rest = &l[p.len()..];
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                if counters.contains(name) {
                    out.push_str(&format!("{p}{name}_total {tail}\n"));
                } else {
                    out.push_str(l);
                    out.push('\n');
                }
            }
            None => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out
}

/// What a path other than `/metrics` answers: (HTTP status, body), or
/// None for 404.
pub type Routes = Box<dyn Fn(&str) -> Option<(u16, String)> + Send>;

/// The one Prometheus exposition server of peregrine (load client, invoker,
/// router, agent): serves `reg` in the text format 0.0.4 on every HTTP
/// request to `addr` until `stop`, calling `refresh` before each scrape so
/// counters read from elsewhere (BPF maps, worker atomics) are current.
/// Scrapes are answered in turn from one thread.
pub fn serve_metrics(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    reg: Registry,
    refresh: impl FnMut() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, MetricsError> {
    serve_http(addr, stop, reg, refresh, Box::new(|_| None))
}

/// `serve_metrics`, where `/metrics` answers the scrape and every other
/// path what `routes` says (the agent's `/healthz` and `/readyz`).
pub fn serve_http(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    reg: Registry,
    mut refresh: impl FnMut() + Send + 'static,
    routes: Routes,
) -> Result<std::thread::JoinHandle<()>, MetricsError> {
    let listener = TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|cause| MetricsError { addr, cause })?;
    Ok(std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    let path = read_request(&mut s);
                    let (status, ctype, body) = match path.as_str() {
                        "/metrics" | "/" => {
                            refresh();
                            (200, CONTENT_TYPE, text_format(&reg))
                        }
                        p => match routes(p) {
                            Some((st, b)) => (st, "text/plain; charset=utf-8", b),
                            None => (404, "text/plain; charset=utf-8", format!("no {p} here\n")),
                        },
                    };
                    let reason = match status {
                        200 => "OK",
                        404 => "Not Found",
                        503 => "Service Unavailable",
                        _ => "",
                    };
                    let _ = write!(
                        s,
                        "HTTP/1.0 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }))
}

/// Reads a request's head (closing with unread data would reset the
/// connection under the reply); its path ("/metrics" when unreadable).
fn read_request(s: &mut TcpStream) -> String {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut req = [0u8; 4096];
    let mut got = 0;
    while let Ok(n) = std::io::Read::read(s, &mut req[got..]) {
        got += n;
        if n == 0 || got == req.len() || req[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let head = String::from_utf8_lossy(&req[..got]);
    head.split_whitespace()
        .nth(1)
        .map(|p| p.split('?').next().unwrap_or(p).to_string())
        .unwrap_or_else(|| "/metrics".into())
}

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
pub fn serve_counters<E>(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    prefix: &str,
    what: &str,
    mut sample: impl FnMut() -> Result<Vec<Counter>, E> + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, MetricsError> {
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
    serve_metrics(addr, stop, reg, refresh)
}

/// A report of counters (a router's, a policer's, a chain's): shown once
/// (its `Display` for people, `to_json` for scripts), or watched and served
/// to Prometheus as `counters`, named `PREFIX`_... and described by `WHAT`.
pub trait Counted: std::fmt::Display {
    const PREFIX: &'static str;
    const WHAT: &'static str;
    fn to_json(&self) -> serde_json::Value;
    fn counters(&self) -> Vec<Counter>;
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
    /// CLOCK_MONOTONIC (ns) when the counts were counted, for counters
    /// published by a process (the AF_XDP scheduler's, every 20 ms, late
    /// when it waits for a CPU): a rate between two samples divides by
    /// the stamps' difference, not by the reader's own clock.
    pub counted_at_ns: Option<u64>,
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
            counted_at_ns: None,
        }
    }

    /// The counter with a level beside it (`depth`).
    pub fn with_depth(mut self, depth: u64) -> Counter {
        self.depth = Some(depth);
        self
    }

    /// The counter as counted at `ns` (CLOCK_MONOTONIC).
    pub fn counted_at(mut self, ns: u64) -> Counter {
        self.counted_at_ns = Some(ns);
        self
    }

    pub fn name(&self) -> String {
        self.labels
            .iter()
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    }
}
