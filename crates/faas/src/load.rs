//! `peregrine faas load`: a closed-loop load client. Each connection (its
//! own UDP socket) keeps one request outstanding; every reply is checked
//! against the function run locally; no reply within the timeout counts as
//! missing. Prometheus metrics can be served while it runs.
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;
use prometheus_client::registry::Registry as PromRegistry;

use crate::functions::Registry;
use crate::invoker::InvokerError;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Server address (its functions' ports come from the registry).
    pub server: IpAddr,
    pub connections: usize,
    pub duration: Duration,
    /// Request payload bytes.
    pub size: usize,
    pub timeout: Duration,
}

/// Live counters, also exported as Prometheus metrics.
pub struct LoadMetrics {
    pub requests: Counter,
    pub responses: Counter,
    pub wrong: Counter,
    pub missing: Counter,
    pub latency: PromHistogram,
}

impl LoadMetrics {
    pub fn new() -> Arc<LoadMetrics> {
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(1e-6, 2.0, 24);
        Arc::new(LoadMetrics {
            requests: Counter::default(),
            responses: Counter::default(),
            wrong: Counter::default(),
            missing: Counter::default(),
            latency: PromHistogram::new(buckets),
        })
    }

    fn registry(self: &Arc<Self>) -> PromRegistry {
        let mut r = PromRegistry::with_prefix("peregrine_faas_load");
        r.register("requests", "Requests sent", self.requests.clone());
        r.register("responses", "Correct replies", self.responses.clone());
        r.register(
            "wrong",
            "Replies that did not match the function",
            self.wrong.clone(),
        );
        r.register(
            "missing",
            "Requests without a reply within the timeout",
            self.missing.clone(),
        );
        r.register("latency_seconds", "Request to reply", self.latency.clone());
        r
    }

    /// Serves the metrics in the Prometheus text format at `addr` until
    /// `stop` (one short-lived thread per scrape is not needed: scrapes are
    /// answered in turn).
    pub fn serve(
        self: &Arc<Self>,
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
    ) -> Result<std::thread::JoinHandle<()>, InvokerError> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| InvokerError::Config(format!("metrics on {addr}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| InvokerError::Config(e.to_string()))?;
        let reg = self.registry();
        Ok(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        // Read the request first: closing with unread data
                        // would reset the connection under the reply.
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                        let mut req = [0u8; 4096];
                        let mut got = 0;
                        while let Ok(n) = std::io::Read::read(&mut s, &mut req[got..]) {
                            got += n;
                            if n == 0
                                || got == req.len()
                                || req[..got].windows(4).any(|w| w == b"\r\n\r\n")
                            {
                                break;
                            }
                        }
                        let mut body = String::new();
                        if encode(&mut body, &reg).is_ok() {
                            let _ = write!(
                                s,
                                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }))
    }
}

#[derive(Debug, Clone)]
pub struct LoadReport {
    pub seconds: f64,
    pub requests: u64,
    pub responses: u64,
    pub wrong: u64,
    pub missing: u64,
    /// Request to reply, ns.
    pub latency: Histogram<u64>,
}

/// One connection's outstanding request.
struct Pending {
    sent: Instant,
    expected: Vec<u8>,
}

/// A request payload: connection and sequence number first, so every
/// request differs, then filler to `size` bytes.
fn request(conn: usize, seq: u64, size: usize) -> Vec<u8> {
    let mut p = format!("{conn}:{seq}:").into_bytes();
    let mut x = (conn as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15) ^ seq;
    while p.len() < size.max(1) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p.push(b'a' + (x % 26) as u8);
    }
    p.truncate(size.max(1));
    p
}

/// Runs the closed loop from sockets made in the caller's namespace
/// (functions spread over connections round robin).
pub fn run(
    registry: &Registry,
    cfg: &LoadConfig,
    metrics: &LoadMetrics,
) -> Result<LoadReport, InvokerError> {
    if cfg.connections == 0 || cfg.connections > 4096 {
        return Err(InvokerError::Config(format!(
            "connections {}: expected 1..=4096",
            cfg.connections
        )));
    }
    let funcs: Vec<(u16, Arc<dyn crate::Function>)> =
        registry.iter().map(|(p, _, f)| (p, f.clone())).collect();
    let bind: SocketAddr = if cfg.server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .expect("address");
    let mut socks = Vec::with_capacity(cfg.connections);
    for i in 0..cfg.connections {
        let s = UdpSocket::bind(bind)
            .map_err(|e| InvokerError::Config(format!("client socket: {e}")))?;
        let (port, _) = &funcs[i % funcs.len()];
        s.connect(SocketAddr::new(cfg.server, *port))
            .map_err(|e| InvokerError::Config(format!("client socket: {e}")))?;
        s.set_nonblocking(true)
            .map_err(|e| InvokerError::Config(e.to_string()))?;
        socks.push(s);
    }
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    let (mut requests, mut responses, mut wrong, mut missing) = (0u64, 0u64, 0u64, 0u64);
    let mut pending: Vec<Option<Pending>> = (0..socks.len()).map(|_| None).collect();
    let mut seq = vec![0u64; socks.len()];
    let mut buf = vec![0u8; 65536];
    let mut out = Vec::new();
    let start = Instant::now();
    let mut fds: Vec<libc::pollfd> = socks
        .iter()
        .map(|s| libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    loop {
        let now = Instant::now();
        let running =
            now.duration_since(start) < cfg.duration && !peregrine_lab::signals::stop_requested();
        for (i, s) in socks.iter().enumerate() {
            // Time out a lost request; then keep one outstanding while running.
            if pending[i]
                .as_ref()
                .is_some_and(|p| now.duration_since(p.sent) > cfg.timeout)
            {
                pending[i] = None;
                missing += 1;
                metrics.missing.inc();
            }
            if pending[i].is_none() && running {
                let req = request(i, seq[i], cfg.size);
                seq[i] += 1;
                out.clear();
                let f = &funcs[i % funcs.len()].1;
                if f.call(&req, &mut out).is_err() {
                    continue;
                }
                if s.send(&req).is_ok() {
                    requests += 1;
                    metrics.requests.inc();
                    pending[i] = Some(Pending {
                        sent: Instant::now(),
                        expected: out.clone(),
                    });
                }
            }
        }
        if !running && pending.iter().all(Option::is_none) {
            break;
        }
        // Safety: `fds` is a valid array of pollfd for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as u64, 10) };
        for (i, s) in socks.iter().enumerate() {
            while let Ok(n) = s.recv(&mut buf) {
                let Some(p) = pending[i].take() else { continue };
                let ns = p.sent.elapsed().as_nanos() as u64;
                if buf[..n] == p.expected[..] {
                    responses += 1;
                    metrics.responses.inc();
                    let _ = hist.record(ns.max(1));
                    metrics.latency.observe(ns as f64 / 1e9);
                } else {
                    wrong += 1;
                    metrics.wrong.inc();
                }
            }
        }
        for f in fds.iter_mut() {
            f.revents = 0;
        }
    }
    Ok(LoadReport {
        seconds: start.elapsed().as_secs_f64(),
        requests,
        responses,
        wrong,
        missing,
        latency: hist,
    })
}
