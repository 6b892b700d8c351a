//! `peregrine bench router`: the XDP router against Linux IP forwarding on the
//! same lab in the same run, per configuration, plus a 2-NF service chain.
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use peregrine_bpf::gen::FrameSizes;
use peregrine_bpf::router::FibMode;
use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_host::nl::Netlink;
use peregrine_host::signals;
use peregrine_lab::dataplane::{ChainConfig, Dataplane, DataplaneConfig, MatchConfig, NfConfig};
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{ResultFile, Rfc2544, Run};
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::trial::{rfc2544_search, SearchParams, TrialSetup};
use peregrine_lab::{Endpoint, Lab, Lifetime};

use crate::bench::{
    builtin_topology, command_line, frame_for, lab_sink, params, path_drops, place, progress_line,
    shown_trial, write_outputs,
};
use crate::units::{DurationArg, RateArg};

#[derive(Args, Clone)]
pub struct BenchRouterArgs {
    /// Length of each trial (2, 2s, 500ms).
    #[arg(long, default_value = "2s")]
    pub trial: DurationArg,
    /// Offered rate of the fixed-rate trial (2M, 2Mpps, 1Gbit).
    #[arg(long, default_value = "2Mpps")]
    pub fixed_rate: RateArg,
    /// RFC 2544 search resolution (20k, 20kpps).
    #[arg(long, default_value = "20kpps")]
    pub resolution: RateArg,
    /// Routes added for the large-table configurations.
    #[arg(long, default_value_t = 10_000)]
    pub routes: u32,
    /// Only IPv4, one flow, direct and chain (a quick look).
    #[arg(long)]
    pub quick: bool,
    /// Rounds per configuration; contenders alternate within each round so
    /// slow drifts of this noisy machine hit them alike. Ratios use medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    #[command(flatten)]
    pub placement: crate::bench::PlacementArgs,
    /// Directory for the result file and plots.
    #[arg(long, default_value = crate::bench::DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-router")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Contender {
    Linux,
    Xdp,
    XdpChain,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::Linux => "linux forwarding",
            Contender::Xdp => "xdp router",
            Contender::XdpChain => "xdp router + 2-NF chain",
        }
    }
}

struct Config {
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
    let nf = |host: &str, kind: &str, out: Option<&str>| NfConfig {
        host: host.into(),
        iface: "eth0".into(),
        kind: kind.into(),
        out: out.map(str::to_string),
        acl: vec![],
    };
    DataplaneConfig {
        lab: lab.into(),
        router: "dut".into(),
        ports: vec!["in0".into(), "out0".into()],
        mode: "native".into(),
        fib: "full".into(),
        nfs: vec![nf("c1", "reflect", None), nf("c2", "reflect", None)],
        chains: vec![ChainConfig {
            name: "bench".into(),
            matches: MatchConfig {
                dst: Some("198.19.0.0/16".into()),
                ..Default::default()
            },
            hops: vec!["c1".into(), "c2".into()],
        }],
    }
}

pub fn bench_router(a: BenchRouterArgs) -> Result<()> {
    let trial: std::time::Duration = a.trial.into();
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
    // Typed keys for the ratios: (configuration, contender, RFC 2544).
    let mut figures: Vec<(usize, Contender, Rfc2544)> = Vec::new();

    let both = vec![Contender::Linux, Contender::Xdp];
    let mut configs = vec![Config {
        name: "ipv4, 1 flow".into(),
        v6: false,
        flows: 1,
        vary_dst: false,
        big_table: false,
        contenders: vec![Contender::Linux, Contender::Xdp, Contender::XdpChain],
    }];
    if !a.quick {
        configs.extend([
            Config {
                name: "ipv6 (78 B), 1 flow".into(),
                v6: true,
                flows: 1,
                vary_dst: false,
                big_table: false,
                contenders: both.clone(),
            },
            Config {
                name: "ipv4, 100 flows".into(),
                v6: false,
                flows: 100,
                vary_dst: false,
                big_table: false,
                contenders: both.clone(),
            },
            Config {
                name: "ipv4, 10000 flows".into(),
                v6: false,
                flows: 10_000,
                vary_dst: false,
                big_table: false,
                contenders: both.clone(),
            },
            Config {
                name: format!("ipv4, {} routes, 1 destination", a.routes),
                v6: false,
                flows: 1,
                vary_dst: false,
                big_table: true,
                contenders: both.clone(),
            },
            Config {
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
    for (ci, cfg) in configs.iter().enumerate() {
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
                let label = format!("{} | {} | round {round}", c.label(), cfg.name);
                eprintln!("{label}");
                let search = SearchParams {
                    loss_tolerance: loss,
                    resolution_pps: a.resolution.pps(mean),
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
                let mut one =
                    |phase: &str, rate| shown_trial(&setup, &label, phase, rate, &mut show);
                let (summary, mut trials) = rfc2544_search(search, mean, &mut one)?;
                trials.push(one("fixed", Rate::Pps(a.fixed_rate.pps(mean)))?);
                drop(show);
                eprintln!("  RFC 2544: {}", summary.describe());
                figures.push((ci, c, summary.clone()));
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
    if !a.json {
        print_ratios(&configs, &figures);
    }
    write_outputs(&result, &a.out, &a.name, a.json)
}

/// Median RFC 2544 throughput over the rounds of one contender in one
/// configuration, and whether any of those rounds was generator-limited.
fn median_throughput(
    figures: &[(usize, Contender, Rfc2544)],
    config: usize,
    contender: Contender,
) -> Option<(f64, bool)> {
    let mine: Vec<&Rfc2544> = figures
        .iter()
        .filter(|(c, k, _)| *c == config && *k == contender)
        .map(|(_, _, s)| s)
        .collect();
    if mine.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = mine.iter().map(|s| s.throughput_pps).collect();
    v.sort_by(f64::total_cmp);
    Some((v[v.len() / 2], mine.iter().any(|s| s.generator_limited)))
}

/// XDP / Linux throughput ratios per configuration (medians over rounds of
/// the same run), and chain / direct. A generator-limited figure is a lower
/// bound, and so is a ratio over it ("or more").
fn print_ratios(configs: &[Config], figures: &[(usize, Contender, Rfc2544)]) {
    let show = |(v, gl): (f64, bool)| format!("{}{:.3} Mpps", if gl { ">= " } else { "" }, v / 1e6);
    for (ci, cfg) in configs.iter().enumerate() {
        let x = median_throughput(figures, ci, Contender::Xdp);
        let l = median_throughput(figures, ci, Contender::Linux);
        let ch = median_throughput(figures, ci, Contender::XdpChain);
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
