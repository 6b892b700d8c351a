//! `peregrine-cni` as runtimes run it: the reference `cnitool` (libcni,
//! what containerd uses) drives a conflist of the plugin standalone with
//! the reference `host-local` IPAM, and chained after the reference
//! `bridge`; pods are namespaces made with `ip netns add`; the node agent
//! runs in a node namespace. The plugin is also run directly for each
//! version and each bad input. The reference plugins and cnitool are
//! built from the Go module proxy by scripts/k8s/build.sh (cached).
mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Where scripts/k8s/build.sh leaves the reference plugins and tools.
fn cache() -> PathBuf {
    PathBuf::from(std::env::var("PEREGRINE_CACHE").unwrap_or("/var/cache/peregrine".into()))
}

/// A node: its namespace, the agent in it, a CNI plugin directory (the
/// reference plugins and peregrine-cni) and a conflist directory.
struct Node {
    ns: String,
    dir: Scratch,
    agent: Option<Child>,
    _namespaces: Namespaces,
}

impl Node {
    fn up(name: &str, pods: &[&str]) -> Node {
        let refs = cache().join("cni/v1.10.0/bin");
        assert!(
            refs.join(".done").exists(),
            "the reference CNI plugins are not built: bash scripts/k8s/build.sh cni"
        );
        Node::with_plugins(name, pods, &refs)
    }

    /// A node whose reference plugins are those in `refs`.
    fn with_plugins(name: &str, pods: &[&str], refs: &std::path::Path) -> Node {
        Node::declared(name, pods, refs, "")
    }

    /// A node whose agent starts with `node_toml`.
    fn declared(name: &str, pods: &[&str], refs: &std::path::Path, node_toml: &str) -> Node {
        let mut all = vec![name];
        all.extend_from_slice(pods);
        let namespaces = Namespaces::add(&all);
        let dir = tmp(name);
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(dir.join("net.d")).unwrap();
        for p in ["bridge", "host-local", "ptp", "loopback"] {
            std::os::unix::fs::symlink(refs.join(p), bin.join(p)).unwrap();
        }
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_peregrine-cni"),
            bin.join("peregrine-cni"),
        )
        .unwrap();
        std::fs::write(dir.join("node.toml"), node_toml).unwrap();
        let mut n = Node {
            ns: name.to_string(),
            dir,
            agent: None,
            _namespaces: namespaces,
        };
        n.start_agent();
        n
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    fn socket(&self) -> PathBuf {
        self.run_dir().join("agent.sock")
    }

    fn start_agent(&mut self) {
        self.agent = Some(spawn_agent(
            &self.ns,
            &self.dir.join("node.toml"),
            &self.run_dir(),
            "127.0.0.1:9465",
            &self.dir.join("agent.log"),
        ));
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self.status().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the agent did not answer within 10 s: {}", self.log());
    }

    fn stop_agent(&mut self) {
        if let Some(mut c) = self.agent.take() {
            peregrine_host::signals::terminate(&mut c, Duration::from_secs(5));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    fn status(&self) -> Option<serde_json::Value> {
        let r = peregrine_agent::control::request(
            &self.socket(),
            &peregrine_agent::control::Request::Status,
        )
        .ok()?;
        r.status
    }

    /// The pods the agent holds: (container id, host interface).
    fn pods(&self) -> Vec<(String, String)> {
        let s = self
            .status()
            .unwrap_or_else(|| panic!("no status: {}", self.log()));
        s["pods"]
            .as_array()
            .unwrap_or_else(|| panic!("no pods in {s:#}"))
            .iter()
            .map(|p| {
                (
                    p["container_id"].as_str().unwrap().to_string(),
                    p["host_iface"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// Live router ports of the node.
    fn router_ports(&self) -> Vec<String> {
        let o = pg_in(&self.ns, &["router", "stats", "--json"]);
        if !o.status.success() {
            return Vec::new();
        }
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["ports"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| p["port"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Writes conflist `name`.
    fn conflist(&self, name: &str, version: &str, plugins: serde_json::Value) {
        let v = serde_json::json!({"cniVersion": version, "name": name, "plugins": plugins});
        std::fs::write(
            self.dir.join("net.d").join(format!("{name}.conflist")),
            serde_json::to_string_pretty(&v).unwrap(),
        )
        .unwrap();
    }

    /// The peregrine-cni plugin section, standalone with host-local.
    fn standalone(&self, subnet: &str) -> serde_json::Value {
        serde_json::json!({
            "type": "peregrine-cni",
            "agentSocket": self.socket(),
            "capabilities": {"bandwidth": true, "io.kubernetes.cri.pod-annotations": true},
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": subnet}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": self.dir.join("ipam"),
            },
        })
    }

    /// `cnitool VERB net /run/netns/pod` in the node's namespace.
    fn cnitool(&self, verb: &str, net: &str, pod: &str, env: &[(&str, &str)]) -> Output {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns, "timeout", "-s", "KILL", "30"])
            .arg(cache().join("tools/bin/cnitool"))
            .args([verb, net, &format!("/run/netns/{pod}")])
            .env("CNI_PATH", self.dir.join("bin"))
            .env("NETCONFPATH", self.dir.join("net.d"));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// peregrine-cni run directly, as a runtime runs it, in the node's
    /// namespace: `env` besides a bare PATH and CNI_PATH, `stdin` written
    /// to it, left running.
    fn spawn_plugin(
        &self,
        env: &[(&str, &str)],
        stdin: &str,
        stdout: Stdio,
        stderr: Stdio,
    ) -> Child {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.ns,
            env!("CARGO_BIN_EXE_peregrine-cni"),
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_PATH", self.dir.join("bin"))
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(stderr);
        for (k, v) in env {
            c.env(k, v);
        }
        let mut ch = c.spawn().unwrap();
        use std::io::Write;
        // A plugin killed or done before reading all of it: its output says.
        let _ = ch.stdin.take().unwrap().write_all(stdin.as_bytes());
        ch
    }

    /// peregrine-cni's ADD for the pod at netns path `pod`, started with
    /// `conf` on its stdin and left running (to be killed midway), its
    /// stdout to `stdout`.
    fn spawn_add(&self, pod: &str, conf: &str, stdout: Stdio) -> Child {
        self.spawn_plugin(&attach_env(pod, "ADD"), conf, stdout, Stdio::null())
    }

    /// The plugin run to its end: its output and its stdout as JSON.
    fn plugin(&self, env: &[(&str, &str)], stdin: &str) -> (Output, serde_json::Value) {
        let ch = self.spawn_plugin(env, stdin, Stdio::piped(), Stdio::piped());
        let o = ch.wait_with_output().unwrap();
        let v = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
        (o, v)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.agent.is_some() {
            let _ = peregrine_agent::control::request(
                &self.socket(),
                &peregrine_agent::control::Request::PodGc { keep: Vec::new() },
            );
        }
        self.stop_agent();
    }
}

fn cni_ok(o: &Output, what: &str) -> serde_json::Value {
    assert!(
        o.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
}

/// The pod's address from a result (its first IPv4 address).
fn pod_ip(r: &serde_json::Value) -> String {
    let a = r["ips"][0]["address"].as_str().unwrap();
    a.split('/').next().unwrap().to_string()
}

fn pings(from: &str, to: &str) -> bool {
    sh_in(
        from,
        &["ping", "-c", "2", "-i", "0.2", "-W", "1", to],
        Duration::from_secs(5),
    )
    .status
    .success()
}

/// How many of `count` UDP datagrams sent from namespace `from` to `ip`
/// on each of `ports` arrive at sockets bound in namespace `to` (the
/// receiver gives up 1 s after the last arrival, 5 s at most).
fn udp_reach(from: &str, to: &str, ip: &str, ports: &[u16], count: u32) -> Vec<u32> {
    let list = ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let recv = format!(
        "import select, socket, sys, time\n\
         ports = [{list}]\n\
         socks = {{}}\n\
         for p in ports:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('{ip}', p)); socks[s] = p\n\
         print('ready', flush=True)\n\
         got = {{p: 0 for p in ports}}\n\
         end = time.time() + 5\n\
         last = time.time()\n\
         while time.time() < end and time.time() - last < 1:\n    r, _, _ = select.select(list(socks), [], [], 0.2)\n    for s in r:\n        s.recv(2048); got[socks[s]] += 1; last = time.time()\n\
         print(' '.join(str(got[p]) for p in ports), flush=True)\n"
    );
    let mut rx = Command::new("ip")
        .args(["netns", "exec", to, "timeout", "10", "python3", "-c", &recv])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(rx.stdout.take().unwrap());
    let mut line = String::new();
    use std::io::BufRead;
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let send = format!(
        "import socket, time\n\
         s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         for i in range({count}):\n    for p in [{list}]:\n        s.sendto(b'denied?', ('{ip}', p))\n    time.sleep(0.005)\n"
    );
    let o = sh_in(from, &["python3", "-c", &send], Duration::from_secs(10));
    assert!(o.status.success(), "udp sender: {}", text(&o.stderr));
    line.clear();
    out.read_line(&mut line).unwrap();
    let _ = rx.wait();
    line.split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

fn link_exists(ns: &str, name: &str) -> bool {
    sh_in(ns, &["ip", "link", "show", name], Duration::from_secs(5))
        .status
        .success()
}

/// Standalone: cnitool ADDs two pods; each gets a host-local address, a
/// veth whose host end joins the node's router, and they reach each other
/// and the node through it. CHECK passes; DEL of one takes its veth, its
/// router port and its lease and leaves the other working; DEL again is
/// no error; GC (nothing valid) takes the rest.
#[test]
fn standalone_pods_join_the_router_and_leave_nothing_behind() {
    let node = Node::up("cnisa", &["cnisa-p1", "cnisa-p2"]);
    node.conflist(
        "pgnet",
        "1.1.0",
        serde_json::json!([node.standalone("198.18.64.0/24")]),
    );
    let r1 = cni_ok(
        &node.cnitool("add", "pgnet", "cnisa-p1", &[]),
        "cnitool add p1",
    );
    let r2 = cni_ok(
        &node.cnitool("add", "pgnet", "cnisa-p2", &[]),
        "cnitool add p2",
    );
    assert_eq!(r1["cniVersion"], "1.1.0");
    assert_eq!(r1["interfaces"][1]["name"], "eth0");
    assert_eq!(r1["interfaces"][1]["sandbox"], "/run/netns/cnisa-p1");
    assert_eq!(r1["ips"][0]["interface"], 1);
    assert_eq!(r1["ips"][0]["gateway"], "198.18.64.1");
    assert!(
        r1["ips"][0].get("version").is_none(),
        "1.1.0 has no ip version"
    );
    let (ip1, ip2) = (pod_ip(&r1), pod_ip(&r2));
    let h1 = r1["interfaces"][0]["name"].as_str().unwrap().to_string();
    let h2 = r2["interfaces"][0]["name"].as_str().unwrap().to_string();
    assert!(h1.starts_with("pg") && h1.len() <= 15, "{h1}");

    let pods = node.pods();
    assert_eq!(pods.len(), 2, "{pods:?}");
    let ports = node.router_ports();
    assert!(
        ports.contains(&h1) && ports.contains(&h2),
        "the pods' host ends are router ports: {ports:?}\n{}",
        node.log()
    );
    assert!(pings("cnisa-p1", &ip2), "p1 -> p2 through the router");
    assert!(pings("cnisa-p2", &ip1), "p2 -> p1 through the router");
    let v = json(
        &pg_in(&node.ns, &["router", "stats", "--json"]),
        "router stats",
    );
    let fwd: u64 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["port"] == h1.as_str())
        .map(|p| p["rx"]["forward"]["packets"].as_u64().unwrap_or(0))
        .sum();
    assert!(fwd >= 2, "the router forwarded p1's echo requests: {v:#}");

    cni_ok(
        &node.cnitool("check", "pgnet", "cnisa-p1", &[]),
        "cnitool check p1",
    );

    cni_ok(
        &node.cnitool("del", "pgnet", "cnisa-p1", &[]),
        "cnitool del p1",
    );
    assert!(!link_exists("cnisa-p1", "eth0"), "p1's eth0 went");
    assert!(!link_exists(&node.ns, &h1), "p1's host end went");
    assert_eq!(node.pods().len(), 1);
    assert!(!node.router_ports().contains(&h1));
    let lease = node.dir.join("ipam/pgnet").join(&ip1);
    assert!(!lease.exists(), "p1's lease released");
    assert!(
        pings("cnisa-p2", "198.18.64.1"),
        "p2 still reaches its gateway"
    );
    // DEL is idempotent (the runtime retries it).
    cni_ok(
        &node.cnitool("del", "pgnet", "cnisa-p1", &[]),
        "cnitool del p1 again",
    );
    // CHECK of the deleted pod fails in one line.
    let o = node.cnitool("check", "pgnet", "cnisa-p1", &[]);
    assert!(!o.status.success(), "check after del passes");

    cni_ok(&node.cnitool("gc", "pgnet", "cnisa-p2", &[]), "cnitool gc");
    assert!(
        node.pods().is_empty(),
        "GC with nothing valid takes every pod"
    );
    assert!(node.router_ports().is_empty(), "{:?}", node.router_ports());
    cni_ok(
        &node.cnitool("del", "pgnet", "cnisa-p2", &[]),
        "cnitool del p2",
    );
    assert!(!link_exists(&node.ns, &h2));
}

/// Chained after a reference bridge (with host-local): the plugin takes
/// the pod's host end from prevResult, hands it to the agent, and passes
/// the bridge's result on unchanged; pods reach each other over the
/// bridge (the router passes their frames to it: `pass_bridged`).
fn chained_after_bridge(node: &Node, version: &str, subnet: &str) {
    let (p1, p2) = (format!("{}-p1", node.ns), format!("{}-p2", node.ns));
    node.conflist(
        "brnet",
        version,
        serde_json::json!([
            {
                "type": "bridge",
                "bridge": "pgbr0",
                "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "dataDir": node.dir.join("ipam"),
                },
            },
            {"type": "peregrine-cni", "agentSocket": node.socket()},
        ]),
    );
    let r1 = cni_ok(&node.cnitool("add", "brnet", &p1, &[]), "add p1");
    let r2 = cni_ok(&node.cnitool("add", "brnet", &p2, &[]), "add p2");
    assert_eq!(r1["cniVersion"], version);
    // bridge's result: [bridge, host veth, eth0].
    assert_eq!(r1["interfaces"][0]["name"], "pgbr0", "{r1:#}");
    let h1 = r1["interfaces"][1]["name"].as_str().unwrap().to_string();
    let pods = node.pods();
    assert!(
        pods.iter().any(|p| p.1 == h1),
        "the agent got the bridge's host veth {h1}: {pods:?}"
    );
    assert!(node.router_ports().contains(&h1));
    assert!(pings(&p1, &pod_ip(&r2)), "p1 -> p2 over the bridge");
    let v = json(
        &pg_in(&node.ns, &["router", "stats", "--json"]),
        "router stats",
    );
    let bridged: u64 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["port"] == h1.as_str())
        .map(|p| p["rx"]["pass_bridged"]["packets"].as_u64().unwrap_or(0))
        .sum();
    assert!(
        bridged >= 2,
        "p1's echo requests passed to the bridge: {v:#}"
    );
    cni_ok(&node.cnitool("check", "brnet", &p1, &[]), "check p1");
    cni_ok(&node.cnitool("del", "brnet", &p1, &[]), "del p1");
    cni_ok(&node.cnitool("del", "brnet", &p1, &[]), "del p1 again");
    cni_ok(&node.cnitool("del", "brnet", &p2, &[]), "del p2");
    assert!(node.pods().is_empty());
    assert!(!link_exists(&node.ns, &h1));
    let _ = sh_in(
        &node.ns,
        &["ip", "link", "del", "pgbr0"],
        Duration::from_secs(5),
    );
}

#[test]
fn chained_after_the_go_built_bridge_v1_10() {
    let node = Node::up("cnich", &["cnich-p1", "cnich-p2"]);
    chained_after_bridge(&node, "1.1.0", "198.18.65.0/24");
}

/// Debian's plugins (1.1.1) speak up to cniVersion 1.0.0.
#[test]
fn chained_after_debians_bridge_1_1_1() {
    let refs = std::path::Path::new("/usr/lib/cni");
    assert!(
        refs.join("bridge").exists(),
        "Debian's CNI plugins are not installed: bash scripts/setup.sh"
    );
    let node = Node::with_plugins("cnideb", &["cnideb-p1", "cnideb-p2"], refs);
    chained_after_bridge(&node, "1.0.0", "198.18.68.0/24");
}

/// DEL after the pod's namespace is gone (the runtime removed it first):
/// success, the agent forgets the pod, the lease is released, and the
/// host end went with the namespace.
#[test]
fn del_after_the_pods_namespace_vanished() {
    let node = Node::up("cnigone", &["cnigone-p1"]);
    node.conflist(
        "gnet",
        "1.1.0",
        serde_json::json!([node.standalone("198.18.69.0/24")]),
    );
    let r = cni_ok(&node.cnitool("add", "gnet", "cnigone-p1", &[]), "add");
    let host = r["interfaces"][0]["name"].as_str().unwrap().to_string();
    let addr = pod_ip(&r);
    ip(&["netns", "del", "cnigone-p1"]);
    // The runtime still names the namespace's path.
    cni_ok(
        &node.cnitool("del", "gnet", "cnigone-p1", &[]),
        "DEL after the namespace went",
    );
    assert!(node.pods().is_empty(), "the agent forgot the pod");
    assert!(
        !link_exists(&node.ns, &host),
        "the host end went with the namespace"
    );
    assert!(
        !node.dir.join("ipam/gnet").join(&addr).exists(),
        "lease released"
    );
}

/// Bad configurations and environments: each gets the spec's error code
/// and one line naming the problem, and changes nothing.
#[test]
fn bad_configurations_get_their_cni_error_codes() {
    let node = Node::up("cnibad", &["cnibad-p1"]);
    let pod = "/run/netns/cnibad-p1";
    let good = || {
        let mut c = node.standalone("198.18.70.0/24");
        c["cniVersion"] = "1.1.0".into();
        c["name"] = "bnet".into();
        c
    };
    let chained = |prev: serde_json::Value| {
        serde_json::json!({"cniVersion": "1.1.0", "name": "bnet", "type": "peregrine-cni",
            "agentSocket": node.socket(), "prevResult": prev})
    };
    let set = |k: &str, v: serde_json::Value| {
        let mut c = good();
        c[k] = v;
        c.to_string()
    };
    let with_ipam = |ipam: serde_json::Value| set("ipam", ipam);
    // (what, environment, stdin, code, what the message names)
    type Bad<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u64, &'a str);
    let mut cases: Vec<Bad> = vec![
        ("version 0.3.1", attach_env(pod, "ADD"), set("cniVersion", "0.3.1".into()), 1, "not supported"),
        ("version 2.0.0", attach_env(pod, "ADD"), set("cniVersion", "2.0.0".into()), 1, "not supported"),
        ("not JSON", attach_env(pod, "ADD"), "{\"cniVersion\":".into(), 6, "not valid"),
        ("no name", attach_env(pod, "ADD"), r#"{"cniVersion":"1.1.0","type":"peregrine-cni"}"#.into(), 6, "name"),
        ("ipam without a type", attach_env(pod, "ADD"), with_ipam(serde_json::json!({"subnet": "198.18.70.0/24"})), 7, "ipam"),
        ("ipam type a path", attach_env(pod, "ADD"), with_ipam(serde_json::json!({"type": "../host-local"})), 7, "ipam"),
        ("ipam plugin not on CNI_PATH", attach_env(pod, "ADD"), with_ipam(serde_json::json!({"type": "no-such-ipam"})), 7, "no plugin"),
        ("mtu 20", attach_env(pod, "ADD"), set("mtu", 20.into()), 7, "MTU"),
        ("bandwidth rate a string", attach_env(pod, "ADD"), set("runtimeConfig", serde_json::json!({"bandwidth": {"egressRate": "10M"}})), 6, "not valid"),
        ("chained without prevResult", attach_env(pod, "ADD"), chained(serde_json::Value::Null).to_string(), 7, "no prevResult"),
        ("prevResult address without prefix", attach_env(pod, "ADD"), chained(serde_json::json!({"cniVersion": "1.1.0", "ips": [{"address": "198.18.70.5"}]})).to_string(), 7, "address/prefix"),
        ("prevResult interface out of range", attach_env(pod, "ADD"), chained(serde_json::json!({"cniVersion": "1.1.0", "ips": [{"address": "198.18.70.5/24", "interface": 3}]})).to_string(), 7, "names interface 3"),
        ("prevResult without the pod's interface", attach_env(pod, "ADD"), chained(serde_json::json!({"cniVersion": "1.1.0", "interfaces": [{"name": "veth1"}]})).to_string(), 7, "no interface eth0"),
        ("prevResult version 0.2.0", attach_env(pod, "ADD"), chained(serde_json::json!({"cniVersion": "0.2.0"})).to_string(), 1, "not supported"),
        ("GC at 1.0.0", vec![("CNI_COMMAND", "GC")], set("cniVersion", "1.0.0".into()), 1, "needs cniVersion 1.1.0"),
        ("relative CNI_NETNS", attach_env("netns/p1", "ADD"), good().to_string(), 4, "absolute path"),
        ("no such namespace", attach_env("/run/netns/cnibad-none", "ADD"), good().to_string(), 3, "no such namespace"),
        ("unknown command", attach_env(pod, "MOVE"), good().to_string(), 4, "expected ADD"),
        ("agent socket nobody answers on", attach_env(pod, "ADD"), set("agentSocket", "/run/peregrine-none/agent.sock".into()), 11, "no peregrine agent answers"),
    ];
    let mut long = attach_env(pod, "ADD");
    long.retain(|e| e.0 != "CNI_IFNAME");
    long.push(("CNI_IFNAME", "a-name-too-long0"));
    cases.push((
        "interface name too long",
        long,
        good().to_string(),
        4,
        "15 bytes",
    ));
    assert!(cases.len() >= 10);
    for (what, env, stdin, code, has) in &cases {
        let (o, v) = node.plugin(env, stdin);
        assert!(!o.status.success(), "{what}: accepted");
        assert_eq!(v["code"], *code, "{what}: {v}");
        let msg = v["msg"].as_str().unwrap_or_default();
        assert!(msg.contains(has), "{what}: {msg:?} lacks {has:?}");
        let e = text(&o.stderr);
        assert_eq!(e.lines().count(), 1, "{what}: one line on stderr: {e}");
        assert!(
            !link_exists("cnibad-p1", "eth0"),
            "{what}: left an interface"
        );
        assert!(node.pods().is_empty(), "{what}: left a pod at the agent");
    }
}

fn attach_env<'a>(pod: &'a str, cmd: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", cmd),
        ("CNI_CONTAINERID", "c-direct-1"),
        ("CNI_NETNS", pod),
        ("CNI_IFNAME", "eth0"),
        (
            "CNI_ARGS",
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=u1",
        ),
    ]
}

/// Each supported version gets results in its own format; others, bad
/// input and a missing agent get the spec's error JSON with its code and
/// one line, and an ADD that fails leaves no veth and no lease.
#[test]
fn versions_errors_and_a_missing_agent_as_the_spec_says() {
    let mut node = Node::up("cnive", &["cnive-p1"]);
    let pod = "/run/netns/cnive-p1";
    let base = node.standalone("198.18.66.0/24");
    let conf = |v: &str| {
        let mut c = base.clone();
        c["cniVersion"] = v.into();
        c["name"] = "vnet".into();
        c.to_string()
    };
    let (o, v) = node.plugin(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.1.0"}"#);
    assert!(o.status.success());
    assert_eq!(
        v["supportedVersions"],
        serde_json::json!(["0.4.0", "1.0.0", "1.1.0"])
    );

    for version in ["0.4.0", "1.0.0", "1.1.0"] {
        let (o, r) = node.plugin(&attach_env(pod, "ADD"), &conf(version));
        assert!(o.status.success(), "{version}: {}", text(&o.stderr));
        assert_eq!(r["cniVersion"], version);
        let has_version = r["ips"][0].get("version").is_some();
        assert_eq!(has_version, version == "0.4.0", "{version}: {r}");
        let pods = node.pods();
        assert_eq!(pods.len(), 1);
        let s = node.status().unwrap();
        assert_eq!(s["pods"][0]["pod_name"], "web-0", "{s:#}");
        let (o, _) = node.plugin(&attach_env(pod, "DEL"), &conf(version));
        assert!(o.status.success(), "{version} DEL: {}", text(&o.stderr));
        assert!(node.pods().is_empty());
        assert!(!link_exists("cnive-p1", "eth0"));
    }

    let err = |o: &Output, v: &serde_json::Value, code: u64, has: &str| {
        assert!(!o.status.success(), "{v}");
        assert_eq!(v["code"], code, "{v}");
        let msg = v["msg"].as_str().unwrap();
        assert!(
            msg.contains(has) && !msg.contains('\n'),
            "{msg:?} lacks {has:?}"
        );
        let e = text(&o.stderr);
        assert_eq!(e.lines().count(), 1, "one line on stderr: {e}");
    };
    let (o, v) = node.plugin(&attach_env(pod, "ADD"), &conf("0.3.1"));
    err(&o, &v, 1, "0.4.0, 1.0.0, 1.1.0");
    let (o, v) = node.plugin(&attach_env(pod, "ADD"), "{not json");
    err(&o, &v, 6, "not valid");
    let mut no_id = attach_env(pod, "ADD");
    no_id.retain(|e| e.0 != "CNI_CONTAINERID");
    let (o, v) = node.plugin(&no_id, &conf("1.1.0"));
    err(&o, &v, 4, "CNI_CONTAINERID is required");
    let (o, v) = node.plugin(&attach_env("/run/netns/cnive-nope", "ADD"), &conf("1.1.0"));
    err(&o, &v, 3, "no such namespace");
    let chained = serde_json::json!({"cniVersion":"1.1.0","name":"vnet","type":"peregrine-cni","agentSocket": node.socket()});
    let (o, v) = node.plugin(&attach_env(pod, "ADD"), &chained.to_string());
    err(&o, &v, 7, "no prevResult");
    let (o, v) = node.plugin(&[("CNI_COMMAND", "STATUS")], &conf("1.1.0"));
    assert!(o.status.success(), "STATUS with the agent up: {v}");

    // The agent stops: ADD is "try again later" and leaves nothing; DEL
    // still succeeds; STATUS says the plugin is not available.
    node.stop_agent();
    let (o, v) = node.plugin(&attach_env(pod, "ADD"), &conf("1.1.0"));
    err(&o, &v, 11, "no peregrine agent answers");
    assert!(
        !link_exists("cnive-p1", "eth0"),
        "a failed ADD leaves no veth"
    );
    let leases: Vec<_> = std::fs::read_dir(node.dir.join("ipam/vnet"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("198."))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        leases.is_empty(),
        "a failed ADD releases its lease: {leases:?}"
    );
    let (o, _) = node.plugin(&attach_env(pod, "DEL"), &conf("1.1.0"));
    assert!(
        o.status.success(),
        "DEL without an agent: {}",
        text(&o.stderr)
    );
    let (o, v) = node.plugin(&[("CNI_COMMAND", "STATUS")], &conf("1.1.0"));
    err(&o, &v, 50, "no peregrine agent answers");
}

/// runtimeConfig bandwidth (what kubelet passes from the pod's bandwidth
/// annotations) reaches the agent with the pod's names, and DEL takes the
/// policer with the pod.
#[test]
fn bandwidth_from_runtime_config_is_policed_on_the_pods_port() {
    let node = Node::up("cnibw", &["cnibw-p1"]);
    node.conflist(
        "bwnet",
        "1.1.0",
        serde_json::json!([node.standalone("198.18.67.0/24")]),
    );
    // A deny list that does not parse refuses the ADD in one line (the
    // agent's), and nothing of the pod is left.
    let o = node.cnitool(
        "add",
        "bwnet",
        "cnibw-p1",
        &[(
            "CAP_ARGS",
            r#"{"io.kubernetes.cri.pod-annotations":{"peregrine.io/ingress-deny":"tcp/23, tcp/0"}}"#,
        )],
    );
    let said = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(!o.status.success(), "{said}");
    assert!(
        said.contains(
            "annotation peregrine.io/ingress-deny, entry 2: \"tcp/0\": the port is 1 to 65535"
        ),
        "{said}"
    );
    assert!(node.pods().is_empty());
    assert!(!link_exists("cnibw-p1", "eth0"));
    let r = cni_ok(
        &node.cnitool(
            "add",
            "bwnet",
            "cnibw-p1",
            &[
                (
                    "CAP_ARGS",
                    r#"{"bandwidth":{"egressRate":10000000,"egressBurst":400000}}"#,
                ),
                (
                    "CNI_ARGS",
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=cart-1",
                ),
            ],
        ),
        "cnitool add with bandwidth",
    );
    let host = r["interfaces"][0]["name"].as_str().unwrap().to_string();
    let s = node.status().unwrap();
    let pod = &s["pods"][0];
    assert_eq!(pod["pod_namespace"], "shop", "{s:#}");
    assert_eq!(pod["egress_rate"], 10_000_000, "{s:#}");
    let q = json(
        &pg_in(&node.ns, &["qos", "stats", "--iface", &host, "--json"]),
        "qos stats",
    );
    assert_eq!(q["policers"].as_array().map(|a| a.len()), Some(1), "{q:#}");
    cni_ok(&node.cnitool("del", "bwnet", "cnibw-p1", &[]), "del");
    let o = pg_in(&node.ns, &["qos", "stats", "--iface", &host, "--json"]);
    assert!(
        !o.status.success() || text(&o.stdout).contains("\"policers\": []"),
        "the policer went with the pod: {}",
        text(&o.stdout)
    );
}

/// containerd (Debian's, with its CRI) in a node's namespace, as kubelet
/// drives it: its own config, root and state, the pause image imported
/// (built locally by scripts/k8s/images.sh: no registry), CNI from the
/// node's directories. Run with `nsenter --net` rather than `ip netns
/// exec`, whose fresh /sys hides the cgroup mounts runc needs. Dropped:
/// every sandbox stopped and removed, containerd and its shims stopped, its
/// directories and the cgroups it made (that were not there) removed.
struct Containerd {
    child: Option<Child>,
    dir: PathBuf,
    state: PathBuf,
    cgroups_before: Vec<PathBuf>,
}

impl Containerd {
    fn start(node: &Node) -> Containerd {
        let image = cache().join("images/pause.tar");
        assert!(image.exists(), "no pause image: bash scripts/k8s/images.sh");
        let dir = node.dir.join("containerd");
        let state = PathBuf::from(format!("/run/pg-{}", node.ns));
        let _ = std::fs::remove_dir_all(&state);
        std::fs::create_dir_all(&dir).unwrap();
        // The node's containerd runs as scripts/k8s/cluster.sh runs it.
        let cfg = include_str!("../../../scripts/k8s/containerd.toml")
            .replace("@ROOT@", &dir.display().to_string())
            .replace("@STATE@", &state.display().to_string())
            .replace("@BIN@", &node.dir.join("bin").display().to_string())
            .replace("@NET@", &node.dir.join("net.d").display().to_string());
        std::fs::write(dir.join("config.toml"), cfg).unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let cgroups_before = Containerd::cgroups();
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", node.ns))
            .args(["containerd", "--config"])
            .arg(dir.join("config.toml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd starts (apt-get install containerd runc)");
        let c = Containerd {
            child: Some(child),
            dir,
            state,
            cgroups_before,
        };
        let end = Instant::now() + Duration::from_secs(15);
        while !c.socket().exists() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        let o = sh(
            &[
                "ctr",
                "-a",
                c.socket().to_str().unwrap(),
                "-n",
                "k8s.io",
                "images",
                "import",
                image.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        );
        assert!(
            o.status.success(),
            "ctr import: {}{}",
            text(&o.stderr),
            c.log()
        );
        c
    }

    fn socket(&self) -> PathBuf {
        self.state.join("containerd.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// The k8s.io cgroups at the roots of the v1 hierarchies.
    fn cgroups() -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/cgroup")
            .map(|d| {
                d.flatten()
                    .map(|e| e.path().join("k8s.io"))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn crictl(&self, args: &[&str]) -> Output {
        let ep = format!("unix://{}", self.socket().display());
        let mut a = vec![
            cache().join("tools/bin/crictl").display().to_string(),
            "-r".into(),
            ep.clone(),
            "-i".into(),
            ep,
            "-t".into(),
            "30s".into(),
        ];
        a.extend(args.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        sh(&refs, Duration::from_secs(40))
    }

    /// `crictl runp` of a pod named `name` with `annotations`: its id.
    fn runp(&self, name: &str, annotations: serde_json::Value) -> String {
        let f = self.dir.join(format!("{name}.json"));
        let pod = serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "attempt": 0},
            "annotations": annotations,
            "log_directory": self.dir.join("logs"),
            "linux": {},
        });
        std::fs::write(&f, pod.to_string()).unwrap();
        let o = self.crictl(&["runp", f.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "crictl runp {name}: {}\n{}",
            text(&o.stderr),
            self.log()
        );
        text(&o.stdout).trim().to_string()
    }

    /// A sandbox's IP and its network namespace's name under /run/netns.
    fn sandbox(&self, id: &str) -> (String, String) {
        let o = self.crictl(&["inspectp", id]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let ip = v["status"]["network"]["ip"].as_str().unwrap().to_string();
        let ns = v["info"]["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["type"] == "network")
            .and_then(|n| n["path"].as_str())
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        (ip, ns)
    }

    fn remove_all(&self) {
        let o = self.crictl(&["pods", "-q"]);
        for id in text(&o.stdout).split_whitespace() {
            let _ = self.crictl(&["stopp", id]);
            let _ = self.crictl(&["rmp", id]);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.remove_all();
        }
        if let Some(mut c) = self.child.take() {
            peregrine_host::signals::terminate(&mut c, Duration::from_secs(10));
        }
        // Shims of this containerd that outlived it.
        let _ = sh(
            &[
                "pkill",
                "-f",
                &format!("-address {}", self.socket().display()),
            ],
            Duration::from_secs(5),
        );
        let _ = std::fs::remove_dir_all(&self.state);
        let _ = std::fs::remove_dir_all(self.dir.join("root"));
        for cg in Containerd::cgroups() {
            if !self.cgroups_before.contains(&cg) {
                let _ = std::fs::remove_dir(&cg);
            }
        }
    }
}

/// containerd's CRI, driven by crictl as kubelet drives it, runs the chain
/// bridge + peregrine-cni for each sandbox: the pods reach each other, the
/// agent holds them under their Kubernetes names with the bandwidth of
/// their annotations, and stopping a sandbox (CNI DEL) takes everything of
/// it. After: no veth, no pod at the agent, no cgroup left.
#[test]
fn containerd_cri_runs_the_chain_as_kubelet_drives_it() {
    let node = Node::up("cnicri", &[]);
    node.conflist(
        "k8s-pod-network",
        "1.0.0",
        serde_json::json!([
            {
                "type": "bridge",
                "bridge": "pgbr1",
                "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "198.18.72.0/24"}]],
                    "dataDir": node.dir.join("ipam"),
                },
            },
            {
                "type": "peregrine-cni",
                "agentSocket": node.socket(),
                "capabilities": {"bandwidth": true, "io.kubernetes.cri.pod-annotations": true},
            },
        ]),
    );
    let ctrd = Containerd::start(&node);
    let a = ctrd.runp(
        "web-0",
        serde_json::json!({
            "kubernetes.io/egress-bandwidth": "10M",
            "peregrine.io/egress-deny": "udp/11",
        }),
    );
    let b = ctrd.runp(
        "web-1",
        serde_json::json!({"peregrine.io/ingress-deny": "udp/9"}),
    );
    let (ip_a, ns_a) = ctrd.sandbox(&a);
    let (ip_b, ns_b) = ctrd.sandbox(&b);
    assert!(
        pings(&ns_a, &ip_b),
        "web-0 -> web-1 ({ip_b})\n{}",
        node.log()
    );
    // The annotations' deny lists: web-1 takes nothing on UDP port 9,
    // web-0 sends nothing to port 11; port 10 passes both. Each denied
    // datagram is counted by the rule of rate 0 that dropped it.
    const SENT: u32 = 20;
    assert_eq!(
        udp_reach(&ns_a, &ns_b, &ip_b, &[9, 10, 11], SENT),
        vec![0, SENT, 0],
        "datagrams web-0 -> web-1 ports 9, 10, 11\n{}",
        node.log()
    );
    let denied = |ns: &str, iface: Option<&str>| {
        let mut args = vec!["qos", "stats", "--json"];
        if let Some(i) = iface {
            args.extend(["--iface", i]);
        }
        let s = json(&pg_in(ns, &args), "qos stats");
        let r = &s["policers"][0]["rules"][0];
        assert_eq!(r["rate"], "0 (nothing conforms)", "{s:#}");
        json_u64(r, "exceed_packets")
    };
    assert_eq!(
        denied(&ns_b, Some("eth0")),
        u64::from(SENT),
        "web-1's ingress-deny"
    );
    let s = node.status().unwrap();
    let pods = s["pods"].as_array().unwrap();
    assert_eq!(pods.len(), 2, "{s:#}");
    let web0 = pods.iter().find(|p| p["pod_name"] == "web-0").unwrap();
    assert_eq!(web0["pod_namespace"], "shop");
    assert_eq!(
        web0["egress_rate"], 10_000_000,
        "the annotation's rate: {s:#}"
    );
    assert!(web0["ips"][0].as_str().unwrap().starts_with(&ip_a));
    let host_a = web0["host_iface"].as_str().unwrap().to_string();
    assert!(node.router_ports().contains(&host_a));
    assert_eq!(
        denied(&node.ns, Some(&host_a)),
        u64::from(SENT),
        "web-0's egress-deny, in front of its egress_rate"
    );

    // Stopping the sandbox is CNI DEL: its port, policer and veth go.
    let o = ctrd.crictl(&["stopp", &a]);
    assert!(o.status.success(), "stopp: {}", text(&o.stderr));
    let o = ctrd.crictl(&["rmp", &a]);
    assert!(o.status.success(), "rmp: {}", text(&o.stderr));
    assert_eq!(node.pods().len(), 1);
    assert!(!node.router_ports().contains(&host_a));
    assert!(!link_exists(&node.ns, &host_a));
    ctrd.remove_all();
    assert!(node.pods().is_empty(), "{}", node.log());
    drop(ctrd);
    let o = sh_in(&node.ns, &["ip", "-br", "link"], Duration::from_secs(5));
    assert!(
        !text(&o.stdout).contains("veth"),
        "no veth left: {}",
        text(&o.stdout)
    );
    let _ = sh_in(
        &node.ns,
        &["ip", "link", "del", "pgbr1"],
        Duration::from_secs(5),
    );
}

/// Two nodes (namespaces joined by a veth `up0`), each agent given the
/// other's pod CIDR in `[cluster]`: it routes there through the other
/// node (route protocol 176), pod-to-pod traffic crosses both routers
/// (their counters show it on each hop), a route removed by hand comes
/// back, and a node taken out of the declaration takes its route along.
#[test]
fn two_nodes_route_to_each_others_pods_through_both_routers() {
    let refs = cache().join("cni/v1.10.0/bin");
    let decl = |own: &str, peer: &str, cidr: &str, addr: &str| {
        format!(
            "[router]\nports = [\"up0\"]\nhook = \"tc\"\n[cluster]\npod_cidr = \"{own}\"\n[[cluster.node]]\nname = \"{peer}\"\npod_cidr = \"{cidr}\"\naddress = \"{addr}\"\n"
        )
    };
    let n1 = Node::declared(
        "cnim1",
        &["cnim1-p1"],
        &refs,
        &decl("198.18.82.0/24", "cnim2", "198.18.83.0/24", "198.18.91.2"),
    );
    let n2 = Node::declared(
        "cnim2",
        &["cnim2-p1"],
        &refs,
        &decl("198.18.83.0/24", "cnim1", "198.18.82.0/24", "198.18.91.1"),
    );
    // The link between the nodes comes after their agents: each attaches
    // its declared port and adds its route when they appear.
    ip(&[
        "link", "add", "up0", "netns", "cnim1", "type", "veth", "peer", "name", "up0", "netns",
        "cnim2",
    ]);
    for (ns, a) in [("cnim1", "198.18.91.1/24"), ("cnim2", "198.18.91.2/24")] {
        ip(&["-n", ns, "addr", "add", a, "dev", "up0"]);
        ip(&["-n", ns, "link", "set", "up0", "up"]);
    }
    let route = |ns: &str, cidr: &str| {
        let o = sh_in(
            ns,
            &["ip", "route", "show", cidr, "proto", "176"],
            Duration::from_secs(5),
        );
        text(&o.stdout)
    };
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let end = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(
                Instant::now() < end,
                "{what}: not within 10 s\n{}\n{}",
                n1.log(),
                n2.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait("up0 a router port of both", &|| {
        n1.router_ports().contains(&"up0".to_string())
            && n2.router_ports().contains(&"up0".to_string())
    });
    wait("routes to the other node's pods", &|| {
        route("cnim1", "198.18.83.0/24").contains("via 198.18.91.2")
            && route("cnim2", "198.18.82.0/24").contains("via 198.18.91.1")
    });
    n1.conflist(
        "m1",
        "1.1.0",
        serde_json::json!([n1.standalone("198.18.82.0/24")]),
    );
    n2.conflist(
        "m2",
        "1.1.0",
        serde_json::json!([n2.standalone("198.18.83.0/24")]),
    );
    let r1 = cni_ok(&n1.cnitool("add", "m1", "cnim1-p1", &[]), "add on node 1");
    let r2 = cni_ok(&n2.cnitool("add", "m2", "cnim2-p1", &[]), "add on node 2");
    let (h1, h2) = (
        r1["interfaces"][0]["name"].as_str().unwrap().to_string(),
        r2["interfaces"][0]["name"].as_str().unwrap().to_string(),
    );
    // (forwarded, passed to the kernel to resolve the next hop's MAC).
    let forwarded = |node: &Node, port: &str| -> (u64, u64) {
        let v = json(
            &pg_in(&node.ns, &["router", "stats", "--json"]),
            "router stats",
        );
        let p = v["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == port)
            .cloned()
            .unwrap_or_default();
        let n = |a: &str| p["rx"][a]["packets"].as_u64().unwrap_or(0);
        (n("forward"), n("pass_no_neigh"))
    };
    let before = [
        forwarded(&n1, &h1),
        forwarded(&n2, "up0"),
        forwarded(&n2, &h2),
        forwarded(&n1, "up0"),
    ];
    let o = sh_in(
        "cnim1-p1",
        &["ping", "-c", "5", "-i", "0.2", "-W", "1", &pod_ip(&r2)],
        Duration::from_secs(10),
    );
    assert!(
        o.status.success(),
        "pod on node 1 -> pod on node 2: {}",
        text(&o.stdout)
    );
    let after = [
        forwarded(&n1, &h1),
        forwarded(&n2, "up0"),
        forwarded(&n2, &h2),
        forwarded(&n1, "up0"),
    ];
    for (i, hop) in [
        "node 1, from its pod",
        "node 2, from node 1",
        "node 2, the reply from its pod",
        "node 1, the reply from node 2",
    ]
    .iter()
    .enumerate()
    {
        // The first frame of each hop may find the next hop's MAC not
        // yet resolved: the kernel takes it and resolves it.
        let (fwd, neigh) = (after[i].0 - before[i].0, after[i].1 - before[i].1);
        assert!(
            fwd >= 4 && fwd + neigh >= 5,
            "{hop}: the router forwarded {fwd} of 5, {neigh} passed to resolve ({before:?} -> {after:?})"
        );
    }
    // Drift: a route removed by hand comes back.
    ip(&["-n", "cnim1", "route", "del", "198.18.83.0/24"]);
    wait("the route removed by hand is back", &|| {
        route("cnim1", "198.18.83.0/24").contains("via 198.18.91.2")
    });
    // Node 2 taken out of node 1's declaration: its route goes.
    std::fs::write(
        n1.dir.join("node.toml"),
        "[router]\nports = [\"up0\"]\nhook = \"tc\"\n",
    )
    .unwrap();
    wait("the undeclared node's route removed", &|| {
        route("cnim1", "198.18.83.0/24").is_empty()
    });
    cni_ok(&n1.cnitool("del", "m1", "cnim1-p1", &[]), "del on node 1");
    cni_ok(&n2.cnitool("del", "m2", "cnim2-p1", &[]), "del on node 2");
}

/// Chaos: the plugin's ADD killed (SIGKILL) at random points, as a runtime
/// that times out or crashes leaves it; the DEL the runtime then sends
/// must leave nothing: no veth on either side, no pod at the agent, no
/// lease. The kill points cover both sides of the veth's creation, and an
/// ADD after them all works.
#[test]
fn an_add_killed_at_any_point_is_cleaned_by_the_next_del() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let node = Node::up("cnikill", &["cnikill-p1"]);
    let pod = "/run/netns/cnikill-p1";
    let mut conf = node.standalone("198.18.73.0/24");
    conf["cniVersion"] = "1.1.0".into();
    conf["name"] = "knet".into();
    // With a deny list: the agent puts a policer in the pod's namespace.
    conf["runtimeConfig"] = udp9_denied();
    let conf = conf.to_string();
    let host = peregrine_cni::plugin::host_iface_name(&peregrine_agent::pods::PodKey {
        container_id: "c-direct-1".into(),
        ifname: "eth0".into(),
    });
    let leases = || -> Vec<String> {
        std::fs::read_dir(node.dir.join("ipam/knet"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("198."))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut rng = ChaosRng::seeded();
    let (mut with_veth, mut without, mut finished) = (0, 0, 0);
    let started = Instant::now();
    const KILLS: u64 = 30;
    for k in 0..KILLS {
        let mut ch = node.spawn_add(pod, &conf, Stdio::null());
        let within = [5, 20, 60, 150][k as usize % 4];
        std::thread::sleep(Duration::from_millis(rng.below(within)));
        let veth = link_exists(&node.ns, &host);
        let _ = kill(Pid::from_raw(ch.id() as i32), Signal::SIGKILL);
        let status = ch.wait().unwrap();
        if status.success() {
            finished += 1;
        } else if veth {
            with_veth += 1;
        } else {
            without += 1;
        }
        let (o, v) = node.plugin(&attach_env(pod, "DEL"), &conf);
        assert!(o.status.success(), "kill {k}: DEL after it: {v}");
        assert!(
            !link_exists(&node.ns, &host),
            "kill {k}: the host end stayed"
        );
        assert!(
            !link_exists("cnikill-p1", "eth0"),
            "kill {k}: the pod's end stayed"
        );
        // The agent may take a request the killed plugin sent just before.
        assert!(node.pods().is_empty(), "kill {k}: the agent kept the pod");
        assert!(leases().is_empty(), "kill {k}: leases {:?}", leases());
        let o = pg_in("cnikill-p1", &["qos", "list", "--json"]);
        assert_eq!(
            json(&o, "qos list")["policers"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["namespace"] == "cnikill-p1")
                .count(),
            0,
            "kill {k}: the deny list's policer stayed"
        );
    }
    // The agent carries on with a request whose plugin was killed.
    let policed = node.log().matches("ingress-deny policed on eth0").count();
    eprintln!(
        "{KILLS} ADDs killed in {:.1} s: {with_veth} after the veth was made, {without} before, {finished} had finished; \
         the agent put the deny list's policer in the pod {policed} times",
        started.elapsed().as_secs_f64()
    );
    assert!(policed > 0, "no kill came after the agent put the policer");
    assert!(
        with_veth > 0 && without > 0,
        "kill points cover both sides of the veth"
    );
    let (o, r) = node.plugin(&attach_env(pod, "ADD"), &conf);
    assert!(o.status.success(), "an ADD after the kills: {r}");
    let (o, _) = node.plugin(&attach_env(pod, "DEL"), &conf);
    assert!(o.status.success());
}

/// Chaos: the agent itself killed (SIGKILL) at random points of an ADD
/// that carries a deny list, and started again at once, as its init system
/// would: the plugin's ADD fails in one line or succeeds, and the DEL the
/// runtime then sends, to the new agent, leaves nothing: no veth, no pod
/// at the agent, no lease, no policer in the pod's namespace. The kill
/// points cover both sides of the policer's attach, and an ADD after them
/// all works.
#[test]
fn the_agent_killed_mid_add_and_restarted_leaves_nothing_after_del() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let mut node = Node::up("cniak", &["cniak-p1"]);
    let pod = "/run/netns/cniak-p1";
    let mut conf = node.standalone("198.18.75.0/24");
    conf["cniVersion"] = "1.1.0".into();
    conf["name"] = "aknet".into();
    conf["runtimeConfig"] = udp9_denied();
    let conf = conf.to_string();
    let host = peregrine_cni::plugin::host_iface_name(&peregrine_agent::pods::PodKey {
        container_id: "c-direct-1".into(),
        ifname: "eth0".into(),
    });
    let pod_policers = || -> usize {
        let o = pg_in("cniak-p1", &["qos", "list", "--json"]);
        json(&o, "qos list")["policers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["namespace"] == "cniak-p1")
            .count()
    };
    let ipam = node.dir.join("ipam/aknet");
    let leases = || -> Vec<String> {
        std::fs::read_dir(&ipam)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("198."))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut rng = ChaosRng::seeded();
    let (mut policed, mut unpoliced, mut finished) = (0, 0, 0);
    let started = Instant::now();
    const KILLS: u64 = 20;
    for k in 0..KILLS {
        let mut ch = node.spawn_add(pod, &conf, Stdio::piped());
        let within = [10, 60, 250, 1000][k as usize % 4];
        std::thread::sleep(Duration::from_millis(rng.below(within)));
        let agent = node.agent.take().expect("the agent runs");
        let _ = kill(Pid::from_raw(agent.id() as i32), Signal::SIGKILL);
        let mut agent = agent;
        agent.wait().unwrap();
        let had_policer = pod_policers() > 0;
        // The plugin ends either way: answered, or its agent gone.
        let end = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = ch.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < end, "kill {k}: the plugin hangs");
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = ch.wait_with_output().unwrap();
        if status.success() {
            finished += 1;
        } else {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|_| panic!("kill {k}: no CNI error JSON: {out:?}"));
            let msg = v["msg"].as_str().unwrap_or_default();
            assert!(
                !msg.is_empty() && !msg.contains('\n'),
                "kill {k}: one line: {v}"
            );
            if had_policer {
                policed += 1;
            } else {
                unpoliced += 1;
            }
        }
        node.start_agent();
        if status.success() {
            // The new agent restored the pod the dead one had joined.
            assert!(
                node.pods().iter().any(|(_, h)| *h == host),
                "kill {k}: the new agent lost the pod: {:?}",
                node.pods()
            );
            assert_eq!(pod_policers(), 1, "kill {k}: the pod's policer");
        }
        let (o, v) = node.plugin(&attach_env(pod, "DEL"), &conf);
        assert!(o.status.success(), "kill {k}: DEL after it: {v}");
        assert!(
            !link_exists(&node.ns, &host),
            "kill {k}: the host end stayed"
        );
        assert!(
            !link_exists("cniak-p1", "eth0"),
            "kill {k}: the pod's end stayed"
        );
        assert!(node.pods().is_empty(), "kill {k}: the agent kept the pod");
        assert!(leases().is_empty(), "kill {k}: leases {:?}", leases());
        assert_eq!(
            pod_policers(),
            0,
            "kill {k}: the deny list's policer stayed"
        );
    }
    eprintln!(
        "{KILLS} agents killed mid-ADD in {:.1} s: the ADD failed {policed} times with the pod's policer in place, \
         {unpoliced} times before it, and finished {finished} times",
        started.elapsed().as_secs_f64()
    );
    assert!(
        policed + finished > 0 && unpoliced > 0,
        "kill points cover both sides of the policer's attach"
    );
    let (o, r) = node.plugin(&attach_env(pod, "ADD"), &conf);
    assert!(o.status.success(), "an ADD after the kills: {r}");
    assert_eq!(pod_policers(), 1, "the deny list's policer after the kills");
    let (o, _) = node.plugin(&attach_env(pod, "DEL"), &conf);
    assert!(o.status.success());
}

/// Together: the AF_XDP function invoker (`faas serve`) in a pod whose
/// port is in the node's router, in both orders (the invoker after both
/// pods joined; the invoker before the other pod joins). The router must
/// deliver into the pod through its XDP hook (no redirect_peer past it):
/// a kernel UDP client in the other pod gets every echo back.
#[test]
fn the_invoker_in_a_pod_answers_through_the_router_in_both_orders() {
    let node = Node::up("cnifx", &["cnifx-p1", "cnifx-p2"]);
    node.conflist(
        "fnet",
        "1.1.0",
        serde_json::json!([node.standalone("198.18.74.0/24")]),
    );
    let serve = || {
        let s = FaasServe::start(
            "cnifx-p2",
            &[
                "--iface",
                "eth0",
                "--backend",
                "afxdp",
                "--functions",
                "7000=echo",
                "--cpus",
                "1",
                "--duration",
                "30",
                "--json",
            ],
            &[],
        );
        std::thread::sleep(Duration::from_secs(2));
        s
    };
    // Order 1: both pods, then the invoker.
    cni_ok(&node.cnitool("add", "fnet", "cnifx-p1", &[]), "add p1");
    let r2 = cni_ok(&node.cnitool("add", "fnet", "cnifx-p2", &[]), "add p2");
    let dst = pod_ip(&r2);
    let mut s = serve();
    let got = echo_replies("cnifx-p1", &dst, 7000, 50);
    assert_eq!(
        got,
        50,
        "order 1: replies from the invoker in p2\n{}",
        node.log()
    );
    s.stop();
    // Order 2: the invoker runs, then the other pod joins the router.
    cni_ok(&node.cnitool("del", "fnet", "cnifx-p1", &[]), "del p1");
    let mut s = serve();
    cni_ok(
        &node.cnitool("add", "fnet", "cnifx-p1", &[]),
        "add p1 again",
    );
    let got = echo_replies("cnifx-p1", &dst, 7000, 50);
    assert_eq!(
        got,
        50,
        "order 2: replies from the invoker in p2\n{}",
        node.log()
    );
    s.stop();
    cni_ok(&node.cnitool("del", "fnet", "cnifx-p1", &[]), "del p1");
    cni_ok(&node.cnitool("del", "fnet", "cnifx-p2", &[]), "del p2");
    assert!(node.pods().is_empty());
}

/// Rewrites the stopped agent's registry as an agent killed mid-ADD left
/// it: the pod's in-pod policer (link L, which it returns) not recorded,
/// only pending, with `before(L)` as the policer that ran there before.
fn rewind_in_pod_policer(node: &Node, before: impl Fn(u64) -> Option<u64>) -> u64 {
    let pods_json = node.run_dir().join("pods.json");
    let mut reg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&pods_json).unwrap()).unwrap();
    let rec = reg["pods"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| r["in_pod"].is_u64())
        .expect("the record with its in-pod policer");
    let link = rec["in_pod_policer"].as_u64().expect("its link id");
    rec.as_object_mut().unwrap().remove("in_pod_policer");
    rec["in_pod_pending"] = serde_json::json!({ "before": before(link) });
    std::fs::write(&pods_json, reg.to_string()).unwrap();
    link
}

/// A runtime config whose pod annotation denies UDP port 9: the agent puts
/// a policer in the pod's namespace.
fn udp9_denied() -> serde_json::Value {
    serde_json::json!({
        "io.kubernetes.cri.pod-annotations": {"peregrine.io/ingress-deny": "udp/9"}
    })
}

/// A restarted agent takes as its own only a policer it put in the pod.
/// The agent killed mid-ADD with a policer already running on the pod's
/// interface (its record: "putting QoS there; link L ran before"): the
/// restarted agent does not take L, and does not take it later either,
/// after the record is saved again and the agent restarted once more (a
/// record that adopted nothing is not an old agent's, adopted by sight).
/// The pod's DEL then leaves L for its owner.
#[test]
fn a_restarted_agent_never_takes_a_policer_it_did_not_put_in_the_pod() {
    let mut node = Node::up("cnirs", &["cnirs-p1", "cnirs-p2"]);
    node.conflist(
        "rnet",
        "1.1.0",
        serde_json::json!([node.standalone("198.18.77.0/24")]),
    );
    let deny = udp9_denied().to_string();
    // The programs of the policers on p1's eth0.
    let links_in_p1 = || -> Vec<u64> {
        let o = pg_in("cnirs-p1", &["qos", "list", "--json"]);
        json(&o, "qos list")["policers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["namespace"] == "cnirs-p1" && p["iface"] == "eth0")
            .filter_map(|p| p["prog_id"].as_u64())
            .collect()
    };
    cni_ok(
        &node.cnitool("add", "rnet", "cnirs-p1", &[("CAP_ARGS", &deny)]),
        "add p1 with a deny list",
    );
    cni_ok(&node.cnitool("add", "rnet", "cnirs-p2", &[]), "add p2");
    let running = links_in_p1();
    assert_eq!(running.len(), 1, "the deny list's policer: {running:?}");
    // Killed mid-ADD, as the record says, with that policer there before.
    node.stop_agent();
    rewind_in_pod_policer(&node, Some);
    node.start_agent();
    // A change saves the registry again; the agent restarts once more.
    cni_ok(&node.cnitool("del", "rnet", "cnirs-p2", &[]), "del p2");
    node.stop_agent();
    node.start_agent();
    cni_ok(&node.cnitool("del", "rnet", "cnirs-p1", &[]), "del p1");
    assert_eq!(
        links_in_p1(),
        running,
        "the policer the agent did not put there stays after DEL\n{}",
        node.log()
    );
    let o = pg_in("cnirs-p1", &["qos", "detach", "eth0"]);
    assert!(
        o.status.success(),
        "its owner's detach: {}",
        text(&o.stderr)
    );
    assert!(links_in_p1().is_empty());
    assert!(node.pods().is_empty());
}

/// A pod's deny list is a policer the agent puts on the pod's interface
/// and knows by its link: DEL takes it, pins and all, and the pod ADDed
/// again without the annotation is not policed. A policer the user put on
/// the pod's interface by hand (`peregrine qos apply` in the pod's
/// namespace, beside the agent's egress_rate shaper) is the user's: DEL
/// leaves its pins for the user's own `qos detach` (the old agent
/// detached it as if it were its own).
#[test]
fn a_pods_deny_list_is_the_agents_own_policer_and_the_users_is_left_alone() {
    let mut node = Node::up("cnidn", &["cnidn-p1", "cnidn-p2"]);
    node.conflist(
        "dnet",
        "1.1.0",
        serde_json::json!([node.standalone("198.18.75.0/24")]),
    );
    let deny = udp9_denied().to_string();
    let policers_in_p1 = || {
        let o = pg_in("cnidn-p1", &["qos", "list", "--json"]);
        json(&o, "qos list")["policers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["iface"] == "eth0")
            .count()
    };
    let before = policers_in_p1();
    cni_ok(&node.cnitool("add", "dnet", "cnidn-p2", &[]), "add p2");
    let r1 = cni_ok(
        &node.cnitool("add", "dnet", "cnidn-p1", &[("CAP_ARGS", &deny)]),
        "add p1 with a deny list",
    );
    let ip = pod_ip(&r1);
    let reach = |ip: &str| udp_reach("cnidn-p2", "cnidn-p1", ip, &[9, 7], 20);
    assert_eq!(reach(&ip), [0, 20], "udp/9 denied\n{}", node.log());
    cni_ok(
        &node.cnitool("check", "dnet", "cnidn-p1", &[("CAP_ARGS", &deny)]),
        "check",
    );
    assert_eq!(policers_in_p1(), before + 1);
    // Together: the AF_XDP invoker in that pod would take frames at XDP,
    // before the deny list's policer (tc) sees them: refused in one line.
    let o = pg_in(
        "cnidn-p1",
        &[
            "faas",
            "serve",
            "--iface",
            "eth0",
            "--backend",
            "afxdp",
            "--functions",
            "9=echo",
            "--duration",
            "5",
        ],
    );
    let e = text(&o.stderr);
    assert!(!o.status.success(), "faas serve beside the deny list: {e}");
    assert!(
        e.contains("eth0") && e.contains("would pass unpoliced"),
        "{e}"
    );
    assert_eq!(reach(&ip), [0, 20], "the deny list still holds");
    // The agent killed after it attached the policer and before it
    // recorded the link: its record says only that it was putting QoS in
    // the pod and that no policer ran there before. The restarted agent
    // takes the policer as its own, and DEL removes it.
    node.stop_agent();
    rewind_in_pod_policer(&node, |_| None);
    node.start_agent();
    assert_eq!(
        reach(&ip),
        [0, 20],
        "the deny list holds across the restart"
    );
    cni_ok(&node.cnitool("del", "dnet", "cnidn-p1", &[]), "del p1");
    assert_eq!(
        policers_in_p1(),
        before,
        "the agent's policer went, pins too"
    );
    // Again without the annotation, with an egress_rate shaper: nothing
    // denied, no policer of the agent's.
    let r1 = cni_ok(
        &node.cnitool(
            "add",
            "dnet",
            "cnidn-p1",
            &[(
                "CAP_ARGS",
                r#"{"bandwidth":{"egressRate":50000000,"egressBurst":400000}}"#,
            )],
        ),
        "add p1 with a shaper",
    );
    let ip = pod_ip(&r1);
    assert_eq!(reach(&ip), [20, 20], "nothing denied\n{}", node.log());
    assert_eq!(policers_in_p1(), before);
    // The user's own policer on the pod's interface.
    let f = node.dir.join("user-deny.toml");
    std::fs::write(&f, "[[rule]]\nproto = \"udp\"\ndport = 7\nrate = \"0\"\n").unwrap();
    let o = pg_in(
        "cnidn-p1",
        &["qos", "apply", f.to_str().unwrap(), "--iface", "eth0"],
    );
    assert!(o.status.success(), "user's qos apply: {}", text(&o.stderr));
    assert_eq!(reach(&ip), [20, 0], "the user's rule");
    cni_ok(&node.cnitool("check", "dnet", "cnidn-p1", &[]), "check");
    cni_ok(&node.cnitool("del", "dnet", "cnidn-p1", &[]), "del p1");
    assert_eq!(
        policers_in_p1(),
        before + 1,
        "the user's policer (stale with its interface) is the user's to remove\n{}",
        node.log()
    );
    let o = pg_in("cnidn-p1", &["qos", "detach", "eth0"]);
    assert!(o.status.success(), "user's qos detach: {}", text(&o.stderr));
    assert_eq!(policers_in_p1(), before);
    cni_ok(&node.cnitool("del", "dnet", "cnidn-p2", &[]), "del p2");
    assert!(node.pods().is_empty());
}
