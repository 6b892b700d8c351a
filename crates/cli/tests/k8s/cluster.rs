//! The single-node test cluster of the full tier (issue 26): brought up
//! and taken down by scripts/k8s/cluster.sh (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, containerd, kubelet in the
//! host's network namespace; every address in 198.18.0.0/15), which records
//! what the host had before and restores it. Dropped (a panic included):
//! taken down. A run that was killed is taken down by the next `up` from
//! its own record. What the host looks like is `HostState`, compared before
//! and after by the test.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{sh, text};

pub const NODE: &str = "peregrine-node";
pub const NODE_IP: &str = "198.18.250.1";
pub const POD_PREFIX: &str = "198.18.240.";
/// containerd's state directory (cluster.sh's STATE).
pub const STATE: &str = "/run/pg-k8s";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn cache() -> PathBuf {
    PathBuf::from(std::env::var("PEREGRINE_CACHE").unwrap_or("/var/cache/peregrine".into()))
}

pub struct Cluster {
    pub dir: PathBuf,
    up: bool,
}

impl Cluster {
    /// The cluster in `dir` (a fixed path: a killed run's record is found
    /// there by the next one).
    pub fn up(dir: &Path) -> Cluster {
        let mut c = Cluster {
            dir: dir.to_path_buf(),
            up: true,
        };
        let o = c.script("up", Duration::from_secs(240));
        if !o.status.success() {
            let logs = c.logs();
            c.down();
            panic!(
                "cluster.sh up: {}\n{}\n{logs}",
                text(&o.stderr),
                text(&o.stdout)
            );
        }
        c
    }

    fn script(&self, verb: &str, timeout: Duration) -> Output {
        let script = root().join("scripts/k8s/cluster.sh");
        sh(
            &[
                "env",
                &format!("PEREGRINE_BIN={}", env!("CARGO_BIN_EXE_peregrine")),
                "bash",
                script.to_str().unwrap(),
                verb,
                self.dir.to_str().unwrap(),
            ],
            timeout,
        )
    }

    /// Stops everything and restores the host (idempotent).
    pub fn down(&mut self) {
        if !self.up {
            return;
        }
        self.up = false;
        let o = self.script("down", Duration::from_secs(180));
        if !o.status.success() {
            eprintln!("cluster.sh down: {}", text(&o.stderr));
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// `kubectl args`, bounded in time.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        let k = cache().join("k8s/v1.34.0/bin/kubectl");
        let kc = self.kubeconfig();
        let mut a = vec![
            k.to_str().unwrap(),
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--request-timeout=60s",
        ];
        a.extend_from_slice(args);
        sh(&a, Duration::from_secs(90))
    }

    /// `kubectl args`, which must succeed: its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let o = self.kubectl(args);
        assert!(
            o.status.success(),
            "kubectl {}: {}\n{}\n{}",
            args.join(" "),
            o.status,
            text(&o.stderr),
            self.logs()
        );
        text(&o.stdout)
    }

    /// `kubectl args` started, not waited for.
    pub fn kubectl_spawn(&self, args: &[&str]) -> std::process::Child {
        Command::new(cache().join("k8s/v1.34.0/bin/kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `kubectl get args -o json`.
    pub fn get(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&a)).unwrap()
    }

    /// The last lines of each component's log, and the agent's.
    pub fn logs(&self) -> String {
        let mut s = String::new();
        if let Ok(d) = std::fs::read_dir(self.dir.join("logs")) {
            for e in d.flatten() {
                let t = std::fs::read_to_string(e.path()).unwrap_or_default();
                let lines: Vec<&str> = t.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                s += &format!("--- {} ---\n{tail}\n", e.path().display());
            }
        }
        s
    }

    /// Polls `f` every 200 ms until it holds or `secs` pass.
    pub fn wait(&self, what: &str, secs: u64, mut f: impl FnMut() -> bool) {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("{what}: not within {secs} s\n{}", self.logs());
    }

    /// The processes the cluster started (cluster.sh's record) that run.
    pub fn running(&self) -> Vec<String> {
        let pids = std::fs::read_to_string(self.dir.join("pids")).unwrap_or_default();
        let mut alive = Vec::new();
        for l in pids.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 3 {
                continue;
            }
            let cmd = std::fs::read(format!("/proc/{}/cmdline", f[1])).unwrap_or_default();
            if text(&cmd).contains(f[2]) {
                alive.push(l.to_string());
            }
        }
        // Anything else naming the cluster's directories (shims, containers' parents).
        for p in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = p.file_name().to_string_lossy().to_string();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let cmd = text(&std::fs::read(p.path().join("cmdline")).unwrap_or_default());
            if cmd.contains(STATE) || cmd.contains(self.dir.to_str().unwrap()) {
                alive.push(format!("{name} {}", cmd.replace('\0', " ")));
            }
        }
        alive
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.up && std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        self.down();
    }
}

/// What the cluster may change on the host, as the test compares it.
#[derive(Debug, PartialEq, Eq)]
pub struct HostState {
    pub sysctls: Vec<(String, String)>,
    /// iptables chains named KUBE-* or CNI-*, per family and table.
    pub chains: BTreeSet<String>,
    /// k8s.io cgroups at the roots of the v1 hierarchies.
    pub cgroups: BTreeSet<String>,
    pub lo: String,
    /// Which of the directories the cluster may make exist.
    pub dirs: Vec<(String, bool)>,
}

impl HostState {
    pub fn now() -> HostState {
        let sysctls = [
            "vm.overcommit_memory",
            "vm.panic_on_oom",
            "kernel.panic",
            "kernel.panic_on_oops",
            "kernel.keys.root_maxkeys",
            "kernel.keys.root_maxbytes",
            "net.ipv4.ip_forward",
        ]
        .iter()
        .map(|k| {
            let v = std::fs::read_to_string(format!("/proc/sys/{}", k.replace('.', "/")))
                .unwrap_or_default();
            (k.to_string(), v.trim().to_string())
        })
        .collect();
        let mut chains = BTreeSet::new();
        for save in ["iptables-save", "ip6tables-save"] {
            let o = sh(&[save], Duration::from_secs(10));
            let mut table = String::new();
            for l in text(&o.stdout).lines() {
                if let Some(t) = l.strip_prefix('*') {
                    table = t.to_string();
                } else if let Some(c) = l.strip_prefix(':') {
                    let c = c.split_whitespace().next().unwrap_or("");
                    if c.starts_with("KUBE-") || c.starts_with("CNI-") {
                        chains.insert(format!("{save} {table} {c}"));
                    }
                }
            }
        }
        let cgroups = std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| {
                d.flatten()
                    .map(|e| e.path().join("k8s.io"))
                    .filter(|p| p.exists())
                    .map(|p| p.display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        let lo = text(&sh(&["ip", "-br", "addr", "show", "lo"], Duration::from_secs(5)).stdout);
        let dirs = [
            "/var/lib/kubelet",
            "/var/log/containers",
            "/var/log/pods",
            "/run/peregrine/agent",
            "/var/run/kubernetes",
            STATE,
        ]
        .iter()
        .map(|d| (d.to_string(), Path::new(d).exists()))
        .collect();
        HostState {
            sysctls,
            chains,
            cgroups,
            lo,
            dirs,
        }
    }
}

/// Mount points under `dir` or containerd's state directory.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let d = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&d) || m.starts_with(STATE))
        .collect()
}
