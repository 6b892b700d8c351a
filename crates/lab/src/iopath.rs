//! I/O paths: one sender and one receiver for each way a program can move
//! UDP datagrams on Linux, usable on their own (`peregrine io send|recv`)
//! and in `bench netmodes`:
//!
//! - `udp`: one `send`/`recv` per datagram on a kernel UDP socket (the
//!   seed's baseline);
//! - `mmsg`: kernel UDP with sendmmsg/recvmmsg (`peregrine_io::UdpBatch`);
//! - `mmsg-gso`: the same with UDP GSO on the sender (one buffer of up to
//!   64 datagrams per message, split by the stack) and UDP GRO on the
//!   receiver (coalesced datagrams split by their segment size);
//! - `mmap`: PACKET_MMAP, a TPACKET_V2 TX ring of frames built here and a
//!   TPACKET_V3 RX block ring (`peregrine_io::packet_mmap`);
//! - `afxdp`: AF_XDP sockets (`peregrine_xsk`), the receiver fed by
//!   `dispatch.bpf.c` on its interface.
//!
//! Every datagram carries the generator's meta (magic, sequence, send time)
//! and then a pattern derived from its sequence number, so a receiver checks
//! count, order and every payload byte, and times each datagram (one clock:
//! sender and receiver run on one host).
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use peregrine_bpf::pod::Pod;
use peregrine_bpf::{XdpMode, XdpProgram};
use peregrine_host::cpu::monotonic_ns;
use peregrine_io::packet_mmap::{RxRing, RxRingConfig, TxRing, TxRingConfig};
use peregrine_io::{DatagramIo, RecvBatch, Transmit, UdpBatch};
use peregrine_testbed::gen::{read_meta, PEREGRINE_MAGIC};
use peregrine_testbed::skel::gen::types::gen_meta;
use peregrine_wire::{MacAddr, UdpFrameSpec};
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

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `ts` is valid for writes for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The send loop of one path: `send(n) -> (sent, dropped)`.
trait PathSender {
    fn send(&mut self, n: u64) -> std::io::Result<u64>;
    fn drops(&self) -> u64;
    fn max_batch(&self) -> u64;
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
    let mut sender: Box<dyn PathSender> = match cfg.path {
        IoPath::Udp | IoPath::Mmsg | IoPath::MmsgGso => {
            Box::new(SocketSender::new(&frame, cfg.path)?)
        }
        IoPath::Mmap => Box::new(MmapSender::new(&cfg.iface, frame)?),
        IoPath::Afxdp => Box::new(XskSender::new(&cfg.iface, frame)?),
    };
    let cpu0 = thread_cpu();
    let start = Instant::now();
    let batch = sender.max_batch();
    let sent = pace(cfg.rate, cfg.limit, batch, |n| {
        let k = sender.send(n)?;
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

/// Kernel UDP: one datagram per call (`udp`), a batch of messages
/// (`mmsg`), or a batch of GSO buffers of several datagrams each
/// (`mmsg-gso`).
struct SocketSender {
    io: UdpBatch,
    /// One buffer per message of a call, `per_message` payloads each.
    buffers: Vec<Vec<u8>>,
    per_message: usize,
    payload_len: usize,
    plain: bool,
    seq: u32,
    drops: u64,
}

/// Datagrams per sendmmsg/recvmmsg.
const MMSG_BATCH: usize = 64;

/// GSO buffers per sendmmsg (each up to 64 datagrams, the kernel's most).
const GSO_MESSAGES: usize = 8;

impl SocketSender {
    fn new(f: &UdpFrameSpec, path: IoPath) -> Result<SocketSender> {
        let src = SocketAddr::new(f.src_ip, f.src_port);
        let dst = SocketAddr::new(f.dst_ip, f.dst_port);
        let s = std::net::UdpSocket::bind(src)
            .map_err(|e| LabError::Other(format!("binding {src}: {e}")))?;
        s.connect(dst)
            .map_err(|e| LabError::Other(format!("connecting to {dst}: {e}")))?;
        let plen = f.frame_len - f.header_len();
        let (messages, per_message) = match path {
            IoPath::Udp => (1, 1),
            IoPath::MmsgGso => {
                peregrine_io::set_udp_gso(&s, plen as u16)
                    .map_err(|e| LabError::Other(format!("UDP GSO on {src}: {e}")))?;
                (GSO_MESSAGES, (65_000 / plen).clamp(1, 64))
            }
            _ => (MMSG_BATCH, 1),
        };
        Ok(SocketSender {
            io: UdpBatch::new(s, messages),
            buffers: vec![vec![0; plen * per_message]; messages],
            per_message,
            payload_len: plen,
            plain: path == IoPath::Udp,
            seq: 0,
            drops: 0,
        })
    }
}

impl PathSender for SocketSender {
    fn max_batch(&self) -> u64 {
        (self.buffers.len() * self.per_message) as u64
    }

    fn send(&mut self, n: u64) -> std::io::Result<u64> {
        let n = (n as usize).min(self.buffers.len() * self.per_message);
        let now = monotonic_ns();
        let (plen, k) = (self.payload_len, self.per_message);
        for j in 0..n {
            let b = &mut self.buffers[j / k][(j % k) * plen..][..plen];
            write_payload(b, self.seq.wrapping_add(j as u32), now);
        }
        let r = if self.plain {
            // The plain path: send(2), one datagram per call.
            self.io.socket().send(&self.buffers[0]).map(|_| 1)
        } else {
            let t: Vec<Transmit> = (0..n.div_ceil(k))
                .map(|m| Transmit {
                    destination: None,
                    contents: &self.buffers[m][..(n - m * k).min(k) * plen],
                })
                .collect();
            // Messages taken -> datagrams taken (the last may be partial).
            self.io.send(&t).map(|msgs| (msgs * k).min(n))
        };
        let sent = match r {
            Ok(k) => k,
            // A full device queue or a peer with no listener yet: the
            // datagram is gone and counted, the schedule goes on.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::ECONNREFUSED)) => {
                self.drops += 1;
                1
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        self.seq = self.seq.wrapping_add(sent as u32);
        Ok(sent as u64)
    }

    fn drops(&self) -> u64 {
        self.drops
    }
}

/// Builds datagram `seq`'s whole frame into `buf` (the raw paths' slot or
/// UMEM frame) with `wire`'s builder: its length, or 0 if it does not fit.
fn build_frame(
    frame: &UdpFrameSpec,
    payload: &mut [u8],
    seq: &mut u32,
    now: u64,
    buf: &mut [u8],
) -> usize {
    write_payload(payload, *seq, now);
    match frame.write_into(buf, payload) {
        Ok(()) => {
            *seq = seq.wrapping_add(1);
            frame.frame_len
        }
        Err(_) => 0,
    }
}

/// PACKET_MMAP: frames built by `wire` in the TX ring, one flush a batch.
struct MmapSender {
    ring: TxRing,
    frame: UdpFrameSpec,
    payload: Vec<u8>,
    seq: u32,
}

impl MmapSender {
    fn new(iface: &str, frame: UdpFrameSpec) -> Result<MmapSender> {
        let ring = TxRing::open(iface, TxRingConfig::default())
            .map_err(|e| LabError::Other(format!("PACKET_MMAP TX ring on {iface}: {e}")))?;
        if frame.frame_len > ring.max_frame_len() {
            return Err(LabError::Invalid(format!(
                "a {}-byte frame does not fit a TX ring slot ({} bytes)",
                frame.frame_len,
                ring.max_frame_len()
            )));
        }
        let payload = vec![0; frame.frame_len - frame.header_len()];
        Ok(MmapSender {
            ring,
            frame,
            payload,
            seq: 0,
        })
    }
}

impl PathSender for MmapSender {
    fn max_batch(&self) -> u64 {
        // The seed flushed every 1000 frames; a quarter of the ring keeps
        // slots free while the kernel finishes the previous batch.
        (self.ring.capacity() / 4).max(1) as u64
    }

    fn send(&mut self, n: u64) -> std::io::Result<u64> {
        let now = monotonic_ns();
        let Self {
            ring,
            frame,
            payload,
            seq,
        } = self;
        let sent = ring.send(n as usize, |buf| build_frame(frame, payload, seq, now, buf))?;
        Ok(sent as u64)
    }

    fn drops(&self) -> u64 {
        self.ring.device_drops() + self.ring.wrong_format()
    }
}

/// AF_XDP: frames built by `wire` in UMEM frames on the TX ring (queue 0).
struct XskSender {
    xsk: peregrine_xsk::Xsk,
    frame: UdpFrameSpec,
    payload: Vec<u8>,
    seq: u32,
}

impl XskSender {
    fn new(iface: &str, frame: UdpFrameSpec) -> Result<XskSender> {
        let xsk = peregrine_xsk::Xsk::open(iface, 0, peregrine_xsk::XskConfig::default())
            .map_err(|e| LabError::Other(format!("AF_XDP socket on {iface}: {e}")))?;
        let payload = vec![0; frame.frame_len - frame.header_len()];
        Ok(XskSender {
            xsk,
            frame,
            payload,
            seq: 0,
        })
    }
}

impl PathSender for XskSender {
    fn max_batch(&self) -> u64 {
        256
    }

    fn send(&mut self, n: u64) -> std::io::Result<u64> {
        let now = monotonic_ns();
        let Self {
            xsk,
            frame,
            payload,
            seq,
        } = self;
        let sent = xsk.transmit(n.min(256) as u32, |buf| {
            build_frame(frame, payload, seq, now, buf)
        })?;
        Ok(u64::from(sent))
    }

    fn drops(&self) -> u64 {
        0
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

/// The receiving side of one path, polled by the receiver's thread.
trait PathReceiver {
    /// Waits up to ~50 ms for datagrams, hands each payload to `each`.
    fn receive(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<usize>;
    /// Drops the kernel counted at this receiver so far.
    fn kernel_drops(&mut self) -> u64;
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
            let opened = (|| -> Result<(Box<dyn PathReceiver>, String, Option<_>)> {
                if let Some(cpu) = cpu {
                    peregrine_host::cpu::pin_to_cpu(cpu)?;
                }
                let guard = match &ns {
                    Some(n) => Some(peregrine_host::netns::NetnsGuard::enter(n)?),
                    None => None,
                };
                let (r, note) = open_receiver(&cfg)?;
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
            let cpu0 = thread_cpu();
            while !st.load(Ordering::Relaxed) {
                let mut tl = t.lock().unwrap_or_else(|e| e.into_inner());
                // The clock is read once a batch, when its first datagram is
                // handled: every datagram of it was sent before then.
                let mut now = 0;
                rx.receive(&mut |p: &[u8]| {
                    if now == 0 {
                        now = monotonic_ns();
                    }
                    tl.datagram(p, now);
                })?;
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

fn open_receiver(cfg: &RecvConfig) -> Result<(Box<dyn PathReceiver>, String)> {
    Ok(match cfg.path {
        IoPath::Udp | IoPath::Mmsg | IoPath::MmsgGso => {
            let s = std::net::UdpSocket::bind(cfg.local)
                .map_err(|e| LabError::Other(format!("binding {}: {e}", cfg.local)))?;
            s.set_read_timeout(Some(POLL))
                .map_err(|e| LabError::Other(e.to_string()))?;
            let granted = peregrine_io::deep_receive_buffer(&s, 16 << 20);
            let gro = cfg.path == IoPath::MmsgGso;
            if gro {
                peregrine_io::set_udp_gro(&s, true)
                    .map_err(|e| LabError::Other(format!("UDP GRO on {}: {e}", cfg.local)))?;
            }
            let batch = if cfg.path == IoPath::Udp {
                1
            } else {
                MMSG_BATCH
            };
            // A GRO buffer holds up to 64 KiB of coalesced datagrams.
            let slot = if gro { 65_536 } else { 2048 };
            (
                Box::new(SocketReceiver {
                    io: UdpBatch::new(s, batch),
                    slots: RecvBatch::new(batch, slot),
                    plain: cfg.path == IoPath::Udp,
                    buf: vec![0; 2048],
                }),
                format!("socket receive buffer {granted} B"),
            )
        }
        IoPath::Mmap => {
            let ring = RxRing::open(&cfg.iface, RxRingConfig::default()).map_err(|e| {
                LabError::Other(format!("PACKET_MMAP RX ring on {}: {e}", cfg.iface))
            })?;
            let note = format!("TPACKET_V3 ring {} MiB", ring.memory_bytes() >> 20);
            (
                Box::new(MmapReceiver {
                    ring,
                    local: cfg.local,
                }),
                note,
            )
        }
        IoPath::Afxdp => {
            let r = XskReceiver::open(&cfg.iface, cfg.local)?;
            let note = r.note.clone();
            (Box::new(r), note)
        }
    })
}

struct SocketReceiver {
    io: UdpBatch,
    slots: RecvBatch,
    plain: bool,
    buf: Vec<u8>,
}

impl PathReceiver for SocketReceiver {
    fn receive(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<usize> {
        if self.plain {
            // The plain path: recv(2), one datagram per call.
            return match self.io.socket().recv(&mut self.buf) {
                Ok(n) => {
                    each(&self.buf[..n]);
                    Ok(1)
                }
                Err(e) if is_timeout(&e) => Ok(0),
                Err(e) => Err(LabError::Other(format!("udp receiver: {e}"))),
            };
        }
        match self.slots.recv(&mut self.io) {
            Ok(n) => {
                for (p, m) in self.slots.iter() {
                    // Coalesced by GRO: split at the segment size.
                    let stride = if m.stride > 0 {
                        m.stride
                    } else {
                        p.len().max(1)
                    };
                    for d in p.chunks(stride) {
                        each(d);
                    }
                }
                Ok(n)
            }
            Err(e) if is_timeout(&e) => Ok(0),
            Err(e) => Err(LabError::Other(format!("mmsg receiver: {e}"))),
        }
    }

    fn kernel_drops(&mut self) -> u64 {
        peregrine_io::receive_drops(self.io.socket()).unwrap_or(0)
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

/// A received frame as the raw receivers see it: Some(payload) for a
/// checked UDP datagram to `local`, Some(empty) for a frame to `local`'s
/// port that fails the checks (counted as corrupt), None for other traffic.
/// Frames from a local kernel sender at default offloads hold a partial
/// UDP checksum; the parser accepts exactly that.
fn payload_for(frame: &[u8], local: SocketAddr) -> Option<&[u8]> {
    match peregrine_wire::parse_udp_frame(frame) {
        Ok(u)
            if u.dst_port == local.port()
                && (local.ip().is_unspecified() || u.dst_ip == local.ip()) =>
        {
            Some(u.payload)
        }
        Ok(_) => None,
        Err(_) => is_our_port(frame, local.port()).then_some(&[]),
    }
}

struct MmapReceiver {
    ring: RxRing,
    local: SocketAddr,
}

impl PathReceiver for MmapReceiver {
    fn receive(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let local = self.local;
        let mut n = 0;
        self.ring
            .receive(POLL, |frame, _status| {
                if let Some(p) = payload_for(frame, local) {
                    each(p);
                    n += 1;
                }
            })
            .map_err(|e| LabError::Other(format!("mmap receiver: {e}")))?;
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.ring.stats().map(|s| s.drops).unwrap_or(0)
    }
}

/// Whether an unparsable frame still names UDP port `port` where an
/// untagged IPv4 or IPv6 UDP header would hold it.
fn is_our_port(frame: &[u8], port: u16) -> bool {
    let at = match frame.get(12..14) {
        Some([0x08, 0x00]) if frame.get(23) == Some(&17) => 14 + usize::from(frame[14] & 0xf) * 4,
        Some([0x86, 0xdd]) if frame.get(20) == Some(&17) => 54,
        _ => return false,
    };
    frame.get(at + 2..at + 4) == Some(&port.to_be_bytes()[..])
}

/// AF_XDP: `dispatch.bpf.c` on the interface sends the port to one socket
/// on RX queue 0, read here in place.
struct XskReceiver {
    xsk: peregrine_xsk::Xsk,
    local: SocketAddr,
    note: String,
    _prog: peregrine_bpf::dispatch::DispatchProgram,
    _link: peregrine_bpf::Link,
}

impl XskReceiver {
    fn open(iface: &str, local: SocketAddr) -> Result<XskReceiver> {
        use peregrine_bpf::dispatch::{slot, DispatchProgram, Policy};
        let prog = DispatchProgram::load()?;
        // Native XDP where the device has it (veth), generic otherwise
        // (macvlan, vxlan-bridged ports report which).
        let (link, mode) = match prog.attach(iface, XdpMode::Native) {
            Ok(l) => (l, XdpMode::Native),
            Err(_) => (prog.attach(iface, XdpMode::Generic)?, XdpMode::Generic),
        };
        prog.set_function(0, local.port(), 1, Policy::RoundRobin)?;
        let cfg = peregrine_xsk::XskConfig {
            frames: 16384,
            ring: 4096,
            ..peregrine_xsk::XskConfig::default()
        };
        let xsk = peregrine_xsk::Xsk::open(iface, 0, cfg)
            .map_err(|e| LabError::Other(format!("AF_XDP socket on {iface}: {e}")))?;
        prog.register_socket(slot(0, 0, 0), xsk.fd())?;
        let note = format!("XDP {mode}, AF_XDP {}", xsk.mode().as_str());
        Ok(XskReceiver {
            xsk,
            local,
            note,
            _prog: prog,
            _link: link,
        })
    }
}

impl PathReceiver for XskReceiver {
    fn receive(&mut self, each: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let local = self.local;
        let mut n = 0;
        let (got, _) = self
            .xsk
            .process(256, |buf, len| {
                // The XDP program sends only our port here.
                each(payload_for(&buf[..len], local).unwrap_or(&[]));
                n += 1;
                peregrine_xsk::Verdict::Drop
            })
            .map_err(|e| LabError::Other(format!("afxdp receiver: {e}")))?;
        if got == 0 {
            self.xsk.wait(POLL.as_millis() as i32);
        }
        Ok(n)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.xsk
            .kernel_stats()
            .map(|k| {
                k.rx_dropped
                    + k.rx_ring_full
                    + k.rx_fill_ring_empty_descriptors
                    + k.rx_invalid_descriptors
            })
            .unwrap_or(0)
    }
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
