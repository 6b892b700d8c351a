//! `peregrine`: argument parsing and output only; the work is library calls.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};
use peregrine_host::signals;
use peregrine_lab::{lab, Lab, Lifetime, Topology};

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
    Lab(LabCmd),
    /// Benchmarks: every contender in one run, JSON + table + plot.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Send traffic in a lab with the generator.
    Gen(bench::GenArgs),
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
    Report(bench::ReportArgs),
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
    Showcase(bench::ShowcaseArgs),
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

#[derive(Subcommand)]
enum LabCmd {
    /// Build a lab from a TOML file or a built-in name (pair, gen-dut-sink,
    /// chain, netmode-host|bridge|macvlan|overlay|same-host).
    Up {
        /// A TOML file or a built-in name (pair, gen-dut-sink, chain,
        /// netmode-host|bridge|macvlan|overlay|same-host).
        topology: String,
        /// Stay in the foreground and remove the lab on Ctrl-C.
        #[arg(long)]
        foreground: bool,
        /// Print the lab and its namespaces as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a lab, or every lab with --all (stale ones included).
    Down {
        /// The lab to remove.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        name: Option<String>,
        /// Remove every lab, and what killed runs left behind.
        #[arg(long)]
        all: bool,
        /// Print what was removed as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List labs and stale state.
    List {
        /// Print the labs as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a lab host: lab exec NAME HOST -- CMD...
    Exec {
        /// The lab.
        name: String,
        /// The host (namespace) of the lab to run in.
        host: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

/// Reads a topology from a file, or a built-in by name.
pub fn load_topology(arg: &str) -> Result<Topology> {
    if let Some(text) = peregrine_lab::topology::builtin::get(arg) {
        return Ok(Topology::from_toml(text)?);
    }
    let p = PathBuf::from(arg);
    if !p.exists() {
        usage!(
            "topology {arg:?}: no such file and not a built-in ({})",
            peregrine_lab::topology::builtin::NAMES.join(", ")
        );
    }
    Ok(Topology::from_file(&p)?)
}

fn run_lab(cmd: LabCmd) -> Result<()> {
    match cmd {
        LabCmd::Up {
            topology,
            foreground,
            json,
        } => {
            let topo = load_topology(&topology)?;
            let lifetime = if foreground {
                Lifetime::Ephemeral
            } else {
                Lifetime::Persistent
            };
            let lab = Lab::up(topo, lifetime)?;
            let hosts: Vec<String> = lab.topo.hosts.iter().map(|h| lab.ns(&h.name)).collect();
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "lab": lab.name(), "namespaces": hosts })
                );
            } else {
                println!("lab {} is up: {}", lab.name(), hosts.join(" "));
            }
            if foreground {
                eprintln!("press Ctrl-C to remove it");
                while !signals::stop_requested() {
                    signals::sleep(std::time::Duration::from_secs(1));
                }
            } else {
                std::mem::forget(lab); // persistent: lives until `lab down`
            }
            Ok(())
        }
        LabCmd::Down { name, all, json } => {
            let d = match (name, all) {
                (_, true) => lab::down_all()?,
                (Some(n), false) => lab::DownAll {
                    labs: lab::down(&n)?,
                    ..Default::default()
                },
                (None, false) => usage!("lab down needs a lab name or --all"),
            };
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "removed": d.labs, "stale_routers": d.stale_routers,
                                        "stale_policers": d.stale_policers })
                );
            } else if d.is_empty() {
                println!("nothing to remove");
            } else {
                if !d.labs.is_empty() {
                    println!("removed: {}", d.labs.join(" "));
                }
                for (n, what) in [(d.stale_routers, "router"), (d.stale_policers, "policer")] {
                    if n > 0 {
                        println!("removed {n} stale {what} attachment(s) of killed runs");
                    }
                }
            }
            Ok(())
        }
        LabCmd::List { json } => {
            let labs = lab::list();
            if json {
                println!("{}", serde_json::to_string_pretty(&labs)?);
            } else if labs.is_empty() {
                println!("no labs");
            } else {
                println!("{:<14} {:<10} {:<6} namespaces", "lab", "owner", "stale");
                for l in labs {
                    let owner = l
                        .owner_pid
                        .map(|p| p.to_string())
                        .unwrap_or_else(|| "-".into());
                    println!(
                        "{:<14} {:<10} {:<6} {}",
                        l.name,
                        owner,
                        l.stale,
                        l.namespaces.join(" ")
                    );
                }
            }
            Ok(())
        }
        LabCmd::Exec { name, host, cmd } => {
            let code = lab::exec(&name, &host, &cmd)?;
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
    }
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
        Some(Cmd::Lab(c)) => run_lab(c),
        Some(Cmd::Bench(c)) => bench::run(c),
        Some(Cmd::Gen(a)) => bench::gen(a),
        Some(Cmd::Io(c)) => io::run(c),
        Some(Cmd::Report(a)) => bench::report(a),
        Some(Cmd::Router(c)) => dp::router(c),
        Some(Cmd::Chain(c)) => chain::chain(c),
        Some(Cmd::Qos(c)) => qos::run(c),
        Some(Cmd::Faas(c)) => faas::run(c),
        Some(Cmd::Quic(c)) => quic::run(c),
        Some(Cmd::Showcase(a)) => bench::showcase(a),
        Some(Cmd::Agent(a)) => agent::agent(a),
        Some(Cmd::Apply(f)) => agent::apply(f),
        Some(Cmd::Diff(f)) => agent::diff(f),
        Some(Cmd::Status(a)) => agent::status(a),
    };
    match res.context("peregrine") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain of causes, innermost last.
            let msg: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
            eprintln!("peregrine: error: {}", msg.join(": "));
            ExitCode::from(if signals::stop_requested() {
                130
            } else {
                usage::exit_code(&e)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand and every argument (flags and positionals) has help.
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (subcommand)", sub.get_name()));
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        walk(&cmd, "", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }

    #[test]
    fn man_pages_and_completions_build() {
        let dir = std::env::temp_dir().join(format!("peregrine-man-{}", std::process::id()));
        docs::man(&dir).unwrap();
        let page = std::fs::read_to_string(dir.join("peregrine.1")).unwrap();
        assert!(page.contains(".TH peregrine 1"), "{page}");
        let faas = std::fs::read_to_string(dir.join("peregrine-faas-load.1")).unwrap();
        assert!(faas.contains("max\\-loss"), "{faas}");
        std::fs::remove_dir_all(&dir).unwrap();
        for shell in [clap_complete::Shell::Bash, clap_complete::Shell::Zsh] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "peregrine", &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("router"), "{shell}");
        }
    }
}
