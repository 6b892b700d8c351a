//! Traffic generators. The live-frame backend runs `gen.bpf.c` with
//! BPF_PROG_RUN live frames from pinned threads; the socket backend uses
//! UDP sockets and sendmmsg where live frames cannot go (through the host
//! stack, bridges, overlays); the afxdp backend AF_XDP TX rings. Both of
//! those send with the lab's one datagram sender (`iopath`).
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_bpf::pod::Pod;
use peregrine_bpf::Link;
use peregrine_testbed::gen::{FrameSizes, GenProgram, GenSetup, PEREGRINE_MAGIC};
use peregrine_testbed::skel::gen::types::gen_meta;
use peregrine_wire::{UdpFrameSpec, FCS_LEN};
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::iopath::{DatagramSender, IoPath, PathIo, Refused};
use crate::pacing::{pace, Limit, Rate};
use crate::sinks::{Delivered, Sink};
use peregrine_host::cpu::{monotonic_ns, pin_to_cpu};
use peregrine_host::netns::{self, NetnsGuard};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// BPF_PROG_RUN with live frames (XDP).
    Xdp,
    /// UDP sockets with sendmmsg.
    Socket,
    /// AF_XDP sockets (copy mode on veth): frames built in user space and
    /// queued on the TX ring, one socket per thread on TX queue = thread.
    Afxdp,
}

impl Backend {
    /// Every backend, each once.
    pub const ALL: [Backend; 3] = [Backend::Xdp, Backend::Socket, Backend::Afxdp];

    /// Its name (`as_str`), then the other name it is also parsed from.
    fn names(self) -> [&'static str; 2] {
        match self {
            Backend::Xdp => ["xdp", "live"],
            Backend::Socket => ["socket", "mmsg"],
            Backend::Afxdp => ["afxdp", "xsk"],
        }
    }

    pub fn as_str(self) -> &'static str {
        self.names()[0]
    }
}

impl std::str::FromStr for Backend {
    type Err = LabError;
    fn from_str(s: &str) -> Result<Self> {
        Backend::ALL
            .into_iter()
            .find(|b| b.names().contains(&s))
            .ok_or_else(|| {
                LabError::Config(format!(
                    "unknown generator backend {s:?}: expected xdp, socket or afxdp"
                ))
            })
    }
}

/// What to send, from where.
#[derive(Debug, Clone)]
pub struct TrafficSpec {
    /// Namespace and interface the traffic leaves from.
    pub ns: String,
    pub iface: String,
    /// Flow 0 headers (frame_len ignored: see `sizes`).
    pub frame: UdpFrameSpec,
    pub sizes: FrameSizes,
    pub flows: u32,
    /// Stamp sequence and transmit time into each frame (for latency).
    pub stamp: bool,
    /// Every Nth frame carries its send time (power of two; 1: every one).
    pub latency_sample: u32,
    /// One sending thread per entry, pinned to that CPU.
    pub cpus: Vec<usize>,
    pub backend: Backend,
    /// Live backend only: build every frame but drop it instead of sending,
    /// to measure the generator's own ceiling.
    pub dry_run: bool,
    /// Live backend only: what the flows differ in.
    pub vary: peregrine_testbed::gen::FlowVary,
}

impl TrafficSpec {
    /// Live frames (the xdp backend) of `sizes` over `flows` flows varying
    /// their source, from one thread on CPU 0, unstamped: what every
    /// benchmark starts from before changing a field or two.
    pub fn live(
        ns: String,
        iface: String,
        frame: UdpFrameSpec,
        sizes: FrameSizes,
        flows: u32,
    ) -> TrafficSpec {
        TrafficSpec {
            ns,
            iface,
            frame,
            sizes,
            flows,
            stamp: false,
            latency_sample: 1,
            cpus: vec![0],
            backend: Backend::Xdp,
            dry_run: false,
            vary: peregrine_testbed::gen::FlowVary::Source,
        }
    }
}

/// What a run offered.
#[derive(Debug, Clone, Copy, Default)]
pub struct Offered {
    pub packets: u64,
    pub elapsed: Duration,
}

/// Flow 0 of traffic from `from` (a veth end in lab `topo`) to `to`: the
/// interface's address of the same family unless `src` is given, the MACs of
/// both ends; and the peer end (namespace, interface).
pub fn lab_frame(
    topo: &crate::Topology,
    from: &crate::Endpoint,
    src: Option<std::net::IpAddr>,
    to: std::net::IpAddr,
    port: u16,
) -> Result<(UdpFrameSpec, (String, String))> {
    let host = topo.host(&from.host).ok_or_else(|| {
        LabError::Config(format!("lab {} has no host {:?}", topo.name, from.host))
    })?;
    let ns = |host: &str| crate::lab::ns_name(&topo.name, host);
    let mut nl = peregrine_host::nl::Netlink::new()?;
    // The interface first: "no address" would mislead when it is missing.
    let ifaces = nl.links(&ns(&from.host))?;
    if !ifaces.contains(&from.iface) {
        return Err(LabError::Config(format!(
            "host {:?} of lab {} has no interface {:?} (it has {})",
            from.host,
            topo.name,
            from.iface,
            ifaces.join(", ")
        )));
    }
    let src = match src {
        Some(s) => s,
        None => host
            .addr
            .get(&from.iface)
            .into_iter()
            .flatten()
            .filter_map(|c| crate::topology::parse_cidr(c).ok())
            .map(|(ip, _)| ip)
            .find(|ip| ip.is_ipv6() == to.is_ipv6())
            .ok_or_else(|| {
                LabError::Config(format!(
                    "{from} has no {} address; pass --src",
                    if to.is_ipv6() { "IPv6" } else { "IPv4" }
                ))
            })?,
    };
    let peer = topo
        .peer_of(from)
        .ok_or_else(|| LabError::Config(format!("{from} is not one end of a veth link")))?;
    let src_mac = nl.mac_of(&ns(&from.host), &from.iface)?;
    let dst_mac = nl.mac_of(&ns(&peer.host), &peer.iface)?;
    Ok((
        UdpFrameSpec {
            src_mac,
            dst_mac,
            src_ip: src,
            dst_ip: to,
            src_port: 1024,
            dst_port: port,
            ttl: 64,
            frame_len: 0,
        },
        (ns(&peer.host), peer.iface.clone()),
    ))
}

/// A loaded generator, ready for any number of runs.
pub struct Generator {
    spec: TrafficSpec,
    prog: Option<Arc<GenProgram>>,
    /// The generator attached to the namespace's `lo` (see GenProgram::anchor).
    _anchor: Option<Link>,
    /// Pass-through program put on the veth peer when it had none: veth
    /// drops redirected frames silently unless the peer runs XDP.
    _peer_xdp: Option<peregrine_dataplane::PassThrough>,
}

impl Generator {
    /// Prepares a generator. `peer` is the namespace and name of the veth
    /// peer of `spec.iface`, checked (and fixed) for the live backend.
    pub fn new(spec: TrafficSpec, peer: Option<(String, String)>) -> Result<Generator> {
        if spec.cpus.is_empty() {
            return Err(LabError::Config(
                "generator needs at least one thread".into(),
            ));
        }
        for ip in [spec.frame.src_ip, spec.frame.dst_ip] {
            if !crate::topology::allowed_address(ip) {
                return Err(LabError::Config(format!(
                    "address {ip} is outside 198.18.0.0/15 and 2001:db8::/32; the generator sends only to lab ranges"
                )));
            }
        }
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        if let Some(c) = spec.cpus.iter().find(|&&c| c >= ncpu) {
            return Err(LabError::Config(format!(
                "cpu {c} does not exist (this machine has {ncpu})"
            )));
        }
        let mut peer_xdp = None;
        let mut anchor = None;
        let prog = match spec.backend {
            Backend::Xdp => {
                let ifindex =
                    netns::run_in(&spec.ns, || peregrine_bpf::link::ifindex(&spec.iface))??;
                let setup = GenSetup {
                    spec: spec.frame.clone(),
                    sizes: spec.sizes.clone(),
                    flows: spec.flows,
                    stamp: spec.stamp,
                    latency_sample: spec.latency_sample,
                    ifindex,
                    dry_run: spec.dry_run,
                    vary: spec.vary,
                };
                let prog = GenProgram::load(&setup)?;
                anchor = Some(netns::run_in(&spec.ns, || prog.anchor("lo"))??);
                if let Some((pns, piface)) = peer {
                    peer_xdp = peregrine_dataplane::ensure_xdp_receiver(&pns, &piface)?;
                }
                Some(Arc::new(prog))
            }
            Backend::Socket | Backend::Afxdp => {
                let v6 = spec.frame.src_ip.is_ipv6();
                let (min, max) = peregrine_testbed::gen::size_limits(v6);
                if let FrameSizes::Fixed(s) = spec.sizes {
                    if s < min || s > max {
                        return Err(LabError::Config(format!(
                            "frame size {s} outside {min}..={max}"
                        )));
                    }
                }
                None
            }
        };
        Ok(Generator {
            spec,
            prog,
            _anchor: anchor,
            _peer_xdp: peer_xdp,
        })
    }

    pub fn spec(&self) -> &TrafficSpec {
        &self.spec
    }

    /// Sends at `rate` until `limit`, adding to `progress` as it goes.
    pub fn run(&self, rate: Rate, limit: Limit, progress: &Arc<AtomicU64>) -> Result<Offered> {
        let n = self.spec.cpus.len() as u64;
        let per_rate = match rate {
            Rate::Max => Rate::Max,
            Rate::Pps(p) => Rate::Pps(p / n as f64),
        };
        let limits: Vec<Limit> = (0..n)
            .map(|i| Limit {
                count: limit.count.map(|c| c / n + u64::from(i < c % n)),
                duration: limit.duration,
            })
            .collect();
        // The live backend's per-CPU sent counters restart before any
        // thread runs, so `offered_so_far` reads this run from its start.
        if let Some(prog) = &self.prog {
            for (&cpu, lim) in self.spec.cpus.iter().zip(&limits) {
                prog.set_pace(cpu, per_rate.pps(), lim.count)?;
            }
        }
        let results: Vec<Result<(u64, Duration)>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .spec
                .cpus
                .iter()
                .zip(&limits)
                .enumerate()
                .map(|(i, (&cpu, &lim))| {
                    let progress = progress.clone();
                    s.spawn(move || self.thread_main(cpu, i, per_rate, lim, &progress))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(LabError::Other("generator thread panicked".into()))
                    })
                })
                .collect()
        });
        // The run lasted as long as its longest-sending thread.
        let (mut packets, mut elapsed) = (0, Duration::ZERO);
        for r in results {
            let (n, t) = r?;
            packets += n;
            elapsed = elapsed.max(t);
        }
        Ok(Offered { packets, elapsed })
    }

    /// Frames sent so far by the run in progress. The live backend adds to
    /// `progress` only after each BPF_PROG_RUN call (up to 2^20 frames), so
    /// for it the program's own per-CPU counters are read, which move with
    /// every frame; the other backends add per batch.
    pub fn offered_so_far(&self, progress: &AtomicU64) -> u64 {
        match &self.prog {
            Some(prog) => self
                .spec
                .cpus
                .iter()
                .map(|&c| prog.pace_sent(c).unwrap_or(0))
                .sum::<u64>()
                .max(progress.load(Ordering::Relaxed)),
            None => progress.load(Ordering::Relaxed),
        }
    }

    /// One sending thread: returns the frames it sent and how long it
    /// sent, timed from its first send (set-up, pinning and namespace entry
    /// are not sending time: counting them made short paced trials look
    /// 1-2% short of their rate).
    fn thread_main(
        &self,
        cpu: usize,
        index: usize,
        rate: Rate,
        limit: Limit,
        progress: &AtomicU64,
    ) -> Result<(u64, Duration)> {
        pin_to_cpu(cpu)?;
        let _ns = NetnsGuard::enter(&self.spec.ns)?;
        match &self.prog {
            Some(prog) => live_loop(prog, cpu, rate, limit, progress),
            None => {
                let (mut sender, lengths) = self.datagram_sender(index)?;
                let (stamp, sample) = match self.spec.backend {
                    // The socket backend stamps every datagram.
                    Backend::Socket => (true, 1),
                    _ => (self.spec.stamp, u64::from(self.spec.latency_sample.max(1))),
                };
                let (batch, name) = match self.spec.backend {
                    Backend::Afxdp => (256, "AF_XDP"),
                    _ => (1024, "socket"),
                };
                paced(rate, limit, batch, progress, name, |k| {
                    let now = if stamp { monotonic_ns() } else { 0 };
                    let sent = sender.send(k as usize, |seq, buf| {
                        let len = lengths[(seq % lengths.len() as u64) as usize];
                        // The live generator's gen_meta, as much as fits;
                        // zeros after it.
                        let meta_len = peregrine_testbed::gen::meta_len(len);
                        let meta = gen_meta {
                            magic: PEREGRINE_MAGIC,
                            seq: if stamp { seq as u32 } else { 0 },
                            tx_ns: if stamp && seq % sample == 0 { now } else { 0 },
                        };
                        buf[..meta_len].copy_from_slice(&meta.as_bytes()[..meta_len]);
                        len
                    })?;
                    Ok(sent as u64)
                })
            }
        }
    }

    /// One thread's sender for the socket and afxdp backends (the lab's
    /// `iopath` family), and the payload lengths the size pattern gives,
    /// datagram by datagram. Socket: one socket per flow, bound to its own
    /// source port (threads use disjoint ones), batches taking them in
    /// turn. AF_XDP: one socket on TX queue = thread, every flow's frames
    /// built on it (source port + k; source or destination address + k as
    /// the spec says).
    fn datagram_sender(&self, index: usize) -> Result<(DatagramSender, Vec<usize>)> {
        use peregrine_testbed::gen::FlowVary;
        let spec = &self.spec;
        let f = &spec.frame;
        let hl = f.header_len();
        let (sizes, pattern) = spec.sizes.classes();
        let lengths: Vec<usize> = pattern
            .iter()
            .map(|&i| sizes[i as usize] - FCS_LEN - hl)
            .collect();
        let slot = lengths.iter().copied().max().unwrap_or(0);
        let sender = match spec.backend {
            Backend::Afxdp => {
                let io =
                    PathIo::sender(IoPath::Afxdp, f, &spec.iface, index as u32).map_err(|e| {
                        LabError::Config(format!(
                            "{e} (the afxdp backend sends one thread per TX queue; {} has fewer?)",
                            spec.iface
                        ))
                    })?;
                let bump = |ip: IpAddr, k: u32| match ip {
                    IpAddr::V4(a) => IpAddr::V4((u32::from(a) + k).into()),
                    IpAddr::V6(a) => IpAddr::V6((u128::from(a) + u128::from(k)).into()),
                };
                let flows = (0..spec.flows.max(1))
                    .map(|k| {
                        let (mut src, mut dst) = (f.src_ip, f.dst_ip);
                        match spec.vary {
                            FlowVary::Source => src = bump(src, k),
                            FlowVary::Destination => dst = bump(dst, k),
                            FlowVary::SourcePort => {}
                        }
                        let sport = f.src_port.wrapping_add(k as u16);
                        (
                            Some(SocketAddr::new(src, sport)),
                            Some(SocketAddr::new(dst, f.dst_port)),
                        )
                    })
                    .collect();
                DatagramSender::new(vec![io], slot, Refused::Retried)?.with_flows(flows)
            }
            _ => {
                if matches!(spec.sizes, FrameSizes::Imix) {
                    return Err(LabError::Config(
                        "IMIX needs the xdp backend (one size per socket run)".into(),
                    ));
                }
                let nsock = spec.flows.clamp(1, 256) as usize;
                let ios = (0..nsock)
                    .map(|k| {
                        let mut flow = f.clone().sized_for(slot);
                        flow.src_port = f.src_port.wrapping_add((index * nsock + k) as u16);
                        PathIo::sender(IoPath::Mmsg, &flow, &spec.iface, 0)
                    })
                    .collect::<Result<Vec<_>>>()?;
                DatagramSender::new(ios, slot, Refused::Retried)?
            }
        };
        Ok((sender, lengths))
    }

    /// Generator-side counters of the live backend (frames made, build errors).
    pub fn made(&self) -> Option<(u64, u64)> {
        let p = self.prog.as_ref()?;
        p.state().ok().map(|s| (s.seq, s.errors))
    }
}

/// One sender's paced run: sends batches of up to `batch` frames, adds each
/// to `progress` as it goes, and returns the frames sent and the time from
/// the first send; errors name the `backend`.
fn paced(
    rate: Rate,
    limit: Limit,
    batch: u64,
    progress: &AtomicU64,
    backend: &str,
    mut send: impl FnMut(u64) -> std::io::Result<u64>,
) -> Result<(u64, Duration)> {
    let start = Instant::now();
    let sent = pace(rate, limit, batch, |k| {
        let n = send(k)?;
        progress.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    })
    .map_err(|e| LabError::Other(format!("{backend} generator: {e}")))?;
    Ok((sent, start.elapsed()))
}

/// Loop iterations per BPF_PROG_RUN call. Paced, most iterations are skips
/// (~50 ns each here), so a call lasts ~50 ms: fine-grained enough to stop
/// on time and report progress, long enough that the call's fixed cost (the
/// kernel builds a page pool per call, ~150 us) stays well under 1%.
const LIVE_ITERATIONS_PACED: u32 = 1 << 20;
const LIVE_ITERATIONS_UNPACED: u32 = 1 << 20;

/// One live-frame sender: the pacing happens inside gen.bpf.c (see
/// `struct gen_pace`), so frames leave evenly spaced, never in bursts.
fn live_loop(
    prog: &GenProgram,
    cpu: usize,
    rate: Rate,
    limit: Limit,
    progress: &AtomicU64,
) -> Result<(u64, Duration)> {
    assert!(
        limit.count.is_some() || limit.duration.is_some(),
        "unbounded generator run"
    );
    if limit.count == Some(0) {
        return Ok((0, Duration::ZERO));
    }
    // `Generator::run` reset the counters before any thread started; the
    // schedule restarts now that this thread is ready to send (nothing was
    // sent in between), so waking late costs no frames.
    prog.set_pace(cpu, rate.pps(), limit.count)?;
    let iterations = if rate.pps().is_some() {
        LIVE_ITERATIONS_PACED
    } else {
        LIVE_ITERATIONS_UNPACED
    };
    let start = Instant::now();
    let mut sent = 0;
    loop {
        if peregrine_host::signals::stop_requested()
            || limit.duration.is_some_and(|d| start.elapsed() >= d)
        {
            break;
        }
        prog.run_live(iterations)?;
        let now = prog.pace_sent(cpu)?;
        progress.fetch_add(now - sent, Ordering::Relaxed);
        sent = now;
        if limit.count.is_some_and(|c| sent >= c) {
            break;
        }
    }
    Ok((sent, start.elapsed()))
}

/// For dry runs, where nothing reaches a receiver: "delivered" is what the
/// generator built (its own per-CPU count).
pub struct GeneratorCount<'a>(pub &'a Generator);

impl Sink for GeneratorCount<'_> {
    fn delivered(&self) -> Result<Delivered> {
        let (made, _errors) = self
            .0
            .made()
            .ok_or_else(|| LabError::Other("dry runs need the xdp backend".into()))?;
        Ok(Delivered {
            packets: made,
            bytes: 0,
        })
    }
    fn describe(&self) -> String {
        "none: frames built by the generator and dropped, not sent".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_from_their_names_and_aliases() {
        for (s, b) in [
            ("xdp", Backend::Xdp),
            ("live", Backend::Xdp),
            ("socket", Backend::Socket),
            ("mmsg", Backend::Socket),
            ("afxdp", Backend::Afxdp),
            ("xsk", Backend::Afxdp),
        ] {
            assert_eq!(s.parse::<Backend>().unwrap(), b, "{s}");
        }
        for b in Backend::ALL {
            assert_eq!(b.as_str().parse::<Backend>().unwrap(), b);
        }
        let e = "dpdk".parse::<Backend>().unwrap_err().to_string();
        assert!(
            e.contains("unknown generator backend \"dpdk\": expected xdp, socket or afxdp"),
            "{e}"
        );
    }
}
