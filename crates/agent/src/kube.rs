//! The other nodes from the Kubernetes API server (`[cluster] nodes_from =
//! "kubernetes"`), as Cilium's native routing takes them: every Node
//! object but this node's gives a pod CIDR (`spec.podCIDRs`) reached
//! through its InternalIP. The agent lists `/api/v1/nodes` over HTTPS with
//! its ServiceAccount's token, verifying the server against the
//! ServiceAccount's CA, every few seconds (`poll`), and the reconcile pass
//! routes to what it found beside the declared `[[cluster.node]]`s.
//!
//! The server is an address, never a name: `api_server` in `[cluster]`,
//! or the in-cluster `KUBERNETES_SERVICE_HOST`/`_PORT` the kubelet gives
//! every pod. Nothing here asks the machine's resolver.
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Serialize;

use crate::cluster::{Cidr, KubeSource, PeerNode};

/// How long a whole request may take: connecting, the TLS handshake,
/// sending it and reading the full response (a server that trickles bytes
/// does not hold the poller past it).
const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a response read (a list of thousands of nodes fits).
const MAX_RESPONSE: u64 = 64 << 20;

/// The API server's address.
pub fn server(src: &KubeSource) -> Result<SocketAddr, String> {
    if let Some(a) = src.api_server {
        return Ok(a);
    }
    let host = std::env::var("KUBERNETES_SERVICE_HOST").map_err(|_| {
        "no api_server in [cluster] and no KUBERNETES_SERVICE_HOST (not in a pod?)".to_string()
    })?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    let ip: IpAddr = host.parse().map_err(|_| {
        format!("KUBERNETES_SERVICE_HOST {host:?} is not an address (names are not looked up)")
    })?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("KUBERNETES_SERVICE_PORT {port:?} is not a port"))?;
    Ok(SocketAddr::new(ip, port))
}

/// This node's name.
pub fn own_name(src: &KubeSource) -> String {
    src.node_name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_default()
        })
}

/// The other nodes: a pod CIDR and an InternalIP of the same family
/// each (a node without both is skipped: nothing to route to).
pub fn peers(src: &KubeSource) -> Result<Vec<PeerNode>, String> {
    let own = own_name(src);
    Ok(peers_of(&list_nodes(src)?, &own))
}

/// How often the Node objects are listed.
pub const POLL: Duration = Duration::from_secs(5);

/// The other nodes as the API server last listed them (`poll` keeps it;
/// a reconcile pass routes to them).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Discovered {
    /// Where they come from; None: `nodes_from` is not declared.
    #[serde(skip)]
    pub source: Option<KubeSource>,
    pub nodes: Vec<PeerNode>,
    /// Lists that succeeded, and why the last one failed (cleared by the
    /// next success).
    pub lists: u64,
    pub error: Option<String>,
}

/// Lists the Node objects every `POLL` while `shared.source` names a
/// source (the agent sets it from the declaration), until `stop`. A failed
/// list keeps the nodes found before (a restarting API server does not
/// take the routes away) and is logged once per new reason.
pub fn poll(shared: Arc<std::sync::Mutex<Discovered>>, stop: Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::Ordering;
    std::thread::spawn(move || {
        let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
        while !stop.load(Ordering::Relaxed) && !peregrine_host::signals::stop_requested() {
            let source = lock().source.clone();
            match source.map(|s| peers(&s)) {
                None => {
                    let mut d = lock();
                    d.nodes.clear();
                    d.error = None;
                }
                Some(Ok(nodes)) => {
                    let mut d = lock();
                    if nodes != d.nodes {
                        tracing::info!(
                            "Node objects: {}",
                            nodes
                                .iter()
                                .map(|n| format!(
                                    "{} pods {} via {}",
                                    n.name, n.pod_cidr, n.address
                                ))
                                .collect::<Vec<_>>()
                                .join(", ")
                        );
                    }
                    d.nodes = nodes;
                    d.lists += 1;
                    d.error = None;
                }
                Some(Err(e)) => {
                    let mut d = lock();
                    if d.error.as_deref() != Some(e.as_str()) {
                        tracing::warn!("listing the Node objects: {e}");
                    }
                    d.error = Some(e);
                }
            }
            peregrine_host::signals::sleep(POLL);
        }
    });
}

/// What a Node object says that routing needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeObject {
    pub name: String,
    pub pod_cidrs: Vec<Cidr>,
    pub internal_ips: Vec<IpAddr>,
}

/// The routes to other nodes' pods that `nodes` give, for node `own`.
pub fn peers_of(nodes: &[NodeObject], own: &str) -> Vec<PeerNode> {
    let mut out = Vec::new();
    for n in nodes.iter().filter(|n| n.name != own) {
        for c in &n.pod_cidrs {
            if let Some(a) = n
                .internal_ips
                .iter()
                .find(|a| a.is_ipv4() == c.addr.is_ipv4())
            {
                out.push(PeerNode {
                    name: n.name.clone(),
                    pod_cidr: *c,
                    address: *a,
                });
            }
        }
    }
    out
}

/// Node objects from a `NodeList` (JSON).
pub fn parse_node_list(body: &[u8]) -> Result<Vec<NodeObject>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the node list is not JSON: {e}"))?;
    if v["kind"] != "NodeList" {
        return Err(format!(
            "expected a NodeList, got kind {}",
            v["kind"].as_str().unwrap_or("(none)")
        ));
    }
    let items = v["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut out = Vec::new();
    for it in items {
        let Some(name) = it["metadata"]["name"].as_str() else {
            continue;
        };
        let mut cidrs: Vec<&str> = it["spec"]["podCIDRs"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
            .unwrap_or_default();
        if let Some(c) = it["spec"]["podCIDR"].as_str() {
            if !cidrs.contains(&c) {
                cidrs.push(c);
            }
        }
        let pod_cidrs = cidrs.iter().filter_map(|c| Cidr::parse(c).ok()).collect();
        let internal_ips = it["status"]["addresses"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|x| x["type"] == "InternalIP")
                    .filter_map(|x| x["address"].as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        out.push(NodeObject {
            name: name.to_string(),
            pod_cidrs,
            internal_ips,
        });
    }
    Ok(out)
}

/// GET /api/v1/nodes.
pub fn list_nodes(src: &KubeSource) -> Result<Vec<NodeObject>, String> {
    let server = server(src)?;
    let (status, body) = get(server, &src.token_file, &src.ca_file, "/api/v1/nodes")?;
    if status != 200 {
        // The API server's Status object says why (401, 403...).
        // One line, whatever the server wrote.
        let why: String = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or_default()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(300)
            .collect();
        return Err(format!(
            "GET https://{server}/api/v1/nodes: HTTP {status} {why}"
        ));
    }
    parse_node_list(&body)
}

/// One HTTPS GET with a bearer token: the status code and the body, within
/// `TIMEOUT` in all.
fn get(
    server: SocketAddr,
    token_file: &Path,
    ca_file: &Path,
    path: &str,
) -> Result<(u16, Vec<u8>), String> {
    let token = std::fs::read_to_string(token_file)
        .map_err(|e| format!("reading the token {}: {e}", token_file.display()))?;
    let ca = std::fs::read(ca_file).map_err(|e| format!("reading {}: {e}", ca_file.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&ca) {
        let c = c.map_err(|e| format!("{}: {e:?}", ca_file.display()))?;
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificate in it", ca_file.display()));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {server}\r\nAuthorization: Bearer {}\r\nAccept: application/json\r\nUser-Agent: peregrine-agent\r\nConnection: close\r\n\r\n",
        token.trim()
    );
    let what = format!("GET https://{server}{path}");
    let raw = exchange(server, Arc::new(config), req.as_bytes(), &what, TIMEOUT)?;
    parse_response(&raw).map_err(|e| format!("{what}: {e}"))
}

/// Sends `req` (`what`, for errors) to `server` over TLS (`config`) and
/// reads the response to its end, all within `timeout`: connecting, the
/// handshake, the request and every read share one deadline.
fn exchange(
    server: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    req: &[u8],
    what: &str,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let deadline = Instant::now() + timeout;
    let name = ServerName::IpAddress(server.ip().into());
    let conn =
        rustls::ClientConnection::new(config, name).map_err(|e| format!("TLS to {server}: {e}"))?;
    let tcp = TcpStream::connect_timeout(&server, timeout)
        .map_err(|e| format!("connecting to the API server {server}: {e}"))?;
    let mut tls = rustls::StreamOwned::new(conn, Deadline { tcp, deadline });
    let late = |e: std::io::Error| {
        if Instant::now() >= deadline {
            format!(
                "{what}: no complete response within {} s",
                timeout.as_secs_f64()
            )
        } else {
            format!("{what}: {e}")
        }
    };
    tls.write_all(req).map_err(late)?;
    let mut raw = Vec::new();
    match (&mut tls).take(MAX_RESPONSE).read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without TLS close_notify after a complete
        // response: what `Connection: close` asked for.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(late(e)),
    }
    Ok(raw)
}

/// A TCP stream whose every read and write may wait only until
/// `deadline`: the socket timeouts are set to what is left before each.
struct Deadline {
    tcp: TcpStream,
    deadline: Instant,
}

impl Deadline {
    /// What is left before the deadline; past it, a TimedOut error.
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

/// Whether `e` is a socket timeout (which `Deadline` retries until its
/// deadline, should the kernel's timer end a wait early).
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Bounded: `left` fails once the deadline has passed.
        loop {
            self.tcp.set_read_timeout(Some(self.left()?))?;
            match self.tcp.read(buf) {
                Err(e) if timed_out(&e) => continue,
                r => return r,
            }
        }
    }
}

impl Write for Deadline {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Bounded: `left` fails once the deadline has passed.
        loop {
            self.tcp.set_write_timeout(Some(self.left()?))?;
            match self.tcp.write(buf) {
                Err(e) if timed_out(&e) => continue,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}

/// An HTTP/1.1 response read to its end: the status code and the body
/// (a chunked one decoded).
pub fn parse_response(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the response has no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
        if k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked") {
            chunked = true;
        } else if k == "content-length" {
            length = v.parse().ok();
        }
    }
    let body = &raw[end + 4..];
    if chunked {
        return Ok((status, dechunk(body)?));
    }
    match length {
        Some(n) if n > body.len() => {
            Err(format!("the body ends after {} of {n} bytes", body.len()))
        }
        Some(n) => Ok((status, body[..n].to_vec())),
        None => Ok((status, body.to_vec())),
    }
}

/// A chunked body decoded (trailers ignored).
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk size line has no end")?;
        let line = std::str::from_utf8(&b[..eol]).map_err(|_| "a chunk size is not text")?;
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {line:?}"))?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if size.checked_add(2).is_none_or(|n| n > b.len()) {
            return Err("the body ends inside a chunk".into());
        }
        if &b[size..size + 2] != b"\r\n" {
            return Err("a chunk is longer than its size".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"kind":"NodeList","apiVersion":"v1","items":[
      {"metadata":{"name":"n1"},"spec":{"podCIDR":"198.18.240.0/24","podCIDRs":["198.18.240.0/24","2001:db8:240::/64"]},
       "status":{"addresses":[{"type":"InternalIP","address":"198.18.250.1"},{"type":"Hostname","address":"n1"}]}},
      {"metadata":{"name":"n2"},"spec":{"podCIDR":"198.18.241.0/24"},
       "status":{"addresses":[{"type":"InternalIP","address":"198.18.251.2"},{"type":"InternalIP","address":"2001:db8:251::2"}]}},
      {"metadata":{"name":"n3"},"spec":{},"status":{"addresses":[{"type":"InternalIP","address":"198.18.251.3"}]}}
    ]}"#;

    #[test]
    fn nodes_give_routes_to_the_other_nodes_pods() {
        let nodes = parse_node_list(LIST.as_bytes()).unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].pod_cidrs.len(), 2);
        let p = peers_of(&nodes, "n1");
        // n2: one IPv4 pod CIDR through its IPv4 address; n3 has no pod
        // CIDR (none allocated yet): nothing to route.
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].name, "n2");
        assert_eq!(p[0].pod_cidr.to_string(), "198.18.241.0/24");
        assert_eq!(p[0].address.to_string(), "198.18.251.2");
        // From n2, n1's two families each through an address of theirs:
        // only the IPv4 one has an InternalIP of its family.
        let p = peers_of(&nodes, "n2");
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].address.to_string(), "198.18.250.1");
        assert!(parse_node_list(b"{\"kind\":\"Status\"}").is_err());
        assert!(parse_node_list(b"not json").is_err());
    }

    /// A server that keeps sending a byte every 20 ms never lets a read
    /// wait long, but the request as a whole ends at its deadline: here
    /// 500 ms (the poller's is `TIMEOUT`), with one line saying so.
    #[test]
    fn a_trickling_server_does_not_hold_a_request_past_its_deadline() {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let trickler = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // A TLS handshake record announcing 16 KiB, then its bytes
            // one at a time: the client waits for the whole record.
            let mut sent = 0;
            if s.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]).is_ok() {
                // Bounded: 10 s at most, ended early when the client goes.
                for _ in 0..500 {
                    std::thread::sleep(Duration::from_millis(20));
                    if s.write_all(&[0]).is_err() {
                        break;
                    }
                    sent += 1;
                }
            }
            sent
        });
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let start = Instant::now();
        let err = exchange(
            server,
            Arc::new(config),
            b"GET / HTTP/1.1\r\n\r\n",
            "GET /",
            Duration::from_millis(500),
        )
        .unwrap_err();
        let took = start.elapsed();
        assert_eq!(err, "GET /: no complete response within 0.5 s");
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_secs(3),
            "the request took {took:?}"
        );
        let sent = trickler.join().unwrap();
        assert!(
            (5..500).contains(&sent),
            "the server trickled {sent} bytes, then saw the client go"
        );
    }

    #[test]
    fn responses_with_a_length_or_chunks_read_whole() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse_response(r).unwrap(), (200, b"hello".to_vec()));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n";
        assert_eq!(parse_response(r).unwrap(), (200, b"hello world".to_vec()));
        let r = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(parse_response(r).unwrap().0, 403);
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err()
        );
        assert!(parse_response(b"garbage").is_err());
        // A chunk size near usize::MAX, or a chunk longer than its size.
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nhello\r\n0\r\n\r\n";
        assert!(parse_response(r).is_err());
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n";
        assert!(parse_response(r).is_err());
    }
}
