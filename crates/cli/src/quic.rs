//! `peregrine quic serve|get`: files over HTTP/3 (quinn + h3), on the
//! kernel's UDP or on peregrine's UDP/IP stack over AF_XDP.
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use peregrine_quic::http3::{self, Files, ServeCounters, Target, ALPN};
use peregrine_quic::tls::{self, Identity, Trust};
use peregrine_quic::{KernelOffload, StackSocket, QUINN_MAX_SEGMENTS};
use peregrine_stack::{Stack, StackConfig};

use crate::units::{ByteSize, DurationArg};

#[derive(Subcommand)]
pub enum QuicCmd {
    /// Serve the files of a directory over HTTP/3 until Ctrl-C or --duration.
    Serve(ServeArgs),
    /// Download a URL over HTTP/3; prints status, size, SHA-256 and goodput.
    Get(GetArgs),
}

/// Which UDP carries QUIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum QuicIo {
    /// peregrine's UDP/IP stack on AF_XDP (an XDP program on the interface
    /// takes the endpoint's datagrams; everything else stays the kernel's).
    Afxdp,
    /// A kernel UDP socket (quinn's own, GSO and GRO where the kernel has them).
    Kernel,
    /// A kernel UDP socket without GSO and GRO: one datagram per system
    /// call each way (plain kernel UDP).
    KernelNogso,
}

impl QuicIo {
    fn name(self) -> &'static str {
        match self {
            QuicIo::Afxdp => "afxdp",
            QuicIo::Kernel => "kernel",
            QuicIo::KernelNogso => "kernel-nogso",
        }
    }
}

/// How the endpoint runs: the UDP/IP stack's settings (--io afxdp) and the
/// async runtime.
#[derive(Args)]
pub struct IoArgs {
    /// --io afxdp: RX queues the stack serves, one AF_XDP socket each
    /// (default: every RX queue the interface has).
    #[arg(long)]
    pub queues: Option<u32>,
    /// --io afxdp: datagrams quinn puts in one transmit, sent as one TX
    /// batch with one kick (1 to 10, quinn's most).
    #[arg(long, default_value_t = QUINN_MAX_SEGMENTS, value_parser = tx_batch)]
    pub tx_batch: usize,
    /// --io afxdp: busy-poll the queues after each batch (SO_BUSY_POLL=USECS,
    /// SO_PREFER_BUSY_POLL); a bare number is microseconds (50, 50us).
    #[arg(long, value_name = "USECS", value_parser = crate::units::micros)]
    pub busy_poll: Option<u32>,
    /// --io afxdp: attach the steering program in native (driver) or
    /// generic (skb) mode. Generic needs peers that do not send UDP GSO
    /// super-packets (veth keeps its peer's GSO on without a native program).
    #[arg(long, default_value = "native")]
    pub xdp_mode: peregrine_bpf::XdpMode,
    /// Threads of the async runtime: 1 runs quinn, HTTP/3 and the I/O on
    /// one thread (fastest for a connection or a few: no hand-offs between
    /// threads); more spreads connections over a pool.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

fn tx_batch(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=QUINN_MAX_SEGMENTS).contains(&n) => Ok(n),
        _ => Err(format!("{s}: 1 to {QUINN_MAX_SEGMENTS} datagrams")),
    }
}

impl IoArgs {
    /// Refuses the stack's settings with another I/O.
    fn check(&self, io: QuicIo) -> Result<()> {
        if io == QuicIo::Afxdp {
            return Ok(());
        }
        let set = [
            ("--queues", self.queues.is_some()),
            ("--tx-batch", self.tx_batch != QUINN_MAX_SEGMENTS),
            ("--busy-poll", self.busy_poll.is_some()),
            (
                "--xdp-mode",
                self.xdp_mode != peregrine_bpf::XdpMode::Native,
            ),
        ];
        if let Some((flag, _)) = set.iter().find(|(_, on)| *on) {
            crate::usage!("{flag} sets the AF_XDP stack: it needs --io afxdp");
        }
        Ok(())
    }

    /// Opens the stack on `iface`.
    fn open(&self, iface: &str) -> Result<Stack> {
        let mut cfg = StackConfig::new(iface);
        cfg.queues = self.queues;
        cfg.xdp_mode = self.xdp_mode;
        cfg.xsk.busy_poll = self.busy_poll.map(|usecs| peregrine_xsk::BusyPoll {
            usecs,
            ..Default::default()
        });
        Stack::open(cfg).with_context(|| format!("the UDP/IP stack on {iface}"))
    }

    fn socket(&self, sock: peregrine_stack::UdpSocket) -> StackSocket {
        StackSocket::new(sock).with_tx_segments(self.tx_batch)
    }
}

/// A body held in memory: NAME=SIZE.
#[derive(Clone, Debug)]
pub struct MemoryFile {
    pub name: String,
    pub size: u64,
}

impl std::str::FromStr for MemoryFile {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<MemoryFile, String> {
        let (name, size) = s
            .split_once('=')
            .ok_or_else(|| format!("{s}: NAME=SIZE, e.g. file-1G=1GiB"))?;
        if name.is_empty() || name.contains('/') {
            return Err(format!("{s}: the name is one path part, without '/'"));
        }
        let size: ByteSize = size.parse()?;
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

#[derive(Args)]
#[command(group(
    clap::ArgGroup::new("content").required(true).multiple(true).args(["dir", "memory"])
))]
pub struct ServeArgs {
    /// Interface the stack runs on (--io afxdp); default: the one that has
    /// the --listen address.
    #[arg(long)]
    pub iface: Option<String>,
    /// Address and UDP port to serve on, e.g. 198.18.0.1:4433 or [2001:db8::1]:443.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Directory whose files are served (GET /NAME, subdirectories too).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A body held in memory, NAME=SIZE (GET /NAME answers SIZE bytes of a
    /// fixed pattern, no file I/O); repeatable.
    #[arg(long, value_name = "NAME=SIZE")]
    pub memory: Vec<MemoryFile>,
    /// afxdp (peregrine's UDP/IP stack), kernel (a kernel UDP socket with
    /// GSO/GRO) or kernel-nogso (one without).
    #[arg(long, value_enum, default_value = "afxdp")]
    pub io: QuicIo,
    #[command(flatten)]
    pub tuning: IoArgs,
    /// Certificate chain (PEM); without it a self-signed one is made for the
    /// listen address and its SHA-256 fingerprint printed.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key of --cert (PEM).
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// Stop after this long (10, 10s, 5m); default: until Ctrl-C.
    #[arg(long)]
    pub duration: Option<DurationArg>,
    /// Print the final counters as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct GetArgs {
    /// https://ADDR:PORT/PATH
    pub url: String,
    /// afxdp (peregrine's UDP/IP stack), kernel (a kernel UDP socket with
    /// GSO/GRO) or kernel-nogso (one without).
    #[arg(long, value_enum, default_value = "afxdp")]
    pub io: QuicIo,
    #[command(flatten)]
    pub tuning: IoArgs,
    /// Interface the stack runs on (--io afxdp); default: the one the
    /// kernel routes the server's address through.
    #[arg(long)]
    pub iface: Option<String>,
    /// Accept any server certificate (the handshake still checks its key).
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,
    /// Trust the certificates of this PEM file (a CA or the server's own).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// Write the body here (default: count and hash it only).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Do not hash the body (its SHA-256 costs about a CPU-second per 2 GB).
    #[arg(long)]
    pub no_sha256: bool,
    /// Give up after this long (30, 30s, 5m).
    #[arg(long, default_value = "5m")]
    pub timeout: DurationArg,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: QuicCmd) -> Result<()> {
    match cmd {
        QuicCmd::Serve(a) => serve(a),
        QuicCmd::Get(a) => get(a),
    }
}

/// The async runtime: one thread runs every task (`threads` 1), or a
/// pool of `threads` workers.
fn runtime(threads: usize) -> Result<tokio::runtime::Runtime> {
    let mut b = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    b.enable_all().build().context("starting the async runtime")
}

/// The interface that holds `ip` here, for the stack.
fn iface_with(ip: IpAddr) -> Result<String> {
    let has = |a: &nix::sys::socket::SockaddrStorage| {
        a.as_sockaddr_in().map(|s| IpAddr::V4(s.ip())) == Some(ip)
            || a.as_sockaddr_in6().map(|s| IpAddr::V6(s.ip())) == Some(ip)
    };
    let found = nix::ifaddrs::getifaddrs()
        .context("listing the interfaces' addresses")?
        .find(|i| i.address.as_ref().is_some_and(has))
        .map(|i| i.interface_name);
    match found {
        Some(name) => Ok(name),
        None => {
            crate::usage!("no interface here has {ip}: listen on one of an interface's addresses")
        }
    }
}

/// The interface the kernel routes `dst` through, and the source address it
/// would pick.
fn route_to(dst: IpAddr) -> Result<(String, IpAddr)> {
    let nl = peregrine_host::nl::NetlinkHere::open()?;
    let r = nl.route_to(dst)?;
    let name = nix::net::if_::if_indextoname(r.oif)
        .map_err(|e| anyhow::anyhow!("interface {}: {e}", r.oif))?
        .to_string_lossy()
        .into_owned();
    let src = r
        .prefsrc
        .ok_or_else(|| anyhow::anyhow!("no source address toward {dst}"))?;
    Ok((name, src))
}

fn serve(a: ServeArgs) -> Result<()> {
    if let Some(d) = a.dir.as_ref().filter(|d| !d.is_dir()) {
        crate::usage!("--dir {}: not a directory", d.display());
    }
    a.tuning.check(a.io)?;
    let id = match (&a.cert, &a.key) {
        (Some(c), Some(k)) => Identity::from_pem_files(c, k)?,
        _ => Identity::self_signed(&[a.listen.ip().to_string(), "localhost".into()])?,
    };
    let fingerprint = id.fingerprint();
    let server_cfg = tls::server_config(id, ALPN)?;
    // The stack (its XDP program) lives until this function returns: on
    // Ctrl-C, --duration or an error alike.
    let mut stack = None;
    let rt = runtime(a.tuning.threads)?;
    let counters = Arc::new(ServeCounters::default());
    let endpoint = match a.io {
        QuicIo::Afxdp => {
            let iface = match &a.iface {
                Some(i) => i.clone(),
                None => iface_with(a.listen.ip())?,
            };
            let s = a.tuning.open(&iface)?;
            let sock = s
                .bind(a.listen)
                .with_context(|| format!("binding {}", a.listen))?;
            stack = Some(s);
            let _in = rt.enter();
            peregrine_quic::endpoint_on_stack(a.tuning.socket(sock), Some(server_cfg))?
        }
        QuicIo::Kernel | QuicIo::KernelNogso => {
            let _in = rt.enter();
            std::net::UdpSocket::bind(a.listen)
                .and_then(|sock| {
                    peregrine_quic::endpoint_on_kernel(sock, Some(server_cfg), offload(a.io))
                })
                .with_context(|| format!("binding {}", a.listen))?
        }
    };
    let on = match (&stack, a.io) {
        (Some(s), _) => format!("the UDP/IP stack on {} (AF_XDP)", s.iface()),
        (None, QuicIo::KernelNogso) => "a kernel UDP socket without GSO/GRO".to_string(),
        _ => "a kernel UDP socket".to_string(),
    };
    let mut what: Vec<String> = a.dir.iter().map(|d| d.display().to_string()).collect();
    what.extend(
        a.memory
            .iter()
            .map(|m| format!("/{} ({} B in memory)", m.name, m.size)),
    );
    eprintln!(
        "serving {} over HTTP/3 at https://{}/ on {on}; certificate SHA-256 {fingerprint}",
        what.join(" and "),
        a.listen
    );
    let files = Files {
        dir: a.dir.clone(),
        memory: a.memory.iter().map(|m| (m.name.clone(), m.size)).collect(),
    };
    let limit = a.duration.map(Duration::from);
    let start = Instant::now();
    rt.block_on(async {
        let serving = tokio::spawn(http3::serve(endpoint.clone(), files, counters.clone()));
        while !peregrine_host::signals::stop_requested()
            && limit.is_none_or(|l| start.elapsed() < l)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        endpoint.close(0x100u32.into(), b"server stopping");
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        serving.abort();
    });
    let c = &counters;
    let v = serde_json::json!({
        "connections": c.connections.load(Ordering::Relaxed),
        "requests": c.requests.load(Ordering::Relaxed),
        "served": c.served.load(Ordering::Relaxed),
        "not_found": c.not_found.load(Ordering::Relaxed),
        "failed": c.failed.load(Ordering::Relaxed),
        "body_bytes": c.body_bytes.load(Ordering::Relaxed),
        "cpu_seconds": process_cpu_seconds(),
        "stack": stack.as_ref().map(|s| s.counters().to_string()),
    });
    if a.json {
        println!("{v}");
    } else {
        println!(
            "served {} of {} requests ({} B of bodies) on {} connections; {} not found, {} failed{}",
            v["served"],
            v["requests"],
            v["body_bytes"],
            v["connections"],
            v["not_found"],
            v["failed"],
            stack
                .as_ref()
                .map(|s| format!("; stack: {}", s.counters()))
                .unwrap_or_default()
        );
    }
    Ok(())
}

/// quinn's use of the kernel's offloads for a kernel I/O.
fn offload(io: QuicIo) -> KernelOffload {
    match io {
        QuicIo::KernelNogso => KernelOffload::Off,
        _ => KernelOffload::GsoGro,
    }
}

fn get(a: GetArgs) -> Result<()> {
    let target = Target::parse(&a.url).map_err(|e| crate::usage::UsageError(e.to_string()))?;
    a.tuning.check(a.io)?;
    let trust = match (&a.ca, a.insecure) {
        (Some(ca), _) => Trust::from_pem_file(ca)?,
        (None, true) => Trust::Anything,
        (None, false) => crate::usage!(
            "quic get needs --ca FILE (the server's certificate or its CA) or --insecure"
        ),
    };
    let client_cfg = tls::client_config(trust, ALPN)?;
    let mut out: Box<dyn std::io::Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::sink()),
    };
    let rt = runtime(a.tuning.threads)?;
    let mut stack = None;
    let mut endpoint = match a.io {
        QuicIo::Afxdp => {
            let (routed, src) = route_to(target.addr.ip())?;
            let iface = a.iface.clone().unwrap_or(routed);
            let s = a.tuning.open(&iface)?;
            let sock = s
                .bind(SocketAddr::new(src, 0))
                .with_context(|| format!("binding {src}"))?;
            stack = Some(s);
            let _in = rt.enter();
            peregrine_quic::endpoint_on_stack(a.tuning.socket(sock), None)?
        }
        QuicIo::Kernel | QuicIo::KernelNogso => {
            let any: SocketAddr = if target.addr.is_ipv6() {
                "[::]:0".parse()?
            } else {
                "0.0.0.0:0".parse()?
            };
            let _in = rt.enter();
            peregrine_quic::endpoint_on_kernel(
                std::net::UdpSocket::bind(any)?,
                None,
                offload(a.io),
            )?
        }
    };
    endpoint.set_default_client_config(client_cfg);
    let json = a.json;
    let mut last = Instant::now();
    let fetched = rt.block_on(async {
        let fetch = http3::get(&endpoint, &target, &mut *out, !a.no_sha256, |got, len| {
            if !json && last.elapsed() >= Duration::from_secs(1) {
                last = Instant::now();
                let of = len
                    .map(|l| format!(" of {:.1} MiB", l as f64 / 1048576.0))
                    .unwrap_or_default();
                eprintln!("  {:.1} MiB{of}", got as f64 / 1048576.0);
            }
        });
        let stop = async {
            while !peregrine_host::signals::stop_requested() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let r = tokio::select! {
            r = tokio::time::timeout(a.timeout.into(), fetch) => r
                .map_err(|_| anyhow::anyhow!("no complete answer from {} within {}", target.addr, a.timeout))
                .and_then(|r| Ok(r?)),
            _ = stop => Err(anyhow::anyhow!("interrupted")),
        };
        endpoint.close(0x100u32.into(), b"");
        let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
        r
    })?;
    let mbit = fetched.bytes as f64 * 8.0 / fetched.seconds.max(1e-9) / 1e6;
    if a.json {
        let mut v = serde_json::to_value(&fetched)?;
        v["url"] = a.url.clone().into();
        v["goodput_mbit_s"] = mbit.into();
        v["io"] = a.io.name().into();
        v["cpu_seconds"] = process_cpu_seconds().into();
        println!("{v}");
    } else {
        println!(
            "{} {}: {} B in {:.3} s ({:.3} s with the handshake), {:.1} Mbit/s goodput; sha256 {}{}",
            fetched.status,
            a.url,
            fetched.bytes,
            fetched.seconds,
            fetched.seconds_with_handshake,
            mbit,
            fetched.sha256.as_deref().unwrap_or("not computed"),
            stack
                .as_ref()
                .map(|s| format!("; stack: {}", s.counters()))
                .unwrap_or_default()
        );
    }
    if fetched.status != 200 {
        anyhow::bail!("{} answered {}", a.url, fetched.status);
    }
    Ok(())
}
