//! `peregrine bench router`: the XDP router against Linux IP forwarding on the
//! same lab in the same run, per configuration, plus a 2-NF service chain.
use std::net::IpAddr;

use std::time::Duration;

use anyhow::Result;
use peregrine_bpf::gen::FrameSizes;
use peregrine_bpf::router::FibMode;
use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_dataplane::{ChainConfig, ChainMatch, Dataplane, DataplaneConfig, NfConfig, NfKind};
use peregrine_host::nl::Netlink;
use peregrine_host::signals;
use peregrine_lab::compare::median;
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{ResultFile, Rfc2544, Run, RunKey};
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::trial::rfc2544_search;
use peregrine_lab::{Endpoint, Lab, Lifetime};

use crate::common::{
    builtin_topology, command_line, dut_search, frame_for, lab_sink, params, path_drops, place,
    progress_line, shown_trial, trial_setup, PlacementConfig, RateSetting, ResultOutput,
};

/// `peregrine bench router`.
#[derive(Clone, Debug)]
pub struct RouterBenchConfig {
    /// Length of each trial.
    pub trial: Duration,
    /// Offered rate of the fixed-rate trial.
    pub fixed_rate: RateSetting,
    /// RFC 2544 search resolution.
    pub resolution: RateSetting,
    /// Routes added for the large-table scenarios.
    pub routes: u32,
    /// Only IPv4, one flow, direct and chain (a quick look).
    pub quick: bool,
    /// Rounds per scenario; contenders alternate within each round so slow
    /// drifts of a noisy machine hit them alike. Ratios use medians.
    pub rounds: u32,
    pub placement: PlacementConfig,
    pub output: ResultOutput,
}

/// What is compared on the DUT.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Contender {
    Linux,
    Xdp,
    XdpChain,
}

impl Contender {
    /// The name in labels, tables and plot legends.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Linux => "linux forwarding",
            Contender::Xdp => "xdp router",
            Contender::XdpChain => "xdp router + 2-NF chain",
        }
    }
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
        lab: lab.into(),
        router: "dut".into(),
        ports: vec!["in0".into(), "out0".into()],
        mode: XdpMode::Native,
        fib: FibMode::Full,
        nfs: vec![reflect("c1"), reflect("c2")],
        chains: vec![ChainConfig {
            name: "bench".into(),
            matches: ChainMatch::Dst("198.19.0.0/16".parse().expect("a prefix")),
            hops: vec!["c1".into(), "c2".into()],
        }],
    }
}

/// Runs every scenario's contenders, round after round, on one lab.
pub fn bench_router(a: RouterBenchConfig) -> Result<()> {
    let trial = a.trial;
    let dut_cpu = a.placement.dut_cpu()?;
    let loss = a.placement.loss_tolerance()?;
    let topo = builtin_topology("chain", "benchrt")?;
    eprintln!(
        "building lab {} (gen -> dut -> sink, containers c1 c2)",
        topo.name
    );
    let lab = Lab::up(topo, Lifetime::Ephemeral)?;
    let mut nl = Netlink::new()?;
    let from = Endpoint {
        host: "gen".into(),
        iface: "eth0".into(),
    };
    let sink_ep = Endpoint {
        host: "sink".into(),
        iface: "eth0".into(),
    };
    let sink = lab_sink(lab.name(), &lab.ns("sink"), &sink_ep, XdpAction::Drop)?;
    let dut = lab.ns("dut");
    let dut_in = Endpoint {
        host: "dut".into(),
        iface: "in0".into(),
    };
    let drops = path_drops(&lab, Some(&dut_in), &sink_ep)?;
    let mut figures: Vec<Figure> = Vec::new();

    let both = vec![Contender::Linux, Contender::Xdp];
    let mut scenarios = vec![Scenario {
        name: "ipv4, 1 flow".into(),
        v6: false,
        flows: 1,
        vary_dst: false,
        big_table: false,
        contenders: vec![Contender::Linux, Contender::Xdp, Contender::XdpChain],
    }];
    if !a.quick {
        scenarios.extend([
            Scenario {
                name: "ipv6 (78 B), 1 flow".into(),
                v6: true,
                flows: 1,
                vary_dst: false,
                big_table: false,
                contenders: both.clone(),
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

    let mut runs = Vec::new();
    let mut table_routes = false;
    for (si, cfg) in scenarios.iter().enumerate() {
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
        let (src, dst): (IpAddr, IpAddr) = if cfg.v6 {
            ("2001:db8:1::100".parse()?, "2001:db8:2::2".parse()?)
        } else {
            ("198.18.1.100".parse()?, "198.19.0.1".parse()?)
        };
        let (frame, peer) = frame_for(&lab, &from, src, dst, 9)?;
        // 64 B frames; IPv6 cannot fit UDP in 64 B, its minimum is 78 B (RFC 5180).
        let sizes = FrameSizes::Fixed(if cfg.v6 { 78 } else { 64 });
        let mean = sizes.mean_size();
        let mut spec = TrafficSpec::live(
            lab.ns("gen"),
            "eth0".into(),
            frame,
            sizes.clone(),
            cfg.flows,
        );
        if cfg.vary_dst {
            spec.vary = peregrine_bpf::gen::FlowVary::Destination;
        }
        for round in 1..=a.rounds.max(1) {
            for &c in &cfg.contenders {
                signals::check()?;
                // The data plane under test; dropped (detached) after the contender.
                let _dp = match c {
                    Contender::Linux => None,
                    Contender::Xdp => Some(Dataplane::router(
                        Some(&dut),
                        &["in0".into(), "out0".into()],
                        XdpMode::Native,
                        FibMode::Full,
                        false,
                    )?),
                    Contender::XdpChain => {
                        Some(Dataplane::deploy(&lab.topo, &chain_config(lab.name()))?)
                    }
                };
                let gen =
                    Generator::new(spec.clone(), Some((lab.ns(&peer.host), peer.iface.clone())))?;
                // After the data plane and the generator's pass-through are
                // attached: attaching recreates the DUT's NAPI workers.
                let placement = place(&lab, &spec.cpus, &dut_in, dut_cpu)?;
                let label = RunKey {
                    contender: c.label().into(),
                    scenario: cfg.name.clone(),
                    round: Some(round),
                }
                .label();
                eprintln!("{label}");
                let search = dut_search(loss, a.resolution.pps(mean), trial);
                let setup = trial_setup(&gen, &sink, &drops, trial, mean, search.loss_tolerance);
                let mut show = progress_line(&label);
                let mut one =
                    |phase: &str, rate| shown_trial(&setup, &label, phase, rate, &mut show);
                let (summary, mut trials) = rfc2544_search(search, mean, &mut one)?;
                trials.push(one("fixed", Rate::Pps(a.fixed_rate.pps(mean)))?);
                drop(show);
                eprintln!("  RFC 2544: {}", summary.describe());
                figures.push(Figure {
                    scenario: si,
                    contender: c,
                    rfc2544: summary.clone(),
                });
                runs.push(Run {
                    label,
                    params: params(&spec, &format!("xdp drop sink {}", sink_ep)),
                    trials,
                    rfc2544: Some(summary),
                    placement: Some(placement),
                });
            }
        }
    }
    drop(drops);
    drop(sink);
    drop(nl);
    drop(lab);
    let result = ResultFile::new("bench-router", command_line(), runs);
    if !a.output.json {
        print_ratios(&scenarios, &figures);
    }
    a.output.write(&result)
}

/// One round's RFC 2544 figure of a contender in a scenario (an index into
/// the run's scenarios).
struct Figure {
    scenario: usize,
    contender: Contender,
    rfc2544: Rfc2544,
}

/// Median RFC 2544 throughput over the rounds of one contender in one
/// scenario, and whether any of those rounds was generator-limited.
fn median_throughput(
    figures: &[Figure],
    scenario: usize,
    contender: Contender,
) -> Option<(f64, bool)> {
    let mine: Vec<&Rfc2544> = figures
        .iter()
        .filter(|f| f.scenario == scenario && f.contender == contender)
        .map(|f| &f.rfc2544)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let v: Vec<f64> = mine.iter().map(|s| s.throughput_pps).collect();
    Some((median(&v), mine.iter().any(|s| s.generator_limited)))
}

/// XDP / Linux throughput ratios per scenario (medians over rounds of the
/// same run), and chain / direct. A generator-limited figure is a lower
/// bound, and so is a ratio over it ("or more").
fn print_ratios(scenarios: &[Scenario], figures: &[Figure]) {
    let show = |(v, gl): (f64, bool)| format!("{}{:.3} Mpps", if gl { ">= " } else { "" }, v / 1e6);
    for (si, cfg) in scenarios.iter().enumerate() {
        let x = median_throughput(figures, si, Contender::Xdp);
        let l = median_throughput(figures, si, Contender::Linux);
        let ch = median_throughput(figures, si, Contender::XdpChain);
        if let (Some(x), Some(l)) = (x, l) {
            println!(
                "ratio  {}: xdp {} / linux {} = {:.2}x{} (medians)",
                cfg.name,
                show(x),
                show(l),
                x.0 / l.0.max(1.0),
                if x.1 {
                    " or more (xdp generator-limited)"
                } else {
                    ""
                }
            );
        }
        if let (Some(ch), Some(x)) = (ch, x) {
            println!(
                "ratio  {}: 2-NF chain {} / direct {} = {:.2} (medians)",
                cfg.name,
                show(ch),
                show(x),
                ch.0 / x.0.max(1.0)
            );
        }
    }
}
