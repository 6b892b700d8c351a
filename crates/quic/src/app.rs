//! `quic serve` and `quic get` assembled: an endpoint on the chosen I/O
//! (peregrine's UDP/IP stack on AF_XDP, or a kernel UDP socket with or
//! without GSO/GRO), HTTP/3 served until stopped or a file fetched, and the
//! report of what was done. Config in, handle or report out.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_bpf::XdpMode;
use peregrine_host::signals;
use peregrine_stack::{Stack, StackConfig};
use peregrine_units::DurationArg;
use serde_json::{json, Value};

use crate::http3::{self, Fetched, Files, Http3Error, ServeCounters, Target, ALPN};
use crate::tls::{self, Identity, TlsError, Trust};
use crate::{KernelOffload, StackSocket, QUINN_MAX_SEGMENTS};

/// Why a serve or get did not happen; the chain of causes, one per line
/// part, as the command prints it.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A setting the caller chose that cannot work (which one, and why).
    #[error("{0}")]
    Invalid(String),
    /// What was being done, and why it failed.
    #[error("{what}")]
    Doing {
        what: String,
        #[source]
        cause: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error(transparent)]
    Http3(#[from] Http3Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    #[error("{0}")]
    Other(String),
}

fn doing<E: std::error::Error + Send + Sync + 'static>(what: String) -> impl FnOnce(E) -> AppError {
    move |e| AppError::Doing {
        what,
        cause: Box::new(e),
    }
}

/// Which UDP carries QUIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicIo {
    /// peregrine's UDP/IP stack on AF_XDP.
    Afxdp,
    /// A kernel UDP socket with GSO and GRO where the kernel has them.
    Kernel,
    /// A kernel UDP socket without GSO and GRO.
    KernelNogso,
}

impl std::str::FromStr for QuicIo {
    type Err = String;
    fn from_str(s: &str) -> Result<QuicIo, String> {
        [QuicIo::Afxdp, QuicIo::Kernel, QuicIo::KernelNogso]
            .into_iter()
            .find(|io| io.as_str() == s)
            .ok_or_else(|| format!("{s:?}: expected afxdp, kernel or kernel-nogso"))
    }
}

impl QuicIo {
    pub fn as_str(self) -> &'static str {
        match self {
            QuicIo::Afxdp => "afxdp",
            QuicIo::Kernel => "kernel",
            QuicIo::KernelNogso => "kernel-nogso",
        }
    }

    /// quinn's use of the kernel's offloads for a kernel I/O.
    fn offload(self) -> KernelOffload {
        match self {
            QuicIo::KernelNogso => KernelOffload::Off,
            _ => KernelOffload::GsoGro,
        }
    }
}

/// The UDP/IP stack's settings (afxdp) and the async runtime's threads.
#[derive(Clone, Debug)]
pub struct IoConfig {
    /// RX queues the stack serves (None: every one the interface has).
    pub queues: Option<u32>,
    /// Datagrams quinn puts in one transmit, sent as one TX batch.
    pub tx_batch: usize,
    /// Busy-poll the queues after each batch, microseconds.
    pub busy_poll: Option<u32>,
    pub xdp_mode: XdpMode,
    /// 1: one thread runs everything; more: a pool.
    pub threads: usize,
}

impl Default for IoConfig {
    fn default() -> IoConfig {
        IoConfig {
            queues: None,
            tx_batch: QUINN_MAX_SEGMENTS,
            busy_poll: None,
            xdp_mode: XdpMode::Native,
            threads: 1,
        }
    }
}

/// Parses a TX batch: 1 to quinn's most datagrams per transmit.
pub fn tx_batch(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=QUINN_MAX_SEGMENTS).contains(&n) => Ok(n),
        _ => Err(format!("{s}: 1 to {QUINN_MAX_SEGMENTS} datagrams")),
    }
}

impl IoConfig {
    /// Refuses the stack's settings with another I/O.
    fn check(&self, io: QuicIo) -> Result<(), AppError> {
        if io == QuicIo::Afxdp {
            return Ok(());
        }
        let set = [
            ("--queues", self.queues.is_some()),
            ("--tx-batch", self.tx_batch != QUINN_MAX_SEGMENTS),
            ("--busy-poll", self.busy_poll.is_some()),
            ("--xdp-mode", self.xdp_mode != XdpMode::Native),
        ];
        match set.iter().find(|(_, on)| *on) {
            Some((flag, _)) => Err(AppError::Invalid(format!(
                "{flag} sets the AF_XDP stack: it needs --io afxdp"
            ))),
            None => Ok(()),
        }
    }

    /// The async runtime: one thread runs every task, or a pool.
    fn runtime(&self) -> Result<tokio::runtime::Runtime, AppError> {
        let mut b = if self.threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
        } else {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(self.threads);
            b
        };
        b.enable_all()
            .build()
            .map_err(doing("starting the async runtime".into()))
    }

    /// An endpoint bound to `addr` on `io` (the stack on `iface` for
    /// afxdp, which is returned too: it lives as long as the endpoint).
    fn endpoint(
        &self,
        rt: &tokio::runtime::Runtime,
        io: QuicIo,
        iface: &str,
        addr: SocketAddr,
        server: Option<quinn::ServerConfig>,
        ipv6_only: bool,
    ) -> Result<(quinn::Endpoint, Option<Stack>), AppError> {
        if io != QuicIo::Afxdp {
            let _in = rt.enter();
            let e = kernel_socket(addr, ipv6_only)
                .and_then(|sock| crate::endpoint_on_kernel(sock, server, io.offload()));
            return Ok((e.map_err(doing(format!("binding {addr}")))?, None));
        }
        let mut cfg = StackConfig::new(iface);
        cfg.queues = self.queues;
        cfg.xdp_mode = self.xdp_mode;
        cfg.xsk.busy_poll = self.busy_poll.map(|usecs| peregrine_xsk::BusyPoll {
            usecs,
            ..Default::default()
        });
        let stack = Stack::open(cfg).map_err(doing(format!("the UDP/IP stack on {iface}")))?;
        let sock = stack.bind(addr).map_err(doing(format!("binding {addr}")))?;
        let _in = rt.enter();
        let sock = StackSocket::new(sock).with_tx_segments(self.tx_batch);
        Ok((crate::endpoint_on_stack(sock, server)?, Some(stack)))
    }
}

/// A kernel UDP socket bound to `addr`. Linux's `[::]` takes IPv4 too
/// (mapped); with `ipv6_only` (IPV6_V6ONLY) it takes IPv6 alone.
fn kernel_socket(addr: SocketAddr, ipv6_only: bool) -> std::io::Result<std::net::UdpSocket> {
    use nix::sys::socket::{self as s, sockopt};
    let SocketAddr::V6(v6) = addr else {
        return std::net::UdpSocket::bind(addr);
    };
    let fd = s::socket(
        s::AddressFamily::Inet6,
        s::SockType::Datagram,
        s::SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    s::setsockopt(&fd, sockopt::Ipv6V6Only, &ipv6_only)?;
    s::bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &s::SockaddrIn6::from(v6),
    )?;
    Ok(std::net::UdpSocket::from(fd))
}

/// A body held in memory: NAME=SIZE.
#[derive(Clone, Debug)]
pub struct MemoryFile {
    pub name: String,
    pub size: u64,
}

impl std::str::FromStr for MemoryFile {
    type Err = String;
    fn from_str(s: &str) -> Result<MemoryFile, String> {
        let (name, size) = s
            .split_once('=')
            .ok_or_else(|| format!("{s}: NAME=SIZE, e.g. file-1G=1GiB"))?;
        if name.is_empty() || name.contains('/') {
            return Err(format!("{s}: the name is one path part, without '/'"));
        }
        let size: peregrine_units::ByteSize = size.parse()?;
        Ok(MemoryFile {
            name: name.to_string(),
            size: size.0,
        })
    }
}

/// User plus system CPU time this process has used, in seconds.
fn process_cpu_seconds() -> f64 {
    // Safety: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Safety: a valid pointer to a rusage for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// The interface that holds `ip` here, for the stack.
fn iface_with(ip: IpAddr) -> Result<String, AppError> {
    if ip.is_unspecified() {
        return Err(AppError::Invalid(format!(
            "--listen {ip} names no interface: give the stack's one with --iface"
        )));
    }
    let has = |a: &nix::sys::socket::SockaddrStorage| {
        a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())) == Some(ip)
            || a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())) == Some(ip)
    };
    nix::ifaddrs::getifaddrs()
        .map_err(doing("listing the interfaces' addresses".into()))?
        .find(|i| i.address.as_ref().is_some_and(has))
        .map(|i| i.interface_name)
        .ok_or_else(|| {
            AppError::Invalid(format!(
                "no interface here has {ip}: listen on one of an interface's addresses, \
                 or name the interface with --iface"
            ))
        })
}

/// The interface the kernel routes `dst` through, and the source address it
/// would pick.
fn route_to(dst: IpAddr) -> Result<(String, IpAddr), AppError> {
    let nl = peregrine_host::nl::NetlinkHere::open()?;
    let r = nl.route_to(dst)?;
    let name = nix::net::if_::if_indextoname(r.oif)
        .map_err(|e| AppError::Other(format!("interface {}: {e}", r.oif)))?
        .to_string_lossy()
        .into_owned();
    let src = r
        .prefsrc
        .ok_or_else(|| AppError::Other(format!("no source address toward {dst}")))?;
    Ok((name, src))
}

/// `quic serve`.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// Interface of the stack (afxdp); None: the one with the address.
    pub iface: Option<String>,
    /// A directory's files (GET /NAME).
    pub dir: Option<PathBuf>,
    /// Bodies held in memory.
    pub memory: Vec<MemoryFile>,
    pub io: QuicIo,
    pub tuning: IoConfig,
    /// Certificate chain and key (PEM); None: a self-signed one.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// `[::]` serves IPv6 alone (IPV6_V6ONLY); without it, both families,
    /// as a Linux socket on `[::]` does.
    pub ipv6_only: bool,
}

/// A running HTTP/3 server; [`QuicServer::run`] serves until stopped.
pub struct QuicServer {
    // The endpoint before the stack: the stack (its XDP program) lives
    // until the server is dropped, on a stop or an error alike.
    endpoint: quinn::Endpoint,
    rt: tokio::runtime::Runtime,
    stack: Option<Stack>,
    files: Files,
    counters: Arc<ServeCounters>,
    summary: String,
}

/// What a server did.
#[derive(Clone, Debug)]
pub struct ServeReport {
    pub connections: u64,
    pub requests: u64,
    pub served: u64,
    pub not_found: u64,
    pub failed: u64,
    pub body_bytes: u64,
    pub cpu_seconds: f64,
    /// The stack's counters (afxdp).
    pub stack: Option<String>,
}

/// `--ipv6-only` needs an IPv6 address; `[::]` on the AF_XDP stack, whose
/// sockets hold one family, is refused unless it is to serve IPv6 alone
/// (an IPv4 client would get no answer at all).
fn check_listen(cfg: &ServeConfig) -> Result<(), AppError> {
    let l = cfg.listen;
    if cfg.ipv6_only && l.is_ipv4() {
        return Err(AppError::Invalid(format!(
            "--ipv6-only with --listen {l}: an IPv6 address is needed"
        )));
    }
    if cfg.io == QuicIo::Afxdp && l.is_ipv6() && l.ip().is_unspecified() && !cfg.ipv6_only {
        return Err(AppError::Invalid(format!(
            "--listen {l} with --io afxdp: the AF_XDP stack's sockets hold one family, so IPv4 \
             clients would go unanswered; add --ipv6-only, or listen on 0.0.0.0:{}",
            l.port()
        )));
    }
    Ok(())
}

/// Starts the endpoint of `quic serve`.
pub fn serve(cfg: &ServeConfig) -> Result<QuicServer, AppError> {
    if let Some(d) = cfg.dir.as_ref().filter(|d| !d.is_dir()) {
        return Err(AppError::Invalid(format!(
            "--dir {}: not a directory",
            d.display()
        )));
    }
    cfg.tuning.check(cfg.io)?;
    check_listen(cfg)?;
    let id = match &cfg.cert {
        Some((c, k)) => Identity::from_pem_files(c, k)?,
        None => Identity::self_signed(&[cfg.listen.ip().to_string(), "localhost".into()])?,
    };
    let fingerprint = id.fingerprint();
    let server_cfg = tls::server_config(id, ALPN)?;
    let rt = cfg.tuning.runtime()?;
    let iface = match (&cfg.iface, cfg.io) {
        (Some(i), _) => i.clone(),
        (None, QuicIo::Afxdp) => iface_with(cfg.listen.ip())?,
        (None, _) => String::new(),
    };
    let (endpoint, stack) = cfg.tuning.endpoint(
        &rt,
        cfg.io,
        &iface,
        cfg.listen,
        Some(server_cfg),
        cfg.ipv6_only,
    )?;
    let on = match (&stack, cfg.io) {
        (Some(s), _) => format!("the UDP/IP stack on {} (AF_XDP)", s.iface()),
        (None, QuicIo::KernelNogso) => "a kernel UDP socket without GSO/GRO".to_string(),
        _ => "a kernel UDP socket".to_string(),
    };
    let mut what: Vec<String> = cfg.dir.iter().map(|d| d.display().to_string()).collect();
    what.extend(
        cfg.memory
            .iter()
            .map(|m| format!("/{} ({} B in memory)", m.name, m.size)),
    );
    let summary = format!(
        "serving {} over HTTP/3 at https://{}/ on {on}; certificate SHA-256 {fingerprint}",
        what.join(" and "),
        cfg.listen
    );
    Ok(QuicServer {
        endpoint,
        rt,
        stack,
        files: Files {
            dir: cfg.dir.clone(),
            memory: cfg
                .memory
                .iter()
                .map(|m| (m.name.clone(), m.size))
                .collect(),
        },
        counters: Arc::new(ServeCounters::default()),
        summary,
    })
}

impl QuicServer {
    /// What is served, where, on which I/O, and the certificate's SHA-256.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Serves until Ctrl-C or `limit`, then closes the endpoint.
    pub fn run(self, limit: Option<Duration>) -> ServeReport {
        let start = Instant::now();
        let (endpoint, counters) = (self.endpoint.clone(), self.counters.clone());
        self.rt.block_on(async {
            let serving = tokio::spawn(http3::serve(
                endpoint.clone(),
                self.files.clone(),
                counters.clone(),
            ));
            while !signals::stop_requested() && limit.is_none_or(|l| start.elapsed() < l) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            endpoint.close(0x100u32.into(), b"server stopping");
            let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
            serving.abort();
        });
        let c = &self.counters;
        ServeReport {
            connections: c.connections.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            served: c.served.load(Ordering::Relaxed),
            not_found: c.not_found.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            body_bytes: c.body_bytes.load(Ordering::Relaxed),
            cpu_seconds: process_cpu_seconds(),
            stack: self.stack.as_ref().map(Stack::summary),
        }
    }
}

/// "; stack: COUNTERS" where there is a stack.
fn stack_note(stack: &Option<String>) -> String {
    stack
        .as_ref()
        .map(|s| format!("; stack: {s}"))
        .unwrap_or_default()
}

impl ServeReport {
    /// As `quic serve --json` prints it.
    pub fn to_json(&self) -> Value {
        json!({
            "connections": self.connections,
            "requests": self.requests,
            "served": self.served,
            "not_found": self.not_found,
            "failed": self.failed,
            "body_bytes": self.body_bytes,
            "cpu_seconds": self.cpu_seconds,
            "stack": self.stack,
        })
    }
}

impl std::fmt::Display for ServeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "served {} of {} requests ({} B of bodies) on {} connections; {} not found, {} failed{}",
            self.served,
            self.requests,
            self.body_bytes,
            self.connections,
            self.not_found,
            self.failed,
            stack_note(&self.stack)
        )
    }
}

/// `quic get`.
#[derive(Clone, Debug)]
pub struct GetConfig {
    /// https://ADDR:PORT/PATH
    pub url: String,
    pub io: QuicIo,
    pub tuning: IoConfig,
    /// Interface of the stack (afxdp); None: the one routed to the server.
    pub iface: Option<String>,
    /// Trust this PEM file's certificates.
    pub ca: Option<PathBuf>,
    /// Accept any certificate (when no `ca`).
    pub insecure: bool,
    /// Write the body here (None: count and hash it only).
    pub output: Option<PathBuf>,
    pub sha256: bool,
    pub timeout: DurationArg,
    /// Print the MiB received every second on stderr.
    pub progress: bool,
}

/// What a GET brought, and on what.
#[derive(Clone, Debug)]
pub struct GetReport {
    pub url: String,
    pub io: QuicIo,
    pub fetched: Fetched,
    /// Body bytes per second of the transfer, Mbit/s.
    pub goodput_mbit_s: f64,
    pub cpu_seconds: f64,
    /// The stack's counters (afxdp).
    pub stack: Option<String>,
}

/// Fetches `cfg.url` over HTTP/3.
pub fn get(cfg: &GetConfig) -> Result<GetReport, AppError> {
    let target = Target::parse(&cfg.url).map_err(|e| AppError::Invalid(e.to_string()))?;
    cfg.tuning.check(cfg.io)?;
    let trust = match (&cfg.ca, cfg.insecure) {
        (Some(ca), _) => Trust::from_pem_file(ca)?,
        (None, true) => Trust::Anything,
        (None, false) => {
            return Err(AppError::Invalid(
                "quic get needs --ca FILE (the server's certificate or its CA) or --insecure"
                    .into(),
            ))
        }
    };
    let client_cfg = tls::client_config(trust, ALPN)?;
    let mut out: Box<dyn std::io::Write> = match &cfg.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(doing(format!("creating {}", p.display())))?,
        )),
        None => Box::new(std::io::sink()),
    };
    let rt = cfg.tuning.runtime()?;
    let (iface, local) = match cfg.io {
        QuicIo::Afxdp => {
            let (routed, src) = route_to(target.addr.ip())?;
            (cfg.iface.clone().unwrap_or(routed), SocketAddr::new(src, 0))
        }
        _ if target.addr.is_ipv6() => (String::new(), "[::]:0".parse().expect("address")),
        _ => (String::new(), "0.0.0.0:0".parse().expect("address")),
    };
    let (ep, stack) = cfg
        .tuning
        .endpoint(&rt, cfg.io, &iface, local, None, false)?;
    // Dropped before the stack it sends on.
    let mut endpoint = ep;
    endpoint.set_default_client_config(client_cfg);
    let mut last = Instant::now();
    let fetched = rt.block_on(async {
        let fetch = http3::get(&endpoint, &target, &mut *out, cfg.sha256, |got, len| {
            if cfg.progress && last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                let of = len
                    .map(|l| format!(" of {:.1} MiB", l as f64 / 1048576.0))
                    .unwrap_or_default();
                eprintln!("  {:.1} MiB{of}", got as f64 / 1048576.0);
            }
        });
        let stop = async {
            while !signals::stop_requested() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let r = tokio::select! {
            r = tokio::time::timeout(cfg.timeout.into(), fetch) => r
                .map_err(|_| AppError::Other(format!("no complete answer from {} within {}", target.addr, cfg.timeout)))
                .and_then(|r| Ok(r?)),
            _ = stop => Err(AppError::Other("interrupted".into())),
        };
        endpoint.close(0x100u32.into(), b"");
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        r
    })?;
    Ok(GetReport {
        url: cfg.url.clone(),
        io: cfg.io,
        goodput_mbit_s: fetched.bytes as f64 * 8.0 / fetched.seconds.max(1e-9) / 1e6,
        fetched,
        cpu_seconds: process_cpu_seconds(),
        stack: stack.as_ref().map(Stack::summary),
    })
}

impl GetReport {
    /// As `quic get --json` prints it.
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(&self.fetched).expect("a Fetched serialises");
        v["url"] = self.url.clone().into();
        v["goodput_mbit_s"] = self.goodput_mbit_s.into();
        v["io"] = self.io.as_str().into();
        v["cpu_seconds"] = self.cpu_seconds.into();
        v
    }
}

impl std::fmt::Display for GetReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.fetched;
        write!(
            f,
            "{} {}: {} B in {:.3} s ({:.3} s with the handshake), {:.1} Mbit/s goodput; sha256 {}{}",
            r.status,
            self.url,
            r.bytes,
            r.seconds,
            r.seconds_with_handshake,
            self.goodput_mbit_s,
            r.sha256.as_deref().unwrap_or("not computed"),
            stack_note(&self.stack)
        )
    }
}
