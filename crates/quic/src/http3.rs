//! HTTP/3 (h3 on h3-quinn) file serving and fetching on any quinn
//! endpoint: one on the kernel's UDP or one on the stack (`endpoint_on_stack`)
//! serve and fetch the same way.
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, Bytes};
use sha2::{Digest, Sha256};

/// ALPN of HTTP/3.
pub const ALPN: &[&[u8]] = &[b"h3"];

/// Bytes a response body is sent in at a time.
const CHUNK: usize = 256 << 10;

#[derive(Debug, thiserror::Error)]
pub enum Http3Error {
    #[error("{0}")]
    Url(String),
    #[error("connecting to {addr}: {why}")]
    Connect {
        addr: std::net::SocketAddr,
        why: String,
    },
    #[error("HTTP/3: {0}")]
    Protocol(String),
    #[error("writing the body: {0}")]
    Write(std::io::Error),
}

fn protocol(e: impl std::fmt::Display) -> Http3Error {
    Http3Error::Protocol(e.to_string())
}

/// What a server answered, counted across connections.
#[derive(Debug, Default)]
pub struct ServeCounters {
    pub connections: AtomicU64,
    pub requests: AtomicU64,
    /// Requests answered 200 with the whole file.
    pub served: AtomicU64,
    pub not_found: AtomicU64,
    /// Connections or streams that ended in an error (a client gone
    /// midway, a protocol error).
    pub failed: AtomicU64,
    pub body_bytes: AtomicU64,
}

/// The file `path` (a request's URL path) names under `root`; None when
/// it would leave `root` (`..`, absolute parts) or names nothing.
pub fn file_under(root: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path.trim_start_matches('/'));
    let mut out = root.to_path_buf();
    let mut any = false;
    for c in rel.components() {
        match c {
            Component::Normal(p) => {
                out.push(p);
                any = true;
            }
            Component::CurDir => {}
            _ => return None,
        }
    }
    (any && out.is_file()).then_some(out)
}

/// What a server answers GETs from.
#[derive(Debug, Clone, Default)]
pub struct Files {
    /// Files under this directory, by their path below it.
    pub dir: Option<PathBuf>,
    /// Bodies held in memory, by name (`GET /NAME`): that many bytes of
    /// [`memory_chunk`] repeated. No file I/O, as the seed's server served
    /// its 2 GiB file from memory; checked before `dir`.
    pub memory: Vec<(String, u64)>,
}

/// Bytes an in-memory body repeats: one send chunk of fixed pseudo-random
/// bytes (xorshift64 from a constant seed), the same in every process, so
/// a client can check a body with [`memory_sha256`].
pub fn memory_chunk() -> Bytes {
    static CHUNK_BYTES: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    CHUNK_BYTES
        .get_or_init(|| {
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut v = Vec::with_capacity(CHUNK);
            while v.len() < CHUNK {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.extend_from_slice(&x.to_le_bytes());
            }
            Bytes::from(v)
        })
        .clone()
}

/// The SHA-256 (hex) of an in-memory body of `len` bytes.
pub fn memory_sha256(len: u64) -> String {
    let chunk = memory_chunk();
    let mut hash = Sha256::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        hash.update(&chunk[..n]);
        left -= n as u64;
    }
    hex(&hash.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Serves `files` on `endpoint` until it is closed: `GET /PATH` answers
/// the in-memory body or file's bytes (200 with content-length), 404 when
/// there is none, 405 for other methods.
pub async fn serve(endpoint: quinn::Endpoint, files: Files, counters: Arc<ServeCounters>) {
    let root = Arc::new(files);
    while let Some(incoming) = endpoint.accept().await {
        let (root, c) = (root.clone(), counters.clone());
        tokio::spawn(async move {
            if connection(incoming, root, c.clone()).await.is_err() {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

async fn connection(
    incoming: quinn::Incoming,
    root: Arc<Files>,
    c: Arc<ServeCounters>,
) -> Result<(), Http3Error> {
    let conn = incoming.await.map_err(protocol)?;
    c.connections.fetch_add(1, Ordering::Relaxed);
    let mut h3 = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn))
        .await
        .map_err(protocol)?;
    loop {
        match h3.accept().await {
            Ok(Some(resolver)) => {
                let (root, c) = (root.clone(), c.clone());
                tokio::spawn(async move {
                    if request(resolver, &root, &c).await.is_err() {
                        c.failed.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            // The client closed the connection (H3_NO_ERROR or not: the
            // requests it made were answered or counted on their own).
            Ok(None) | Err(_) => return Ok(()),
        }
    }
}

async fn request(
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    files: &Files,
    c: &ServeCounters,
) -> Result<(), Http3Error> {
    let (req, mut stream) = resolver.resolve_request().await.map_err(protocol)?;
    c.requests.fetch_add(1, Ordering::Relaxed);
    // The request's end first (a GET has no body): answering before it
    // would leave the client's half of the stream unfinished.
    while stream.recv_data().await.map_err(protocol)?.is_some() {}
    let answer = |status: u16| http::Response::builder().status(status).body(());
    if req.method() != http::Method::GET {
        stream
            .send_response(answer(405).map_err(protocol)?)
            .await
            .map_err(protocol)?;
        return stream.finish().await.map_err(protocol);
    }
    let path = req.uri().path();
    let in_memory = files
        .memory
        .iter()
        .find(|(name, _)| path.strip_prefix('/') == Some(name.as_str()))
        .map(|&(_, len)| len);
    let file = match in_memory {
        Some(_) => None,
        None => files
            .dir
            .as_deref()
            .and_then(|root| file_under(root, path))
            .and_then(|p| std::fs::File::open(p).ok()),
    };
    if in_memory.is_none() && file.is_none() {
        c.not_found.fetch_add(1, Ordering::Relaxed);
        stream
            .send_response(answer(404).map_err(protocol)?)
            .await
            .map_err(protocol)?;
        return stream.finish().await.map_err(protocol);
    };
    let len = match (&file, in_memory) {
        (_, Some(len)) => len,
        (Some(f), None) => f.metadata().map(|m| m.len()).unwrap_or(0),
        (None, None) => 0,
    };
    let resp = http::Response::builder()
        .status(200)
        .header(http::header::CONTENT_LENGTH, len)
        .body(())
        .map_err(protocol)?;
    stream.send_response(resp).await.map_err(protocol)?;
    let mut left = len;
    let mut file = file;
    let chunk = memory_chunk();
    while left > 0 {
        let n = CHUNK.min(left as usize);
        let buf = match &mut file {
            Some(f) => {
                let mut buf = vec![0u8; n];
                // A page-cache read of at most CHUNK bytes: short next to
                // sending it.
                f.read_exact(&mut buf)
                    .map_err(|e| Http3Error::Protocol(format!("reading the file: {e}")))?;
                Bytes::from(buf)
            }
            // The shared chunk, not a copy of it.
            None => chunk.slice(..n),
        };
        left -= n as u64;
        c.body_bytes.fetch_add(n as u64, Ordering::Relaxed);
        stream.send_data(buf).await.map_err(protocol)?;
    }
    stream.finish().await.map_err(protocol)?;
    c.served.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A URL `get` fetches: https://ADDR:PORT/PATH (an IP address, or a name
/// the resolver knows).
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: std::net::SocketAddr,
    /// The name the certificate must carry (the URL's host).
    pub server_name: String,
    pub uri: http::Uri,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, Http3Error> {
        let bad = |why: &str| Http3Error::Url(format!("{url}: {why}"));
        let uri: http::Uri = url
            .parse()
            .map_err(|_| bad("not a URL (https://ADDR:PORT/PATH)"))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("HTTP/3 URLs start with https://"));
        }
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let name = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(443);
        let addr = match name.parse::<std::net::IpAddr>() {
            Ok(ip) => std::net::SocketAddr::new(ip, port),
            Err(_) => std::net::ToSocketAddrs::to_socket_addrs(&(name, port))
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| bad("the host name does not resolve"))?,
        };
        Ok(Target {
            addr,
            server_name: name.to_string(),
            uri,
        })
    }
}

/// What a GET brought.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Fetched {
    pub status: u16,
    pub bytes: u64,
    /// From the request sent to the body's end.
    pub seconds: f64,
    /// Including the QUIC and TLS handshake.
    pub seconds_with_handshake: f64,
    /// The body's SHA-256 (hex), when asked for.
    pub sha256: Option<String>,
}

/// GETs `target` on `endpoint` (with a client configuration set), writing
/// the body to `out` as it comes (hashing it with SHA-256 when `sha256`)
/// and calling `progress(received, length)` after each chunk.
pub async fn get(
    endpoint: &quinn::Endpoint,
    target: &Target,
    out: &mut dyn std::io::Write,
    sha256: bool,
    mut progress: impl FnMut(u64, Option<u64>),
) -> Result<Fetched, Http3Error> {
    let t0 = Instant::now();
    let connect_err = |why: String| Http3Error::Connect {
        addr: target.addr,
        why,
    };
    let conn = endpoint
        .connect(target.addr, &target.server_name)
        .map_err(|e| connect_err(e.to_string()))?
        .await
        .map_err(|e| connect_err(e.to_string()))?;
    let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(protocol)?;
    let drive = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let t1 = Instant::now();
    let req = http::Request::get(target.uri.clone())
        .body(())
        .map_err(protocol)?;
    let mut stream = send.send_request(req).await.map_err(protocol)?;
    stream.finish().await.map_err(protocol)?;
    let resp = stream.recv_response().await.map_err(protocol)?;
    let length = resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let mut hash = sha256.then(Sha256::new);
    let mut bytes = 0u64;
    while let Some(mut chunk) = stream.recv_data().await.map_err(protocol)? {
        while chunk.has_remaining() {
            let part = chunk.chunk();
            if let Some(h) = &mut hash {
                h.update(part);
            }
            out.write_all(part).map_err(Http3Error::Write)?;
            bytes += part.len() as u64;
            let n = part.len();
            chunk.advance(n);
        }
        progress(bytes, length);
    }
    let seconds = t1.elapsed().as_secs_f64();
    out.flush().map_err(Http3Error::Write)?;
    drop(send);
    // H3_NO_ERROR: a normal close, as RFC 9114 asks.
    conn.close(0x100u32.into(), b"");
    drive.abort();
    Ok(Fetched {
        status: resp.status().as_u16(),
        bytes,
        seconds,
        seconds_with_handshake: t0.elapsed().as_secs_f64(),
        sha256: hash.map(|h| hex(&h.finalize())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_under_the_root() {
        let root = std::env::temp_dir().join(format!("pg-h3-root-{}", std::process::id()));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a"), b"x").unwrap();
        std::fs::write(root.join("sub/b"), b"y").unwrap();
        assert_eq!(file_under(&root, "/a"), Some(root.join("a")));
        assert_eq!(file_under(&root, "/sub/./b"), Some(root.join("sub/b")));
        for bad in ["/", "/sub", "/../etc/passwd", "/sub/../a", "/nope", ""] {
            assert_eq!(file_under(&root, bad), None, "{bad}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn memory_bodies_hash_as_their_bytes() {
        let c = memory_chunk();
        assert_eq!(c.len(), CHUNK);
        assert_ne!(c[..8], c[8..16], "not one repeated word");
        assert_eq!(memory_sha256(0), hex(&Sha256::digest(b"")));
        let mut body = c.to_vec();
        body.extend_from_slice(&c[..5]);
        assert_eq!(memory_sha256(CHUNK as u64 + 5), hex(&Sha256::digest(&body)));
    }

    #[test]
    fn urls_parse_with_one_line_errors() {
        let t = Target::parse("https://[2001:db8::1]:4433/f").unwrap();
        assert_eq!(t.addr, "[2001:db8::1]:4433".parse().unwrap());
        assert_eq!(t.server_name, "2001:db8::1");
        let t = Target::parse("https://198.18.0.1/x").unwrap();
        assert_eq!(t.addr.port(), 443);
        for (bad, says) in [
            ("http://198.18.0.1/x", "https://"),
            ("https://bad host/x", "not a URL"),
            ("198.18.0.1/x", "https://ADDR:PORT/PATH"),
        ] {
            let e = Target::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.lines().count() == 1, "{e}");
        }
    }
}
