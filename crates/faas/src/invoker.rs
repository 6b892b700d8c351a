//! The AF_XDP invoker: `dispatch.bpf.c` sends each function's UDP port to the
//! AF_XDP sockets of the RX queue the request arrived on; pinned worker
//! threads turn each request frame into its reply in place and send it back
//! from the same UMEM frame. Every bad request is counted, never fatal.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use peregrine_bpf::dispatch::{slot, DispatchProgram, Policy};
use peregrine_bpf::{Link, XdpMode, XdpProgram};
use peregrine_host::netns;
use peregrine_wire::parse_udp_frame;
use peregrine_xsk::{FrameHandler, Verdict, Workers, Xsk, XskConfig};

use crate::functions::Registry;

#[derive(Debug, thiserror::Error)]
pub enum InvokerError {
    #[error(transparent)]
    Bpf(#[from] peregrine_bpf::BpfError),
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    #[error(transparent)]
    Xsk(#[from] peregrine_xsk::XskError),
    #[error("invoker: {0}")]
    Config(String),
}

#[derive(Debug, Clone)]
pub struct InvokerConfig {
    /// RX queues served (0..queues).
    pub queues: u32,
    /// Worker sockets per queue.
    pub workers: u32,
    /// CPUs the workers are pinned to, round robin.
    pub cpus: Vec<usize>,
    pub xsk: XskConfig,
    pub policy: Policy,
    /// How the dispatcher is attached: native (driver) or generic (skb)
    /// XDP; sockets on a generic program run in the kernel's skb mode.
    pub xdp_mode: XdpMode,
}

impl Default for InvokerConfig {
    fn default() -> Self {
        InvokerConfig {
            queues: 1,
            workers: 1,
            cpus: vec![],
            xsk: XskConfig::default(),
            policy: Policy::RoundRobin,
            xdp_mode: XdpMode::Native,
        }
    }
}

/// Invoker counters (all workers).
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub replies: AtomicU64,
    /// Frames that failed parsing (lengths, headers): dropped.
    pub malformed: AtomicU64,
    /// Frames whose IPv4 header or UDP checksum is neither valid nor the
    /// partial pseudo-header value a local sender leaves: dropped.
    pub bad_checksum: AtomicU64,
    /// A port without a function (dispatch and registry disagree): dropped.
    pub unknown_port: AtomicU64,
    /// The function returned an error: dropped.
    pub failed: AtomicU64,
    /// The reply did not fit in the UMEM frame: dropped.
    pub too_large: AtomicU64,
    /// Replies made but dropped: the TX ring stayed full (AF_XDP only).
    pub tx_ring_full: AtomicU64,
    /// Requests answered, per function id (sent, or counted in tx_ring_full).
    pub per_function: Vec<AtomicU64>,
}

pub struct AfXdpInvoker {
    /// First field, so the workers stop before the program goes.
    _workers: Workers,
    pub prog: DispatchProgram,
    _link: Link,
    pub counters: Arc<Counters>,
    /// "zero-copy", "copy" (native XDP) or "skb" (generic XDP), as bound.
    pub mode: &'static str,
    /// UMEM and rings of all sockets.
    pub memory_bytes: usize,
}

/// Requests a worker takes from its RX ring at a time.
const BATCH: u32 = 256;

/// Answers one request in `buf[..len]`; the verdict says what to send.
fn handle(
    registry: &Registry,
    buf: &mut [u8],
    len: usize,
    scratch: &mut Vec<u8>,
    c: &Counters,
) -> Verdict {
    c.requests.fetch_add(1, Ordering::Relaxed);
    // Parsed (and its checksums checked) once; the reply is written from
    // what the parse found.
    let (id, mut spec) = match parse_udp_frame(&buf[..len]) {
        Ok(req) => match (registry.get(req.dst_port), req.reply_spec(0)) {
            (Some((id, f)), Ok(spec)) => {
                scratch.clear();
                if f.call(req.payload, scratch).is_err() {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                    return Verdict::Drop;
                }
                (*id, spec)
            }
            (None, _) => {
                c.unknown_port.fetch_add(1, Ordering::Relaxed);
                return Verdict::Drop;
            }
            (_, Err(_)) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                return Verdict::Drop;
            }
        },
        Err(peregrine_wire::FrameError::BadChecksum(_)) => {
            c.bad_checksum.fetch_add(1, Ordering::Relaxed);
            return Verdict::Drop;
        }
        Err(_) => {
            c.malformed.fetch_add(1, Ordering::Relaxed);
            return Verdict::Drop;
        }
    };
    spec.frame_len += scratch.len();
    match spec.write_into(buf, scratch).map(|()| spec.frame_len) {
        Ok(n) => {
            // `replies` is counted once the TX ring took the frame.
            if let Some(p) = c.per_function.get(id as usize) {
                p.fetch_add(1, Ordering::Relaxed);
            }
            Verdict::Transmit(n)
        }
        Err(_) => {
            c.too_large.fetch_add(1, Ordering::Relaxed);
            Verdict::Drop
        }
    }
}

/// One worker's state: its function registry, the shared counters, the
/// buffer a function writes its reply into, and the batch's answers.
struct InvokerWorker {
    registry: Arc<Registry>,
    counters: Arc<Counters>,
    scratch: Vec<u8>,
    /// Replies made in the current batch (sent, or dropped for want of TX room).
    answered: u64,
}

impl FrameHandler for InvokerWorker {
    fn frame(&mut self, buf: &mut [u8], len: usize) -> Verdict {
        let v = handle(&self.registry, buf, len, &mut self.scratch, &self.counters);
        self.answered += u64::from(matches!(v, Verdict::Transmit(_)));
        v
    }

    fn end_batch(&mut self, _xsk: &Xsk, batch: peregrine_xsk::Result<(u32, u32)>) {
        if let Ok((received, sent)) = batch {
            if received > 0 {
                let c = &self.counters;
                c.replies.fetch_add(u64::from(sent), Ordering::Relaxed);
                c.tx_ring_full
                    .fetch_add(self.answered - u64::from(sent), Ordering::Relaxed);
            }
        }
        self.answered = 0;
    }
}

impl AfXdpInvoker {
    /// Serves `registry` on `ns:iface` (None: this namespace).
    pub fn start(
        ns: Option<&str>,
        iface: &str,
        registry: Registry,
        cfg: InvokerConfig,
    ) -> Result<AfXdpInvoker, InvokerError> {
        use peregrine_bpf::dispatch::{MAX_QUEUES, MAX_SOCKS};
        if cfg.queues == 0 || cfg.queues > MAX_QUEUES || cfg.workers == 0 || cfg.workers > MAX_SOCKS
        {
            return Err(InvokerError::Config(format!(
                "queues 1..={MAX_QUEUES} and workers per queue 1..={MAX_SOCKS} (got {} and {})",
                cfg.queues, cfg.workers
            )));
        }
        // A request can only reach an AF_XDP socket bound to the queue it
        // arrived on: serving fewer queues than the device has would lose
        // every request hashed to the others.
        let rx_dir = format!("/sys/class/net/{iface}/queues");
        let count_rx = || {
            std::fs::read_dir(&rx_dir)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                        .count() as u32
                })
                .unwrap_or(0)
        };
        let device_queues = match ns {
            Some(n) => netns::with_sysfs(n, count_rx)?,
            None => count_rx(),
        };
        if device_queues > cfg.queues {
            return Err(InvokerError::Config(format!(
                "{iface} has {device_queues} RX queues; serve all of them (--queues {device_queues}) or reduce them, or requests arriving on the others are lost"
            )));
        }
        let prog = DispatchProgram::load()?;
        let link = netns::run_in_opt(ns, || prog.attach(iface, cfg.xdp_mode))??;
        let counters = Arc::new(Counters {
            per_function: (0..registry.len()).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        });
        let registry = Arc::new(registry);
        let mut workers = Workers::new();
        let mut mode = "copy";
        let mut memory = 0;
        for q in 0..cfg.queues {
            let sockets =
                netns::run_in_opt(ns, || Xsk::open_queue(iface, q, cfg.workers, cfg.xsk))??;
            for (w, xsk) in (0..cfg.workers).zip(sockets) {
                mode = match cfg.xdp_mode {
                    XdpMode::Generic => "skb",
                    XdpMode::Native => xsk.mode().as_str(),
                };
                memory += xsk.memory_bytes();
                // One socket serves every function on its queue.
                for (_, id, _) in registry.iter() {
                    prog.register_socket(slot(id, q, w), xsk.fd())?;
                }
                let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[workers.len() % cfg.cpus.len()]);
                let handler = InvokerWorker {
                    registry: registry.clone(),
                    counters: counters.clone(),
                    scratch: Vec::with_capacity(2048),
                    answered: 0,
                };
                workers.spawn(xsk, cpu, BATCH, handler);
            }
        }
        // Workers are up: route the ports to them.
        for (port, id, _) in registry.iter() {
            prog.set_function(id, port, cfg.workers, cfg.policy)?;
        }
        Ok(AfXdpInvoker {
            _workers: workers,
            prog,
            _link: link,
            counters,
            mode,
            memory_bytes: memory,
        })
    }
}
