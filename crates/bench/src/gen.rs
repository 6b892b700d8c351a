//! `peregrine bench gen` (the generator's own figures, side by side) and
//! `peregrine gen` (send in an existing lab, optionally counting at a sink).
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{bail, Result};
use peregrine_bpf::XdpAction;
use peregrine_host::signals;
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_lab::results::{Limiter, NoValues, Placement, ResultFile, Run};
use peregrine_lab::sinks::{Sink, SocketSink};
use peregrine_lab::traffic::{Backend, Generator, TrafficSpec};
use peregrine_lab::trial::DropProbes;
use peregrine_lab::{Endpoint, Lab, Lifetime};
use peregrine_testbed::gen::FrameSizes;

use crate::common::{
    builtin_topology, command_line, cpu_count, duration, frame_for, frame_sizes, lab_sink,
    one_trial_run, params, path_drops, trial_setup, warn_shortfall, RateSetting, ResultOutput,
};
use crate::report::Report;

/// `peregrine bench gen`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-gen")))]
pub struct GenBenchConfig {
    /// Length of each trial (10, 10s, 500ms).
    #[arg(long, default_value = "3s", value_parser = duration)]
    pub duration: Duration,
    /// Frame size with FCS (64..1518) or "imix"; default the smallest
    /// frame of the address family (64 B IPv4, 78 B IPv6).
    #[arg(long, value_parser = frame_sizes)]
    pub size: Option<FrameSizes>,
    /// Flows (source address and port differ per flow).
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// Send IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Rate of the accuracy check (200k, 1M, 1Mpps, 500Mbps).
    #[arg(long, default_value = "1Mpps")]
    pub rate_check: RateSetting,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// How much a sender sends and how fast: shared by `gen` and `io send`.
#[derive(clap::Args, Clone, Debug)]
pub struct Pace {
    /// Rate (200k, 1Mpps, 500Mbit, 1Gbit: bits of Ethernet frames with FCS);
    /// default unpaced.
    #[arg(long)]
    pub rate: Option<RateSetting>,
    /// Frames (datagrams) to send (with --duration: whichever comes first).
    #[arg(long)]
    pub count: Option<u64>,
    /// How long to send (10, 10s, 500ms).
    #[arg(long, value_parser = duration)]
    pub duration: Option<Duration>,
}

impl Pace {
    /// The sender's bound: a count, a duration or both.
    pub fn limit(&self) -> Limit {
        Limit {
            count: self.count,
            duration: self.duration,
        }
    }
}

/// `peregrine gen`.
#[derive(clap::Args, Clone, Debug)]
pub struct GenConfig {
    /// Lab (made with `peregrine lab up`).
    #[arg(long)]
    pub lab: String,
    /// Sending interface, HOST:IFACE.
    #[arg(long)]
    pub from: String,
    /// Destination address (in 198.18.0.0/15 or 2001:db8::/32).
    #[arg(long)]
    pub to: IpAddr,
    /// Source address (default: the first address of the sending interface's family).
    #[arg(long)]
    pub src: Option<IpAddr>,
    /// Destination UDP port.
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    #[command(flatten)]
    pub pace: Pace,
    /// Frame size with FCS (64..1518) or "imix"; default the smallest
    /// frame of the destination's family (64 B IPv4, 78 B IPv6).
    #[arg(long, value_parser = frame_sizes)]
    pub size: Option<FrameSizes>,
    /// Flows (source address and port differ per flow).
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// Sending threads, one per CPU from 0.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// xdp (live frames), socket (sendmmsg) or afxdp (AF_XDP TX ring).
    #[arg(long, default_value = "xdp")]
    pub backend: String,
    /// Stamp sequence and transmit time into every frame (costs ~40% of the
    /// live backend's top rate on this VM: reading the clock is slow here).
    #[arg(long)]
    pub stamp: bool,
    /// Count delivery here with an XDP drop sink, HOST:IFACE.
    #[arg(long)]
    pub sink: Option<String>,
    /// Exit with status 1 when more than this share of the frames is lost
    /// at the sink (needs --sink), e.g. 0 or 0.001.
    #[arg(long, requires = "sink")]
    pub max_loss: Option<f64>,
    /// Print the result (peregrine.result/1) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `peregrine bench gen`: the generator's own figures, side by side.
pub fn bench_gen(a: GenBenchConfig) -> Result<()> {
    let dur = a.duration;
    let sizes = a.size.clone().unwrap_or(FrameSizes::Fixed(
        peregrine_testbed::gen::size_limits(a.ipv6).0,
    ));
    let ncpu = cpu_count();
    let mut topo = builtin_topology("pair", "benchgen")?;
    // One veth queue per CPU: each sending thread then feeds its own ring
    // and its own receive NAPI, and threads do not contend.
    topo.links[0].queues = ncpu as u32;
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let from = Endpoint {
        host: "a".into(),
        iface: "eth0".into(),
    };
    // Live frames use sources from .100 up (one per flow), clear of both
    // hosts' own addresses; sockets must bind the sender's own address.
    let (src, socket_src, dst): (IpAddr, IpAddr, IpAddr) = if a.ipv6 {
        (
            "2001:db8::100".parse()?,
            "2001:db8::1".parse()?,
            "2001:db8::2".parse()?,
        )
    } else {
        (
            "198.18.0.100".parse()?,
            "198.18.0.1".parse()?,
            "198.18.0.2".parse()?,
        )
    };
    let (frame, peer) = frame_for(&lab, &from, src, dst, 9)?;
    let sink_ns = lab.ns(&peer.host);
    let base = TrafficSpec::live(
        lab.ns(&from.host),
        from.iface.clone(),
        frame,
        sizes.clone(),
        a.flows,
    );
    let mean = sizes.mean_size();
    let drops = path_drops(lab.name(), None, &peer)?;
    // The sink's receive work runs where the frames are sent (veth): the
    // generator's figure includes it, as a NIC's would not; said in the JSON.
    let placement = |cpus: &[usize]| {
        Placement {
        generator_cpus: cpus.to_vec(),
        dut_cpus: vec![],
        sink_cpus: cpus.to_vec(),
        notes: vec![
            "no DUT; the sink's receive runs on each sending CPU (veth default), so its cost is in the generator's figure".into(),
            lab.topo.offloads_note(),
        ],
    }
    };
    let mut runs = Vec::new();

    // The generator alone: frames built, then dropped instead of sent.
    {
        let mut spec = base.clone();
        spec.dry_run = true;
        let label = "xdp live frames, 1 thread, built but not sent".to_string();
        eprintln!("{label}: unpaced for {:.1}s", dur.as_secs_f64());
        let gen = Generator::new(spec.clone(), None)?;
        let count = peregrine_lab::traffic::GeneratorCount(&gen);
        let none = DropProbes::none(Limiter::Unattributed);
        let setup = trial_setup(&gen, &count, &none, dur, mean, 0.0);
        runs.push(one_trial_run(
            label,
            &setup,
            "max",
            Rate::Max,
            params(&spec, &count.describe()),
            Some(Placement {
                sink_cpus: vec![],
                notes: vec!["frames built and dropped by the generator itself".into()],
                ..placement(&spec.cpus)
            }),
        )?);
    }

    // Contenders at full speed into the XDP drop sink.
    {
        let sink = lab_sink(lab.name(), &sink_ns, &peer, XdpAction::Drop)?;
        let xdp = Counted {
            sink: &sink,
            desc: format!("xdp drop sink {peer}"),
            drops: &drops,
        };
        let mut contenders = vec![("xdp live frames, 1 thread".to_string(), base.clone())];
        if ncpu > 1 {
            let mut s = base.clone();
            s.cpus = (0..ncpu).collect();
            contenders.push((format!("xdp live frames, {ncpu} threads"), s));
        }
        if sizes != FrameSizes::Imix {
            let mut s = base.clone();
            s.backend = Backend::Socket;
            s.frame.src_ip = socket_src;
            contenders.push(("socket sendmmsg, 1 thread".to_string(), s));
        }
        {
            let mut s = base.clone();
            s.backend = Backend::Afxdp;
            contenders.push(("AF_XDP (copy) TX ring, 1 thread".to_string(), s));
        }
        for (label, spec) in contenders {
            signals::check()?;
            eprintln!("{label}: unpaced for {:.1}s", dur.as_secs_f64());
            let to = Some((sink_ns.clone(), peer.iface.clone()));
            let p = placement(&spec.cpus);
            runs.push(gen_run(label, &spec, to, &xdp, dur, Rate::Max, p)?);
        }
        // Rate accuracy: a set rate, judged per 1 s window at the sink.
        let pps = a.rate_check.pps(mean);
        let label = format!("xdp live frames at {:.3} Mpps", pps / 1e6);
        let dur3 = dur.max(Duration::from_secs(3));
        eprintln!("{label}: paced for {:.1}s", dur3.as_secs_f64());
        let p = placement(&base.cpus);
        runs.push(gen_run(label, &base, None, &xdp, dur3, Rate::Pps(pps), p)?);
    }
    // Live frames into AF_XDP sockets (copy mode on veth): every frame checked.
    {
        signals::check()?;
        let queues = ncpu as u32;
        let cpus: Vec<usize> = (0..ncpu).map(|c| (c + 1) % ncpu).collect();
        let xsk = peregrine_lab::sinks::XskSink::start(&sink_ns, &peer.iface, 9, queues, &cpus)?;
        let label = format!("xdp live frames -> AF_XDP ({}), 1 thread", xsk.mode);
        eprintln!("{label}: unpaced for {:.1}s", dur.as_secs_f64());
        let mut p = placement(&base.cpus);
        p.sink_cpus = cpus.clone();
        p.notes[0] = format!(
            "no DUT; the kernel's receive runs on the sending CPU, the AF_XDP reader threads on cpu {cpus:?}"
        );
        let at = Counted {
            sink: &xsk,
            desc: xsk.describe(),
            drops: &drops,
        };
        runs.push(gen_run(label, &base, None, &at, dur, Rate::Max, p)?);
        if xsk.corrupt() > 0 {
            bail!(
                "{} frames arrived at the AF_XDP sink corrupted",
                xsk.corrupt()
            );
        }
    }
    // Latency: live frames with timestamps into a UDP socket (XDP pass in front).
    if sizes != FrameSizes::Imix {
        signals::check()?;
        let _pass = lab_sink(lab.name(), &sink_ns, &peer, XdpAction::Pass)?;
        let sock = SocketSink::start(&sink_ns, std::net::SocketAddr::new(dst, 9))?;
        let mut spec = base.clone();
        spec.stamp = true;
        let label = "xdp live frames -> UDP socket, 100 kpps".to_string();
        eprintln!("{label}: latency for {:.1}s", dur.as_secs_f64());
        let at = Counted {
            sink: &sock,
            desc: sock.describe(),
            drops: &drops,
        };
        let p = placement(&spec.cpus);
        runs.push(gen_run(
            label,
            &spec,
            None,
            &at,
            dur,
            Rate::Pps(100_000.0),
            p,
        )?);
    }

    drop(drops);
    drop(lab);
    let result = ResultFile::new(BenchGen::KIND, command_line(), runs);
    a.output.write::<BenchGen>(&result)
}

/// Where a `bench gen` trial's frames are counted: the sink, its name in
/// the result, and the drop probes on the way.
struct Counted<'a> {
    sink: &'a dyn Sink,
    desc: String,
    drops: &'a DropProbes,
}

/// One run of one trial: `spec`'s generator (live frames anchored at the
/// namespace and interface `to` when given) counted `at`, for `dur`,
/// unpaced (`Rate::Max`) or at a fixed rate.
fn gen_run(
    label: String,
    spec: &TrafficSpec,
    to: Option<(String, String)>,
    at: &Counted,
    dur: Duration,
    rate: Rate,
    placement: Placement,
) -> Result<Run> {
    let gen = Generator::new(spec.clone(), to)?;
    let mean = spec.sizes.mean_size();
    let setup = trial_setup(&gen, at.sink, at.drops, dur, mean, 0.0);
    let phase = if matches!(rate, Rate::Max) {
        "max"
    } else {
        "fixed"
    };
    let params = params(spec, &at.desc);
    one_trial_run(label, &setup, phase, rate, params, Some(placement))
}

/// `peregrine gen`: send in an existing lab, optionally counting at a sink.
pub fn gen(a: GenConfig) -> Result<()> {
    let backend: Backend = a.backend.parse()?;
    let topo = peregrine_lab::lab::state(&a.lab)?.topology;
    let from = Endpoint::parse(&a.from)?;
    let sizes = a.size.clone().unwrap_or(FrameSizes::Fixed(
        peregrine_testbed::gen::size_limits(a.to.is_ipv6()).0,
    ));
    if a.pace.count.is_none() && a.pace.duration.is_none() {
        bad_setting!("give --count or --duration (runs are always bounded)");
    }
    if a.threads == 0 {
        bad_setting!("--threads must be at least 1");
    }
    if let Some(l) = a.max_loss {
        if !(0.0..=1.0).contains(&l) {
            bad_setting!("--max-loss {l}: expected a share of the frames in [0, 1]");
        }
    }
    let (frame, peer) = peregrine_lab::traffic::lab_frame(&topo, &from, a.src, a.to, a.port)?;
    let rate = match a.pace.rate {
        Some(r) => crate::common::pacing(r, sizes.mean_size()),
        None => Rate::Max,
    };
    let ns = |host: &str| peregrine_lab::lab::ns_name(&topo.name, host);
    let spec = TrafficSpec {
        ns: ns(&from.host),
        iface: from.iface.clone(),
        frame,
        sizes: sizes.clone(),
        flows: a.flows,
        stamp: a.stamp,
        latency_sample: 1,
        cpus: (0..a.threads).collect(),
        backend,
        dry_run: false,
        vary: peregrine_testbed::gen::FlowVary::Source,
    };
    // The sink, and where a frame refused on its way there is counted
    // (the sink's input: a full XDP ring on veth).
    let (sink, probes) = match &a.sink {
        Some(s) => {
            let ep = Endpoint::parse(s)?;
            (
                Some(lab_sink(&topo.name, &ns(&ep.host), &ep, XdpAction::Drop)?),
                path_drops(&topo.name, None, &ep)?,
            )
        }
        None => (None, DropProbes::none(Limiter::Unattributed)),
    };
    let gen = Generator::new(spec.clone(), Some(peer))?;
    let limit = Limit {
        count: a.pace.count,
        duration: a.pace.duration,
    };
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let before = sink.as_ref().map(|s| s.delivered()).transpose()?;
    let drops0 = probes.snapshot()?;
    let cpu0 = peregrine_lab::measure::CpuSnapshot::take();
    let off = gen.run(rate, limit, &progress)?;
    signals::sleep(Duration::from_millis(200));
    let after = sink.as_ref().map(|s| s.delivered()).transpose()?;
    let drops = probes.since(&drops0)?;
    let cpu = peregrine_lab::measure::CpuSnapshot::take().usage_since(&cpu0);
    let secs = off.elapsed.as_secs_f64().max(1e-9);
    let delivered = match (before, after) {
        (Some(b), Some(a)) => Some(a.packets - b.packets),
        _ => None,
    };
    let mean = sizes.mean_size();
    let offered_pps = off.packets as f64 / secs;
    let lost = delivered
        .map(|d| off.packets.saturating_sub(d))
        .unwrap_or(0);
    let loss = if off.packets == 0 {
        0.0
    } else {
        lost as f64 / off.packets as f64
    };
    // A count-limited run ends when its frames are out: its rate is judged
    // over the time they took, which is what pacing aims at too.
    let requested = rate.pps();
    let trial = peregrine_lab::results::Trial {
        phase: if requested.is_some() { "fixed" } else { "max" }.into(),
        requested_pps: requested,
        duration_s: secs,
        offered_packets: off.packets,
        delivered_packets: delivered.unwrap_or(0),
        offered_pps,
        delivered_pps: delivered.unwrap_or(0) as f64 / secs,
        offered_bps: offered_pps * mean * 8.0,
        delivered_bps: delivered.unwrap_or(0) as f64 / secs * mean * 8.0,
        loss_ratio: loss,
        cpu,
        latency: None,
        windows: vec![],
        limited_by: Some(peregrine_lab::trial::classify(
            requested,
            offered_pps,
            lost,
            loss,
            a.max_loss.unwrap_or(0.0),
            &drops,
            Limiter::Unattributed,
        )),
        drops: drops.clone(),
        wrong: None,
        repeated: 0,
    };
    let label = format!("gen {} -> {}", a.from, a.to);
    warn_shortfall(&label, &trial);
    let sink_desc = match &a.sink {
        Some(s) => format!("xdp drop sink {s}"),
        None => "none: delivery not counted (no --sink)".into(),
    };
    let run: Run = Run {
        label,
        params: params(&spec, &sink_desc),
        trials: vec![trial],
        rfc2544: None,
        placement: Some(Placement {
            generator_cpus: spec.cpus.clone(),
            notes: vec!["receive work runs where frames are sent (veth default)".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let result = ResultFile::new(Gen::KIND, command_line(), vec![run]);
    if a.json {
        println!("{}", result.to_json());
    } else {
        println!(
            "offered {} frames in {:.3}s: {:.3} Mpps, {:.3} Gbit/s",
            off.packets,
            secs,
            offered_pps / 1e6,
            offered_pps * mean * 8.0 / 1e9
        );
        if let Some(d) = delivered {
            println!(
                "delivered {d}: {:.3} Mpps, {:.3} Gbit/s; lost {lost} ({:.4}%)",
                d as f64 / secs / 1e6,
                d as f64 / secs * mean * 8.0 / 1e9,
                loss * 100.0
            );
            let counted: u64 = drops.iter().map(|d| d.packets).sum();
            if lost > 0 {
                let places = drops
                    .iter()
                    .map(|d| format!("{} at {}", d.packets, d.at))
                    .collect::<Vec<_>>()
                    .join(", ");
                println!(
                    "counted dropped: {counted} ({}); counted nowhere: {}",
                    if places.is_empty() {
                        "none".into()
                    } else {
                        places
                    },
                    lost.saturating_sub(counted)
                );
            }
        }
    }
    if delivered == Some(0) && off.packets > 0 {
        bail!(
            "nothing was delivered at the sink ({} frames offered)",
            off.packets
        );
    }
    if let Some(max) = a.max_loss {
        if loss > max {
            bail!(
                "lost {lost} of {} frames ({:.4}%), above --max-loss {max}",
                off.packets,
                loss * 100.0
            );
        }
    }
    Ok(())
}

/// `bench gen`'s result files: the generator's ceiling per backend.
pub struct BenchGen;

impl Report for BenchGen {
    const KIND: &'static str = "bench-gen";
    type Values = NoValues;
}

/// `peregrine gen --json`'s result: one run.
pub struct Gen;

impl Report for Gen {
    const KIND: &'static str = "gen";
    type Values = NoValues;
}
