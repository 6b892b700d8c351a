//! The full tier of issue 26: peregrine on a real single-node Kubernetes
//! v1.34 cluster (scripts/k8s/cluster.sh; binaries cached by
//! scripts/k8s/build.sh, images built by scripts/k8s/images.sh). The agent
//! runs as the DaemonSet of deploy/kubernetes, whose initContainer installs
//! peregrine-cni and its conflist (peregrine-cni standalone with
//! host-local) into the node's CNI directories; pods of a Deployment
//! reach each other (ping, TCP, UDP; iperf3 TCP between two pods of a
//! locally built iperf3 image) forwarded by the node's router,
//! deleted pods and the deleted DaemonSet leave nothing, and the host is as
//! it was when the cluster is gone. docs/KUBERNETES.md.
#[path = "k8s/cluster.rs"]
mod cluster;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster::*;
use common::{sh, text};

/// The agent's control socket on the node (the DaemonSet's /run/peregrine).
const AGENT_SOCK: &str = "/run/peregrine/agent/agent.sock";

/// The agent's status over its socket, if it answers.
fn agent_status() -> Option<serde_json::Value> {
    peregrine_agent::control::request(
        Path::new(AGENT_SOCK),
        &peregrine_agent::control::Request::Status,
    )
    .ok()?
    .status
}

/// The host's router ports and the packets each one forwarded.
fn router_rx() -> Vec<(String, u64)> {
    let o = sh(
        &[env!("CARGO_BIN_EXE_peregrine"), "router", "stats", "--json"],
        Duration::from_secs(20),
    );
    if !o.status.success() {
        return Vec::new();
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["ports"]
        .as_array()
        .map(|ports| {
            ports
                .iter()
                .map(|p| {
                    let rx = p["rx"]["forward"]["packets"].as_u64().unwrap_or(0);
                    (p["port"].as_str().unwrap_or("").to_string(), rx)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn rx_of(ports: &[(String, u64)], port: &str) -> u64 {
    ports
        .iter()
        .find(|p| p.0 == port)
        .map(|p| p.1)
        .unwrap_or_else(|| panic!("{port} is not a router port: {ports:?}"))
}

/// Router attachments in the host's namespace (others' are not ours).
fn host_router_attachments() -> Vec<serde_json::Value> {
    let me = peregrine_host::netns::cookie().unwrap();
    let o = sh(
        &[env!("CARGO_BIN_EXE_peregrine"), "router", "list", "--json"],
        Duration::from_secs(20),
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["attachments"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a["netns_cookie"].as_u64() == Some(me))
        .collect()
}

fn link_exists(name: &str) -> bool {
    sh(&["ip", "link", "show", name], Duration::from_secs(5))
        .status
        .success()
}

/// The manifests of deploy/kubernetes with the node's CNI directories and
/// host-local's data directory moved into the cluster's directory (the
/// test's containerd reads them there; hostPath can point anywhere).
fn manifests(c: &Cluster) -> PathBuf {
    let out = c.dir.join("manifests");
    std::fs::create_dir_all(&out).unwrap();
    let src = root().join("deploy/kubernetes");
    let mut names: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    assert!(names.len() >= 4, "deploy/kubernetes: {names:?}");
    let d = c.dir.display();
    for n in names {
        let t = std::fs::read_to_string(src.join(&n))
            .unwrap()
            .replace("path: /opt/cni/bin", &format!("path: {d}/cni/bin"))
            .replace("path: /etc/cni/net.d", &format!("path: {d}/cni/net.d"))
            .replace(
                "\"dataDir\": \"/var/lib/cni/networks\"",
                &format!("\"dataDir\": \"{d}/ipam\""),
            )
            // No kube-proxy here: the API server at its own address.
            .replace(
                "nodes_from = \"kubernetes\"",
                &format!("nodes_from = \"kubernetes\"\n    api_server = \"{NODE_IP}:6443\""),
            );
        std::fs::write(out.join(n), t).unwrap();
    }
    out
}

/// A second node as its kubelet would register it: its pod CIDR and its
/// InternalIP (on `HostLink`'s subnet). No kubelet runs for it: it stays
/// NotReady, which routing does not look at.
const NODE2: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: pg-node-2, labels: {peregrine.io/test: node2}}
spec:
  podCIDR: 198.18.241.0/24
  podCIDRs: [198.18.241.0/24]
status:
  addresses:
  - {type: InternalIP, address: 198.18.251.2}
"#;

/// A veth pair in the host's namespace with an address on one end: a
/// link the other node's address is on. Removed when dropped.
struct HostLink(&'static str);

impl HostLink {
    fn add(a: &'static str, b: &'static str, addr: &str) -> HostLink {
        let _ = Command::new("ip")
            .args(["link", "del", a])
            .stderr(std::process::Stdio::null())
            .status();
        for args in [
            vec!["link", "add", a, "type", "veth", "peer", "name", b],
            vec!["addr", "add", addr, "dev", a],
            vec!["link", "set", a, "up"],
            vec!["link", "set", b, "up"],
        ] {
            let st = Command::new("ip").args(&args).status().unwrap();
            assert!(st.success(), "ip {args:?}");
        }
        HostLink(a)
    }
}

impl Drop for HostLink {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", self.0]).status();
    }
}

/// `ip route show DST` in the host's namespace (empty: no route).
fn route_to(dst: &str) -> String {
    let o = Command::new("ip")
        .args(["route", "show", dst])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// 4 pods of the peregrine image (busybox + peregrine): ping and nc from
/// busybox, `peregrine io` for UDP (its sender resolves neighbours through
/// netlink: NET_ADMIN), a TCP server on 5000 answering "tcp-ok".
const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: peregrine.local/peregrine:dev
        imagePullPolicy: Never
        securityContext: {capabilities: {add: ["NET_ADMIN"]}}
        command: ["/bin/sh", "-c", "nc -ll -p 5000 -e /bin/echo tcp-ok & exec sleep 100000"]
"#;

/// Two pods of Debian's iperf3 (image built by images.sh): a server and a
/// client that waits for `kubectl exec`.
const IPERF: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: iperf3-server, namespace: default, labels: {app: iperf3}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: iperf3, image: "peregrine.local/iperf3:1", imagePullPolicy: Never, command: ["/usr/bin/iperf3", "-s", "-p", "5201"]}
---
apiVersion: v1
kind: Pod
metadata: {name: iperf3-client, namespace: default, labels: {app: iperf3}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: iperf3, image: "peregrine.local/iperf3:1", imagePullPolicy: Never, command: ["/bin/sleep", "100000"]}
---
apiVersion: v1
kind: Pod
metadata:
  name: iperf3-limited
  namespace: default
  labels: {app: iperf3}
  annotations: {kubernetes.io/egress-bandwidth: 10M}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: iperf3, image: "peregrine.local/iperf3:1", imagePullPolicy: Never, command: ["/bin/sleep", "100000"]}
"#;

/// iperf3 TCP from `client` to `server` for `secs` seconds: the goodput
/// the server received, bit/s.
fn iperf3_goodput(c: &Cluster, client: &str, server: &str, secs: u32) -> f64 {
    let t = secs.to_string();
    let o = exec(
        c,
        client,
        &["iperf3", "-c", server, "-p", "5201", "-t", &t, "-J"],
    );
    let iv: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("iperf3: {e}: {}{}", text(&o.stdout), text(&o.stderr)));
    iv["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .unwrap_or_else(|| panic!("iperf3 {client} -> {server}: {iv:#}"))
}

/// Running web pods: (name, IP).
fn web_pods(c: &Cluster) -> Vec<(String, String)> {
    let v = c.get(&["pods", "-l", "app=web"]);
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .filter_map(|p| {
            Some((
                p["metadata"]["name"].as_str()?.to_string(),
                p["status"]["podIP"].as_str()?.to_string(),
            ))
        })
        .collect()
}

fn exec(c: &Cluster, pod: &str, cmd: &[&str]) -> std::process::Output {
    let mut a = vec!["exec", pod, "--"];
    a.extend_from_slice(cmd);
    c.kubectl(&a)
}

#[test]
fn full_tier_daemonset_pods_through_the_router_and_a_clean_host() {
    if !peregrine_testbed::testing::privileged_here() {
        return;
    }
    let t0 = Instant::now();
    let mut lap = Instant::now();
    let mut step = |what: &str| {
        eprintln!(
            "k8s: {what}: {:.1} s (total {:.1} s)",
            lap.elapsed().as_secs_f64(),
            t0.elapsed().as_secs_f64()
        );
        lap = Instant::now();
    };
    for (f, how) in [
        ("k8s/v1.34.0/bin/.done", "bash scripts/k8s/build.sh"),
        ("etcd/usr/bin/etcd", "bash scripts/setup.sh"),
    ] {
        assert!(cache().join(f).exists(), "no {f}: {how}");
    }
    // The images of the binaries under test (rebuilt only when they changed).
    let o = sh(
        &[
            "bash",
            root().join("scripts/k8s/images.sh").to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert!(o.status.success(), "images.sh: {}", text(&o.stderr));
    // Offline validation against the 1.34 schemas.
    let validate = Path::new("/opt/peregrine/k8s-venv/bin/kubernetes-validate");
    assert!(
        validate.exists(),
        "no kubernetes-validate: bash scripts/setup.sh"
    );
    let files: Vec<String> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .unwrap()
        .flatten()
        .map(|e| e.path().display().to_string())
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    let mut a = vec![validate.to_str().unwrap(), "-k", "1.34.0", "--strict"];
    a.extend(files.iter().map(String::as_str));
    let o = sh(&a, Duration::from_secs(60));
    assert!(
        o.status.success(),
        "kubernetes-validate: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    step("images, kubernetes-validate");

    let dir = std::env::temp_dir().join("peregrine-k8s");
    // A killed earlier run: its record is in `dir`, and `up` takes it down
    // first; the host as it is then is what must come back.
    let before_record = dir.join("before/complete").exists();
    if before_record {
        let o = sh(
            &[
                "bash",
                root().join("scripts/k8s/cluster.sh").to_str().unwrap(),
                "down",
                dir.to_str().unwrap(),
            ],
            Duration::from_secs(180),
        );
        eprintln!(
            "k8s: an earlier run's cluster taken down: {}",
            text(&o.stderr)
        );
    }
    let host = HostState::now();
    let mut c = Cluster::up(&dir);
    step("cluster up");

    // 1. The manifests: the namespace, a server-side dry run, then for real.
    let m = manifests(&c);
    let ns_file = m.join("00-namespace.yaml");
    c.kubectl_ok(&["apply", "-f", ns_file.to_str().unwrap()]);
    let dry = c.kubectl_ok(&["apply", "--dry-run=server", "-f", m.to_str().unwrap()]);
    assert!(
        dry.contains("daemonset.apps/peregrine-agent created (server dry run)"),
        "{dry}"
    );
    c.kubectl_ok(&["apply", "-f", m.to_str().unwrap()]);
    c.kubectl_ok(&[
        "-n",
        "peregrine-system",
        "rollout",
        "status",
        "ds/peregrine-agent",
        "--timeout=90s",
    ]);
    let conflist = c.dir.join("cni/net.d/10-peregrine.conflist");
    let cf: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&conflist).unwrap()).unwrap();
    assert_eq!(cf["plugins"][0]["type"], "peregrine-cni", "{cf:#}");
    assert_eq!(cf["plugins"][0]["ipam"]["type"], "host-local", "{cf:#}");
    assert!(c.dir.join("cni/bin/peregrine-cni").exists());
    c.wait("the agent answers on its socket", 30, || {
        agent_status().is_some()
    });
    c.wait("the node is Ready", 60, || {
        let n = c.get(&["node", NODE]);
        n["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|x| x["type"] == "Ready" && x["status"] == "True")
        })
    });
    step("DaemonSet ready, conflist installed");

    // The other nodes from their Node objects (docs/KUBERNETES.md): a
    // second Node, made as its kubelet would register it, with a pod CIDR
    // and an InternalIP on a link of this host. The agent lists it with
    // its ServiceAccount and routes that node's pods through it (its own
    // route protocol, 176); the route goes with the Node.
    let _link = HostLink::add("pgk8s-n2a", "pgk8s-n2b", "198.18.251.1/24");
    let node2 = c.dir.join("node2.yaml");
    std::fs::write(&node2, NODE2).unwrap();
    c.kubectl_ok(&["create", "-f", node2.to_str().unwrap()]);
    c.wait("the agent routes to node 2's pods through it", 30, || {
        let r = route_to("198.18.241.0/24");
        r.contains("via 198.18.251.2") && r.contains("proto 176")
    });
    let st = agent_status().unwrap();
    assert!(
        st["kubernetes"]["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["name"] == "pg-node-2")),
        "{st:#}"
    );
    assert!(st["kubernetes"]["error"].is_null(), "{st:#}");
    c.kubectl_ok(&["delete", "node", "pg-node-2"]);
    c.wait("the route goes with the Node", 30, || {
        route_to("198.18.241.0/24").is_empty()
    });
    drop(_link);
    step("Node objects: a route to another node's pods, and away again");

    // 2. A Deployment of 4 pods, Running, with IPs from the pod CIDR.
    let web = c.dir.join("web.yaml");
    std::fs::write(&web, WEB).unwrap();
    c.kubectl_ok(&["apply", "-f", web.to_str().unwrap()]);
    let iperf = c.dir.join("iperf3.yaml");
    std::fs::write(&iperf, IPERF).unwrap();
    c.kubectl_ok(&["apply", "-f", iperf.to_str().unwrap()]);
    c.kubectl_ok(&["rollout", "status", "deploy/web", "--timeout=90s"]);
    let mut pods = Vec::new();
    c.wait("4 web pods Running", 60, || {
        pods = web_pods(&c);
        pods.len() == 4
    });
    for (name, ip) in &pods {
        assert!(ip.starts_with(POD_PREFIX), "{name}: {ip}");
    }
    c.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "pod/iperf3-server",
        "pod/iperf3-client",
        "pod/iperf3-limited",
        "--timeout=90s",
    ]);
    step("4 web pods and 3 iperf3 pods Running");

    // The agent holds them under their Kubernetes names; their host
    // interfaces are router ports.
    let mut iface = std::collections::HashMap::new();
    c.wait("the agent holds the 4 pods", 30, || {
        let s = agent_status().unwrap_or_default();
        iface.clear();
        for p in s["pods"].as_array().cloned().unwrap_or_default() {
            if p["pod_namespace"] == "default" {
                iface.insert(
                    p["pod_name"].as_str().unwrap_or("").to_string(),
                    p["host_iface"].as_str().unwrap_or("").to_string(),
                );
            }
        }
        pods.iter().all(|(n, _)| iface.contains_key(n))
    });
    let ports = router_rx();
    for (n, _) in &pods {
        assert!(
            ports.iter().any(|p| p.0 == iface[n]),
            "{n}'s {} in {ports:?}",
            iface[n]
        );
    }

    // The other order: node 2's Node object arrives while the pods run, and
    // goes while they run. Its route comes and goes; the pods' own routes
    // and ports stay, and they reach each other throughout.
    let ping = |from: &(String, String), to: &(String, String), when: &str| {
        let o = exec(
            &c,
            &from.0,
            &["ping", "-c", "3", "-i", "0.2", "-W", "2", &to.1],
        );
        assert!(
            o.status.success(),
            "{when}: ping {} -> {}: {}{}",
            from.0,
            to.1,
            text(&o.stdout),
            text(&o.stderr)
        );
    };
    let link2 = HostLink::add("pgk8s-n2a", "pgk8s-n2b", "198.18.251.1/24");
    c.kubectl_ok(&["create", "-f", node2.to_str().unwrap()]);
    c.wait("node 2's route, pods running", 30, || {
        let r = route_to("198.18.241.0/24");
        r.contains("via 198.18.251.2") && r.contains("proto 176")
    });
    ping(&pods[0], &pods[1], "node 2 added while pods run");
    c.kubectl_ok(&["delete", "node", "pg-node-2"]);
    c.wait("node 2's route goes, pods running", 30, || {
        route_to("198.18.241.0/24").is_empty()
    });
    drop(link2);
    ping(&pods[1], &pods[0], "node 2 deleted while pods run");
    let held = agent_status().unwrap()["pods"].as_array().map_or(0, |p| {
        p.iter().filter(|p| p["pod_namespace"] == "default").count()
    });
    assert!(held >= 4, "the agent still holds the web pods ({held})");
    let after_node = router_rx();
    for (n, _) in &pods {
        assert!(
            after_node.iter().any(|p| p.0 == iface[n]),
            "{n}'s port after node 2 came and went: {after_node:?}"
        );
    }
    step("Node objects while pods run: node 2 came and went, pods untouched");

    // 3. Ping, TCP and UDP between pods; the senders' router ports count them.
    let (p0, p1, p2, p3) = (&pods[0], &pods[1], &pods[2], &pods[3]);
    ping(p0, p1, "pods");
    ping(p2, p3, "pods");
    let o = exec(
        &c,
        &p0.0,
        &["sh", "-c", &format!("echo hi | nc -w 3 {} 5000", p2.1)],
    );
    assert_eq!(
        text(&o.stdout).trim(),
        "tcp-ok",
        "TCP {} -> {}: {}",
        p0.0,
        p2.1,
        text(&o.stderr)
    );
    let sent_before = rx_of(&router_rx(), &iface[&p3.0]);
    let listen = format!("{}:5001", p1.1);
    let recv = c.kubectl_spawn(&[
        "exec",
        &p1.0,
        "--",
        "peregrine",
        "io",
        "recv",
        "--path",
        "udp",
        "--listen",
        &listen,
        "--count",
        "200",
        "--duration",
        "20s",
        "--json",
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    let o = exec(
        &c,
        &p3.0,
        &[
            "peregrine",
            "io",
            "send",
            "--path",
            "udp",
            "--to",
            &listen,
            "--count",
            "200",
            "--rate",
            "2k",
        ],
    );
    assert!(
        o.status.success(),
        "io send: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let r = recv.wait_with_output().unwrap();
    let rv: serde_json::Value = serde_json::from_slice(&r.stdout)
        .unwrap_or_else(|e| panic!("io recv: {e}: {}{}", text(&r.stdout), text(&r.stderr)));
    assert_eq!(rv["packets"], 200, "UDP {} -> {}: {rv:#}", p3.0, p1.0);
    assert_eq!(rv["corrupt"], 0, "{rv:#}");
    let after = router_rx();
    // The router forwarded them (the first may go through the kernel to
    // resolve the receiver's MAC: pass_no_neigh).
    let sent = rx_of(&after, &iface[&p3.0]) - sent_before;
    assert!(
        sent >= 199,
        "{}'s port {} forwarded {sent} of 200 datagrams",
        p3.0,
        iface[&p3.0]
    );
    for (n, _) in [p0, p2] {
        assert!(
            rx_of(&after, &iface[n]) > 0,
            "{n}'s port forwarded nothing: {after:?}"
        );
    }
    let st = agent_status().unwrap();
    let names: Vec<&str> = st["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["pod_name"].as_str())
        .collect();
    step(&format!(
        "ping, TCP, UDP between pods; agent pods {names:?}"
    ));

    // iperf3 TCP between its two pods.
    let server = c.get(&["pod", "iperf3-server"]);
    let sip = server["status"]["podIP"].as_str().unwrap().to_string();
    assert!(sip.starts_with(POD_PREFIX), "iperf3-server: {sip}");
    let bps = iperf3_goodput(&c, "iperf3-client", &sip, 2);
    assert!(bps > 10e6, "iperf3 TCP between pods: {bps} bit/s");
    step(&format!("iperf3 TCP pod to pod: {:.2} Gbit/s", bps / 1e9));

    // 4. A pod with kubernetes.io/egress-bandwidth: 10M: the agent holds
    // its rate (the runtime's runtimeConfig, through the plugin), shapes
    // the pod's eth0 to it, and its TCP goodput is within 10% of it (9 to
    // 11 Mbit/s; payload is at most 0.956 of what the shaper counts).
    let st = agent_status().unwrap();
    let limited = st["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pod_name"] == "iperf3-limited")
        .cloned()
        .unwrap_or_else(|| panic!("iperf3-limited not at the agent: {st:#}"));
    assert_eq!(limited["egress_rate"], 10_000_000u64, "{limited:#}");
    let limited_bps = iperf3_goodput(&c, "iperf3-limited", &sip, 8);
    assert!(
        (9e6..=11e6).contains(&limited_bps),
        "egress-bandwidth 10M: iperf3 TCP goodput {limited_bps} bit/s"
    );
    c.kubectl_ok(&[
        "delete",
        "-f",
        iperf.to_str().unwrap(),
        "--wait=true",
        "--timeout=60s",
    ]);
    step(&format!(
        "egress-bandwidth 10M: {:.2} Mbit/s TCP",
        limited_bps / 1e6
    ));

    // 6. The agent's pod killed while two pods ping: no ping is lost, and
    // the DaemonSet's next agent adopts the node as it is (the same pods,
    // the same router programs).
    let progs = |a: Vec<serde_json::Value>| -> Vec<(String, u64)> {
        let mut v: Vec<_> = a
            .iter()
            .map(|x| {
                (
                    x["iface"].as_str().unwrap_or("").to_string(),
                    x["prog_id"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = progs(host_router_attachments());
    let pods_of = |s: serde_json::Value| -> Vec<String> {
        let mut v: Vec<String> = s["pods"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p["pod_name"].as_str().map(String::from))
            .collect();
        v.sort();
        v
    };
    let held = pods_of(agent_status().unwrap());
    let agent_pod = || -> Option<String> {
        c.get(&["pods", "-n", "peregrine-system"])["items"]
            .as_array()?
            .iter()
            .find(|p| {
                p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .and_then(|p| p["metadata"]["name"].as_str().map(String::from))
    };
    let old_agent = agent_pod().expect("the agent's pod");
    let mut ping = c.kubectl_spawn(&[
        "exec", &p1.0, "--", "ping", "-c", "80", "-i", "0.1", "-W", "1", &p2.1,
    ]);
    std::thread::sleep(Duration::from_secs(1));
    c.kubectl_ok(&[
        "-n",
        "peregrine-system",
        "delete",
        "pod",
        &old_agent,
        "--wait=true",
        "--timeout=60s",
    ]);
    c.wait("the DaemonSet's next agent answers", 60, || {
        agent_pod().is_some_and(|p| p != old_agent) && agent_status().is_some()
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while ping.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "ping across the agent's restart hangs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = ping.wait_with_output().unwrap();
    let summary = text(&out.stdout);
    assert!(
        out.status.success() && summary.contains("80 packets transmitted, 80 packets received"),
        "ping {} -> {} across the agent's restart: {summary}{}",
        p1.0,
        p2.1,
        text(&out.stderr)
    );
    assert_eq!(
        pods_of(agent_status().unwrap()),
        held,
        "the pods the next agent holds"
    );
    assert_eq!(
        progs(host_router_attachments()),
        before,
        "the router programs, adopted (not reattached)"
    );
    step("the agent's pod killed: 80 of 80 pings, the node adopted");

    // 5. A deleted pod leaves no veth, no router port, nothing at the agent.
    let gone = &p0.0;
    let gone_if = iface[gone].clone();
    c.kubectl_ok(&["delete", "pod", gone, "--wait=true", "--timeout=60s"]);
    c.wait("the deleted pod's veth goes", 30, || !link_exists(&gone_if));
    let st = agent_status().unwrap();
    assert!(
        !st["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pod_name"] == gone.as_str()),
        "{gone} still at the agent: {st:#}"
    );
    assert!(
        !router_rx().iter().any(|p| p.0 == gone_if),
        "{gone_if} still a router port"
    );
    step("a pod deleted");

    // 7. The Deployment and then the manifests deleted: no pods at the
    // agent, no router in the host's namespace, the agent gone. The
    // plugin and the conflist stay installed (deploy/kubernetes: pods made
    // while no agent runs fail their ADD; DEL works without it).
    c.kubectl_ok(&["delete", "deploy", "web", "--wait=true", "--timeout=60s"]);
    c.wait("the web pods go", 60, || {
        c.get(&["pods", "-l", "app=web"])["items"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    });
    c.wait("the agent holds no pod", 30, || {
        agent_status().is_some_and(|s| s["pods"].as_array().is_some_and(|a| a.is_empty()))
    });
    let ifaces: Vec<String> = iface.values().cloned().collect();
    c.kubectl_ok(&[
        "delete",
        "-f",
        m.to_str().unwrap(),
        "--wait=true",
        "--timeout=90s",
    ]);
    c.wait("the agent's pod goes", 60, || {
        c.get(&["pods", "-n", "peregrine-system"])["items"]
            .as_array()
            .is_some_and(|a| a.is_empty())
    });
    c.wait("the agent stops answering", 30, || agent_status().is_none());
    let left = host_router_attachments();
    assert!(
        left.is_empty(),
        "router pins left in the host's namespace: {left:?}"
    );
    for i in &ifaces {
        assert!(!link_exists(i), "{i} left");
    }
    assert!(
        conflist.exists(),
        "the conflist stays installed (by design)"
    );
    step("Deployment and DaemonSet deleted, the node clean");

    // 8. The cluster gone: the host as before.
    let mut alive = c.running();
    assert!(!alive.is_empty(), "the record of the cluster's processes");
    c.down();
    step("cluster down");
    alive = c.running();
    assert!(alive.is_empty(), "left running: {alive:#?}");
    let now = HostState::now();
    assert_eq!(now.sysctls, host.sysctls, "sysctls");
    assert_eq!(now.chains, host.chains, "iptables chains");
    assert_eq!(now.cgroups, host.cgroups, "k8s.io cgroups");
    assert_eq!(now.lo, host.lo, "lo's addresses");
    assert_eq!(now.dirs, host.dirs, "directories the cluster makes");
    assert!(!now.lo.contains(NODE_IP));
    let mounts = mounts_under(&c.dir);
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    assert!(!link_exists("peregrine0"), "the bridge left");
    assert!(!Path::new(STATE).exists(), "{STATE} left");
    assert!(!c.dir.join("before").exists(), "the record is consumed");
    eprintln!("k8s: total {:.1} s", t0.elapsed().as_secs_f64());
}
