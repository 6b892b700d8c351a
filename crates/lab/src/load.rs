//! `peregrine faas load`: a closed-loop load client. Each connection (its
//! own UDP socket) keeps one request outstanding; every reply is checked
//! against the function run locally; no reply within the timeout counts as
//! missing. Prometheus metrics can be served while it runs; this module also
//! holds the one exposition server every command uses ([`serve_metrics`]).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
pub use peregrine_metrics::{
    prometheus_client, serve_metrics, text_format, MetricsError, CONTENT_TYPE,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram as PromHistogram;
use prometheus_client::registry::Registry as PromRegistry;

use crate::error::LabError;
use peregrine_faas::Registry;

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

    /// Registers the load client's metrics (prefix `peregrine_faas_load`)
    /// in `r`.
    pub fn register(&self, r: &mut PromRegistry) {
        let r = r.sub_registry_with_prefix("peregrine_faas_load");
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
    }

    /// Serves the metrics at `addr` until `stop` (see [`serve_metrics`]).
    pub fn serve(
        self: &Arc<Self>,
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
    ) -> Result<std::thread::JoinHandle<()>, LabError> {
        let mut reg = PromRegistry::default();
        self.register(&mut reg);
        serve_metrics(addr, stop, reg, || {}).map_err(|e| LabError::Other(e.to_string()))
    }
}

#[derive(Debug, Clone)]
pub struct LoadReport {
    pub seconds: f64,
    pub requests: u64,
    pub responses: u64,
    pub wrong: u64,
    pub missing: u64,
    /// Requests the socket refused to send (not counted in `requests`).
    pub send_errors: u64,
    /// The first of those errors, for people.
    pub send_error: Option<String>,
    /// Request to reply, ns.
    pub latency: Histogram<u64>,
}

/// The largest request payload that fits one frame on the way to `to`,
/// and what limits it: the path MTU (the route's, as the kernel would send;
/// 1500 when it cannot tell), or the invoker's 2 KiB UMEM frames.
pub fn max_request_payload(to: std::net::IpAddr) -> (usize, String) {
    const UMEM_FRAME_MTU: usize = 2048 - peregrine_wire::ETH_HLEN;
    let (bind, level, opt, ip_hlen) = if to.is_ipv4() {
        (
            "0.0.0.0:0",
            libc::IPPROTO_IP,
            libc::IP_MTU,
            peregrine_wire::IPV4_HLEN,
        )
    } else {
        (
            "[::]:0",
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU,
            peregrine_wire::IPV6_HLEN,
        )
    };
    let route_mtu = std::net::UdpSocket::bind(bind)
        .and_then(|s| s.connect((to, 9)).map(|()| s))
        .ok()
        .and_then(|s| peregrine_io::sockopt::get::<libc::c_int>(&s, level, opt).ok())
        .filter(|&mtu| mtu > 0)
        .map(|mtu| mtu as usize)
        .unwrap_or(1500);
    let (mtu, why) = if route_mtu > UMEM_FRAME_MTU {
        (
            UMEM_FRAME_MTU,
            format!("{UMEM_FRAME_MTU} B in the invoker's 2 KiB frames"),
        )
    } else {
        (route_mtu, format!("path MTU {route_mtu} to {to}"))
    };
    (mtu - ip_hlen - peregrine_wire::UDP_HLEN, why)
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
) -> Result<LoadReport, LabError> {
    if cfg.connections == 0 || cfg.connections > 4096 {
        return Err(LabError::Invalid(format!(
            "connections {}: expected 1..=4096",
            cfg.connections
        )));
    }
    let funcs: Vec<(u16, Arc<dyn peregrine_faas::Function>)> =
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
        let s =
            UdpSocket::bind(bind).map_err(|e| LabError::Invalid(format!("client socket: {e}")))?;
        let (port, _) = &funcs[i % funcs.len()];
        s.connect(SocketAddr::new(cfg.server, *port))
            .map_err(|e| LabError::Invalid(format!("client socket: {e}")))?;
        s.set_nonblocking(true)
            .map_err(|e| LabError::Invalid(e.to_string()))?;
        socks.push(s);
    }
    let mut hist =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    let (mut requests, mut responses, mut wrong, mut missing) = (0u64, 0u64, 0u64, 0u64);
    let (mut send_errors, mut send_error) = (0u64, None);
    // A connected UDP socket reports the ICMP port unreachable an earlier
    // request drew, on its next send or receive.
    let refused = |i: usize, first: &mut Option<String>| {
        if first.is_none() {
            *first = Some(format!(
                "{}:{} answered port unreachable (nothing listens on that port)",
                cfg.server,
                funcs[i % funcs.len()].0
            ));
        }
    };
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
            now.duration_since(start) < cfg.duration && !peregrine_host::signals::stop_requested();
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
                match s.send(&req) {
                    Ok(_) => {
                        requests += 1;
                        metrics.requests.inc();
                        pending[i] = Some(Pending {
                            sent: Instant::now(),
                            expected: out.clone(),
                        });
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                        send_errors += 1;
                        refused(i, &mut send_error);
                    }
                    Err(e) => {
                        send_errors += 1;
                        if send_error.is_none() {
                            let port = funcs[i % funcs.len()].0;
                            send_error = Some(format!("sending to {}:{port}: {e}", cfg.server));
                        }
                    }
                }
            }
        }
        if !running && pending.iter().all(Option::is_none) {
            break;
        }
        // Safety: `fds` is a valid array of pollfd for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as u64, 10) };
        for (i, s) in socks.iter().enumerate() {
            loop {
                let n = match s.recv(&mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        if e.raw_os_error() == Some(libc::ECONNREFUSED) {
                            refused(i, &mut send_error);
                        }
                        break;
                    }
                };
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
        send_errors,
        send_error,
        latency: hist,
    })
}

#[cfg(test)]
mod size_limit_tests {
    use super::max_request_payload;

    /// Issue 9: a request larger than one frame is refused before sending.
    /// Loopback's 64 KiB MTU leaves the invoker's 2 KiB UMEM frames as the
    /// limit (over a 1500-byte MTU veth it is 1472 B for IPv4, 1452 B for
    /// IPv6: checked by hand, see the commit).
    #[test]
    fn one_frame_is_the_limit() {
        let (v4, why) = max_request_payload("127.0.0.1".parse().unwrap());
        assert_eq!(v4, 2034 - 20 - 8, "{why}");
        assert!(why.contains("2 KiB frames"), "{why}");
        let (v6, _) = max_request_payload("::1".parse().unwrap());
        assert_eq!(v6, 2034 - 40 - 8);
    }
}
