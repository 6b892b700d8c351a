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
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_lab::results::{ResultFile, Run, RunParams, Window};
use peregrine_lab::sinks::{Sink, SocketSink, XdpSink};
use peregrine_lab::topology::builtin;
use peregrine_lab::traffic::{Backend, Generator, TrafficSpec};
use peregrine_lab::trial::{rfc2544_search, run_trial, SearchParams};
use peregrine_lab::{signals, Endpoint, Lab, Lifetime, Topology};
use peregrine_wire::UdpFrameSpec;

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
    /// Seconds per trial.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Frame size with FCS (64..1518) or "imix".
    #[arg(long, default_value = "64")]
    pub size: String,
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
    #[arg(long)]
    pub ipv6: bool,
    /// Rate for the accuracy check, frames per second.
    #[arg(long, default_value_t = 1_000_000.0)]
    pub rate_check: f64,
    /// Directory for the result file and plots.
    #[arg(long, default_value = "docs/results")]
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
    #[arg(long, default_value_t = 9)]
    pub port: u16,
    /// Rate: 1Mpps, 250kpps, 1000000 (pps), 10Gbps, 500Mbps; default unpaced.
    #[arg(long)]
    pub rate: Option<String>,
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds.
    #[arg(long)]
    pub duration: Option<f64>,
    #[arg(long, default_value = "64")]
    pub size: String,
    #[arg(long, default_value_t = 1)]
    pub flows: u32,
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
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct ShowcaseArgs {
    /// Directory for the result file and plots.
    #[arg(long, default_value = "peregrine-results")]
    pub out: PathBuf,
    /// Seconds per trial.
    #[arg(long, default_value_t = 1.0)]
    pub trial: f64,
    /// Run the DUT's receive work on this CPU (threaded NAPI) instead of on
    /// the generator's. On a VM, waking the NAPI thread can take long enough
    /// to overflow veth's 256-frame ring: expect small losses at low rates.
    #[arg(long)]
    pub dut_cpu: Option<usize>,
    #[arg(long)]
    pub json: bool,
}

impl Default for ShowcaseArgs {
    fn default() -> Self {
        ShowcaseArgs {
            out: PathBuf::from("peregrine-results"),
            trial: 1.0,
            dut_cpu: None,
            json: false,
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

pub(crate) fn secs(s: f64, what: &str) -> Result<Duration> {
    if !(s > 0.0 && s <= 3600.0) {
        bail!("{what} {s}: expected seconds in (0, 3600]");
    }
    Ok(Duration::from_secs_f64(s))
}

/// Parses 1Mpps / 250kpps / 1000000 (pps) / 10Gbps / 500Mbps / 1e9bps.
pub fn parse_rate(s: &str, mean_frame_bytes: f64) -> Result<Rate> {
    let t: String = s
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().with_context(|| {
        format!("rate {s:?}: expected a number with a unit like 1Mpps or 10Gbps")
    })?;
    let pps = match unit {
        "" | "pps" => v,
        "kpps" => v * 1e3,
        "mpps" => v * 1e6,
        "bps" | "bit/s" => v / (mean_frame_bytes * 8.0),
        "kbps" | "kbit/s" => v * 1e3 / (mean_frame_bytes * 8.0),
        "mbps" | "mbit/s" => v * 1e6 / (mean_frame_bytes * 8.0),
        "gbps" | "gbit/s" => v * 1e9 / (mean_frame_bytes * 8.0),
        _ => bail!("rate {s:?}: unknown unit {unit:?} (pps, kpps, Mpps, bps, Mbps, Gbps)"),
    };
    if !(pps.is_finite() && pps > 0.0 && pps <= 1e9) {
        bail!("rate {s:?}: must be above 0 and at most 1e9 frames/s");
    }
    Ok(Rate::Pps(pps))
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

/// An XDP sink whose counters are pinned under the lab's pin directory
/// while it runs, so other tools can read them; removed with the lab.
pub(crate) fn lab_sink(lab: &str, ns: &str, ep: &Endpoint, verdict: XdpAction) -> Result<XdpSink> {
    let mut s = XdpSink::attach_or_share(ns, &ep.iface, verdict, XdpMode::Native)?;
    let dir = peregrine_bpf::bpffs::pin_dir(lab)?;
    s.pin(&dir.join(format!("sink-{}-{}", ep.host, ep.iface)))?;
    Ok(s)
}

/// A run of one trial, shown live as it goes.
#[allow(clippy::too_many_arguments)]
fn one_trial_run(
    label: String,
    gen: &Generator,
    sink: &dyn Sink,
    phase: &str,
    rate: Rate,
    dur: Duration,
    mean: f64,
    spec: &TrafficSpec,
    sink_desc: &str,
) -> Result<Run> {
    let t = run_trial(
        gen,
        sink,
        phase,
        rate,
        dur,
        mean,
        &mut progress_line(&label),
    )?;
    Ok(Run {
        label,
        params: params(spec, sink_desc),
        trials: vec![t],
        rfc2544: None,
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
    let dur = secs(a.duration, "--duration")?;
    let sizes: FrameSizes = a.size.parse()?;
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
    let base = TrafficSpec {
        ns: lab.ns(&from.host),
        iface: from.iface.clone(),
        frame,
        sizes: sizes.clone(),
        flows: a.flows,
        stamp: false,
        latency_sample: 1,
        cpus: vec![0],
        backend: Backend::Xdp,
        dry_run: false,
        vary: peregrine_bpf::gen::FlowVary::Source,
    };
    let mean = sizes.mean_size();
    let mut runs = Vec::new();

    // The generator alone: frames built, then dropped instead of sent.
    {
        let mut spec = base.clone();
        spec.dry_run = true;
        let label = "xdp live frames, 1 thread, not sent".to_string();
        eprintln!("{label}: unpaced for {:.1}s", dur.as_secs_f64());
        let gen = Generator::new(spec.clone(), None)?;
        let count = peregrine_lab::sinks::GeneratorCount(&gen);
        runs.push(one_trial_run(
            label,
            &gen,
            &count,
            "max",
            Rate::Max,
            dur,
            mean,
            &spec,
            &count.describe(),
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
            runs.push(one_trial_run(
                label,
                &gen,
                &sink,
                "max",
                Rate::Max,
                dur,
                mean,
                &spec,
                &sink_desc,
            )?);
        }
        // Rate accuracy: a set rate, judged per 1 s window at the sink.
        let label = format!("xdp live frames at {:.3} Mpps", a.rate_check / 1e6);
        eprintln!("{label}: paced for {:.1}s", dur.as_secs_f64().max(3.0));
        let gen = Generator::new(base.clone(), None)?;
        runs.push(one_trial_run(
            label,
            &gen,
            &sink,
            "fixed",
            Rate::Pps(a.rate_check),
            dur.max(Duration::from_secs(3)),
            mean,
            &base,
            &sink_desc,
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
        runs.push(one_trial_run(
            label,
            &gen,
            &xsk,
            "max",
            Rate::Max,
            dur,
            mean,
            &base,
            &xsk.describe(),
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
        runs.push(one_trial_run(
            label,
            &gen,
            &sock,
            "fixed",
            Rate::Pps(100_000.0),
            dur,
            mean,
            &spec,
            &sock.describe(),
        )?);
    }

    drop(lab);
    let result = ResultFile::new("bench-gen", command_line(), runs);
    write_outputs(&result, &a.out, &a.name, a.json)
}

/// `peregrine gen`: send in an existing lab, optionally counting at a sink.
/// Flow 0 of traffic from `from` (a veth end in lab `topo`) to `to`, and
/// the peer end (namespace, interface); see `traffic::lab_frame`.
pub(crate) fn endpoint_frame(
    topo: &peregrine_lab::Topology,
    from: &Endpoint,
    src: Option<std::net::IpAddr>,
    to: std::net::IpAddr,
    port: u16,
) -> Result<(UdpFrameSpec, (String, String))> {
    Ok(peregrine_lab::traffic::lab_frame(
        topo, from, src, to, port,
    )?)
}

pub fn gen(a: GenArgs) -> Result<()> {
    let topo = peregrine_lab::lab::state(&a.lab)?.topology;
    let from = Endpoint::parse(&a.from)?;
    let (frame, peer) = endpoint_frame(&topo, &from, a.src, a.to, a.port)?;
    let sizes: FrameSizes = a.size.parse()?;
    let rate = match &a.rate {
        Some(r) => parse_rate(r, sizes.mean_size())?,
        None => Rate::Max,
    };
    if a.count.is_none() && a.duration.is_none() {
        bail!("give --count or --duration (runs are always bounded)");
    }
    let duration = a.duration.map(|d| secs(d, "--duration")).transpose()?;
    if a.threads == 0 {
        bail!("--threads must be at least 1");
    }
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
        duration,
    };
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let before = sink.as_ref().map(|s| s.delivered()).transpose()?;
    let off = gen.run(rate, limit, &progress)?;
    signals::sleep(Duration::from_millis(200));
    let after = sink.as_ref().map(|s| s.delivered()).transpose()?;
    let secs = off.elapsed.as_secs_f64().max(1e-9);
    let delivered = match (before, after) {
        (Some(b), Some(a)) => Some(a.packets - b.packets),
        _ => None,
    };
    let out = serde_json::json!({
        "offered_packets": off.packets,
        "seconds": secs,
        "offered_pps": off.packets as f64 / secs,
        "delivered_packets": delivered,
        "loss_ratio": delivered.map(|d| if off.packets == 0 { 0.0 } else { off.packets.saturating_sub(d) as f64 / off.packets as f64 }),
    });
    if a.json {
        println!("{out}");
    } else {
        println!(
            "offered {} frames in {:.3}s ({:.3} Mpps)",
            off.packets,
            secs,
            off.packets as f64 / secs / 1e6
        );
        if let Some(d) = delivered {
            println!(
                "delivered {d} ({:.3} Mpps), lost {}",
                d as f64 / secs / 1e6,
                off.packets.saturating_sub(d)
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
    let trial = secs(a.trial, "--trial")?;
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
        let spec = TrafficSpec {
            ns: lab.ns("gen"),
            iface: "eth0".into(),
            frame,
            sizes: sizes.clone(),
            flows: 1,
            stamp: false,
            latency_sample: 1,
            cpus: vec![0],
            backend: Backend::Xdp,
            dry_run: false,
            vary: peregrine_bpf::gen::FlowVary::Source,
        };
        let label = "generator -> XDP drop sink".to_string();
        eprintln!("{label}");
        let gen = Generator::new(spec.clone(), None)?;
        runs.push(one_trial_run(
            label,
            &gen,
            &sink,
            "max",
            Rate::Max,
            trial,
            mean,
            &spec,
            &sink.describe(),
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
        let spec = TrafficSpec {
            ns: lab.ns("gen"),
            iface: "eth0".into(),
            frame,
            sizes: sizes.clone(),
            flows: 16,
            stamp: false,
            latency_sample: 1,
            cpus: vec![0],
            backend: Backend::Xdp,
            dry_run: false,
            vary: peregrine_bpf::gen::FlowVary::Source,
        };
        let gen = Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
        // By default the DUT's receive work runs on the generator's CPU (how
        // veth works: the receiver's NAPI runs where the sender transmits),
        // so the generator is back-pressured and nothing is lost in the ring.
        // --dut-cpu moves it to its own core with threaded NAPI instead.
        let label = match a.dut_cpu {
            Some(cpu) => {
                peregrine_lab::napi::pin_receive(&lab.ns(&peer.host), &peer.iface, cpu)?;
                format!("Linux forwarding (dut on cpu {cpu}), RFC 2544")
            }
            None => "Linux forwarding, RFC 2544".to_string(),
        };
        eprintln!("{label}");
        let search = SearchParams {
            loss_tolerance: 0.0,
            resolution_pps: 50_000.0,
            trial,
            max_trials: 12,
            start: Rate::Max,
        };
        let mut show = progress_line(&label);
        let (summary, trials) = rfc2544_search(search, mean, |phase, rate| {
            if let Rate::Pps(p) = rate {
                eprintln!("  trial at {:.3} Mpps", p / 1e6);
            }
            run_trial(&gen, &sink, phase, rate, trial, mean, &mut show)
        })?;
        drop(show);
        runs.push(Run {
            label,
            params: params(&spec, &sink.describe()),
            trials,
            rfc2544: Some(summary),
        });
    }

    drop(lab);
    let result = ResultFile::new("showcase", command_line(), runs);
    write_outputs(&result, &a.out, "showcase", a.json)
}
