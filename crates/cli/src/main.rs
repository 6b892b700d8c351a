//! `peregrine`: argument parsing and output only; the work is library calls.
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use peregrine_lab::{lab, signals, Lab, Lifetime, Topology};

mod bench;
mod bench_faas;
mod bench_router;
mod dp;
mod faas;

#[derive(Parser)]
#[command(
    name = "peregrine",
    version,
    about = "XDP/AF_XDP fast-path networking toolkit and packet lab"
)]
struct Cli {
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
    /// The XDP router: attach, detach, counters.
    #[command(subcommand)]
    Router(dp::RouterCmd),
    /// Service chains through containers: apply or remove a declaration.
    #[command(subcommand)]
    Chain(dp::ChainCmd),
    /// The serverless function invoker (AF_XDP, with socket baselines).
    #[command(subcommand)]
    Faas(faas::FaasCmd),
    /// Turn result files into plots (PNG and SVG).
    Report(bench::ReportArgs),
    /// The built-in showcase (what runs with no subcommand).
    Showcase(bench::ShowcaseArgs),
}

#[derive(Subcommand)]
enum LabCmd {
    /// Build a lab from a TOML file or a built-in name (pair, gen-dut-sink).
    Up {
        topology: String,
        /// Stay in the foreground and remove the lab on Ctrl-C.
        #[arg(long)]
        foreground: bool,
        #[arg(long)]
        json: bool,
    },
    /// Remove a lab, or every lab with --all (stale ones included).
    Down {
        name: Option<String>,
        #[arg(long)]
        all: bool,
        #[arg(long)]
        json: bool,
    },
    /// List labs and stale state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a lab host: lab exec NAME HOST -- CMD...
    Exec {
        name: String,
        host: String,
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
        anyhow::bail!(
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
            let removed = match (name, all) {
                (_, true) => lab::down_all()?,
                (Some(n), false) => lab::down(&n)?,
                (None, false) => anyhow::bail!("lab down needs a lab name or --all"),
            };
            if json {
                println!("{}", serde_json::json!({ "removed": removed }));
            } else if removed.is_empty() {
                println!("nothing to remove");
            } else {
                println!("removed: {}", removed.join(" "));
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

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("PEREGRINE_LOG"))
        .with_writer(std::io::stderr)
        .init();
    signals::install();
    let cli = Cli::parse();
    let res = match cli.cmd {
        None => bench::showcase(bench::ShowcaseArgs::default()),
        Some(Cmd::Lab(c)) => run_lab(c),
        Some(Cmd::Bench(c)) => bench::run(c),
        Some(Cmd::Gen(a)) => bench::gen(a),
        Some(Cmd::Report(a)) => bench::report(a),
        Some(Cmd::Router(c)) => dp::router(c),
        Some(Cmd::Chain(c)) => dp::chain(c),
        Some(Cmd::Faas(c)) => faas::run(c),
        Some(Cmd::Showcase(a)) => bench::showcase(a),
    };
    match res.context("peregrine") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain of causes, innermost last.
            let msg: Vec<String> = e.chain().skip(1).map(|c| c.to_string()).collect();
            eprintln!("peregrine: error: {}", msg.join(": "));
            ExitCode::from(if signals::stop_requested() { 130 } else { 1 })
        }
    }
}
