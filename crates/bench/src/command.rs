//! `peregrine bench ...`: the subcommands, each a benchmark's config.
use anyhow::Result;

use crate::agent::AgentBenchConfig;
use crate::cni::CniBenchConfig;
use crate::faas::FaasBenchConfig;
use crate::gen::GenBenchConfig;
use crate::netmodes::NetmodesBenchConfig;
use crate::qos::QosBenchConfig;
use crate::quic::QuicBenchConfig;
use crate::router::RouterBenchConfig;
use crate::soak::SoakBenchConfig;

#[derive(clap::Subcommand, Clone, Debug)]
pub enum BenchCmd {
    /// Generator -> veth -> XDP drop sink: live frames vs sockets, rate accuracy, latency.
    Gen(GenBenchConfig),
    /// XDP router vs Linux forwarding (and a 2-NF chain) on generator -> dut -> sink.
    Router(RouterBenchConfig),
    /// The function invoker: socket, mmsg and AF_XDP, per request size and workers.
    Faas(FaasBenchConfig),
    /// QoS vs tc HTB: the policer (tc and XDP hooks: rate accuracy, CPU,
    /// TCP goodput, the cost of 100,000 rules) and the AF_XDP scheduler
    /// (WFQ shares with UDP and TCP, strict priority, saturation).
    Qos(QosBenchConfig),
    /// Seed 003 again: udp, mmsg, PACKET_MMAP and AF_XDP across container
    /// network modes (host, bridge with NAT, macvlan, overlay, same-host),
    /// its three scenarios, loss by place, CPU per datagram, latency.
    Netmodes(NetmodesBenchConfig),
    /// Seed 002 again: an HTTP/3 download of a body held in memory, quinn
    /// on kernel UDP without and with GSO/GRO and on peregrine's UDP/IP
    /// stack over AF_XDP, then the stack's ablations: goodput, CPU per GB,
    /// where the CPU went (perf).
    Quic(QuicBenchConfig),
    /// The node agent's control plane: applying a node of many ports and
    /// rules, a new agent adopting it after kill -9, reconcile latency
    /// after a port appears, resident memory.
    Agent(AgentBenchConfig),
    /// CNI chains on one node (issue 26's goals): the reference bridge,
    /// bridge + peregrine-cni chained, peregrine-cni standalone and ptp;
    /// pod-to-pod TCP and 64 B UDP, CNI ADD/DEL latency, leaks.
    Cni(CniBenchConfig),
    /// One lab node under mixed paced load for --duration (issue 28):
    /// tc router, tc policer, the function invoker (built-in and
    /// WebAssembly), HTTP/3 downloads and kernel-socket UDP clients;
    /// memory, descriptors, pins and map entries sampled and held flat,
    /// every request answered or counted dropped at a named place.
    Soak(SoakBenchConfig),
}

impl BenchCmd {
    /// Runs the benchmark.
    pub fn run(self) -> Result<()> {
        match self {
            BenchCmd::Gen(c) => crate::gen::bench_gen(c),
            BenchCmd::Router(c) => crate::router::bench_router(c),
            BenchCmd::Faas(c) => crate::faas::bench_faas(c),
            BenchCmd::Qos(c) => crate::qos::bench_qos(c),
            BenchCmd::Netmodes(c) => crate::netmodes::bench_netmodes(c),
            BenchCmd::Quic(c) => crate::quic::bench_quic(c),
            BenchCmd::Agent(c) => crate::agent::bench_agent(c),
            BenchCmd::Cni(c) => crate::cni::bench_cni(c),
            BenchCmd::Soak(c) => crate::soak::bench_soak(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Bench {
        #[command(subcommand)]
        cmd: BenchCmd,
    }

    /// Each benchmark's result is named after it unless --name says.
    #[test]
    fn each_benchmark_names_its_result() {
        let name = |args: &[&str]| match Bench::try_parse_from(args).unwrap().cmd {
            BenchCmd::Gen(c) => c.output.name,
            BenchCmd::Router(c) => c.output.name,
            BenchCmd::Faas(c) => c.output.name,
            BenchCmd::Qos(c) => c.output.name,
            BenchCmd::Netmodes(c) => c.output.name,
            BenchCmd::Quic(c) => c.output.name,
            BenchCmd::Agent(c) => c.output.name,
            BenchCmd::Cni(c) => c.output.name,
            BenchCmd::Soak(c) => c.output.name,
        };
        for b in [
            "gen", "router", "faas", "qos", "netmodes", "quic", "agent", "cni", "soak",
        ] {
            assert_eq!(name(&["bench", b]), format!("bench-{b}"));
            assert_eq!(name(&["bench", b, "--name", "x"]), "x");
        }
    }
}
