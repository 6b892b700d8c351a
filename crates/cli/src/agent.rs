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
    let get = |k: &str| s.get(k).cloned().unwrap_or_default();
    println!(
        "agent pid {} ({}): {}, {} reconciles, {} repairs, last took {:.1} ms",
        get("pid"),
        get("config").as_str().unwrap_or(""),
        if get("ready").as_bool() == Some(true) {
            "ready"
        } else {
            "not ready"
        },
        get("reconciles"),
        get("repairs"),
        get("last_reconcile_seconds").as_f64().unwrap_or(0.0) * 1e3
    );
    if let Some(r) = s.get("router").filter(|r| !r.is_null()) {
        let ports: Vec<String> = r["ports"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| {
                        let live = p[1].as_bool() == Some(true);
                        format!(
                            "{}{}",
                            p[0].as_str().unwrap_or("?"),
                            if live { "" } else { " (down)" }
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "router at {}: {}",
            r["hook"].as_str().unwrap_or("-"),
            ports.join(", ")
        );
    }
    for q in get("qos").as_array().into_iter().flatten() {
        println!(
            "qos {}: {} rule(s) at {}{}{}",
            q["iface"].as_str().unwrap_or("?"),
            q["rules"],
            q["hook"].as_str().unwrap_or("?"),
            if q["scheduler"].as_bool() == Some(true) {
                ", scheduler"
            } else {
                ""
            },
            if q["live"].as_bool() == Some(true) || q["scheduler"].as_bool() == Some(true) {
                ""
            } else {
                " (not running)"
            }
        );
    }
    for o in get("order").as_array().into_iter().flatten() {
        let st: Vec<&str> = o["stages"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        println!(
            "order on {}: {}",
            o["iface"].as_str().unwrap_or("?"),
            st.join(" -> ")
        );
    }
    for v in get("services").as_array().into_iter().flatten() {
        println!(
            "service {} ({}): {} pid {}, {} restarts{}",
            v["name"].as_str().unwrap_or("?"),
            v["kind"].as_str().unwrap_or("?"),
            v["state"].as_str().unwrap_or("?"),
            v["pid"],
            v["restarts"],
            if v["adopted"].as_bool() == Some(true) {
                ", adopted"
            } else {
                ""
            }
        );
    }
    for k in ["waiting", "errors"] {
        for l in get(k).as_array().into_iter().flatten() {
            println!("{}: {}", k.trim_end_matches('s'), l.as_str().unwrap_or(""));
        }
    }
    Ok(())
}

/// One-shot commands that attach in the agent's namespace (`ns`, None:
/// this one) refuse while an agent runs there (its children excepted):
/// the agent owns the node.
pub fn refuse_beside_agent(what: &str, ns: Option<&str>) -> Result<()> {
    if std::env::var_os("PEREGRINE_AGENT_CHILD").is_some() {
        return Ok(());
    }
    let path = state::socket_path();
    if !path.exists() {
        return Ok(());
    }
    let Ok(r) = control::request(&path, &Request::Status) else {
        return Ok(());
    };
    let Some(s) = r.status else { return Ok(()) };
    let ours = peregrine_host::netns::run_in_opt(ns, peregrine_host::netns::cookie)
        .ok()
        .and_then(|c| c.ok());
    if s.get("netns_cookie").and_then(|c| c.as_u64()) != ours {
        return Ok(());
    }
    usage!(
        "a peregrine agent (pid {}) owns this node's data plane: declare the {what} in its declaration ({}) and run `peregrine apply FILE`, or stop the agent",
        s["pid"],
        s["config"].as_str().unwrap_or("?")
    )
}
