//! `peregrine bench router`: the XDP router against Linux IP forwarding on the
//! same lab in the same run, per configuration, plus a 2-NF service chain,
//! and real TCP (iperf3) through each forwarding path.
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use std::time::Duration;

use anyhow::{Context, Result};
use peregrine_bpf::router::FibMode;
use peregrine_bpf::XdpMode;
use peregrine_dataplane::{
    ChainConfig, ChainMatch, Dataplane, DataplaneConfig, Hook, NfConfig, NfKind,
};
use peregrine_host::netdev::{self, Offload};
use peregrine_host::nl::Netlink;
use peregrine_host::{netns, signals};
use peregrine_lab::compare;
use peregrine_lab::pacing::Rate;
use peregrine_lab::plot;
use peregrine_lab::results::{NoValues, Placement, ResultFile, Run, RunParams};
use peregrine_lab::sinks::XdpSink;
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::trial::{rfc2544_search, DropProbes};
use peregrine_lab::{Endpoint, Lab, Lifetime};
use peregrine_testbed::gen::FrameSizes;

use crate::common::{
    builtin_topology, command_line, duration, dut_search, frame_for, params, place, progress_line,
    shown_trial, trial_setup, ChainPath, PlacementConfig, RateSetting, ResultOutput,
};
use crate::report::Report;
use crate::saturation;
use crate::tcp::{self, TcpTransfer};

/// `peregrine bench router`.
#[derive(clap::Args, Clone, Debug)]
#[command(mut_arg("name", ResultOutput::named("bench-router")))]
pub struct RouterBenchConfig {
    /// Length of each trial (2, 2s, 500ms).
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub trial: Duration,
    /// Offered rate of the fixed-rate trial (2M, 2Mpps, 1Gbit).
    #[arg(long, default_value = "2Mpps")]
    pub fixed_rate: RateSetting,
    /// RFC 2544 search resolution (20k, 20kpps).
    #[arg(long, default_value = "20kpps")]
    pub resolution: RateSetting,
    /// Routes added for the large-table configurations.
    #[arg(long, default_value_t = 10_000)]
    pub routes: u32,
    /// Only IPv4, one flow, direct and chain, and one TCP stream (a quick
    /// look).
    #[arg(long)]
    pub quick: bool,
    /// Length of each iperf3 TCP transfer (3, 3s).
    #[arg(long, default_value = "3s", value_parser = duration)]
    pub tcp_time: Duration,
    /// Run only the scenarios whose name contains TEXT (repeatable), e.g.
    /// "1 flow" for the 64 B IPv4 and 78 B IPv6 single-flow runs, "tcp" for
    /// the iperf3 rows; every name is listed in the result's runs.
    #[arg(long = "scenario", value_name = "TEXT")]
    pub only: Vec<String>,
    /// A local build of xdp-tools' xdp-forward to compare beside the XDP
    /// router in the 1-flow scenarios (never shipped with peregrine).
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<PathBuf>,
    /// Rounds per configuration; contenders alternate within each round so
    /// slow drifts of this noisy machine hit them alike. Ratios use medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Unpaced trials per contender and round (the RFC 2544 search's first
    /// included): a contender's saturated figure is the median of all of
    /// them, so one trial the VM slowed moves no ratio.
    #[arg(long, default_value_t = 3)]
    pub saturated: u32,
    #[command(flatten)]
    pub placement: PlacementConfig,
    #[command(flatten)]
    pub output: ResultOutput,
}

/// What is compared on the DUT.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Contender {
    Linux,
    /// peregrine's router at the XDP hook.
    Xdp,
    /// peregrine's router at the tc (tcx ingress) hook.
    Tc,
    XdpChain,
    /// xdp-forward from xdp-tools (a local build, `--xdp-forward`).
    XdpForward,
}

impl Contender {
    /// The name in labels, tables and plot legends.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Linux => "linux forwarding",
            Contender::Xdp => "xdp router",
            Contender::Tc => "tc router",
            Contender::XdpChain => "xdp router + 2-NF chain",
            Contender::XdpForward => "xdp-forward (xdp-tools)",
        }
    }
}

/// A contender attached on the DUT, held only to be detached when dropped
/// (a `Dataplane` or an `XdpForward`; nothing for Linux forwarding).
type Attached = Option<Box<dyn std::any::Any>>;

/// xdp-forward loaded on the DUT's in0 and out0, unloaded when dropped.
struct XdpForward {
    path: PathBuf,
    ns: String,
}

impl XdpForward {
    const PORTS: [&'static str; 2] = ["in0", "out0"];

    fn run(&self, cmd: &str) -> Result<()> {
        let out = netns::command(&self.ns, &self.path.to_string_lossy())?
            .arg(cmd)
            .args(Self::PORTS)
            .output()
            .with_context(|| format!("running {}", self.path.display()))?;
        if !out.status.success() {
            anyhow::bail!(
                "xdp-forward {cmd}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    fn load(path: &Path, ns: &str) -> Result<XdpForward> {
        let x = XdpForward {
            path: path.to_path_buf(),
            ns: ns.into(),
        };
        // Full FIB lookups in native mode, as peregrine's router here.
        x.run("load")?;
        Ok(x)
    }
}

impl Drop for XdpForward {
    fn drop(&mut self) {
        if let Err(e) = self.run("unload") {
            eprintln!("peregrine: {e}");
        }
    }
}

/// Attaches `c` on the lab's DUT.
fn attach(lab: &Lab, c: Contender, xdp_forward: Option<&Path>) -> Result<Attached> {
    let dut = lab.ns("dut");
    let ports = ["in0".to_string(), "out0".to_string()];
    let router = |hook: Hook| Dataplane::router(Some(&dut), &ports, hook, FibMode::Full, false);
    Ok(match c {
        Contender::Linux => None,
        Contender::Xdp => {
            let mut dp = router(Hook::Xdp(XdpMode::Native))?;
            // gen's and sink's ends must take what XDP redirects to them
            // (veth drops it otherwise); the packet runs' generator and
            // sink already do, TCP's kernel endpoints do not.
            dp.prepare_peers(&lab.topo, "dut")?;
            Some(Box::new(dp))
        }
        Contender::Tc => Some(Box::new(router(Hook::TC)?)),
        Contender::XdpChain => Some(Box::new(Dataplane::deploy(
            &lab.topo,
            &chain_config(lab.name()),
        )?)),
        Contender::XdpForward => match xdp_forward {
            Some(p) => Some(Box::new(XdpForward::load(p, &dut)?)),
            None => anyhow::bail!("xdp-forward is compared only with --xdp-forward PATH"),
        },
    })
}

/// One traffic and routing-table set-up the contenders are compared in.
struct Scenario {
    name: String,
    v6: bool,
    flows: u32,
    vary_dst: bool,
    big_table: bool,
    contenders: Vec<Contender>,
}

impl Scenario {
    /// 64 B IPv4 frames of one flow, the default routing table.
    fn one_flow_v4(contenders: Vec<Contender>) -> Scenario {
        Scenario {
            name: "ipv4, 1 flow".into(),
            v6: false,
            flows: 1,
            vary_dst: false,
            big_table: false,
            contenders,
        }
    }
}

/// The chain used by the chain contender: two reflecting functions (XDP_TX,
/// as in the source), in c1 and c2.
fn chain_config(lab: &str) -> DataplaneConfig {
    let reflect = |host: &str| NfConfig {
        host: host.into(),
        iface: "eth0".into(),
        kind: NfKind::Reflect,
        acl: Vec::new(),
    };
    DataplaneConfig {
        lab: Some(lab.into()),
        router: "dut".into(),
        ports: vec!["in0".into(), "out0".into()],
        mode: XdpMode::Native,
        // The benchmark measures the XDP router (the lab's veths have TX
        // checksum offload off, so XDP is right there).
        hook: peregrine_dataplane::HookChoice::Given(Hook::Xdp(XdpMode::Native)),
        fib: FibMode::Full,
        nfs: vec![reflect("c1"), reflect("c2")],
        chains: vec![ChainConfig {
            name: "bench".into(),
            matches: ChainMatch::Dst("198.19.0.0/16".parse().expect("a prefix")),
            hops: vec!["c1".into(), "c2".into()],
        }],
    }
}

/// How a contender's packet run measures: an RFC 2544 search whose first
/// trial is unpaced (the DUT saturated), then, when given, one trial at a
/// fixed rate.
#[derive(Clone, Debug)]
pub struct PacketTrials {
    /// Length of each trial.
    pub trial: Duration,
    /// RFC 2544 search resolution.
    pub resolution: RateSetting,
    /// Offered rate of the fixed-rate trial, if one is run.
    pub fixed_rate: Option<RateSetting>,
    /// Highest share lost in a passing trial.
    pub loss: f64,
    /// Unpaced (saturated) trials per contender run, the search's first
    /// included; the others follow the search (`saturation`).
    pub saturated: u32,
    /// Where the DUT's receive work runs (None: on the sender's CPU).
    pub dut_cpu: Option<usize>,
}

/// A scenario's traffic: what the generator sends, and the DUT's end it
/// sends it to.
struct Traffic {
    spec: TrafficSpec,
    peer: Endpoint,
}

/// The built-in `chain` lab (gen -> dut -> sink, containers c1 c2) with an
/// XDP drop sink at the sink and the drop probes along the path: where
/// every packet run of the contenders takes place.
struct PacketLab {
    // Fields drop in this order: probes and sink before the lab.
    drops: DropProbes,
    sink: XdpSink,
    path: ChainPath,
    lab: Lab,
}

impl PacketLab {
    /// Builds the lab, named `name`, and its sink (removed when dropped).
    fn up(name: &str) -> Result<PacketLab> {
        let topo = builtin_topology("chain", name)?;
        eprintln!(
            "building lab {} (gen -> dut -> sink, containers c1 c2)",
            topo.name
        );
        let lab = Lab::up(topo, Lifetime::Ephemeral)?;
        let path = ChainPath::new();
        let (sink, drops) = path.drop_sink(&lab)?;
        Ok(PacketLab {
            drops,
            sink,
            path,
            lab,
        })
    }

    /// The lab alone, its sink and probes removed (for TCP runs).
    fn into_lab(self) -> Lab {
        let PacketLab {
            drops, sink, lab, ..
        } = self;
        drop(drops);
        drop(sink);
        lab
    }

    /// The traffic of scenario `cfg`: 64 B frames (IPv6: 78 B) from gen
    /// through the DUT to the sink.
    fn traffic(&self, cfg: &Scenario) -> Result<Traffic> {
        let (src, dst): (IpAddr, IpAddr) = if cfg.v6 {
            ("2001:db8:1::100".parse()?, "2001:db8:2::2".parse()?)
        } else {
            ("198.18.1.100".parse()?, "198.19.0.1".parse()?)
        };
        let lab = &self.lab;
        let (frame, peer) = frame_for(lab, &self.path.from, src, dst, 9)?;
        // 64 B frames; IPv6 cannot fit UDP in 64 B, its minimum is 78 B (RFC 5180).
        let sizes = FrameSizes::Fixed(if cfg.v6 { 78 } else { 64 });
        let mut spec = TrafficSpec::live(lab.ns("gen"), "eth0".into(), frame, sizes, cfg.flows);
        if cfg.vary_dst {
            spec.vary = peregrine_testbed::gen::FlowVary::Destination;
        }
        Ok(Traffic { spec, peer })
    }

    /// Contender `c` attached on the DUT (detached after), measured with
    /// `traffic`: its run labelled `scenario` and `round`.
    fn run(
        &self,
        traffic: &Traffic,
        scenario: &str,
        c: Contender,
        round: u32,
        t: &PacketTrials,
        xdp_forward: Option<&Path>,
    ) -> Result<Run> {
        let Traffic { spec, peer } = traffic;
        let (lab, path) = (&self.lab, &self.path);
        let mean = spec.sizes.mean_size();
        signals::check()?;
        // The data plane under test; dropped (detached) after the contender.
        let _dp = attach(lab, c, xdp_forward)?;
        let gen = Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
        // After the data plane and the generator's pass-through are
        // attached: attaching recreates the DUT's NAPI workers.
        let placement = place(lab, &spec.cpus, &path.dut_in, t.dut_cpu)?;
        let label = announce(c, scenario, round);
        let search = dut_search(t.loss, t.resolution.pps(mean), t.trial);
        let setup = trial_setup(
            &gen,
            &self.sink,
            &self.drops,
            t.trial,
            mean,
            search.loss_tolerance,
        );
        let mut show = progress_line(&label);
        let mut one = |phase: &str, rate| shown_trial(&setup, &label, phase, rate, &mut show);
        let (summary, mut trials) = rfc2544_search(search, mean, &mut one)?;
        if let Some(fixed) = t.fixed_rate {
            trials.push(one("fixed", Rate::Pps(fixed.pps(mean)))?);
        }
        for _ in 1..t.saturated {
            trials.push(one("max", Rate::Max)?);
        }
        drop(show);
        eprintln!("  RFC 2544: {}", summary.describe());
        let run = Run {
            label,
            params: params(spec, &format!("xdp drop sink {}", path.sink)),
            trials,
            rfc2544: Some(summary),
            placement: Some(placement),
            ..Default::default()
        };
        Ok(run)
    }
}

/// `contenders` in the 64 B IPv4 one-flow scenario of `bench router`, one
/// round, each measured with `t`, on a fresh `chain` lab named `lab_name`
/// (removed before returning): the showcase's forwarding part.
pub fn one_flow_runs(
    lab_name: &str,
    contenders: &[Contender],
    t: &PacketTrials,
) -> Result<Vec<Run>> {
    let cfg = Scenario::one_flow_v4(contenders.to_vec());
    let packets = PacketLab::up(lab_name)?;
    let traffic = packets.traffic(&cfg)?;
    contenders
        .iter()
        .map(|&c| packets.run(&traffic, &cfg.name, c, 1, t, None))
        .collect()
}

/// Runs every scenario's contenders, round after round, on one lab.
pub fn bench_router(a: RouterBenchConfig) -> Result<()> {
    let trial = a.trial;
    let dut_cpu = a.placement.dut_cpu()?;
    let loss = a.placement.loss_tolerance()?;

    let both = vec![Contender::Linux, Contender::Xdp];
    // The hooks and peers side by side where they are compared: 1 flow.
    let mut hooks = vec![Contender::Linux, Contender::Tc, Contender::Xdp];
    if a.xdp_forward.is_some() {
        hooks.push(Contender::XdpForward);
    } else {
        eprintln!("xdp-forward not compared: give --xdp-forward PATH (a local build of xdp-tools)");
    }
    let mut scenarios = vec![Scenario::one_flow_v4(
        [hooks.as_slice(), &[Contender::XdpChain]].concat(),
    )];
    if !a.quick {
        scenarios.extend([
            Scenario {
                name: "ipv6 (78 B), 1 flow".into(),
                v6: true,
                flows: 1,
                vary_dst: false,
                big_table: false,
                contenders: hooks.clone(),
            },
            Scenario {
                name: "ipv4, 100 flows".into(),
                v6: false,
                flows: 100,
                vary_dst: false,
                big_table: false,
                contenders: both.clone(),
            },
            Scenario {
                name: "ipv4, 10000 flows".into(),
                v6: false,
                flows: 10_000,
                vary_dst: false,
                big_table: false,
                contenders: both.clone(),
            },
            Scenario {
                name: format!("ipv4, {} routes, 1 destination", a.routes),
                v6: false,
                flows: 1,
                vary_dst: false,
                big_table: true,
                contenders: both.clone(),
            },
            Scenario {
                name: format!("ipv4, {} routes, {} destinations", a.routes, a.routes),
                v6: false,
                flows: a.routes,
                vary_dst: true,
                big_table: true,
                contenders: both.clone(),
            },
        ]);
    }

    let picked = |name: &str| a.only.is_empty() || a.only.iter().any(|o| name.contains(o.as_str()));
    scenarios.retain(|s| picked(&s.name));
    let mut tcp_scenarios = tcp_scenarios(a.quick);
    tcp_scenarios.retain(|s| picked(&s.name));
    if scenarios.is_empty() && tcp_scenarios.is_empty() {
        return Err(crate::BadSetting(format!(
            "no scenario's name contains {}",
            a.only.join(" or ")
        ))
        .into());
    }

    let packets = PacketLab::up("benchrt")?;
    let mut nl = Netlink::new()?;
    let dut = packets.lab.ns("dut");
    let trials = PacketTrials {
        trial,
        resolution: a.resolution,
        fixed_rate: Some(a.fixed_rate),
        loss,
        saturated: a.saturated.max(1),
        dut_cpu,
    };
    let mut runs = Vec::new();
    let mut table_routes = false;
    for cfg in &scenarios {
        if cfg.big_table && !table_routes {
            eprintln!("adding {} /32 routes in the dut", a.routes);
            for k in 0..a.routes {
                let ip = IpAddr::V4(std::net::Ipv4Addr::from(
                    u32::from(std::net::Ipv4Addr::new(198, 19, 0, 1)) + k,
                ));
                nl.add_route(&dut, ip, 32, Some("198.18.2.2".parse()?), None)?;
            }
            table_routes = true;
        }
        let traffic = packets.traffic(cfg)?;
        for round in 1..=a.rounds.max(1) {
            for &c in &cfg.contenders {
                let run = packets.run(
                    &traffic,
                    &cfg.name,
                    c,
                    round,
                    &trials,
                    a.xdp_forward.as_deref(),
                )?;
                runs.push(run);
            }
        }
    }
    let lab = packets.into_lab();
    for round in 1..=a.rounds.max(1) {
        for cfg in &tcp_scenarios {
            for &c in &cfg.contenders {
                signals::check()?;
                runs.push(tcp_run(
                    &lab,
                    c,
                    cfg,
                    round,
                    a.tcp_time,
                    a.xdp_forward.as_deref(),
                )?);
            }
        }
    }
    drop(nl);
    drop(lab);
    let result = ResultFile::new(BenchRouter::KIND, command_line(), runs);
    a.output.write::<BenchRouter>(&result)
}

/// The label of contender `c`'s run in `scenario`, `round`, printed as the
/// run starts.
fn announce(c: Contender, scenario: &str, round: u32) -> String {
    crate::common::announce(c.label(), scenario, round)
}

/// A TCP transfer through the DUT, gen to sink, compared across contenders.
struct TcpScenario {
    name: String,
    v6: bool,
    streams: u32,
    contenders: Vec<Contender>,
}

/// iperf3 with 1 and 8 streams, IPv4 and IPv6 (IPv4 with 1 stream when
/// quick).
fn tcp_scenarios(quick: bool) -> Vec<TcpScenario> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        for streams in [1, 8] {
            if quick && (v6 || streams > 1) {
                continue;
            }
            out.push(TcpScenario {
                name: format!(
                    "tcp {}, {streams} stream{}",
                    if v6 { "ipv6" } else { "ipv4" },
                    if streams > 1 { "s" } else { "" }
                ),
                v6,
                streams,
                contenders: vec![Contender::Linux, Contender::Tc, Contender::Xdp],
            });
        }
    }
    out
}

/// The lab's four veth ends on the gen -> dut -> sink path.
fn path_ends() -> [(&'static str, &'static str); 4] {
    [
        ("gen", "eth0"),
        ("dut", "in0"),
        ("dut", "out0"),
        ("sink", "eth0"),
    ]
}

/// One transfer of scenario `cfg` through contender `c`. The XDP hook
/// cannot carry the partial checksums TX checksum offload leaves (a
/// redirected frame keeps them and the receiver drops it), so its runs turn
/// that offload off on the path for their duration, and say so; the others
/// run at the kernel's defaults.
fn tcp_run(
    lab: &Lab,
    c: Contender,
    cfg: &TcpScenario,
    round: u32,
    time: Duration,
    xdp_forward: Option<&Path>,
) -> Result<Run> {
    let _dp = attach(lab, c, xdp_forward)?;
    let mut notes = vec![
        "iperf3 client in gen, server in sink, through the dut; processes and receive work unpinned".to_string(),
    ];
    if c == Contender::Tc {
        notes.push("tc router: routed frames enter gen and sink with bpf_redirect_peer (their eth0 run no XDP here)".into());
    }
    let _offloads = if c == Contender::Xdp {
        let ends: Vec<(String, String)> = path_ends()
            .iter()
            .map(|(h, i)| (lab.ns(h), i.to_string()))
            .collect();
        notes.push(
            "TX checksum offload off on gen:eth0, dut:in0, dut:out0, sink:eth0 for this run: the XDP hook cannot forward partial checksums".into(),
        );
        Some(netdev::OffloadOverride::set(
            ends,
            Offload::TxChecksum,
            false,
        )?)
    } else {
        notes.push(lab.topo.offloads_note());
        None
    };
    let server: IpAddr = if cfg.v6 {
        "2001:db8:2::2".parse()?
    } else {
        "198.19.0.1".parse()?
    };
    let label = announce(c, &cfg.name, round);
    let fig = tcp::iperf3(&TcpTransfer {
        client_ns: lab.ns("gen"),
        server_ns: lab.ns("sink"),
        server,
        streams: cfg.streams,
        duration: time,
    })?;
    eprintln!(
        "  {:.2} Gbit/s, {} retransmits, {:.2} CPU cores ({:.3} per Gbit/s)",
        fig.gbit_s, fig.retransmits, fig.cpu_cores, fig.cpu_cores_per_gbit_s
    );
    Ok(Run {
        label,
        params: RunParams {
            backend: "iperf3".into(),
            ip: if cfg.v6 { "ipv6" } else { "ipv4" }.into(),
            frame_size: "tcp".into(),
            mean_frame_bytes: 0.0,
            flows: cfg.streams,
            threads: cfg.streams as usize,
            sink: format!("iperf3 server {server} in sink"),
            sent: true,
        },
        trials: Vec::new(),
        rfc2544: None,
        placement: Some(Placement {
            generator_cpus: Vec::new(),
            dut_cpus: Vec::new(),
            sink_cpus: Vec::new(),
            notes,
        }),
        tcp: Some(fig),
        values: Default::default(),
    })
}

/// The ratios quoted beside each scenario's ratios to Linux forwarding:
/// the XDP router against its peer, and the chain against the direct path.
fn pairs() -> [(&'static str, &'static str); 2] {
    [
        (Contender::Xdp.label(), Contender::XdpForward.label()),
        (Contender::XdpChain.label(), Contender::Xdp.label()),
    ]
}

/// `bench router`'s result files: RFC 2544 and TCP per scenario and
/// contender.
pub struct BenchRouter;

impl Report for BenchRouter {
    const KIND: &'static str = "bench-router";
    type Values = NoValues;

    /// Every trial; the saturated figures, whose ratios are the ones
    /// quoted (`saturation`); then RFC 2544 and TCP per scenario, RFC 2544
    /// without ratios: a search at <= 0.1% loss on this VM follows the
    /// DUT's NAPI wake-ups, and its medians do not repeat between runs.
    fn table(r: &ResultFile) -> String {
        let sat = saturation::scenarios(r);
        let mut out = r.table() + &saturation::table(&sat, &pairs(), Self::RATE_UNIT);
        out += &compare::table(&unrated_rfc2544(r), Self::RATE_UNIT);
        out
    }

    fn figures(r: &ResultFile) -> Vec<plot::Figure> {
        let sat = saturation::scenarios(r);
        let rfc: Vec<_> = unrated_rfc2544(r)
            .into_iter()
            .filter(|s| s.metric == compare::Metric::Rfc2544)
            .collect();
        let mut f: Vec<plot::Figure> = saturation::figure(r, &sat, Self::RATE_UNIT)
            .into_iter()
            .collect();
        f.push(plot::rates_of(r, &rfc, Self::RATE_UNIT));
        f.push(plot::timeline(r));
        f
    }
}

/// The file's scenarios, RFC 2544 ones without ratios.
fn unrated_rfc2544(r: &ResultFile) -> Vec<compare::ScenarioFigures> {
    let mut s = compare::by_scenario(r);
    for x in &mut s {
        x.rated = x.metric != compare::Metric::Rfc2544;
    }
    s
}
