//! `peregrine bench ...`, `gen`, `report` and `showcase`: their arguments,
//! turned into peregrine-bench's configurations, which does the work.
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};
use peregrine_bench::faas::{FaasBenchConfig, FaasContender};
use peregrine_bench::gen::{GenBenchConfig, GenConfig};
use peregrine_bench::qos::{QosBenchConfig, QosPart};
use peregrine_bench::redraw::ReportConfig;
use peregrine_bench::router::RouterBenchConfig;
use peregrine_bench::showcase::ShowcaseConfig;
use peregrine_bench::{PlacementConfig, ResultOutput, DEFAULT_OUT};
use peregrine_testbed::gen::FrameSizes;

use crate::units::{self, DurationArg, RateArg};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Generator -> veth -> XDP drop sink: live frames vs sockets, rate accuracy, latency.
    Gen(BenchGenArgs),
    /// XDP router vs Linux forwarding (and a 2-NF chain) on generator -> dut -> sink.
    Router(BenchRouterArgs),
    /// The function invoker: socket, mmsg and AF_XDP, per request size and workers.
    Faas(BenchFaasArgs),
    /// QoS vs tc HTB: the policer (tc and XDP hooks: rate accuracy, CPU,
    /// TCP goodput, the cost of 100,000 rules) and the AF_XDP scheduler
    /// (WFQ shares with UDP and TCP, strict priority, saturation).
    Qos(BenchQosArgs),
    /// Seed 003 again: udp, mmsg, PACKET_MMAP and AF_XDP across container
    /// network modes (host, bridge with NAT, macvlan, overlay, same-host),
    /// its three scenarios, loss by place, CPU per datagram, latency.
    Netmodes(BenchNetmodesArgs),
    /// Seed 002 again: an HTTP/3 download of a body held in memory, quinn
    /// on kernel UDP without and with GSO/GRO and on peregrine's UDP/IP
    /// stack over AF_XDP, then the stack's ablations: goodput, CPU per GB,
    /// where the CPU went (perf).
    Quic(BenchQuicArgs),
    /// The node agent's control plane: applying a node of many ports and
    /// rules, a new agent adopting it after kill -9, reconcile latency
    /// after a port appears, resident memory.
    Agent(BenchAgentArgs),
}

#[derive(Args, Clone)]
pub struct BenchAgentArgs {
    /// Router ports of the node applied (veth pairs made by the bench).
    #[arg(long, default_value_t = 100)]
    pub ports: usize,
    /// Policer rules of the node applied (on its first port).
    #[arg(long, default_value_t = 10_000)]
    pub rules: usize,
    /// Samples of the reconcile latency after a port appears.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Rounds of the apply, re-apply and adopt measures.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-agent")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct BenchQuicArgs {
    /// Body bytes each download carries (the seed: 2GiB).
    #[arg(long, default_value = "1GiB")]
    pub size: units::ByteSize,
    /// Contenders, comma-separated: kernel-nogso, kernel-gso,
    /// kernel-gso-segmented (GSO with the server's veth segmenting), afxdp.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kernel-nogso,kernel-gso,kernel-gso-segmented,afxdp"
    )]
    pub contenders: Vec<String>,
    /// The stack's ablations, comma-separated: tx-batch, busy-poll, queues,
    /// xdp-generic, threads, or none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tx-batch,busy-poll,queues,xdp-generic,threads"
    )]
    pub ablations: Vec<String>,
    /// TX batches (datagrams per quinn transmit, 1-10) the tx-batch
    /// ablation tries beside the default 10.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub tx_batches: Vec<usize>,
    /// The busy-poll ablation's time per poll (20, 20us).
    #[arg(long, default_value = "20us", value_parser = units::micros)]
    pub busy_poll: u32,
    /// The queues ablation's RX queue count (veth and stack).
    #[arg(long, default_value_t = 2)]
    pub queues: u32,
    /// The threads ablation's async runtime threads per end (default runs: 1).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Rounds; the contenders take turns within each.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Over IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// Skip perf (the CPU breakdown of the first round).
    #[arg(long)]
    pub no_perf: bool,
    /// A short run for CI: 64 MiB, one round, no ablations, no perf.
    #[arg(long)]
    pub quick: bool,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-quic")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct BenchNetmodesArgs {
    /// I/O paths compared, comma-separated (udp, mmsg, mmsg-gso, mmap, afxdp).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "udp,mmsg,mmsg-gso,mmap,afxdp"
    )]
    pub paths: Vec<peregrine_lab::iopath::IoPath>,
    /// Network modes, comma-separated (host, bridge, macvlan, overlay, same-host).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "host,bridge,macvlan,overlay,same-host"
    )]
    pub modes: Vec<peregrine_lab::netmodes::NetMode>,
    /// Scenarios, comma-separated: I (count), II (rate), III (size).
    #[arg(long, value_delimiter = ',', default_value = "I,II,III")]
    pub scenarios: Vec<String>,
    /// Scenario I: datagrams per run (the seed: 2M..10M).
    #[arg(long, value_delimiter = ',', default_value = "2M,4M,6M,8M,10M")]
    pub counts: Vec<RateArg>,
    /// Scenario II: offered rates (bit/s of frames with FCS), then
    /// "unpaced" for saturation.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "200Mbit,400Mbit,600Mbit,800Mbit,unpaced"
    )]
    pub rates: Vec<String>,
    /// Scenario III: UDP payload sizes in bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "64,128,256,512,1024,1472"
    )]
    pub sizes: Vec<usize>,
    /// Rate of scenarios I and III (the seed: 500 Mbit/s).
    #[arg(long, default_value = "500Mbit")]
    pub rate: RateArg,
    /// Datagrams per run in scenarios II and III (the seed: 1M).
    #[arg(long, default_value = "1M")]
    pub count: RateArg,
    /// Longest a run sends.
    #[arg(long, default_value = "30s")]
    pub max_run: DurationArg,
    /// Repeats of every point; paths alternate within each.
    #[arg(long, default_value_t = 3)]
    pub repeats: u32,
    /// Send IPv6 instead of IPv4.
    #[arg(long)]
    pub ipv6: bool,
    /// A short run for CI: 20k datagrams, two rates, two sizes, one repeat
    /// (overrides --counts, --rates, --sizes, --count and --repeats).
    #[arg(long)]
    pub quick: bool,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-netmodes")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct BenchQosArgs {
    /// Rates compared (bit/s: 10Mbit, 1Gbit), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10Mbit,100Mbit,1Gbit")]
    pub rates: Vec<RateArg>,
    /// Length of each UDP trial (4, 4s); accuracy is read from its 1 s
    /// windows after the first.
    #[arg(long, default_value = "4s")]
    pub trial: DurationArg,
    /// Length of each iperf3 TCP transfer.
    #[arg(long, default_value = "10s")]
    pub tcp_time: DurationArg,
    /// Rules in the scale comparison (against one rule).
    #[arg(long, default_value_t = 100_000)]
    pub rules: u32,
    /// Rounds; contenders alternate within each round. Ratios use medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// policer, scheduler or all.
    #[arg(long, default_value = "all")]
    pub part: QosPart,
    /// The scheduler part's link rate (its root class; bit/s): low enough
    /// that the DUT's CPU is not what limits either contender.
    #[arg(long, default_value = "200Mbit")]
    pub sched_link: RateArg,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-qos")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
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

/// How much a sender sends and how fast: shared by `gen` and `io send`.
#[derive(Args, Clone)]
pub struct PaceArgs {
    /// Rate (200k, 1Mpps, 500Mbit, 1Gbit: bits of Ethernet frames with FCS);
    /// default unpaced.
    #[arg(long)]
    pub rate: Option<RateArg>,
    /// Frames (datagrams) to send (with --duration: whichever comes first).
    #[arg(long)]
    pub count: Option<u64>,
    /// How long to send (10, 10s, 500ms).
    #[arg(long)]
    pub duration: Option<DurationArg>,
}

impl PaceArgs {
    /// The sender's bound: a count, a duration or both.
    pub fn limit(&self) -> peregrine_lab::pacing::Limit {
        peregrine_lab::pacing::Limit {
            count: self.count,
            duration: self.duration.map(Into::into),
        }
    }
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
    #[command(flatten)]
    pub pace: PaceArgs,
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
    /// Length of each trial (2, 2s, 500ms).
    #[arg(long, default_value = "2s")]
    pub trial: DurationArg,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

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
    /// Only IPv4, one flow, direct and chain, and one TCP stream (a quick
    /// look).
    #[arg(long)]
    pub quick: bool,
    /// Length of each iperf3 TCP transfer (3, 3s).
    #[arg(long, default_value = "3s")]
    pub tcp_time: DurationArg,
    /// Run only the scenarios whose name contains TEXT (repeatable), e.g.
    /// "1 flow" for the 64 B IPv4 and 78 B IPv6 single-flow runs, "tcp" for
    /// the iperf3 rows; every name is listed in the result's runs.
    #[arg(long, value_name = "TEXT")]
    pub scenario: Vec<String>,
    /// A local build of xdp-tools' xdp-forward to compare beside the XDP
    /// router in the 1-flow scenarios (never shipped with peregrine).
    #[arg(long, value_name = "PATH")]
    pub xdp_forward: Option<PathBuf>,
    /// Rounds per configuration; contenders alternate within each round so
    /// slow drifts of this noisy machine hit them alike. Ratios use medians.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    #[command(flatten)]
    pub placement: PlacementArgs,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-router")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct BenchFaasArgs {
    /// Length of each trial (1.5, 1.5s, 500ms).
    #[arg(long, default_value = "1.5s")]
    pub duration: DurationArg,
    /// Request payload sizes, bytes.
    #[arg(long, value_delimiter = ',', default_value = "200,600,800,1000,1400")]
    pub sizes: Vec<usize>,
    /// Backends and worker configurations (BACKEND:THREADS, threads =
    /// queues; BACKEND-wasm:THREADS runs reverse as WebAssembly).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "socket:1,mmsg:1,afxdp:1,afxdp-wasm:1,mmsg:2,afxdp:2"
    )]
    pub configs: Vec<String>,
    /// Highest share of requests left unanswered at the throughput found.
    #[arg(long, default_value_t = 0.001)]
    pub loss: f64,
    /// Requests/s offered in the saturation trial (the search's first):
    /// above every server's capacity here, below what would overload the
    /// generator's own core (unpaced, it would also starve the servers'
    /// receive work that veth runs there).
    #[arg(long, default_value = "3M")]
    pub saturate: RateArg,
    /// Request rate at which latency is compared (every backend sustains it).
    #[arg(long, default_value = "100k")]
    pub latency_rate: RateArg,
    /// Where the client receives and checks replies: sender (veth's
    /// default: on the server's CPU that sent them), rps (RPS to the
    /// generator's CPU) or napi (the client veth's threaded NAPI pinned to
    /// the generator's CPU, as on a separate client host).
    #[arg(long, default_value = "sender")]
    pub client_receive: peregrine_bench::faas::ClientReceive,
    /// Directory for the result file and plots.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// File name stem of the result and plots.
    #[arg(long, default_value = "bench-faas")]
    pub name: String,
    /// Print the result as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
}

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

impl From<&PlacementArgs> for PlacementConfig {
    fn from(a: &PlacementArgs) -> PlacementConfig {
        PlacementConfig {
            loss: a.loss,
            dut_cpu: a.dut_cpu,
            dut_on_sender_cpu: a.dut_on_sender_cpu,
        }
    }
}

pub fn run(cmd: BenchCmd) -> Result<()> {
    match cmd {
        BenchCmd::Gen(a) => peregrine_bench::gen::bench_gen(GenBenchConfig {
            duration: a.duration.into(),
            size: a.size,
            flows: a.flows,
            ipv6: a.ipv6,
            rate_check: a.rate_check,
            output: output(a.out, a.name, a.json),
        }),
        BenchCmd::Netmodes(a) => netmodes(a),
        BenchCmd::Quic(a) => quic(a),
        BenchCmd::Agent(a) => {
            peregrine_host::caps::require_bpf("bench agent")?;
            peregrine_bench::agent::bench_agent(peregrine_bench::agent::AgentBenchConfig {
                ports: a.ports,
                rules: a.rules,
                samples: a.samples,
                rounds: a.rounds,
                exe: std::env::current_exe()?,
                output: output(a.out, a.name, a.json),
            })
        }
        BenchCmd::Qos(a) => {
            let mut rates = Vec::new();
            for r in &a.rates {
                match r {
                    RateArg::Bps(b) if *b >= 1e3 => rates.push(b.round() as u64),
                    _ => crate::usage!("--rates {r}: give bit rates (10Mbit, 1Gbit)"),
                }
            }
            let sched_link = match a.sched_link {
                RateArg::Bps(b) if b >= 1e6 => b.round() as u64,
                r => crate::usage!("--sched-link {r}: give a bit rate of at least 1Mbit"),
            };
            peregrine_bench::qos::bench_qos(QosBenchConfig {
                part: a.part,
                sched_link,
                rates,
                trial: a.trial.into(),
                tcp_time: a.tcp_time.into(),
                rules: a.rules,
                rounds: a.rounds,
                placement: (&a.placement).into(),
                output: output(a.out, a.name, a.json),
            })
        }
        BenchCmd::Router(a) => peregrine_bench::router::bench_router(RouterBenchConfig {
            trial: a.trial.into(),
            fixed_rate: a.fixed_rate,
            resolution: a.resolution,
            routes: a.routes,
            quick: a.quick,
            tcp_time: a.tcp_time.into(),
            only: a.scenario,
            xdp_forward: a.xdp_forward,
            rounds: a.rounds,
            placement: (&a.placement).into(),
            output: output(a.out, a.name, a.json),
        }),
        BenchCmd::Faas(a) => {
            // Errors of --configs are exit status 1, as they always were.
            let contenders = a
                .configs
                .iter()
                .map(|c| c.parse::<FaasContender>().map_err(anyhow::Error::msg))
                .collect::<Result<Vec<_>>>()?;
            peregrine_bench::faas::bench_faas(FaasBenchConfig {
                duration: a.duration.into(),
                sizes: a.sizes,
                contenders,
                loss: a.loss,
                saturate: a.saturate,
                latency_rate: a.latency_rate,
                client_receive: a.client_receive,
                output: output(a.out, a.name, a.json),
            })
        }
    }
}

/// `peregrine gen`.
pub fn gen(a: GenArgs) -> Result<()> {
    peregrine_bench::gen::gen(GenConfig {
        lab: a.lab,
        from: a.from,
        to: a.to,
        src: a.src,
        port: a.port,
        rate: a.pace.rate,
        count: a.pace.count,
        duration: a.pace.duration.map(Into::into),
        size: a.size,
        flows: a.flows,
        threads: a.threads,
        backend: a.backend.parse()?,
        stamp: a.stamp,
        sink: a.sink,
        max_loss: a.max_loss,
        json: a.json,
    })
}

/// `peregrine report`.
pub fn report(a: ReportArgs) -> Result<()> {
    peregrine_bench::redraw::report(ReportConfig {
        files: a.files,
        out: a.out,
        json: a.json,
    })
}

/// `peregrine showcase`.
pub fn showcase(a: ShowcaseArgs) -> Result<()> {
    peregrine_bench::showcase::showcase(ShowcaseConfig {
        trial: a.trial.into(),
        placement: (&a.placement).into(),
        output: ResultOutput {
            dir: a.out,
            stem: "showcase".into(),
            json: a.json,
        },
    })
}

/// Where a benchmark writes its result, from its --out, --name and --json.
/// A count given as a plain or scaled number (2M, 500k).
fn count_of(flag: &str, r: RateArg) -> Result<u64> {
    match r {
        RateArg::Pps(p) if p >= 1.0 => Ok(p.round() as u64),
        _ => crate::usage!("{flag} {r}: give a count (20000, 2M)"),
    }
}

fn netmodes(a: BenchNetmodesArgs) -> Result<()> {
    use peregrine_bench::netmodes::{NetmodesBenchConfig, Scenario};
    let mut scenarios = Vec::new();
    for s in &a.scenarios {
        match Scenario::ALL
            .into_iter()
            .find(|x| x.name() == s.to_uppercase())
        {
            Some(x) => scenarios.push(x),
            None => crate::usage!("--scenarios {s}: expected I, II or III"),
        }
    }
    let mut rates = Vec::new();
    for r in &a.rates {
        if r == "unpaced" {
            rates.push(None);
            continue;
        }
        match r.parse::<RateArg>() {
            Ok(RateArg::Bps(b)) => rates.push(Some(b)),
            _ => crate::usage!("--rates {r}: give bit rates (200Mbit) or unpaced"),
        }
    }
    let rate = match a.rate {
        RateArg::Bps(b) => b,
        r => crate::usage!("--rate {r}: give a bit rate (500Mbit)"),
    };
    let mut counts = Vec::new();
    for c in &a.counts {
        counts.push(count_of("--counts", *c)?);
    }
    let mut cfg = NetmodesBenchConfig {
        paths: a.paths,
        modes: a.modes,
        scenarios,
        counts,
        rates,
        sizes: a.sizes,
        rate,
        count: count_of("--count", a.count)?,
        max_run: a.max_run.into(),
        repeats: a.repeats.max(1),
        ipv6: a.ipv6,
        output: output(a.out, a.name, a.json),
    };
    if a.quick {
        cfg.counts = vec![20_000];
        cfg.rates = vec![Some(200e6), None];
        cfg.sizes = vec![64, 1472];
        cfg.count = 20_000;
        cfg.repeats = 1;
    }
    peregrine_bench::netmodes::bench_netmodes(cfg)
}

fn quic(a: BenchQuicArgs) -> Result<()> {
    use peregrine_bench::quic::{Ablation, QuicBenchConfig, QuicIo};
    let mut contenders = Vec::new();
    for c in &a.contenders {
        match QuicIo::ALL.into_iter().find(|io| io.name() == c) {
            Some(io) => contenders.push(io),
            None => crate::usage!(
                "--contenders {c}: expected kernel-nogso, kernel-gso, kernel-gso-segmented or afxdp"
            ),
        }
    }
    let mut ablations = Vec::new();
    for x in &a.ablations {
        match x.as_str() {
            "tx-batch" => ablations.extend(a.tx_batches.iter().map(|&n| Ablation::TxBatch(n))),
            "busy-poll" => ablations.push(Ablation::BusyPoll(a.busy_poll)),
            "queues" => ablations.push(Ablation::Queues(a.queues)),
            "xdp-generic" => ablations.push(Ablation::XdpGeneric),
            "threads" => ablations.push(Ablation::Threads(a.threads)),
            "none" => {}
            _ => crate::usage!(
                "--ablations {x}: expected tx-batch, busy-poll, queues, xdp-generic, threads or none"
            ),
        }
    }
    let mut cfg = QuicBenchConfig {
        exe: std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("finding the peregrine binary: {e}"))?,
        size: a.size.0,
        contenders,
        ablations,
        repeats: a.repeats,
        ipv6: a.ipv6,
        perf: !a.no_perf,
        output: output(a.out, a.name, a.json),
    };
    if a.quick {
        cfg.size = 64 << 20;
        cfg.repeats = 1;
        cfg.ablations.clear();
        cfg.perf = false;
    }
    peregrine_bench::quic::bench_quic(cfg)
}

fn output(dir: PathBuf, stem: String, json: bool) -> ResultOutput {
    ResultOutput { dir, stem, json }
}
