//! Benchmarks, the generator command, reports and the showcase. Each one
//! builds its lab, runs every contender in the same run, prints a table (or
//! JSON with --json), writes the result file and plots, and removes the lab.
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use peregrine_bpf::gen::FrameSizes;
use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_host::signals;
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_lab::results::{Limiter, Placement, ResultFile, Run, RunParams, Window};
use peregrine_lab::sinks::{Sink, SocketSink, XdpSink};
use peregrine_lab::topology::builtin;
use peregrine_lab::traffic::{Backend, Generator, TrafficSpec};
use peregrine_lab::trial::{
    measure_trial, rfc2544_search, DropPoint, DropProbes, SearchParams, TrialSetup,
};
use peregrine_lab::{Endpoint, Lab, Lifetime, Topology};
use peregrine_wire::UdpFrameSpec;

use crate::units::{self, DurationArg, RateArg};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Generator -> veth -> XDP drop sink: live frames vs sockets, rate accuracy, latency.
    Gen(BenchGenArgs),
    /// XDP router vs Linux forwarding (and a 2-NF chain) on generator -> dut -> sink.
    Router(crate::bench_router::BenchRouterArgs),
    /// The function invoker: socket, mmsg and AF_XDP, per request size and workers.
    Faas(crate::bench_faas::BenchFaasArgs),
}

#[derive(Args, Clone)]
pub struct BenchGenArgs {
    /// Length of each trial (10, 10s, 500ms).
    #[arg(long, default_value = "3s")]
    pub duration: DurationArg,
    /// Frame size with FCS (64..1518) or "imix"; default the smallest
    /// frame of the address family (64 B IPv4, 78 B IPv6).
    #[arg(long, value_parser = units::frame_sizes)]
    pub size: Option<FrameSizes>,
    /// Flows (source address and port differ per flow).
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    /// Send IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Rate of the accuracy check (200k, 1M, 1Mpps, 500Mbps).
    #[arg(long, default_value = "1Mpps")]
    pub rate_check: RateArg,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-gen")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct GenArgs {
    /// Lab (made with `peregrine lab up`).
    #[arg(long)]
    pub lab: String,
    /// Sending interface, HOST:IFACE.
    #[arg(long)]
    pub from: String,
    /// Destination address (in 198.18.0.0/15 or 2001:db8::/32).
    #[arg(long)]
    pub to: std::net::IpAddr,
    /// Source address (default: the first address of the sending interface's family).
    #[arg(long)]
    pub src: Option<std::net::IpAddr>,
    /// Destination UDP port.
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    /// Rate (200k, 1M, 1Mpps, 500Mbps, 1Gbit); default unpaced.
    #[arg(long)]
    pub rate: Option<RateArg>,
    /// Frames to send (with --duration: whichever comes first).
    #[arg(long)]
    pub count: Option<u64>,
    /// How long to send (10, 10s, 500ms).
    #[arg(long)]
    pub duration: Option<DurationArg>,
    /// Frame size with FCS (64..1518) or "imix"; default the smallest
    /// frame of the destination's family (64 B IPv4, 78 B IPv6).
    #[arg(long, value_parser = units::frame_sizes)]
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

#[derive(Args, Clone)]
pub struct ReportArgs {
    /// Result files (JSON) to plot.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output directory (default: next to each file).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the written plots as JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct ShowcaseArgs {
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// Length of each trial (1, 1s, 500ms).
    #[arg(long, default_value = "1s")]
    pub trial: DurationArg,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

/// Where benchmarks put their files unless told: never the checkout's
/// docs/results, which holds the published runs.
pub const DEFAULT_OUT: &str = "peregrine-results";

/// Where the device under test runs, for benchmarks that have one.
#[derive(Args, Clone, Debug)]
pub struct PlacementArgs {
    /// Highest share of frames an RFC 2544 trial may lose and still pass
    /// (RFC 2544 itself: 0). With the DUT on its own CPU, a VM's scheduling
    /// hiccups drop a few frames at any rate while the DUT's NAPI thread
    /// wakes; a zero-loss search then measures the hiccups, not capacity.
    #[arg(long, default_value_t = 0.001)]
    pub loss: f64,
    /// Run the DUT's receive work (threaded NAPI on its ingress veth) on
    /// this CPU, apart from the generator's (CPU 0). Default: the last CPU
    /// when there are two or more. veth otherwise runs it on the sender's
    /// CPU, and the figure would be the generator's as much as the DUT's.
    #[arg(long, conflicts_with = "dut_on_sender_cpu")]
    pub dut_cpu: Option<usize>,
    /// Leave the DUT's receive work on the sender's CPU (veth's default).
    #[arg(long)]
    pub dut_on_sender_cpu: bool,
}

impl PlacementArgs {
    /// The loss tolerance, checked.
    pub fn loss_tolerance(&self) -> Result<f64> {
        if !(0.0..0.5).contains(&self.loss) {
            crate::usage!(
                "--loss {}: expected a share of the frames in [0, 0.5)",
                self.loss
            );
        }
        Ok(self.loss)
    }

    /// The CPU for the DUT, or None to leave it on the sender's.
    pub fn dut_cpu(&self) -> Result<Option<usize>> {
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        if self.dut_on_sender_cpu {
            return Ok(None);
        }
        match self.dut_cpu {
            Some(0) => crate::usage!("--dut-cpu 0: CPU 0 is the generator's"),
            Some(c) if c >= ncpu => {
                crate::usage!(
                    "--dut-cpu {c}: this machine has {ncpu} CPUs (0..{})",
                    ncpu - 1
                )
            }
            Some(c) => Ok(Some(c)),
            None if ncpu > 1 => Ok(Some(ncpu - 1)),
            None => Ok(None),
        }
    }
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Gen(a) => bench_gen(a),
        BenchCmd::Router(a) => crate::bench_router::bench_router(a),
        BenchCmd::Faas(a) => crate::bench_faas::bench_faas(a),
    }
}

pub(crate) fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

pub(crate) fn progress_line(label: &str) -> impl FnMut(&Window) + '_ {
    move |w| {
        eprintln!(
            "  {label}: t={:>4.1}s offered {:>8.3} Mpps, delivered {:>8.3} Mpps",
            w.t_s,
            w.offered_pps / 1e6,
            w.delivered_pps / 1e6
        )
    }
}

/// Warns on stderr when a trial offered less than it was asked to (by more
/// than `trial::SHORTFALL`): the figure is the generator's, not the path's.
pub(crate) fn warn_shortfall(label: &str, t: &peregrine_lab::results::Trial) {
    if let Some(req) = t.requested_pps {
        if peregrine_lab::trial::short_of(Some(req), t.offered_pps) {
            eprintln!(
                "peregrine: warning: {label}: asked for {:.3} Mpps, the generator offered {:.3} Mpps ({:.1}% short): generator-limited",
                req / 1e6,
                t.offered_pps / 1e6,
                (1.0 - t.offered_pps / req) * 100.0
            );
        }
    }
}

/// The drop counters of a generator -> [DUT ->] sink path: the DUT's input
/// ring (its ingress veth) and the sink's input ring; loss no counter saw
/// happened inside the DUT (or, without one, is unattributed).
pub(crate) fn path_drops(
    lab: &Lab,
    dut_in: Option<&Endpoint>,
    sink_in: &Endpoint,
) -> Result<DropProbes> {
    let mut points = Vec::new();
    if let Some(d) = dut_in {
        points.push(DropPoint {
            ns: lab.ns(&d.host),
            iface: d.iface.clone(),
            role: Limiter::Dut,
        });
    }
    points.push(DropPoint {
        ns: lab.ns(&sink_in.host),
        iface: sink_in.iface.clone(),
        role: Limiter::Sink,
    });
    let remainder = if dut_in.is_some() {
        Limiter::Dut
    } else {
        Limiter::Unattributed
    };
    Ok(DropProbes::new(points, remainder)?)
}

/// Moves the DUT's receive work (threaded NAPI of its ingress veth) to
/// `dut_cpu`, away from the generator's CPUs, and says where everything
/// runs. Call once the ingress has NAPI (an XDP program is attached, the
/// generator's pass-through included); XDP attach and detach recreate the
/// NAPI workers, so call again after each change.
pub(crate) fn place(
    lab: &Lab,
    gen_cpus: &[usize],
    dut_in: &Endpoint,
    dut_cpu: Option<usize>,
) -> Result<Placement> {
    let mut p = Placement {
        generator_cpus: gen_cpus.to_vec(),
        ..Default::default()
    };
    match dut_cpu {
        Some(cpu) => {
            let threads = peregrine_host::napi::pin_receive(&lab.ns(&dut_in.host), &dut_in.iface, cpu)?;
            p.dut_cpus = vec![cpu];
            p.sink_cpus = vec![cpu];
            p.notes.push(format!(
                "threaded NAPI on {dut_in} pinned to cpu {cpu} ({} worker(s)); the sink's receive runs where the DUT transmits",
                threads.len()
            ));
        }
        None => p.notes.push(
            "DUT and sink receive on the sender's CPU (veth default): the figure includes the generator's work".into(),
        ),
    }
    p.notes.push(
        "lab veths with TX checksum offload off (the lab sets it: frames carry full checksums)"
            .into(),
    );
    Ok(p)
}

/// An XDP sink whose counters are pinned under the lab's pin directory
/// while it runs, so other tools can read them; removed with the lab.
pub(crate) fn lab_sink(lab: &str, ns: &str, ep: &Endpoint, verdict: XdpAction) -> Result<XdpSink> {
    let mut s = XdpSink::attach_or_share(ns, &ep.iface, verdict, XdpMode::Native)?;
    let dir = peregrine_bpf::bpffs::pin_dir(lab)?;
    s.pin(&dir.join(format!("sink-{}-{}", ep.host, ep.iface)))?;
    Ok(s)
}

/// One trial shown live as it goes, its shortfall (if any) warned about.
pub(crate) fn shown_trial(
    setup: &TrialSetup,
    label: &str,
    phase: &str,
    rate: Rate,
    show: &mut dyn FnMut(&Window),
) -> peregrine_lab::Result<peregrine_lab::results::Trial> {
    let t = measure_trial(setup, phase, rate, show)?;
    warn_shortfall(label, &t);
    Ok(t)
}

/// A run of one trial, shown live as it goes.
fn one_trial_run(
    label: String,
    setup: &TrialSetup,
    phase: &str,
    rate: Rate,
    params: RunParams,
    placement: Option<Placement>,
) -> Result<Run> {
    let t = shown_trial(setup, &label, phase, rate, &mut progress_line(&label))?;
    Ok(Run {
        label,
        params,
        trials: vec![t],
        rfc2544: None,
        placement,
    })
}

/// Addresses and MACs for traffic from `from` to `dst_ip` via the veth peer.
pub(crate) fn frame_for(
    lab: &Lab,
    from: &Endpoint,
    src_ip: std::net::IpAddr,
    dst_ip: std::net::IpAddr,
    dst_port: u16,
) -> Result<(UdpFrameSpec, Endpoint)> {
    let peer = lab
        .peer_of(from)
        .with_context(|| format!("{from} is not one end of a veth link in lab {}", lab.name()))?;
    let (frame, _) =
        peregrine_lab::traffic::lab_frame(lab.topology(), from, Some(src_ip), dst_ip, dst_port)?;
    Ok((frame, peer))
}

pub(crate) fn params(spec: &TrafficSpec, sink: &str) -> RunParams {
    RunParams {
        backend: spec.backend.as_str().into(),
        ip: if spec.frame.src_ip.is_ipv6() {
            "ipv6".into()
        } else {
            "ipv4".into()
        },
        frame_size: spec.sizes.label(),
        mean_frame_bytes: spec.sizes.mean_size(),
        flows: spec.flows,
        threads: spec.cpus.len(),
        sink: sink.into(),
        sent: !spec.dry_run,
    }
}

pub(crate) fn builtin_topology(name: &str, lab_name: &str) -> Result<Topology> {
    let mut t = Topology::from_toml(builtin::get(name).expect("built-in exists"))?;
    t.name = lab_name.into();
    Ok(t)
}

pub(crate) fn write_outputs(result: &ResultFile, out: &Path, stem: &str, json: bool) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = out.join(format!("{stem}.json"));
    std::fs::write(&path, result.to_json())
        .with_context(|| format!("writing {}", path.display()))?;
    std::fs::write(
        out.join(format!("{stem}.cmd")),
        format!("{}\n", result.command),
    )?;
    let plots = peregrine_lab::plot::plot(result, out, stem)?;
    if json {
        println!("{}", result.to_json());
    } else {
        print!("{}", result.table());
        println!("wrote {}", path.display());
        for p in plots {
            println!("wrote {}", p.display());
        }
    }
    Ok(())
}

/// `peregrine bench gen`: the generator's own figures, side by side.
pub fn bench_gen(a: BenchGenArgs) -> Result<()> {
    let dur: Duration = a.duration.into();
    let sizes = a
        .size
        .clone()
        .unwrap_or(FrameSizes::Fixed(peregrine_bpf::gen::size_limits(a.ipv6).0));
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
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
    let drops = path_drops(&lab, None, &peer)?;
    // The sink's receive work runs where the frames are sent (veth): the
    // generator's figure includes it, as a NIC's would not; said in the JSON.
    let placement = |cpus: &[usize]| {
        Placement {
        generator_cpus: cpus.to_vec(),
        dut_cpus: vec![],
        sink_cpus: cpus.to_vec(),
        notes: vec![
            "no DUT; the sink's receive runs on each sending CPU (veth default), so its cost is in the generator's figure".into(),
            "lab veths with TX checksum offload off (the lab sets it: frames carry full checksums)".into(),
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
        let setup = TrialSetup {
            gen: &gen,
            sink: &count,
            duration: dur,
            mean_frame_bytes: mean,
            loss_tolerance: 0.0,
            drops: &none,
        };
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
        let sink_desc = format!("xdp drop sink {peer}");
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
            let gen = Generator::new(spec.clone(), Some((sink_ns.clone(), peer.iface.clone())))?;
            let setup = TrialSetup {
                gen: &gen,
                sink: &sink,
                duration: dur,
                mean_frame_bytes: mean,
                loss_tolerance: 0.0,
                drops: &drops,
            };
            runs.push(one_trial_run(
                label,
                &setup,
                "max",
                Rate::Max,
                params(&spec, &sink_desc),
                Some(placement(&spec.cpus)),
            )?);
        }
        // Rate accuracy: a set rate, judged per 1 s window at the sink.
        let pps = a.rate_check.pps(mean);
        let label = format!("xdp live frames at {:.3} Mpps", pps / 1e6);
        let dur3 = dur.max(Duration::from_secs(3));
        eprintln!("{label}: paced for {:.1}s", dur3.as_secs_f64());
        let gen = Generator::new(base.clone(), None)?;
        let setup = TrialSetup {
            gen: &gen,
            sink: &sink,
            duration: dur3,
            mean_frame_bytes: mean,
            loss_tolerance: 0.0,
            drops: &drops,
        };
        runs.push(one_trial_run(
            label,
            &setup,
            "fixed",
            Rate::Pps(pps),
            params(&base, &sink_desc),
            Some(placement(&base.cpus)),
        )?);
    }
    // Live frames into AF_XDP sockets (copy mode on veth): every frame checked.
    {
        signals::check()?;
        let queues = ncpu as u32;
        let cpus: Vec<usize> = (0..ncpu).map(|c| (c + 1) % ncpu).collect();
        let xsk = peregrine_lab::sinks::XskSink::start(&sink_ns, &peer.iface, 9, queues, &cpus)?;
        let label = format!("xdp live frames -> AF_XDP ({}), 1 thread", xsk.mode);
        eprintln!("{label}: unpaced for {:.1}s", dur.as_secs_f64());
        let gen = Generator::new(base.clone(), None)?;
        let setup = TrialSetup {
            gen: &gen,
            sink: &xsk,
            duration: dur,
            mean_frame_bytes: mean,
            loss_tolerance: 0.0,
            drops: &drops,
        };
        let mut p = placement(&base.cpus);
        p.sink_cpus = cpus.clone();
        p.notes[0] = format!(
            "no DUT; the kernel's receive runs on the sending CPU, the AF_XDP reader threads on cpu {cpus:?}"
        );
        runs.push(one_trial_run(
            label,
            &setup,
            "max",
            Rate::Max,
            params(&base, &xsk.describe()),
            Some(p),
        )?);
        if xsk.corrupt() > 0 {
            anyhow::bail!(
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
        let gen = Generator::new(spec.clone(), None)?;
        let setup = TrialSetup {
            gen: &gen,
            sink: &sock,
            duration: dur,
            mean_frame_bytes: mean,
            loss_tolerance: 0.0,
            drops: &drops,
        };
        runs.push(one_trial_run(
            label,
            &setup,
            "fixed",
            Rate::Pps(100_000.0),
            params(&spec, &sock.describe()),
            Some(placement(&spec.cpus)),
        )?);
    }

    drop(drops);
    drop(lab);
    let result = ResultFile::new("bench-gen", command_line(), runs);
    write_outputs(&result, &a.out, &a.name, a.json)
}

/// `peregrine gen`: send in an existing lab, optionally counting at a sink.
pub fn gen(a: GenArgs) -> Result<()> {
    let topo = peregrine_lab::lab::state(&a.lab)?.topology;
    let from = Endpoint::parse(&a.from)?;
    let sizes = a.size.clone().unwrap_or(FrameSizes::Fixed(
        peregrine_bpf::gen::size_limits(a.to.is_ipv6()).0,
    ));
    if a.count.is_none() && a.duration.is_none() {
        crate::usage!("give --count or --duration (runs are always bounded)");
    }
    if a.threads == 0 {
        crate::usage!("--threads must be at least 1");
    }
    if let Some(l) = a.max_loss {
        if !(0.0..=1.0).contains(&l) {
            crate::usage!("--max-loss {l}: expected a share of the frames in [0, 1]");
        }
    }
    let (frame, peer) = peregrine_lab::traffic::lab_frame(&topo, &from, a.src, a.to, a.port)?;
    let rate = match a.rate {
        Some(r) => r.rate(sizes.mean_size()),
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
        backend: a.backend.parse()?,
        dry_run: false,
        vary: peregrine_bpf::gen::FlowVary::Source,
    };
    let sink = match &a.sink {
        Some(s) => {
            let ep = Endpoint::parse(s)?;
            Some(lab_sink(&topo.name, &ns(&ep.host), &ep, XdpAction::Drop)?)
        }
        None => None,
    };
    let gen = Generator::new(spec.clone(), Some(peer))?;
    let limit = Limit {
        count: a.count,
        duration: a.duration.map(Duration::from),
    };
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let before = sink.as_ref().map(|s| s.delivered()).transpose()?;
    let cpu0 = peregrine_lab::measure::CpuSnapshot::take();
    let off = gen.run(rate, limit, &progress)?;
    signals::sleep(Duration::from_millis(200));
    let after = sink.as_ref().map(|s| s.delivered()).transpose()?;
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
            &[],
            Limiter::Unattributed,
        )),
        drops: vec![],
        wrong: None,
    };
    let label = format!("gen {} -> {}", a.from, a.to);
    warn_shortfall(&label, &trial);
    let sink_desc = match &a.sink {
        Some(s) => format!("xdp drop sink {s}"),
        None => "none: delivery not counted (no --sink)".into(),
    };
    let run = Run {
        label,
        params: params(&spec, &sink_desc),
        trials: vec![trial],
        rfc2544: None,
        placement: Some(Placement {
            generator_cpus: spec.cpus.clone(),
            notes: vec!["receive work runs where frames are sent (veth default)".into()],
            ..Default::default()
        }),
    };
    let result = ResultFile::new("gen", command_line(), vec![run]);
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

pub fn report(a: ReportArgs) -> Result<()> {
    let mut written = Vec::new();
    for f in &a.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let r =
            ResultFile::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| f.parent().map(Path::to_path_buf).unwrap_or_default());
        let stem = f
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "result".into());
        written.extend(peregrine_lab::plot::plot(&r, &dir, &stem)?);
        if !a.json {
            print!("{}", r.table());
        }
    }
    if a.json {
        println!("{}", serde_json::json!({ "plots": written }));
    } else {
        for w in written {
            println!("wrote {}", w.display());
        }
    }
    Ok(())
}

/// The main job: default lab, generator -> XDP drop sink, an RFC 2544 search
/// through Linux forwarding, table, JSON, plots, lab removed.
pub fn showcase(a: ShowcaseArgs) -> Result<()> {
    let trial: Duration = a.trial.into();
    let dut_cpu = a.placement.dut_cpu()?;
    let loss = a.placement.loss_tolerance()?;
    let topo = builtin_topology("gen-dut-sink", "showcase")?;
    eprintln!("building lab {} (generator -> dut -> sink)", topo.name);
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let from = Endpoint {
        host: "gen".into(),
        iface: "eth0".into(),
    };
    let mut runs = Vec::new();
    let sizes = FrameSizes::Fixed(64);
    let mean = sizes.mean_size();
    let spec =
        |frame, flows| TrafficSpec::live(lab.ns("gen"), "eth0".into(), frame, sizes.clone(), flows);

    // 1. Generator straight into an XDP drop sink on the DUT's ingress.
    {
        let (frame, peer) = frame_for(
            &lab,
            &from,
            "198.18.1.100".parse()?,
            "198.19.0.1".parse()?,
            9,
        )?;
        let sink = lab_sink(lab.name(), &lab.ns(&peer.host), &peer, XdpAction::Drop)?;
        let drops = path_drops(&lab, None, &peer)?;
        let spec = spec(frame, 1);
        let label = "generator -> XDP drop sink".to_string();
        eprintln!("{label}");
        let gen = Generator::new(spec.clone(), None)?;
        let setup = TrialSetup {
            gen: &gen,
            sink: &sink,
            duration: trial,
            mean_frame_bytes: mean,
            loss_tolerance: 0.0,
            drops: &drops,
        };
        let placement = Placement {
            generator_cpus: vec![0],
            sink_cpus: vec![0],
            notes: vec!["the sink's receive runs on the sending CPU (veth default)".into()],
            ..Default::default()
        };
        runs.push(one_trial_run(
            label,
            &setup,
            "max",
            Rate::Max,
            params(&spec, &sink.describe()),
            Some(placement),
        )?);
    }
    // 2. RFC 2544 throughput of Linux IPv4 forwarding in the DUT.
    {
        signals::check()?;
        let (frame, peer) = frame_for(
            &lab,
            &from,
            "198.18.1.100".parse()?,
            "198.19.0.1".parse()?,
            9,
        )?;
        let sink_ep = Endpoint {
            host: "sink".into(),
            iface: "eth0".into(),
        };
        let sink = lab_sink(lab.name(), &lab.ns("sink"), &sink_ep, XdpAction::Drop)?;
        let spec = spec(frame, 16);
        let gen = Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
        // The generator's pass-through on the DUT's ingress gives it NAPI;
        // its worker moves to the DUT's own CPU.
        let placement = place(&lab, &spec.cpus, &peer, dut_cpu)?;
        let drops = path_drops(&lab, Some(&peer), &sink_ep)?;
        let label = "Linux forwarding, RFC 2544".to_string();
        eprintln!("{label} ({})", placement.describe());
        let search = SearchParams {
            loss_tolerance: loss,
            resolution_pps: 50_000.0,
            trial,
            max_trials: 12,
            start: Rate::Max,
        };
        let setup = TrialSetup {
            gen: &gen,
            sink: &sink,
            duration: trial,
            mean_frame_bytes: mean,
            loss_tolerance: search.loss_tolerance,
            drops: &drops,
        };
        let mut show = progress_line(&label);
        let (summary, trials) = rfc2544_search(search, mean, |phase, rate| {
            if let Rate::Pps(p) = rate {
                eprintln!("  trial at {:.3} Mpps", p / 1e6);
            }
            shown_trial(&setup, &label, phase, rate, &mut show)
        })?;
        drop(show);
        eprintln!("  RFC 2544: {}", summary.describe());
        runs.push(Run {
            label,
            params: params(&spec, &sink.describe()),
            trials,
            rfc2544: Some(summary),
            placement: Some(placement),
        });
    }

    drop(lab);
    let result = ResultFile::new("showcase", command_line(), runs);
    write_outputs(&result, &a.out, "showcase", a.json)
}
