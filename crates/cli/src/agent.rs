//! `peregrine agent`, `apply`, `diff` and `status`: arguments into
//! `peregrine_agent`'s options and control requests, replies printed. The
//! agent checks each service's arguments with this binary's own parser.
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::{Args, Parser, ValueEnum};
use peregrine_agent::control::{self, Reply, Request};
use peregrine_agent::{state, ServiceKind};

use crate::usage;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Args)]
pub struct AgentArgs {
    /// The node's declaration: a TOML file, or a directory whose *.toml
    /// files are read together (docs/AGENT.md).
    #[arg(
        long,
        value_name = "FILE|DIR",
        default_value = "/etc/peregrine/node.toml"
    )]
    pub config: PathBuf,
    /// Serve /metrics, /healthz and /readyz here (e.g. 198.18.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Log lines as text or as one JSON object each.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Check the declaration, print its mistakes (one line each) or "ok",
    /// and exit without changing anything.
    #[arg(long)]
    pub check: bool,
}

#[derive(Args)]
pub struct FileArgs {
    /// A node declaration (TOML).
    pub file: PathBuf,
}

#[derive(Args)]
pub struct StatusArgs {
    /// The whole state as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Checks a service's arguments with the parser of the command it runs.
fn check_service(kind: ServiceKind, args: &[String]) -> std::result::Result<(), String> {
    let mut argv: Vec<String> = vec!["peregrine".into()];
    argv.extend(kind.command().iter().map(|s| s.to_string()));
    argv.extend(args.iter().cloned());
    match crate::Cli::try_parse_from(&argv) {
        Ok(_) => Ok(()),
        Err(e) => {
            let msg = e.to_string();
            let first = msg
                .lines()
                .find(|l| l.starts_with("error:"))
                .unwrap_or(msg.lines().next().unwrap_or(""))
                .trim_start_matches("error: ")
                .to_string();
            Err(first)
        }
    }
}

/// `peregrine agent`.
pub fn agent(a: AgentArgs) -> Result<()> {
    let check: Arc<peregrine_agent::decl::ArgCheck> = Arc::new(check_service);
    if a.check {
        return match peregrine_agent::check::read(&a.config, &*check) {
            Ok(_) => {
                println!("{}: ok", a.config.display());
                Ok(())
            }
            Err(lines) => refused(&lines),
        };
    }
    let exe = std::env::current_exe()?;
    let opts = peregrine_agent::Options {
        config: a.config,
        metrics: a.metrics,
        exe,
        check,
    };
    match peregrine_agent::run(opts) {
        Ok(()) => Ok(()),
        Err(lines) => refused(&lines),
    }
}

/// Prints every mistake on its own line; a usage error (exit 2).
fn refused(lines: &[String]) -> Result<()> {
    for l in &lines[..lines.len().saturating_sub(1)] {
        eprintln!("peregrine: error: {l}");
    }
    usage!("{}", lines.last().cloned().unwrap_or_default())
}

fn send(req: Request) -> Result<Reply> {
    control::request(&state::socket_path(), &req).map_err(|e| anyhow::anyhow!(e))
}

fn file_request(f: &FileArgs, apply: bool) -> Result<()> {
    let text = match std::fs::read_to_string(&f.file) {
        Ok(t) => t,
        Err(e) => usage!("{}: {e}", f.file.display()),
    };
    let name = f.file.display().to_string();
    let req = if apply {
        Request::Apply { name, text }
    } else {
        Request::Diff { name, text }
    };
    let r = send(req)?;
    if !r.ok && r.lines.iter().all(|l| !l.starts_with("error: ")) {
        return refused(&r.lines);
    }
    for l in &r.lines {
        println!("{l}");
    }
    if !r.ok {
        anyhow::bail!("the agent could not apply all of it (see the lines above)");
    }
    Ok(())
}

/// `peregrine apply FILE`.
pub fn apply(f: FileArgs) -> Result<()> {
    file_request(&f, true)
}

/// `peregrine diff FILE`.
pub fn diff(f: FileArgs) -> Result<()> {
    file_request(&f, false)
}

/// `peregrine status`.
pub fn status(a: StatusArgs) -> Result<()> {
    let r = send(Request::Status)?;
    let s = r.status.unwrap_or_default();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
        return Ok(());
    }
    print!("{}", peregrine_agent::status::text(&s));
    Ok(())
}

/// One-shot commands that attach in the agent's namespace (`ns`, None:
/// this one) refuse while an agent runs there (its children excepted):
/// the agent owns the node.
pub fn refuse_beside_agent(what: &str, ns: Option<&str>) -> Result<()> {
    match control::refusal(what, ns) {
        Some(m) => usage!("{m}"),
        None => Ok(()),
    }
}
