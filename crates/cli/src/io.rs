//! `peregrine io send|recv`: one I/O path's sender or receiver, on its own,
//! in the namespace the command runs in (`ip netns exec`, `lab exec`, a
//! container).
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};
use peregrine_lab::iopath::{self, IoPath, Receiver, RecvConfig, SendConfig};
use peregrine_lab::pacing::Rate;

use crate::bench::PaceArgs;
use crate::units::DurationArg;

#[derive(Subcommand)]
pub enum IoCmd {
    /// Send numbered datagrams (meta + pattern) at a rate, for a count or a time.
    Send(SendArgs),
    /// Receive them and check count, order and every payload byte; loss,
    /// kernel drops, CPU and latency.
    Recv(RecvArgs),
}

#[derive(Args)]
pub struct SendArgs {
    /// udp (send per datagram), mmsg (sendmmsg), mmsg-gso (sendmmsg of UDP
    /// GSO buffers), mmap (PACKET_MMAP TX ring) or afxdp (AF_XDP TX ring).
    #[arg(long)]
    pub path: IoPath,
    /// Destination ADDR:PORT (198.18.0.0/15 or 2001:db8::/32).
    #[arg(long)]
    pub to: SocketAddr,
    /// UDP payload bytes (16..1472 over IPv4, ..1452 over IPv6).
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    #[command(flatten)]
    pub pace: PaceArgs,
    /// Source UDP port.
    #[arg(long, default_value_t = 40000)]
    pub src_port: u16,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RecvArgs {
    /// udp (recv per datagram), mmsg (recvmmsg), mmsg-gso (recvmmsg with UDP
    /// GRO), mmap (TPACKET_V3 RX ring) or afxdp (AF_XDP socket behind an XDP
    /// program on --iface).
    #[arg(long)]
    pub path: IoPath,
    /// Local ADDR:PORT to take datagrams for.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Receiving interface (mmap and afxdp).
    #[arg(long)]
    pub iface: Option<String>,
    /// Stop after this many intact datagrams.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this long (10, 10s, 500ms).
    #[arg(long, default_value = "10s")]
    pub duration: DurationArg,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: IoCmd) -> Result<()> {
    match cmd {
        IoCmd::Send(a) => send(a),
        IoCmd::Recv(a) => recv(a),
    }
}

fn send(a: SendArgs) -> Result<()> {
    if a.pace.count.is_none() && a.pace.duration.is_none() {
        crate::usage!("io send needs --count or --duration (runs are always bounded)");
    }
    let dst = a.to;
    let mut cfg = SendConfig::toward(a.path, dst, a.src_port, a.payload, a.pace.limit())?;
    let frame_bytes = cfg.frame_bytes() as f64;
    if let Some(r) = a.pace.rate {
        cfg.rate = Rate::Pps(r.pps(frame_bytes));
    }
    let r = iopath::send(&cfg, &AtomicU64::new(0))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let pps = r.sent as f64 / r.elapsed_s.max(1e-9);
        println!(
            "{} sent {} datagrams of {} B to {dst} in {:.3} s: {:.0} pps, {:.3} Gbit/s of frames; {} dropped at send; sender CPU {:.3} s",
            a.path,
            r.sent,
            a.payload,
            r.elapsed_s,
            pps,
            pps * frame_bytes * 8.0 / 1e9,
            r.send_drops,
            r.cpu_s
        );
    }
    Ok(())
}

fn recv(a: RecvArgs) -> Result<()> {
    let iface = match (&a.iface, a.path.raw()) {
        (Some(i), _) => i.clone(),
        (None, false) => String::new(),
        (None, true) => crate::usage!("io recv --path {} needs --iface", a.path),
    };
    let rx = Receiver::start(
        None,
        RecvConfig {
            path: a.path,
            iface,
            local: a.listen,
        },
        None,
    )?;
    let limit: Duration = a.duration.into();
    let start = std::time::Instant::now();
    while start.elapsed() < limit
        && !peregrine_host::signals::stop_requested()
        && a.count.is_none_or(|c| rx.received() < c)
    {
        peregrine_host::signals::sleep(Duration::from_millis(20));
    }
    let (r, _) = rx.finish(a.count, Duration::ZERO)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        let lat = r
            .latency
            .map(|l| {
                format!(
                    "; latency p50 {:.1} us, p99 {:.1} us",
                    l.p50_ns as f64 / 1e3,
                    l.p99_ns as f64 / 1e3
                )
            })
            .unwrap_or_default();
        println!(
            "{} received {} datagrams ({} B) in {:.3} s; {} out of order, {} duplicate, {} corrupt, {} dropped by the kernel here; receiver CPU {:.3} s{lat} ({})",
            a.path,
            r.packets,
            r.bytes,
            r.span_s,
            r.out_of_order,
            r.duplicates,
            r.corrupt,
            r.kernel_drops,
            r.cpu_s,
            r.note
        );
    }
    Ok(())
}
