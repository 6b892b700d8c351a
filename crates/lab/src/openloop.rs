//! Open-loop load: requests leave at a set rate whatever the server does, as
//! real clients arrive. The live-frame generator sends stamped requests
//! (gen_meta, then zeros) from pinned threads; `replycheck.bpf.c` on the
//! client's interface checks every reply byte for byte, counts it and times
//! it. No user-space receiver competes for the CPUs, so the figures are the
//! server's, not the client's.
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pacing::{Limit, Rate};
use crate::traffic::{Backend, Generator, TrafficSpec};
use hdrhistogram::Histogram;
use peregrine_host::netns;
use peregrine_testbed::gen::{FlowVary, FrameSizes};
use peregrine_testbed::replycheck::{
    bucket_range, CheckedFunction, ReplyCheckProgram, ReplyStats, MAX_PAYLOAD, MIN_PAYLOAD,
};
use peregrine_wire::UdpFrameSpec;

use crate::error::LabError;

#[derive(Debug, Clone)]
pub struct OpenLoopConfig {
    /// Client namespace and interface the requests leave from.
    pub ns: String,
    pub iface: String,
    /// The server's end of the link (namespace, interface): veth takes
    /// redirected frames only when it runs XDP, so the generator puts a
    /// pass-through program there if the server has none.
    pub peer: Option<(String, String)>,
    /// Addresses, MACs and the function's port (`dst_port`); the source
    /// port is the first of `flows`.
    pub frame: UdpFrameSpec,
    pub function: CheckedFunction,
    /// Request payload bytes.
    pub size: usize,
    pub rate: Rate,
    pub duration: Duration,
    /// Source ports used (RSS and SO_REUSEPORT spread them).
    pub flows: u32,
    /// One generator thread per CPU listed.
    pub cpus: Vec<usize>,
    /// How long replies are still waited for after the last request.
    pub drain: Duration,
    /// Check replies on the generator's CPUs (RPS) instead of the CPU that
    /// sent them. Off (the default), veth hands each reply to the client on
    /// the server's core, which then also pays the client's receive and
    /// check (a fixed cost per reply, the same for every backend) and the
    /// reply is timed the moment it leaves. On, the server's core does
    /// server work only, but a saturated client core then bounds the
    /// result, and the socket's TX completions run on the client's core
    /// (contending for AF_XDP's completion lock).
    pub check_on_client_cpus: bool,
    /// Receive replies in the client interface's own NAPI thread pinned to
    /// the first generator CPU (GRO on gives the veth end NAPI, threaded
    /// NAPI its kernel thread; TSO goes off at the server's end, see `run`),
    /// as a client host receives on its own cores
    /// from its own NIC. Unlike RPS, the sending (server's) core does not
    /// queue each reply to another CPU's backlog: it only puts the skb in
    /// the veth ring and wakes the thread.
    pub receive_in_client_napi: bool,
}

#[derive(Debug, Clone)]
pub struct OpenLoopReport {
    /// Sending time.
    pub seconds: f64,
    pub requests: u64,
    /// Correct replies.
    pub replies: u64,
    pub wrong: u64,
    /// Requests without a reply (lost anywhere, or still unanswered after
    /// the drain time).
    pub missing: u64,
    pub checks: ReplyStats,
    /// Request to reply, ns (bucketed to about 3%).
    pub latency: Histogram<u64>,
}

/// Every 16th request carries its send time: the clock read costs the
/// generator and the checker ~5% of a core each at a million requests a
/// second here, and a 1/16 sample still gives tens of thousands of latencies
/// a second.
pub const LATENCY_SAMPLE: u32 = 16;

/// Progress of a running load, for a watcher thread.
#[derive(Default)]
pub struct OpenLoopProgress {
    pub requests: Arc<AtomicU64>,
    /// Correct and wrong replies so far (read from the checker about every
    /// 100 ms while the load runs).
    pub replies: AtomicU64,
    pub wrong: AtomicU64,
}

impl OpenLoopConfig {
    /// Settings for load from `from` (a veth end of lab `topo`) to the one
    /// function of `registry` at `to`, `size` payload bytes per request; one
    /// second at full rate from CPU 0 until changed.
    pub fn for_lab(
        topo: &crate::Topology,
        from: &crate::Endpoint,
        to: std::net::IpAddr,
        registry: &peregrine_faas::Registry,
        size: usize,
    ) -> Result<OpenLoopConfig, LabError> {
        let mut fs = registry.iter();
        let (port, _, f) = match (fs.next(), fs.next()) {
            (Some(one), None) => one,
            _ => {
                return Err(LabError::Invalid(
                    "open-loop load checks one function: give one PORT=FUNCTION".into(),
                ))
            }
        };
        let Some(function) = CheckedFunction::by_name(f.name()) else {
            return Err(LabError::Invalid(format!(
                "open-loop replies are checked in the kernel, which knows the one-to-one functions echo and reverse; {} needs the closed loop (--connections)",
                f.name()
            )));
        };
        if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&size) {
            return Err(LabError::Invalid(format!(
                "--size {size}: open-loop requests carry {MIN_PAYLOAD}..={MAX_PAYLOAD} payload bytes"
            )));
        }
        let (frame, peer) = crate::traffic::lab_frame(topo, from, None, to, port)?;
        Ok(OpenLoopConfig {
            ns: crate::lab::ns_name(&topo.name, &from.host),
            iface: from.iface.clone(),
            peer: Some(peer),
            frame,
            function,
            size,
            rate: Rate::Max,
            duration: Duration::from_secs(1),
            flows: 16,
            cpus: vec![0],
            drain: Duration::from_millis(500),
            check_on_client_cpus: false,
            receive_in_client_napi: false,
        })
    }
}

/// Frame length with FCS of a request carrying `size` payload bytes.
pub fn request_frame_size(frame: &UdpFrameSpec, size: usize) -> usize {
    frame.min_frame_len() + size + peregrine_wire::FCS_LEN
}

pub fn run(cfg: &OpenLoopConfig, progress: &OpenLoopProgress) -> Result<OpenLoopReport, LabError> {
    if cfg.cpus.is_empty() {
        return Err(LabError::Invalid(
            "open-loop load needs a generator CPU".into(),
        ));
    }
    let check = ReplyCheckProgram::load(cfg.frame.dst_port, cfg.size, cfg.function)?;
    // At tcx ingress, not XDP: on veth an XDP program makes the kernel copy
    // every reply into an XDP frame on the sending (server's) CPU first.
    let _check_link = netns::run_in(&cfg.ns, || check.attach_tcx(&cfg.iface))??;
    // And on the client's CPUs: veth receives a reply on the CPU that sent
    // it, the server's; RPS moves the client's share of the work (receive,
    // check) to the generator's CPUs, so the server's core measures the
    // server alone.
    let _rps = if cfg.check_on_client_cpus {
        Some(peregrine_host::netdev::steer_receive(
            &cfg.ns, &cfg.iface, &cfg.cpus,
        )?)
    } else {
        None
    };
    let _napi = if cfg.receive_in_client_napi {
        let gro = peregrine_host::netdev::OffloadOverride::set(
            [(cfg.ns.clone(), cfg.iface.clone())],
            peregrine_host::netdev::Offload::Gro,
            true,
        )?;
        // veth hands the receiver's NAPI only skbs eligible for GRO: with
        // TSO on at the sender, socket-owned ones only (AF_XDP's replies are
        // not), so TSO goes off at the server's end for every backend.
        let tso = match &cfg.peer {
            Some((pns, piface)) => Some(peregrine_host::netdev::OffloadOverride::set(
                [(pns.clone(), piface.clone())],
                peregrine_host::netdev::Offload::Tso,
                false,
            )?),
            None => None,
        };
        peregrine_host::napi::pin_receive(&cfg.ns, &cfg.iface, cfg.cpus[0])?;
        Some((gro, tso))
    } else {
        None
    };
    let spec = TrafficSpec {
        ns: cfg.ns.clone(),
        iface: cfg.iface.clone(),
        frame: cfg.frame.clone(),
        sizes: FrameSizes::Fixed(request_frame_size(&cfg.frame, cfg.size)),
        flows: cfg.flows.max(1),
        stamp: true,
        latency_sample: LATENCY_SAMPLE,
        cpus: cfg.cpus.clone(),
        backend: Backend::Xdp,
        dry_run: false,
        vary: FlowVary::SourcePort,
    };
    let gen = Generator::new(spec, cfg.peer.clone())?;
    let limit = Limit {
        count: None,
        duration: Some(cfg.duration),
    };
    let sending = AtomicBool::new(true);
    let offered = std::thread::scope(|s| {
        s.spawn(|| {
            while sending.load(Ordering::Relaxed) {
                if let Ok(st) = check.stats() {
                    progress.replies.store(st.replies, Ordering::Relaxed);
                    progress.wrong.store(st.wrong(), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let r = gen.run(cfg.rate, limit, &progress.requests);
        sending.store(false, Ordering::Relaxed);
        r
    })?;
    // Replies still in flight: wait until they stop coming or the drain ends.
    let drain_end = Instant::now() + cfg.drain;
    let mut last = check.stats()?;
    while Instant::now() < drain_end {
        std::thread::sleep(Duration::from_millis(20));
        let now = check.stats()?;
        if now.replies + now.wrong() == offered.packets
            || (now.replies == last.replies && now.wrong() == last.wrong())
        {
            break;
        }
        last = now;
    }
    let checks = check.stats()?;
    progress.replies.store(checks.replies, Ordering::Relaxed);
    progress.wrong.store(checks.wrong(), Ordering::Relaxed);
    let mut latency =
        Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
    for (b, n) in check.latency_buckets()?.into_iter().enumerate() {
        if n > 0 {
            let (low, width) = bucket_range(b as u32);
            let _ = latency.record_n((low + width / 2).max(1), n);
        }
    }
    let answered = checks.replies + checks.wrong();
    Ok(OpenLoopReport {
        seconds: offered.elapsed.as_secs_f64(),
        requests: offered.packets,
        replies: checks.replies,
        wrong: checks.wrong(),
        missing: offered.packets.saturating_sub(answered),
        checks,
        latency,
    })
}

/// Prints requests and replies per second to stderr until `stop`.
pub fn watch(progress: &OpenLoopProgress, stop: &AtomicBool, label: &str) {
    let start = Instant::now();
    let (mut last, mut last_replies) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        peregrine_host::signals::sleep(Duration::from_millis(1000));
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = progress.requests.load(Ordering::Relaxed);
        let replies = progress.replies.load(Ordering::Relaxed);
        eprintln!(
            "  {label} {:>5.1}s: {} requests/s offered, {} correct replies/s, {} wrong so far",
            start.elapsed().as_secs_f64(),
            now.saturating_sub(last),
            replies.saturating_sub(last_replies),
            progress.wrong.load(Ordering::Relaxed)
        );
        (last, last_replies) = (now, replies);
    }
}
