//! The node's AF_XDP services (function invokers, QUIC servers, schedulers)
//! as child processes: the same `faas serve`, `quic serve` and `qos serve`
//! a user runs, started by the agent, restarted within a second when they
//! exit, adopted (not restarted) by a new agent after a restart or an
//! upgrade. While one is down its XDP program is gone with it, so its
//! interface's traffic goes to the kernel (fails open).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;

use crate::decl::{ServiceDecl, ServiceKind};
use crate::state::{Owned, OwnedService};

enum Proc {
    Child(Child),
    /// Started by an earlier agent: not our child, watched by pid.
    Adopted(u32),
    Exited,
}

struct Running {
    decl: ServiceDecl,
    /// The command line the service runs (what /proc/PID/cmdline shows).
    argv: Vec<String>,
    proc: Proc,
    restarts: u64,
    started: Instant,
    last_exit: Option<String>,
}

/// A service as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ServiceStatus {
    pub name: String,
    pub kind: ServiceKind,
    pub netns: Option<String>,
    pub iface: Option<String>,
    pub pid: Option<u32>,
    pub state: &'static str,
    pub restarts: u64,
    pub adopted: bool,
    pub last_exit: Option<String>,
    pub log: String,
}

pub struct Supervisor {
    exe: PathBuf,
    dir: PathBuf,
    running: BTreeMap<String, Running>,
}

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok() && !zombie(pid)
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

impl Supervisor {
    /// Children run `exe` (the agent's own binary); their files (a
    /// scheduler's rules, logs) go in `dir`.
    pub fn new(exe: PathBuf, dir: PathBuf) -> Supervisor {
        Supervisor {
            exe,
            dir,
            running: BTreeMap::new(),
        }
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// The scheduler's rules file of `iface`, as `qos serve` reads it.
    pub fn qos_file(dir: &Path, iface: &str) -> PathBuf {
        dir.join(format!("qos-{iface}.toml"))
    }

    /// The command line `d` runs (after `ip netns exec NS`, if any).
    fn argv(&self, d: &ServiceDecl) -> Vec<String> {
        let mut v = vec![self.exe.display().to_string()];
        v.extend(d.kind.command().iter().map(|s| s.to_string()));
        match d.kind {
            ServiceKind::Scheduler => {
                let iface = d.iface.clone().unwrap_or_default();
                v.push(Self::qos_file(&self.dir, &iface).display().to_string());
                v.push("--iface".into());
                v.push(iface);
            }
            _ => v.extend(d.args.iter().cloned()),
        }
        v
    }

    fn spawn(&self, d: &ServiceDecl, argv: &[String]) -> std::io::Result<Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(&d.name))?;
        let mut cmd = match &d.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).args(argv);
                c
            }
            None => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // A child of the agent is the agent's: it does not refuse to
            // run beside it.
            .env("PEREGRINE_AGENT_CHILD", "1");
        cmd.spawn()
    }

    /// Brings the children to `want`: stops those no longer declared (or
    /// declared differently), adopts what an earlier agent left running
    /// (`owned`), starts the rest. What it did, one line each.
    pub fn sync(&mut self, want: &[ServiceDecl], owned: &mut Owned) -> Vec<String> {
        let mut out = Vec::new();
        let names: Vec<String> = self.running.keys().cloned().collect();
        for n in names {
            let keep = want.iter().any(|d| {
                d.name == n && self.argv(d) == self.running[&n].argv && *d == self.running[&n].decl
            });
            if !keep {
                if let Some(r) = self.running.remove(&n) {
                    stop(r.proc);
                    out.push(format!("service {n}: stopped"));
                }
                owned.services.remove(&n);
            }
        }
        // Earlier agents' children that are no longer declared.
        let stale: Vec<String> = owned
            .services
            .keys()
            .filter(|n| !want.iter().any(|d| &&d.name == n))
            .cloned()
            .collect();
        for n in stale {
            let s = owned.services.remove(&n).unwrap_or_default();
            if alive(s.pid) && cmdline(s.pid) == s.argv {
                stop(Proc::Adopted(s.pid));
                out.push(format!(
                    "service {n}: stopped (pid {}, left by an earlier agent)",
                    s.pid
                ));
            }
        }
        for d in want {
            if self.running.contains_key(&d.name) {
                continue;
            }
            let argv = self.argv(d);
            if let Some(s) = owned.services.get(&d.name) {
                if s.argv == argv && alive(s.pid) && cmdline(s.pid) == argv {
                    out.push(format!("service {}: adopted (pid {})", d.name, s.pid));
                    self.running.insert(
                        d.name.clone(),
                        Running {
                            decl: d.clone(),
                            argv,
                            proc: Proc::Adopted(s.pid),
                            restarts: 0,
                            started: Instant::now(),
                            last_exit: None,
                        },
                    );
                    continue;
                }
            }
            let (proc, line) = match self.spawn(d, &argv) {
                Ok(c) => {
                    let pid = c.id();
                    owned.services.insert(
                        d.name.clone(),
                        OwnedService {
                            pid,
                            argv: argv.clone(),
                        },
                    );
                    (
                        Proc::Child(c),
                        format!("service {}: started (pid {pid})", d.name),
                    )
                }
                Err(e) => (
                    Proc::Exited,
                    format!("service {}: cannot start: {e}", d.name),
                ),
            };
            out.push(line);
            self.running.insert(
                d.name.clone(),
                Running {
                    decl: d.clone(),
                    argv,
                    proc,
                    restarts: 0,
                    started: Instant::now(),
                    last_exit: None,
                },
            );
        }
        out
    }

    /// Restarts the children that exited; what it did. Call it often
    /// (every 100-200 ms): a service is back within a second.
    pub fn tick(&mut self, owned: &mut Owned) -> Vec<String> {
        let mut out = Vec::new();
        let mut restart = Vec::new();
        for (n, r) in self.running.iter_mut() {
            let exited = match &mut r.proc {
                Proc::Child(c) => match c.try_wait() {
                    Ok(Some(st)) => Some(st.to_string()),
                    Ok(None) => None,
                    Err(e) => Some(e.to_string()),
                },
                Proc::Adopted(pid) => (!alive(*pid)).then(|| "exited".to_string()),
                Proc::Exited => Some(r.last_exit.clone().unwrap_or_default()),
            };
            if let Some(why) = exited {
                r.last_exit = Some(why);
                restart.push(n.clone());
            }
        }
        for n in restart {
            let (decl, argv) = {
                let r = &self.running[&n];
                (r.decl.clone(), r.argv.clone())
            };
            // A service that dies at once is retried no faster than every
            // 500 ms (its log says why).
            if self.running[&n].started.elapsed() < Duration::from_millis(500)
                && self.running[&n].restarts > 0
            {
                continue;
            }
            let spawned = self.spawn(&decl, &argv);
            let r = self.running.get_mut(&n).expect("listed above");
            r.restarts += 1;
            r.started = Instant::now();
            match spawned {
                Ok(c) => {
                    let pid = c.id();
                    owned.services.insert(
                        n.clone(),
                        OwnedService {
                            pid,
                            argv: argv.clone(),
                        },
                    );
                    out.push(format!(
                        "service {n}: exited ({}), restarted (pid {pid})",
                        r.last_exit.as_deref().unwrap_or("?")
                    ));
                    r.proc = Proc::Child(c);
                }
                Err(e) => {
                    out.push(format!("service {n}: cannot restart: {e}"));
                    r.proc = Proc::Exited;
                }
            }
        }
        out
    }

    pub fn status(&self) -> Vec<ServiceStatus> {
        self.running
            .iter()
            .map(|(n, r)| {
                let (pid, state, adopted) = match &r.proc {
                    Proc::Child(c) => (Some(c.id()), "running", false),
                    Proc::Adopted(p) => (Some(*p), "running", true),
                    Proc::Exited => (None, "down", false),
                };
                ServiceStatus {
                    name: n.clone(),
                    kind: r.decl.kind,
                    netns: r.decl.netns.clone(),
                    iface: r.decl.iface.clone(),
                    pid,
                    state,
                    restarts: r.restarts,
                    adopted,
                    last_exit: r.last_exit.clone(),
                    log: self.log_path(n).display().to_string(),
                }
            })
            .collect()
    }

    /// Every service is up.
    pub fn all_up(&self) -> bool {
        self.running
            .values()
            .all(|r| !matches!(r.proc, Proc::Exited))
    }

    /// The restarts of every service so far.
    pub fn restarts(&self) -> Vec<(String, u64)> {
        self.running
            .iter()
            .map(|(n, r)| (n.clone(), r.restarts))
            .collect()
    }
}

/// SIGTERM, then SIGKILL after 3 s; reaped when it is our child.
fn stop(p: Proc) {
    let pid = match &p {
        Proc::Child(c) => c.id(),
        Proc::Adopted(pid) => *pid,
        Proc::Exited => return,
    };
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
    let end = Instant::now() + Duration::from_secs(3);
    let mut p = p;
    loop {
        let gone = match &mut p {
            Proc::Child(c) => matches!(c.try_wait(), Ok(Some(_)) | Err(_)),
            _ => !alive(pid),
        };
        if gone {
            return;
        }
        if Instant::now() >= end {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            if let Proc::Child(c) = &mut p {
                let _ = c.wait();
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
