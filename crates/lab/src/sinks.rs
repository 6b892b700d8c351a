//! Receiver-side sinks: the XDP counting sink and a UDP socket sink that
//! also measures latency from the generator's timestamps.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use peregrine_bpf::sink::SinkProgram;
use peregrine_bpf::{Link, XdpAction, XdpMode, XdpProgram};
use peregrine_testbed::gen::read_meta;

use crate::error::{LabError, Result};
use peregrine_host::cpu::monotonic_ns;
use peregrine_host::netns::{self, NetnsGuard};
use peregrine_io::{RecvBatch, UdpBatch};
use peregrine_xsk::{FrameHandler, Verdict, Workers, Xsk, XskConfig};

/// Delivered traffic as a sink counts it: frames carrying the generator's
/// magic only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    pub packets: u64,
    pub bytes: u64,
}

pub trait Sink: Send + Sync {
    fn delivered(&self) -> Result<Delivered>;
    /// Latency histogram (ns) since the last `take_latency`, if this sink
    /// sees packets in user space.
    fn take_latency(&self) -> Option<Histogram<u64>> {
        None
    }
    fn describe(&self) -> String;
}

/// Waits (up to `timeout`) until `sink` has counted `want` frames more than
/// `before`, then returns how many it counted: exactly `want` unless frames
/// were lost or extra ones arrived. Frames still in flight when a sender
/// returns are waited for, not missed.
pub fn delivered_after(sink: &dyn Sink, before: u64, want: u64, timeout: Duration) -> Result<u64> {
    let start = std::time::Instant::now();
    loop {
        let got = sink.delivered()?.packets.saturating_sub(before);
        if got >= want || start.elapsed() >= timeout {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One-way latencies (ns) recorded by a sink's receive threads, taken (and
/// reset) once per trial.
#[derive(Clone)]
struct Latencies(Arc<Mutex<Histogram<u64>>>);

impl Latencies {
    fn new() -> Latencies {
        let h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
        Latencies(Arc::new(Mutex::new(h)))
    }

    /// Records `now - tx` for each transmit timestamp of a batch (0: none).
    /// `now` must be read after the batch arrived.
    fn record_batch(&self, tx_times: &[u64], now: u64) {
        if tx_times.is_empty() {
            return;
        }
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for &tx in tx_times.iter().filter(|&&tx| tx != 0) {
            let _ = h.record(now.saturating_sub(tx).max(1));
        }
    }

    fn take(&self) -> Histogram<u64> {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let out = h.clone();
        h.reset();
        out
    }
}

/// `sink.bpf.c` attached to an interface; removed on drop.
pub struct XdpSink {
    counters: SinkCounters,
    name: String,
    pinned: Option<std::path::PathBuf>,
}

enum SinkCounters {
    /// Our own program, attached by us.
    Own(Box<(SinkProgram, Link)>),
    /// A peregrine sink someone else attached there (a data plane's
    /// pass-through): we read its counters and leave it in place.
    Shared(peregrine_bpf::sink::MapHandle),
}

impl XdpSink {
    pub fn attach(ns: &str, iface: &str, verdict: XdpAction, mode: XdpMode) -> Result<XdpSink> {
        let prog = SinkProgram::load(verdict)?;
        let link = netns::run_in(ns, || prog.attach(iface, mode))??;
        Ok(XdpSink {
            counters: SinkCounters::Own(Box::new((prog, link))),
            name: format!("xdp-sink {ns}:{iface} ({mode})"),
            pinned: None,
        })
    }

    /// As `attach`, but if a peregrine sink already runs there (for example
    /// the pass-through a data plane put on a veth peer), counts with it.
    pub fn attach_or_share(
        ns: &str,
        iface: &str,
        verdict: XdpAction,
        mode: XdpMode,
    ) -> Result<XdpSink> {
        let existing = netns::run_in(ns, || -> Result<Option<peregrine_bpf::sink::MapHandle>> {
            let idx = peregrine_bpf::link::ifindex(iface)?;
            Ok(peregrine_bpf::sink::attached_sink_stats(idx)?)
        })??;
        match existing {
            Some(map) => Ok(XdpSink {
                counters: SinkCounters::Shared(map),
                name: format!("xdp-sink {ns}:{iface} (already attached, pass)"),
                pinned: None,
            }),
            None => XdpSink::attach(ns, iface, verdict, mode),
        }
    }

    /// All counters, including frames that are not the generator's.
    pub fn stats(&self) -> Result<peregrine_bpf::sink::SinkStats> {
        Ok(match &self.counters {
            SinkCounters::Own(own) => own.0.stats()?,
            SinkCounters::Shared(m) => peregrine_bpf::sink::read_stats(m)?,
        })
    }

    /// Pins the counters at `path` (replacing a pin a killed run left) for
    /// as long as this sink lives.
    pub fn pin(&mut self, path: &std::path::Path) -> Result<()> {
        if let SinkCounters::Own(own) = &mut self.counters {
            let _ = std::fs::remove_file(path);
            own.0.pin_stats(path)?;
            self.pinned = Some(path.to_path_buf());
        }
        Ok(())
    }
}

impl Drop for XdpSink {
    fn drop(&mut self) {
        if let Some(p) = self.pinned.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Sink for XdpSink {
    fn delivered(&self) -> Result<Delivered> {
        let s = self.stats()?;
        Ok(Delivered {
            packets: s.gen_packets,
            bytes: s.gen_bytes,
        })
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// A UDP socket in a namespace counting the generator's datagrams with
/// recvmmsg and recording one-way latency (same host, same clock).
pub struct SocketSink {
    counters: Arc<(AtomicU64, AtomicU64)>,
    hist: Latencies,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The same socket, to read what the kernel dropped at it.
    drops_fd: std::net::UdpSocket,
    name: String,
}

impl SocketSink {
    /// Datagrams the kernel dropped at this sink's socket (buffer full or a
    /// bad checksum): the losses a test may attribute to the receiver.
    pub fn socket_drops(&self) -> Result<u64> {
        peregrine_io::receive_drops(&self.drops_fd)
            .map_err(|e| LabError::Other(format!("socket sink: SO_MEMINFO: {e}")))
    }

    pub fn start(ns: &str, bind: SocketAddr) -> Result<SocketSink> {
        let sock = netns::run_in(ns, || std::net::UdpSocket::bind(bind))?
            .map_err(|e| LabError::Other(format!("socket sink: binding {bind} in {ns}: {e}")))?;
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .map_err(|e| LabError::Other(format!("socket sink: {e}")))?;
        peregrine_io::deep_receive_buffer(&sock, 16 << 20);
        let drops_fd = sock
            .try_clone()
            .map_err(|e| LabError::Other(format!("socket sink: {e}")))?;
        let counters = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let hist = Latencies::new();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, h, st) = (counters.clone(), hist.clone(), stop.clone());
        let nsn = ns.to_string();
        let mut io = UdpBatch::new(sock, SOCKET_SINK_BATCH);
        let thread = std::thread::spawn(move || {
            let _g = NetnsGuard::enter(&nsn).ok();
            recv_loop(&mut io, &c, &h, &st);
        });
        Ok(SocketSink {
            counters,
            hist,
            stop,
            thread: Some(thread),
            drops_fd,
            name: format!("socket-sink {ns} {bind}"),
        })
    }
}

/// Datagrams the socket sink takes per recvmmsg.
const SOCKET_SINK_BATCH: usize = 64;

fn recv_loop(io: &mut UdpBatch, c: &(AtomicU64, AtomicU64), h: &Latencies, stop: &AtomicBool) {
    let mut batch = RecvBatch::new(SOCKET_SINK_BATCH, 2048);
    let mut lat = Vec::with_capacity(SOCKET_SINK_BATCH);
    while !stop.load(Ordering::Relaxed) {
        // MSG_WAITFORONE returns after the first datagram plus whatever
        // else is queued; SO_RCVTIMEO bounds the wait for the first.
        if !matches!(batch.recv(io), Ok(n) if n > 0) {
            continue;
        }
        let now = monotonic_ns();
        let (mut p, mut b) = (0u64, 0u64);
        lat.clear();
        for (buf, _) in batch.iter() {
            let len = buf.len();
            if let Some(meta) = read_meta(buf) {
                p += 1;
                b += len as u64;
                lat.push(meta.tx_ns);
            }
        }
        c.0.fetch_add(p, Ordering::Relaxed);
        c.1.fetch_add(b, Ordering::Relaxed);
        h.record_batch(&lat, now);
    }
}

impl Sink for SocketSink {
    /// Bytes here are UDP payload bytes; callers convert with frame sizes.
    fn delivered(&self) -> Result<Delivered> {
        Ok(Delivered {
            packets: self.counters.0.load(Ordering::Relaxed),
            bytes: self.counters.1.load(Ordering::Relaxed),
        })
    }
    fn take_latency(&self) -> Option<Histogram<u64>> {
        Some(self.hist.take())
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}

impl Drop for SocketSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An AF_XDP sink: `dispatch.bpf.c` on the interface sends the generator's
/// UDP port to one AF_XDP socket per RX queue; a busy-polling worker per
/// socket (one core each) checks every frame (lengths, IP and UDP checksums)
/// and counts it.
pub struct XskSink {
    /// First field, so the workers stop before the program goes.
    _workers: Workers,
    counters: Arc<XskCounters>,
    hist: Latencies,
    _prog: peregrine_bpf::dispatch::DispatchProgram,
    _link: Link,
    /// Socket mode and memory, for the record.
    pub mode: &'static str,
    pub memory_bytes: usize,
    name: String,
}

#[derive(Default)]
struct XskCounters {
    packets: AtomicU64,
    bytes: AtomicU64,
    /// Frames that reached the socket but failed validation.
    corrupt: AtomicU64,
    /// Frames the kernel dropped at the socket (ring full, fill ring empty).
    kernel_drops: AtomicU64,
}

/// One sink worker's state: the batch's counts and latencies, added to the
/// shared counters once per batch.
struct XskSinkWorker {
    counters: Arc<XskCounters>,
    hist: Latencies,
    packets: u64,
    bytes: u64,
    corrupt: u64,
    /// Transmit timestamps of the batch's frames.
    tx_times: Vec<u64>,
    /// Batches since the kernel's drop counters were last read.
    rounds: u32,
}

impl FrameHandler for XskSinkWorker {
    fn frame(&mut self, buf: &mut [u8], len: usize) -> Verdict {
        let frame = &buf[..len];
        match peregrine_wire::parse_udp_frame(frame)
            .ok()
            .and_then(|u| read_meta(u.payload))
        {
            Some(meta) => {
                self.packets += 1;
                self.bytes += frame.len() as u64;
                self.tx_times.push(meta.tx_ns);
            }
            None => self.corrupt += 1,
        }
        Verdict::Drop
    }

    fn end_batch(&mut self, xsk: &Xsk, _batch: peregrine_xsk::Result<(u32, u32)>) {
        let c = &self.counters;
        c.packets.fetch_add(self.packets, Ordering::Relaxed);
        c.bytes.fetch_add(self.bytes, Ordering::Relaxed);
        c.corrupt.fetch_add(self.corrupt, Ordering::Relaxed);
        (self.packets, self.bytes, self.corrupt) = (0, 0, 0);
        // The clock is read after the batch: every frame in it was sent
        // before this instant.
        self.hist.record_batch(&self.tx_times, monotonic_ns());
        self.tx_times.clear();
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds.is_multiple_of(4096) {
            if let Ok(k) = xsk.kernel_stats() {
                c.kernel_drops.store(
                    k.rx_dropped
                        + k.rx_ring_full
                        + k.rx_fill_ring_empty_descriptors
                        + k.rx_invalid_descriptors,
                    Ordering::Relaxed,
                );
            }
        }
    }
}

impl XskSink {
    /// Attaches to `ns:iface`, taking UDP port `port` on `queues` RX queues.
    pub fn start(ns: &str, iface: &str, port: u16, queues: u32, cpus: &[usize]) -> Result<XskSink> {
        use peregrine_bpf::dispatch::{slot, DispatchProgram, Policy};
        let prog = DispatchProgram::load()?;
        let link = netns::run_in(ns, || prog.attach(iface, XdpMode::Native))??;
        prog.set_function(0, port, 1, Policy::RoundRobin)?;
        let counters = Arc::new(XskCounters::default());
        let hist = Latencies::new();
        let mut workers = Workers::new();
        let mut mode = "copy";
        let mut memory = 0;
        for q in 0..queues {
            // Deep rings: a receiver preempted for a few ms on a VM must not
            // overflow (32 MiB of UMEM per queue).
            let cfg = XskConfig {
                frames: 16384,
                ring: 4096,
                ..XskConfig::default()
            };
            let xsk = netns::run_in(ns, || Xsk::open(iface, q, cfg))?
                .map_err(|e| LabError::Other(e.to_string()))?;
            mode = xsk.mode().as_str();
            memory += xsk.memory_bytes();
            prog.register_socket(slot(0, q, 0), xsk.fd())?;
            let cpu = cpus.get(q as usize % cpus.len().max(1)).copied();
            let handler = XskSinkWorker {
                counters: counters.clone(),
                hist: hist.clone(),
                packets: 0,
                bytes: 0,
                corrupt: 0,
                tx_times: Vec::with_capacity(256),
                rounds: 0,
            };
            workers.spawn(xsk, cpu, 256, handler);
        }
        Ok(XskSink {
            _workers: workers,
            counters,
            hist,
            _prog: prog,
            _link: link,
            mode,
            memory_bytes: memory,
            name: format!("af_xdp sink {ns}:{iface} port {port} ({mode}, {queues} queue(s))"),
        })
    }

    /// Frames that reached the socket but failed validation.
    pub fn corrupt(&self) -> u64 {
        self.counters.corrupt.load(Ordering::Relaxed)
    }

    /// Frames the kernel dropped at the sockets (rings full or empty).
    pub fn kernel_drops(&self) -> u64 {
        self.counters.kernel_drops.load(Ordering::Relaxed)
    }
}

impl Sink for XskSink {
    fn delivered(&self) -> Result<Delivered> {
        Ok(Delivered {
            packets: self.counters.packets.load(Ordering::Relaxed),
            bytes: self.counters.bytes.load(Ordering::Relaxed),
        })
    }
    fn take_latency(&self) -> Option<Histogram<u64>> {
        Some(self.hist.take())
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}
