//! I/O paths: the lab's one family of senders and receivers, a transport
//! for each way a program can move UDP datagrams on Linux (`PathIo`, one
//! `peregrine_io::DatagramIo` each), a paced sender over it
//! (`DatagramSender`) and a checking receiver (`Receiver`). Used on their
//! own (`peregrine io send|recv`), in `bench netmodes`, and by the
//! generator's socket and afxdp backends (`traffic`):
//!
//! - `udp`: one `send`/`recv` per datagram on a kernel UDP socket (the
//!   seed's baseline);
//! - `mmsg`: kernel UDP with sendmmsg/recvmmsg (`peregrine_io::UdpBatch`);
//! - `mmsg-gso`: the same with UDP GSO on the sender (one buffer of up to
//!   64 datagrams per message, split by the stack) and UDP GRO on the
//!   receiver (coalesced datagrams split by their segment size);
//! - `mmap`: PACKET_MMAP, a TPACKET_V2 TX ring and a TPACKET_V3 RX block
//!   ring (`peregrine_io::packet_mmap::MmapDatagrams`);
//! - `afxdp`: AF_XDP sockets (`peregrine_xsk::XskDatagrams`), the receiver
//!   fed by `dispatch.bpf.c` on its interface.
//!
//! Every datagram carries the generator's meta (magic, sequence, send time)
//! and then a pattern derived from its sequence number, so a receiver checks
//! count, order and every payload byte, and times each datagram (one clock:
//! sender and receiver run on one host).
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use peregrine_bpf::dispatch::DispatchProgram;
use peregrine_bpf::pod::Pod;
use peregrine_bpf::{Link, XdpMode, XdpProgram};
use peregrine_host::cpu::{monotonic_ns, thread_cpu};
use peregrine_io::packet_mmap::MmapDatagrams;
use peregrine_io::{DatagramIo, RecvBatch, RecvMeta, Transmit, UdpBatch};
use peregrine_testbed::gen::{read_meta, PEREGRINE_MAGIC};
use peregrine_testbed::skel::gen::types::gen_meta;
use peregrine_wire::{MacAddr, UdpFrameSpec};
use peregrine_xsk::{XskConfig, XskDatagrams};
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::pacing::{pace, Limit, Rate};
use crate::results::Latency;

/// How datagrams are moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum IoPath {
    Udp,
    Mmsg,
    #[serde(rename = "mmsg-gso")]
    MmsgGso,
    Mmap,
    Afxdp,
}

impl IoPath {
    pub const ALL: [IoPath; 5] = [
        IoPath::Udp,
        IoPath::Mmsg,
        IoPath::MmsgGso,
        IoPath::Mmap,
        IoPath::Afxdp,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IoPath::Udp => "udp",
            IoPath::Mmsg => "mmsg",
            IoPath::MmsgGso => "mmsg-gso",
            IoPath::Mmap => "mmap",
            IoPath::Afxdp => "afxdp",
        }
    }

    /// Whether the path builds whole frames itself (and so needs the
    /// interface and the next hop's MAC).
    pub fn raw(self) -> bool {
        matches!(self, IoPath::Mmap | IoPath::Afxdp)
    }
}

impl std::fmt::Display for IoPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for IoPath {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        IoPath::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("unknown I/O path {s:?}: expected udp, mmsg, mmsg-gso, mmap or afxdp")
            })
    }
}

/// Bytes of the meta every datagram starts with.
const META_LEN: usize = std::mem::size_of::<gen_meta>();

/// Smallest and largest UDP payload a path sends: the meta must fit, and
/// one datagram must fit a 1500-byte MTU (no fragments).
pub fn payload_limits(v6: bool) -> (usize, usize) {
    (META_LEN, if v6 { 1452 } else { 1472 })
}

/// Writes datagram `seq`'s payload into `buf`: meta, then the pattern.
pub fn write_payload(buf: &mut [u8], seq: u32, tx_ns: u64) {
    let meta = gen_meta {
        magic: PEREGRINE_MAGIC,
        seq,
        tx_ns,
    };
    let n = META_LEN.min(buf.len());
    buf[..n].copy_from_slice(&meta.as_bytes()[..n]);
    for (i, b) in buf[n..].iter_mut().enumerate() {
        *b = pattern(seq, i);
    }
}

fn pattern(seq: u32, i: usize) -> u8 {
    (seq as u8) ^ (i as u8).wrapping_mul(31)
}

/// The sequence number and send time of a payload written by
/// `write_payload`, if it is one and every pattern byte is intact.
pub fn check_payload(buf: &[u8]) -> Option<(u32, u64)> {
    if buf.len() < META_LEN {
        return None;
    }
    let m = read_meta(buf)?;
    let intact = buf[META_LEN..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(m.seq, i));
    intact.then_some((m.seq, m.tx_ns))
}

/// What a sender sends: flow headers (the MACs matter only to raw paths;
/// `frame_len` is set from `payload_len`), from which interface.
#[derive(Debug, Clone)]
pub struct SendConfig {
    pub path: IoPath,
    /// Sending interface (raw paths).
    pub iface: String,
    pub frame: UdpFrameSpec,
    pub payload_len: usize,
    pub rate: Rate,
    pub limit: Limit,
}

impl SendConfig {
    /// Datagrams of `payload_len` bytes to `dst` from our address toward it
    /// and `src_port`, over the route the calling thread's namespace has
    /// (raw paths build frames for its next hop, resolved if need be); the
    /// payload checked against the route's MTU. Unpaced until `rate` is set.
    pub fn toward(
        path: IoPath,
        dst: SocketAddr,
        src_port: u16,
        payload_len: usize,
        limit: Limit,
    ) -> Result<SendConfig> {
        let hop = next_hop(dst.ip())?;
        check_mtu(payload_len, dst.is_ipv6(), hop.mtu, &hop.iface)?;
        Ok(SendConfig {
            path,
            iface: hop.iface,
            frame: UdpFrameSpec {
                src_mac: hop.src_mac,
                dst_mac: hop.dst_mac,
                src_ip: hop.src,
                dst_ip: dst.ip(),
                src_port,
                dst_port: dst.port(),
                ttl: 64,
                frame_len: 0,
            }
            .sized_for(payload_len),
            payload_len,
            rate: Rate::Max,
            limit,
        })
    }

    /// Bytes of each frame on the wire, FCS included (rates in bits).
    pub fn frame_bytes(&self) -> usize {
        self.frame.header_len() + self.payload_len + peregrine_wire::FCS_LEN
    }
}

/// What a sender did.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct SendReport {
    pub sent: u64,
    pub elapsed_s: f64,
    /// Datagrams the sending path refused or the device dropped as they
    /// left (ENOBUFS, a full socket, PACKET_MMAP device drops).
    pub send_drops: u64,
    /// CPU time of the sending thread (user + system), seconds.
    pub cpu_s: f64,
    /// When the first datagram went (for the delivery window).
    #[serde(skip)]
    pub started: Option<Instant>,
}

/// Sends as `cfg` says from the calling thread (in the namespace it is
/// in), adding to `progress` as it goes.
pub fn send(cfg: &SendConfig, progress: &AtomicU64) -> Result<SendReport> {
    let (lo, hi) = payload_limits(cfg.frame.dst_ip.is_ipv6());
    if cfg.payload_len < lo || cfg.payload_len > hi {
        return Err(LabError::Invalid(format!(
            "payload size {} outside {lo}..={hi} bytes",
            cfg.payload_len
        )));
    }
    for ip in [cfg.frame.src_ip, cfg.frame.dst_ip] {
        if !crate::topology::allowed_address(ip) {
            return Err(LabError::Invalid(format!(
                "address {ip} is outside 198.18.0.0/15 and 2001:db8::/32; peregrine sends only to lab ranges"
            )));
        }
    }
    let frame = cfg.frame.clone().sized_for(cfg.payload_len);
    let io = PathIo::sender(cfg.path, &frame, &cfg.iface, 0)?;
    // Connected sockets name no destination (no route lookup per
    // datagram); raw paths build it into every frame.
    let dst = SocketAddr::new(frame.dst_ip, frame.dst_port);
    let flows = vec![(None, cfg.path.raw().then_some(dst))];
    let mut sender =
        DatagramSender::new(vec![io], cfg.payload_len, Refused::Dropped)?.with_flows(flows);
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let batch = sender.max_batch() as u64;
    let sent = pace(cfg.rate, cfg.limit, batch, |n| {
        let now = monotonic_ns();
        let k = sender.send(n as usize, |seq, buf| {
            write_payload(buf, seq as u32, now);
            buf.len()
        })? as u64;
        progress.fetch_add(k, Ordering::Relaxed);
        Ok(k)
    })
    .map_err(|e| LabError::Other(format!("{} sender: {e}", cfg.path)))?;
    Ok(SendReport {
        sent,
        started: Some(start),
        elapsed_s: start.elapsed().as_secs_f64(),
        send_drops: sender.drops(),
        cpu_s: (thread_cpu() - cpu0).as_secs_f64(),
    })
}

/// Datagrams per sendmmsg/recvmmsg.
const MMSG_BATCH: usize = 64;

/// GSO buffers per sendmmsg (each up to 64 datagrams, the kernel's most).
const GSO_MESSAGES: usize = 8;

/// Frames one AF_XDP TX or RX batch moves.
const XSK_BATCH: usize = 256;

/// One path's transport, opened to send or to receive: what every sender
/// and receiver of the lab moves datagrams with (`io send|recv`, bench
/// netmodes, the generator's socket and afxdp backends), one `DatagramIo`.
pub enum PathIo {
    /// `udp`: one send(2)/recv(2) per datagram.
    Udp(std::net::UdpSocket),
    /// `mmsg`: sendmmsg/recvmmsg.
    Mmsg(UdpBatch),
    /// `mmsg-gso`: the same with UDP GSO on the sender (buffers of several
    /// datagrams, split by the stack) and UDP GRO on the receiver.
    MmsgGso(UdpBatch),
    /// `mmap`: PACKET_MMAP rings.
    Mmap(Box<MmapDatagrams>),
    /// `afxdp`: an AF_XDP socket; a receiver's dispatch program, attached
    /// to its interface, sends it the local port.
    Afxdp(Box<XskDatagrams>, Option<Box<(DispatchProgram, Link)>>),
}

impl PathIo {
    /// A sender on `path` of datagrams with `frame`'s headers: kernel
    /// sockets bound to its source and connected to its destination; raw
    /// paths build whole frames (MACs included) on `iface`, AF_XDP on TX
    /// queue `queue`.
    pub fn sender(path: IoPath, frame: &UdpFrameSpec, iface: &str, queue: u32) -> Result<PathIo> {
        let src = SocketAddr::new(frame.src_ip, frame.src_port);
        let dst = SocketAddr::new(frame.dst_ip, frame.dst_port);
        let connected = || -> Result<std::net::UdpSocket> {
            let s = std::net::UdpSocket::bind(src)
                .map_err(|e| LabError::Other(format!("binding {src}: {e}")))?;
            s.connect(dst)
                .map_err(|e| LabError::Other(format!("connecting to {dst}: {e}")))?;
            Ok(s)
        };
        Ok(match path {
            IoPath::Udp => PathIo::Udp(connected()?),
            IoPath::Mmsg => PathIo::Mmsg(UdpBatch::new(connected()?, MMSG_BATCH)),
            IoPath::MmsgGso => {
                let s = connected()?;
                let plen = frame.frame_len - frame.header_len();
                peregrine_io::set_udp_gso(&s, plen as u16)
                    .map_err(|e| LabError::Other(format!("UDP GSO on {src}: {e}")))?;
                PathIo::MmsgGso(UdpBatch::new(s, GSO_MESSAGES))
            }
            IoPath::Mmap => {
                let io = MmapDatagrams::sender(iface, frame.clone())
                    .map_err(|e| LabError::Other(format!("PACKET_MMAP TX ring on {iface}: {e}")))?;
                let slot = io.tx_ring().map_or(0, |t| t.max_frame_len());
                if frame.frame_len > slot {
                    return Err(LabError::Invalid(format!(
                        "a {}-byte frame does not fit a TX ring slot ({slot} bytes)",
                        frame.frame_len
                    )));
                }
                PathIo::Mmap(Box::new(io))
            }
            IoPath::Afxdp => {
                let xsk = peregrine_xsk::Xsk::open(iface, queue, XskConfig::default())
                    .map_err(|e| LabError::Other(format!("AF_XDP socket on {iface}: {e}")))?;
                let io = XskDatagrams::new(xsk, frame.clone(), XSK_BATCH);
                PathIo::Afxdp(Box::new(io), None)
            }
        })
    }

    /// A receiver on `path` of datagrams to `local` (the address may be
    /// unspecified), on `iface` for the raw paths; each receive waits up to
    /// `wait` for the first datagram. Also says how it is set up (buffer,
    /// ring, XDP and bind modes).
    pub fn receiver(
        path: IoPath,
        local: SocketAddr,
        iface: &str,
        wait: Duration,
    ) -> Result<(PathIo, String)> {
        // The raw paths' receiving side: only the address and port matter.
        let spec = UdpFrameSpec {
            src_mac: MacAddr([0; 6]),
            dst_mac: MacAddr([0; 6]),
            src_ip: local.ip(),
            dst_ip: local.ip(),
            src_port: local.port(),
            dst_port: 0,
            ttl: 64,
            frame_len: 0,
        };
        Ok(match path {
            IoPath::Udp | IoPath::Mmsg | IoPath::MmsgGso => {
                let s = std::net::UdpSocket::bind(local)
                    .map_err(|e| LabError::Other(format!("binding {local}: {e}")))?;
                s.set_read_timeout(Some(wait))
                    .map_err(|e| LabError::Other(e.to_string()))?;
                let granted = peregrine_io::deep_receive_buffer(&s, 16 << 20);
                if path == IoPath::MmsgGso {
                    peregrine_io::set_udp_gro(&s, true)
                        .map_err(|e| LabError::Other(format!("UDP GRO on {local}: {e}")))?;
                }
                let io = match path {
                    IoPath::Udp => PathIo::Udp(s),
                    IoPath::Mmsg => PathIo::Mmsg(UdpBatch::new(s, MMSG_BATCH)),
                    _ => PathIo::MmsgGso(UdpBatch::new(s, MMSG_BATCH)),
                };
                (io, format!("socket receive buffer {granted} B"))
            }
            IoPath::Mmap => {
                let mut io = MmapDatagrams::receiver(iface, spec, wait)
                    .map_err(|e| LabError::Other(format!("PACKET_MMAP RX ring on {iface}: {e}")))?;
                let bytes = io.rx_ring().map_or(0, |r| r.memory_bytes());
                (
                    PathIo::Mmap(Box::new(io)),
                    format!("TPACKET_V3 ring {} MiB", bytes >> 20),
                )
            }
            IoPath::Afxdp => {
                use peregrine_bpf::dispatch::{slot, Policy};
                let prog = DispatchProgram::load()?;
                // Native XDP where the device has it (veth), generic
                // otherwise (macvlan, vxlan-bridged ports report which).
                let (link, mode) = match prog.attach(iface, XdpMode::Native) {
                    Ok(l) => (l, XdpMode::Native),
                    Err(_) => (prog.attach(iface, XdpMode::Generic)?, XdpMode::Generic),
                };
                prog.set_function(0, local.port(), 1, Policy::RoundRobin)?;
                let cfg = XskConfig {
                    frames: 16384,
                    ring: 4096,
                    ..XskConfig::default()
                };
                let xsk = peregrine_xsk::Xsk::open(iface, 0, cfg)
                    .map_err(|e| LabError::Other(format!("AF_XDP socket on {iface}: {e}")))?;
                prog.register_socket(slot(0, 0, 0), xsk.fd())?;
                let note = format!("XDP {mode}, AF_XDP {}", xsk.mode().as_str());
                let io = XskDatagrams::new(xsk, spec, XSK_BATCH).with_wait(wait);
                (
                    PathIo::Afxdp(Box::new(io), Some(Box::new((prog, link)))),
                    note,
                )
            }
        })
    }

    /// Slots a receive batch needs, and the bytes of each: a UDP GRO buffer
    /// holds up to 64 KiB of coalesced datagrams; a PACKET_MMAP block up to
    /// 512 frames.
    fn recv_slots(&self) -> (usize, usize) {
        match self {
            PathIo::Udp(_) => (1, 2048),
            PathIo::Mmsg(_) => (MMSG_BATCH, 2048),
            PathIo::MmsgGso(_) => (MMSG_BATCH, 65_536),
            PathIo::Mmap(_) => (512, 2048),
            PathIo::Afxdp(..) => (XSK_BATCH, 2048),
        }
    }

    /// Drops the kernel counted at this receiver so far: the socket's
    /// buffer (udp, mmsg), the ring (mmap: PACKET_STATISTICS; afxdp:
    /// XDP_STATISTICS).
    pub fn kernel_drops(&mut self) -> u64 {
        match self {
            PathIo::Udp(s) => peregrine_io::receive_drops(s).unwrap_or(0),
            PathIo::Mmsg(b) | PathIo::MmsgGso(b) => {
                peregrine_io::receive_drops(b.socket()).unwrap_or(0)
            }
            PathIo::Mmap(m) => m
                .rx_ring()
                .and_then(|r| r.stats().ok())
                .map_or(0, |s| s.drops),
            PathIo::Afxdp(x, _) => x
                .xsk()
                .kernel_stats()
                .map(|k| {
                    k.rx_dropped
                        + k.rx_ring_full
                        + k.rx_fill_ring_empty_descriptors
                        + k.rx_invalid_descriptors
                })
                .unwrap_or(0),
        }
    }

    /// Frames for the receiver's port that failed the checks (raw paths;
    /// the kernel drops such datagrams before a socket sees them).
    pub fn damaged(&self) -> u64 {
        match self {
            PathIo::Mmap(m) => m.damaged(),
            PathIo::Afxdp(x, _) => x.damaged(),
            _ => 0,
        }
    }

    /// Datagrams the device dropped as they left (PACKET_MMAP: ENOBUFS on
    /// a flush, frames the kernel refused as malformed).
    pub fn device_drops(&self) -> u64 {
        match self {
            PathIo::Mmap(m) => m
                .tx_ring()
                .map_or(0, |t| t.device_drops() + t.wrong_format()),
            _ => 0,
        }
    }

    fn io(&mut self) -> &mut dyn DatagramIo {
        match self {
            PathIo::Udp(s) => s,
            PathIo::Mmsg(b) | PathIo::MmsgGso(b) => b,
            PathIo::Mmap(m) => &mut **m,
            PathIo::Afxdp(x, _) => &mut **x,
        }
    }
}

impl DatagramIo for PathIo {
    fn max_batch(&self) -> usize {
        match self {
            PathIo::Udp(s) => s.max_batch(),
            PathIo::Mmsg(b) | PathIo::MmsgGso(b) => b.max_batch(),
            PathIo::Mmap(m) => m.max_batch(),
            PathIo::Afxdp(x, _) => x.max_batch(),
        }
    }

    fn send(&mut self, transmits: &[Transmit<'_>]) -> std::io::Result<usize> {
        self.io().send(transmits)
    }

    fn recv(
        &mut self,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> std::io::Result<usize> {
        self.io().recv(bufs, meta)
    }
}

/// What a sender does when a kernel socket refuses a datagram for want of
/// room in the device queue (ENOBUFS) or because no one listens yet
/// (ECONNREFUSED).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The datagram is gone and counted (`drops`), the schedule goes on:
    /// a measured path's loss at the sender.
    Dropped,
    /// Nothing was sent; the schedule sends it again: back-pressure for a
    /// generator, whose offered count is what left.
    Retried,
}

/// The paced send loop's side of one or more transports: batches of
/// datagrams written in place by the caller, sent through the transports
/// in turn (a generator's flow sockets), each datagram to its flow's
/// destination from its flow's source (raw paths; sockets are connected).
pub struct DatagramSender {
    ios: Vec<PathIo>,
    turn: usize,
    /// One batch: `messages` buffers of `per_message` datagrams of up to
    /// `slot` bytes each (more than one only with UDP GSO, which splits a
    /// buffer at the segment size: then every datagram fills its slot).
    buf: Vec<u8>,
    slot: usize,
    messages: usize,
    per_message: usize,
    /// Flow `k`'s (source, destination); None: the transport's own.
    flows: Vec<(Option<SocketAddr>, Option<SocketAddr>)>,
    refused: Refused,
    seq: u64,
    drops: u64,
}

impl DatagramSender {
    /// Sends through `ios` (one or more of one path) datagrams of up to
    /// `slot` payload bytes (mmsg-gso: of exactly `slot` bytes, the segment
    /// size); the flows are the transports' own until `with_flows`.
    pub fn new(ios: Vec<PathIo>, slot: usize, refused: Refused) -> Result<DatagramSender> {
        let first = ios
            .first()
            .ok_or_else(|| LabError::Config("a sender needs a transport".into()))?;
        let slot = slot.max(1);
        // A socket with UDP GSO (mmsg-gso): one buffer of up to 64
        // datagrams per message (the kernel's most), about 64 KB.
        let per_message = match first {
            PathIo::MmsgGso(_) => (65_000 / slot).clamp(1, 64),
            _ => 1,
        };
        let messages = first.max_batch();
        Ok(DatagramSender {
            ios,
            turn: 0,
            buf: vec![0; messages * per_message * slot],
            slot,
            messages,
            per_message,
            flows: vec![(None, None)],
            refused,
            seq: 0,
            drops: 0,
        })
    }

    /// Datagram `seq` goes from and to flow `seq % flows.len()`'s
    /// addresses (raw paths build them into the frame).
    pub fn with_flows(self, flows: Vec<(Option<SocketAddr>, Option<SocketAddr>)>) -> Self {
        DatagramSender {
            flows: if flows.is_empty() { self.flows } else { flows },
            ..self
        }
    }

    /// Most datagrams one `send` moves.
    pub fn max_batch(&self) -> usize {
        self.messages * self.per_message
    }

    /// Datagrams refused and counted (`Refused::Dropped`) or dropped by the
    /// device as they left.
    pub fn drops(&self) -> u64 {
        self.drops + self.ios.iter().map(PathIo::device_drops).sum::<u64>()
    }

    /// Sends up to `n` datagrams (at most `max_batch`) in one call of the
    /// next transport: datagram `seq`'s payload is what `write(seq, buf)`
    /// writes into `buf` (returning its length); returns how many were
    /// taken (refused ones included when they count as dropped).
    pub fn send(
        &mut self,
        n: usize,
        mut write: impl FnMut(u64, &mut [u8]) -> usize,
    ) -> std::io::Result<usize> {
        let n = n.min(self.max_batch());
        let (slot, k) = (self.slot, self.per_message);
        // Bytes of each message: its datagrams, back to back.
        let mut lengths = Vec::with_capacity(n.div_ceil(k));
        for (j, b) in self.buf.chunks_mut(slot).take(n).enumerate() {
            let len = write(self.seq + j as u64, b).min(slot);
            if j % k == 0 {
                lengths.push(0);
            }
            *lengths.last_mut().expect("pushed") += len;
        }
        let flows = &self.flows;
        let seq = self.seq;
        let transmits: Vec<Transmit> = lengths
            .iter()
            .enumerate()
            .map(|(m, &len)| {
                let flow = (seq + (m * k) as u64) % flows.len() as u64;
                let (source, destination) = flows[flow as usize];
                Transmit {
                    destination,
                    source,
                    contents: &self.buf[m * k * slot..][..len],
                }
            })
            .collect();
        let turn = self.turn;
        self.turn = (turn + 1) % self.ios.len();
        let r = self.ios[turn]
            .send(&transmits)
            // Messages taken -> datagrams taken (the last may be partial).
            .map(|msgs| (msgs * k).min(n));
        let sent = match r {
            Ok(sent) => sent,
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ECONNREFUSED))
                    && self.refused == Refused::Dropped =>
            {
                self.drops += 1;
                1
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ECONNREFUSED)) =>
            {
                0
            }
            Err(e) => return Err(e),
        };
        self.seq += sent as u64;
        Ok(sent)
    }
}

/// What a receiver takes: datagrams to `local` (address and port), on
/// `iface` for the raw paths.
#[derive(Debug, Clone)]
pub struct RecvConfig {
    pub path: IoPath,
    pub iface: String,
    pub local: SocketAddr,
}

/// What a receiver saw.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RecvReport {
    /// Datagrams with an intact payload, each sequence number once.
    pub packets: u64,
    /// UDP payload bytes of those.
    pub bytes: u64,
    /// Datagrams that arrived after a higher sequence number.
    pub out_of_order: u64,
    /// A sequence number seen again.
    pub duplicates: u64,
    /// Datagrams for our port whose payload failed the check.
    pub corrupt: u64,
    /// Drops counted by the kernel at this receiver: the socket's buffer
    /// (udp, mmsg), the ring (mmap: PACKET_STATISTICS; afxdp: XDP_STATISTICS).
    pub kernel_drops: u64,
    /// Receiving thread's CPU time, seconds.
    pub cpu_s: f64,
    /// First to last arrival, seconds.
    pub span_s: f64,
    pub latency: Option<Latency>,
    /// How the receiver ran (AF_XDP: XDP mode and bind mode).
    pub note: String,
    /// When the last intact datagram arrived.
    #[serde(skip)]
    pub last_arrival: Option<Instant>,
}

/// Per-datagram bookkeeping of a receiver: which sequence numbers came,
/// in which order, intact or not, and when.
struct Tally {
    seen: Vec<u64>,
    highest: Option<u32>,
    report: RecvReport,
    first: Option<Instant>,
    last: Option<Instant>,
    hist: Histogram<u64>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            seen: Vec::new(),
            highest: None,
            report: RecvReport::default(),
            first: None,
            last: None,
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds"),
        }
    }

    /// One datagram's payload, received at `now_ns`.
    fn datagram(&mut self, payload: &[u8], now_ns: u64) {
        let Some((seq, tx_ns)) = check_payload(payload) else {
            self.report.corrupt += 1;
            return;
        };
        let (word, bit) = ((seq / 64) as usize, seq % 64);
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & (1 << bit) != 0 {
            self.report.duplicates += 1;
            return;
        }
        self.seen[word] |= 1 << bit;
        match self.highest {
            Some(h) if seq < h => self.report.out_of_order += 1,
            _ => self.highest = Some(seq),
        }
        self.report.packets += 1;
        self.report.bytes += payload.len() as u64;
        if tx_ns != 0 {
            let _ = self.hist.record(now_ns.saturating_sub(tx_ns).max(1));
        }
        let t = Instant::now();
        self.first.get_or_insert(t);
        self.last = Some(t);
    }

    /// Sequence numbers below `sent` that never came.
    fn missing(&self, sent: u64) -> u64 {
        sent.saturating_sub(
            (0..sent)
                .filter(|&s| {
                    self.seen
                        .get((s / 64) as usize)
                        .is_some_and(|w| w & (1 << (s % 64)) != 0)
                })
                .count() as u64,
        )
    }
}

/// A receiver running on its own thread (in a namespace, if given) until
/// `finish`.
pub struct Receiver {
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    tally: Arc<Mutex<Tally>>,
    thread: Option<std::thread::JoinHandle<Result<(u64, f64, String)>>>,
}

const POLL: Duration = Duration::from_millis(50);

impl Receiver {
    /// Opens the receiver in namespace `ns` (None: where the caller is) and
    /// starts taking datagrams; returns once it is ready.
    pub fn start(ns: Option<&str>, cfg: RecvConfig, cpu: Option<usize>) -> Result<Receiver> {
        let stop = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let tally = Arc::new(Mutex::new(Tally::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let (st, c, t) = (stop.clone(), count.clone(), tally.clone());
        let ns = ns.map(str::to_string);
        let thread = std::thread::spawn(move || -> Result<(u64, f64, String)> {
            let opened = (|| -> Result<(PathIo, String, Option<_>)> {
                if let Some(cpu) = cpu {
                    peregrine_host::cpu::pin_to_cpu(cpu)?;
                }
                let guard = match &ns {
                    Some(n) => Some(peregrine_host::netns::NetnsGuard::enter(n)?),
                    None => None,
                };
                let (r, note) = PathIo::receiver(cfg.path, cfg.local, &cfg.iface, POLL)?;
                Ok((r, note, guard))
            })();
            let (mut rx, note, _guard) = match opened {
                Ok(o) => {
                    let _ = ready_tx.send(Ok(()));
                    o
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(LabError::Other(e.to_string())));
                    return Err(e);
                }
            };
            let (slots, size) = rx.recv_slots();
            let mut batch = RecvBatch::new(slots, size);
            let mut damaged = 0;
            let cpu0 = thread_cpu();
            while !st.load(Ordering::Relaxed) {
                let got = match batch.recv(&mut rx) {
                    Ok(n) => n,
                    Err(e) if is_timeout(&e) => 0,
                    Err(e) => return Err(LabError::Other(format!("{} receiver: {e}", cfg.path))),
                };
                let mut tl = t.lock().unwrap_or_else(|e| e.into_inner());
                if got > 0 {
                    // The clock is read once a batch, when it came: every
                    // datagram of it was sent before then.
                    let now = monotonic_ns();
                    for (p, m) in batch.iter() {
                        // Coalesced by GRO: split at the segment size.
                        let stride = if m.stride > 0 {
                            m.stride
                        } else {
                            p.len().max(1)
                        };
                        for d in p.chunks(stride) {
                            tl.datagram(d, now);
                        }
                    }
                }
                // Frames for our port that failed the checks (raw paths).
                let d = rx.damaged();
                tl.report.corrupt += d - damaged;
                damaged = d;
                c.store(tl.report.packets, Ordering::Relaxed);
            }
            Ok((rx.kernel_drops(), (thread_cpu() - cpu0).as_secs_f64(), note))
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Receiver {
                stop,
                count,
                tally,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(LabError::Other("receiver thread ended".into())),
        }
    }

    /// Intact datagrams so far.
    pub fn received(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Waits (up to `timeout`) until `want` datagrams came or none came
    /// for 300 ms, then stops and reports; `sent` (if known) counts the
    /// sequence numbers that never came.
    pub fn finish(mut self, want: Option<u64>, timeout: Duration) -> Result<(RecvReport, u64)> {
        let start = Instant::now();
        let (mut last, mut still) = (self.received(), Instant::now());
        while start.elapsed() < timeout {
            let now = self.received();
            if want.is_some_and(|w| now >= w) || still.elapsed() > Duration::from_millis(300) {
                break;
            }
            if now != last {
                (last, still) = (now, Instant::now());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stop.store(true, Ordering::Relaxed);
        let (drops, cpu, note) = self
            .thread
            .take()
            .expect("finished once")
            .join()
            .map_err(|_| LabError::Other("receiver thread panicked".into()))??;
        let t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
        let mut r = t.report.clone();
        r.kernel_drops = drops;
        r.cpu_s = cpu;
        r.note = note;
        r.last_arrival = t.last;
        r.span_s = match (t.first, t.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        r.latency = crate::measure::summarize(&t.hist);
        let missing = want.map(|w| t.missing(w)).unwrap_or(0);
        Ok((r, missing))
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::Interrupted
    )
}

/// Refuses a payload whose IP packet exceeds `mtu` (datagrams are never
/// fragmented here), naming `what` has that MTU.
pub fn check_mtu(payload_len: usize, v6: bool, mtu: u32, what: &str) -> Result<()> {
    let packet = payload_len + if v6 { 48 } else { 28 };
    if packet > mtu as usize {
        return Err(LabError::Invalid(format!(
            "a {payload_len}-byte payload makes a {packet}-byte IP packet, more than {what}'s MTU of {mtu}"
        )));
    }
    Ok(())
}

/// The way to a destination, as the kernel routes it.
#[derive(Debug, Clone)]
pub struct NextHop {
    /// The interface the route leaves by, and its MTU.
    pub iface: String,
    pub mtu: u32,
    /// Our address on it.
    pub src: IpAddr,
    pub src_mac: MacAddr,
    /// The next hop's MAC (the destination's, on the same link).
    pub dst_mac: MacAddr,
}

/// The route to `dst` from the calling thread's namespace, the next hop
/// resolved with one ARP/ND exchange if the kernel has no entry yet. Raw
/// paths build frames with it.
pub fn next_hop(dst: IpAddr) -> Result<NextHop> {
    use peregrine_host::nl::{NeighbourUse, NetlinkHere};
    let nl = NetlinkHere::open()?;
    let route = nl.route_to(dst)?;
    let iface = nix::net::if_::if_indextoname(route.oif)
        .map_err(|e| LabError::Other(format!("the interface toward {dst}: {e}")))?
        .to_string_lossy()
        .into_owned();
    let src = route
        .prefsrc
        .ok_or_else(|| LabError::Other(format!("no source address toward {dst}")))?;
    let hop = route.gateway.unwrap_or(dst);
    let own = nl.link_info(route.oif)?;
    for attempt in 0..60 {
        let mac = nl
            .neighbours(route.oif)?
            .into_iter()
            .find(|n| n.ip == hop && matches!(n.state, NeighbourUse::Valid | NeighbourUse::Stale))
            .and_then(|n| n.mac);
        if let Some(dst_mac) = mac {
            return Ok(NextHop {
                iface,
                mtu: own.mtu,
                src,
                src_mac: own.mac,
                dst_mac,
            });
        }
        if attempt % 10 == 0 {
            // The kernel sends ARP or ND as if it had a packet for the hop
            // (again every 0.5 s: a link still coming up lost the last).
            nl.resolve_neighbour(route.oif, hop)?;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(LabError::Other(format!(
        "next hop {hop} on {iface} did not resolve (no ARP/ND answer in 3 s)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_check_their_own_bytes() {
        for len in [16, 18, 64, 1472] {
            let mut b = vec![0u8; len];
            write_payload(&mut b, 77, 123);
            assert_eq!(check_payload(&b), Some((77, 123)));
            if len > META_LEN {
                b[len - 1] ^= 1;
                assert_eq!(check_payload(&b), None, "a flipped bit is found");
            }
        }
        assert_eq!(check_payload(&[0; 10]), None);
    }

    #[test]
    fn tally_counts_order_duplicates_and_gaps() {
        let mut t = Tally::new();
        let mut b = vec![0u8; 32];
        for seq in [0u32, 1, 3, 2, 3, 5] {
            write_payload(&mut b, seq, 0);
            t.datagram(&b, 1);
        }
        t.datagram(&[1, 2, 3], 1);
        assert_eq!(t.report.packets, 5);
        assert_eq!(t.report.out_of_order, 1);
        assert_eq!(t.report.duplicates, 1);
        assert_eq!(t.report.corrupt, 1);
        assert_eq!(t.missing(6), 1);
    }

    #[test]
    fn paths_parse() {
        for p in IoPath::ALL {
            assert_eq!(p.as_str().parse::<IoPath>().unwrap(), p);
        }
        assert!("dpdk".parse::<IoPath>().is_err());
    }
}
