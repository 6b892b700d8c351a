//! `peregrine quic serve|get`: files over HTTP/3 (quinn + h3), on the
//! kernel's UDP or on peregrine's UDP/IP stack over AF_XDP. The lifecycles
//! are `peregrine_quic::app`'s; here the arguments and the printing.
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use peregrine_quic::app::{self, IoConfig, MemoryFile};
use peregrine_quic::QUINN_MAX_SEGMENTS;

use crate::units::DurationArg;

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

/// How the endpoint runs: the UDP/IP stack's settings (--io afxdp) and the
/// async runtime.
#[derive(Args)]
pub struct IoArgs {
    /// afxdp (peregrine's UDP/IP stack), kernel (a kernel UDP socket with
    /// GSO/GRO) or kernel-nogso (one without).
    #[arg(long, value_enum, default_value = "afxdp")]
    pub io: QuicIo,
    /// --io afxdp: RX queues the stack serves, one AF_XDP socket each
    /// (default: every RX queue the interface has).
    #[arg(long)]
    pub queues: Option<u32>,
    /// --io afxdp: datagrams quinn puts in one transmit, sent as one TX
    /// batch with one kick (1 to 10, quinn's most).
    #[arg(long, default_value_t = QUINN_MAX_SEGMENTS, value_parser = app::tx_batch)]
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

impl IoArgs {
    fn io(&self) -> app::QuicIo {
        let name = self.io.to_possible_value().expect("every value is shown");
        name.get_name().parse().expect("the same names")
    }

    fn config(&self) -> IoConfig {
        IoConfig {
            queues: self.queues,
            tx_batch: self.tx_batch,
            busy_poll: self.busy_poll,
            xdp_mode: self.xdp_mode,
            threads: self.threads,
        }
    }
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
    /// With --listen [::]:PORT: IPv6 clients only (IPV6_V6ONLY). Without
    /// it `[::]` serves both families, as Linux sockets do (--io afxdp
    /// refuses `[::]` without it: its sockets hold one family).
    #[arg(long)]
    pub ipv6_only: bool,
    /// Directory whose files are served (GET /NAME, subdirectories too).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// A body held in memory, NAME=SIZE (GET /NAME answers SIZE bytes of a
    /// fixed pattern, no file I/O); repeatable.
    #[arg(long, value_name = "NAME=SIZE")]
    pub memory: Vec<MemoryFile>,
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

/// The report: one JSON object, or a line for people.
fn print(json: bool, v: serde_json::Value, line: impl std::fmt::Display) {
    if json {
        println!("{v}");
    } else {
        println!("{line}");
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    crate::agent::refuse_beside_agent("QUIC service", None)?;
    let server = app::serve(&app::ServeConfig {
        listen: a.listen,
        iface: a.iface,
        dir: a.dir,
        memory: a.memory,
        io: a.tuning.io(),
        tuning: a.tuning.config(),
        cert: a.cert.zip(a.key),
        ipv6_only: a.ipv6_only,
    })?;
    eprintln!("{}", server.summary());
    let r = server.run(a.duration.map(Into::into));
    print(a.json, r.to_json(), &r);
    Ok(())
}

fn get(a: GetArgs) -> Result<()> {
    let r = app::get(&app::GetConfig {
        url: a.url,
        io: a.tuning.io(),
        tuning: a.tuning.config(),
        iface: a.iface,
        ca: a.ca,
        insecure: a.insecure,
        output: a.output,
        sha256: !a.no_sha256,
        timeout: a.timeout,
        progress: !a.json,
    })?;
    print(a.json, r.to_json(), &r);
    if r.fetched.status != 200 {
        anyhow::bail!("{} answered {}", r.url, r.fetched.status);
    }
    Ok(())
}
