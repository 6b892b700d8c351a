//! `peregrine lab ...`: build, inspect and remove labs, as the command line
//! asks (its arguments, what it prints).
use std::path::PathBuf;

use anyhow::Result;
use peregrine_host::signals;

use crate::{lab, Lab, LabError, Lifetime, Topology};

#[derive(clap::Subcommand, Clone, Debug)]
pub enum LabCmd {
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
pub fn load_topology(arg: &str) -> crate::Result<Topology> {
    if let Some(text) = crate::topology::builtin::get(arg) {
        return Topology::from_toml(text);
    }
    let p = PathBuf::from(arg);
    if !p.exists() {
        return Err(LabError::Invalid(format!(
            "topology {arg:?}: no such file and not a built-in ({})",
            crate::topology::builtin::NAMES.join(", ")
        )));
    }
    Topology::from_file(&p)
}

impl LabCmd {
    /// Runs the command; `lab exec` exits with the command's status.
    pub fn run(self) -> Result<()> {
        match self {
            LabCmd::Up {
                topology,
                foreground,
                json,
            } => up(&topology, foreground, json),
            LabCmd::Down { name, all, json } => {
                let d = match (name, all) {
                    (_, true) => lab::down_all()?,
                    (Some(n), false) => lab::DownAll {
                        labs: lab::down(&n)?,
                        ..Default::default()
                    },
                    (None, false) => {
                        return Err(
                            LabError::Invalid("lab down needs a lab name or --all".into()).into(),
                        )
                    }
                };
                print_down(&d, json);
                Ok(())
            }
            LabCmd::List { json } => list(json),
            LabCmd::Exec { name, host, cmd } => {
                let code = lab::exec(&name, &host, &cmd)?;
                if code != 0 {
                    std::process::exit(code);
                }
                Ok(())
            }
        }
    }
}

fn up(topology: &str, foreground: bool, json: bool) -> Result<()> {
    let topo = load_topology(topology)?;
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

fn print_down(d: &lab::DownAll, json: bool) {
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
}

fn list(json: bool) -> Result<()> {
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
            // A lab whose state file cannot be used: why, in place of
            // the namespaces nobody can name.
            let what = l.error.unwrap_or_else(|| l.namespaces.join(" "));
            println!("{:<14} {:<10} {:<6} {what}", l.name, owner, l.stale);
        }
    }
    Ok(())
}
