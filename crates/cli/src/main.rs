//! `peregrine`: argument parsing and output only; the work is library calls.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use peregrine_host::signals;

mod agent;
mod bench;
mod chain;
mod docs;
mod dp;
mod faas;
mod io;
mod metrics;
mod qos;
mod qos_stats;
mod quic;
mod scope;
mod table;
mod units;
mod usage;
mod watch;

#[derive(Parser)]
#[command(
    name = "peregrine",
    version,
    about = "XDP/AF_XDP fast-path networking toolkit and packet lab",
    after_help = "Exit status: 0 success; 1 the command failed or missed its purpose \
(e.g. faas load without replies); 2 usage error; 130 interrupted.\n\
Units of rates (1M, 1Mpps, 10Gbit/s), durations (10, 500ms, 2m) and sizes (200, 1KiB): docs/CLI.md."
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build, inspect and remove labs (network namespaces over veth).
    #[command(subcommand)]
    Lab(peregrine_lab::LabCmd),
    /// Benchmarks: every contender in one run, JSON + table + plot.
    #[command(subcommand)]
    Bench(peregrine_bench::BenchCmd),
    /// Send traffic in a lab with the generator.
    Gen(peregrine_bench::gen::GenConfig),
    /// One I/O path (udp, mmsg, PACKET_MMAP, AF_XDP) as a checked sender or
    /// receiver, in the namespace it runs in.
    #[command(subcommand)]
    Io(io::IoCmd),
    /// The XDP router: attach, detach, counters.
    #[command(subcommand)]
    Router(dp::RouterCmd),
    /// Service chains through containers: apply or remove a declaration, counters.
    #[command(subcommand)]
    Chain(chain::ChainCmd),
    /// QoS: the per-rule policer (XDP or tc) and the AF_XDP egress
    /// scheduler (classes, priority, WFQ): apply or serve a file, change
    /// rules and classes, counters.
    #[command(subcommand)]
    Qos(qos::QosCmd),
    /// The serverless function invoker (AF_XDP, with socket baselines).
    #[command(subcommand)]
    Faas(faas::FaasCmd),
    /// Files over HTTP/3 (QUIC): a server and a client, on a kernel UDP
    /// socket or on peregrine's UDP/IP stack over AF_XDP.
    #[command(subcommand)]
    Quic(quic::QuicCmd),
    /// Turn result files into plots (PNG and SVG).
    Report(peregrine_bench::redraw::ReportConfig),
    /// The node agent: applies a declared state (router, QoS, functions,
    /// QUIC services) and keeps it applied until SIGTERM (docs/AGENT.md).
    Agent(agent::AgentArgs),
    /// Make FILE the running agent's declaration (checked whole first).
    Apply(agent::FileArgs),
    /// What applying FILE to the running agent would change.
    Diff(agent::FileArgs),
    /// The running agent's view of the node.
    Status(agent::StatusArgs),
    /// The built-in showcase (what `scripts/run.sh` runs).
    Showcase(peregrine_bench::showcase::ShowcaseConfig),
    /// Write man pages (one per command) into a directory.
    #[command(hide = true)]
    Man {
        /// Directory for peregrine.1, peregrine-lab.1, ...
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(hide = true)]
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Clap's own errors as ours: one line, `peregrine: error: ...`, exit 2
/// (help and version print as clap prints them).
fn clap_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    // The message is the first paragraph; usage and the help hint follow.
    let msg: Vec<&str> = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect();
    let msg = msg.join(" ");
    let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
    eprintln!("peregrine: error: {msg} (see --help)");
    std::process::exit(2);
}

/// Logs go to stderr, filtered by $PEREGRINE_LOG (default: errors; the
/// agent: info), as text or (`agent --log-format json`) JSON lines.
fn init_logs(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let agent = match &cli.cmd {
        Some(Cmd::Agent(a)) => Some(a.log_format),
        _ => None,
    };
    let filter = EnvFilter::try_from_env("PEREGRINE_LOG")
        .unwrap_or_else(|_| EnvFilter::new(if agent.is_some() { "info" } else { "error" }));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if agent == Some(agent::LogFormat::Json) {
        fmt.json().init();
    } else {
        fmt.init();
    }
}

fn main() -> ExitCode {
    signals::install();
    peregrine_host::limits::raise_open_files();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => clap_error(e),
    };
    init_logs(&cli);
    let res = match cli.cmd {
        None => {
            // No subcommand: the usage, as a usage error (exit 2). The
            // showcase is `peregrine showcase` (scripts/run.sh runs it).
            let _ = Cli::command().print_help();
            return ExitCode::from(2);
        }
        Some(Cmd::Man { out }) => docs::man(&out),
        Some(Cmd::Completions { shell }) => {
            docs::completions(shell);
            Ok(())
        }
        Some(Cmd::Lab(c)) => c.run(),
        Some(Cmd::Bench(c)) => c.run(),
        Some(Cmd::Gen(a)) => peregrine_bench::gen::gen(a),
        Some(Cmd::Io(c)) => io::run(c),
        Some(Cmd::Report(a)) => peregrine_bench::redraw::report(a),
        Some(Cmd::Router(c)) => dp::router(c),
        Some(Cmd::Chain(c)) => chain::chain(c),
        Some(Cmd::Qos(c)) => qos::run(c),
        Some(Cmd::Faas(c)) => faas::run(c),
        Some(Cmd::Quic(c)) => quic::run(c),
        Some(Cmd::Showcase(a)) => peregrine_bench::showcase::showcase(a),
        Some(Cmd::Agent(a)) => agent::agent(a),
        Some(Cmd::Apply(f)) => agent::apply(f),
        Some(Cmd::Diff(f)) => agent::diff(f),
        Some(Cmd::Status(a)) => agent::status(a),
    };
    match res.context("peregrine") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain of causes, innermost last; a cause
            // that an outer message already quotes is not repeated, and
            // one that begins with the message just before it ("binding
            // X" then "binding X: why") takes its place.
            let mut msg = String::new();
            let mut last_len = 0;
            for cause in e.chain().skip(1).map(|c| c.to_string()) {
                if msg.contains(&cause) {
                    continue;
                }
                let last = &msg[msg.len() - last_len..];
                if !last.is_empty() && cause.starts_with(last) {
                    msg.truncate(msg.len() - last_len);
                } else if !msg.is_empty() {
                    msg.push_str(": ");
                }
                msg.push_str(&cause);
                last_len = cause.len();
            }
            eprintln!("peregrine: error: {msg}");
            ExitCode::from(if signals::stop_requested() {
                130
            } else {
                usage::exit_code(&e)
            })
        }
    }
}
