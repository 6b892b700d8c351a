//! `peregrine agent` as users run it: namespaces made with `ip`, the agent
//! started in the background through `ip netns exec`, its declaration
//! applied, changed and broken; iperf3, ping and Python clients through
//! what it composes; the agent killed with SIGKILL and started again.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use peregrine_agent::control::{self, Reply, Request};
use peregrine_agent::pods::{Bandwidth, PodKey, PodPort};

/// An agent running in the router namespace of a `Topo`, with its own run
/// directory (the default one is the host's). Dropping it applies an
/// empty declaration (everything it made goes) and stops it.
struct Agent {
    ns: String,
    dir: PathBuf,
    config: PathBuf,
    metrics: String,
    child: Option<Child>,
}

impl Agent {
    fn start(ns: &str, dir: &Path, text: &str) -> Agent {
        let config = dir.join("node.toml");
        std::fs::write(&config, text).unwrap();
        let mut a = Agent {
            ns: ns.to_string(),
            dir: dir.to_path_buf(),
            config,
            metrics: "127.0.0.1:9464".into(),
            child: None,
        };
        a.spawn();
        a
    }

    fn spawn(&mut self) {
        self.launch();
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if self
                .try_status()
                .is_some_and(|s| s["reconciles"].as_u64() > Some(0))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the agent did not answer within 10 s: {}", self.log());
    }

    /// Starts the agent without waiting for it.
    fn launch(&mut self) {
        self.child = Some(spawn_agent(
            &self.ns,
            &self.config,
            &self.dir.join("run"),
            &self.metrics,
            &self.dir.join("agent.log"),
        ));
    }

    /// `peregrine ARGS` in the agent's namespace, talking to this agent.
    fn pg(&self, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_peregrine")])
            .args(args)
            .env("PEREGRINE_AGENT_DIR", self.dir.join("run"))
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap()
    }

    fn try_status(&self) -> Option<serde_json::Value> {
        let o = self.pg(&["status", "--json"]);
        o.status
            .success()
            .then(|| serde_json::from_slice(&o.stdout).ok())
            .flatten()
    }

    fn status(&self) -> serde_json::Value {
        self.try_status()
            .unwrap_or_else(|| panic!("status: {}", self.log()))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// Writes `text` to a file and applies it.
    fn apply(&self, name: &str, text: &str) -> Output {
        let f = self.dir.join(name);
        std::fs::write(&f, text).unwrap();
        self.pg(&["apply", f.to_str().unwrap()])
    }

    /// Waits (at most `secs`) until `f` holds for the agent's status.
    fn wait_for(&self, secs: u64, what: &str, f: impl Fn(&serde_json::Value) -> bool) {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if f(&self.status()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{what}: not within {secs} s: {:#}\n{}",
            self.status(),
            self.log()
        );
    }

    /// A pod request on the agent's control socket, as the CNI plugin
    /// sends it.
    fn pods(&self, req: &Request) -> Reply {
        control::request(&self.dir.join("run").join("agent.sock"), req)
            .unwrap_or_else(|e| panic!("{e}: {}", self.log()))
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// An HTTP GET of `path` on the agent's endpoint: (status line, body).
    fn http(&self, path: &str) -> (String, String) {
        let url = format!("http://{}{path}", self.metrics);
        let o = sh_in(
            &self.ns,
            &["curl", "-s", "-i", "--max-time", "3", &url],
            Duration::from_secs(5),
        );
        let t = text(&o.stdout);
        let (head, body) = t.split_once("\r\n\r\n").unwrap_or((&t, ""));
        (
            head.lines().next().unwrap_or("").to_string(),
            body.to_string(),
        )
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.pods(&Request::PodGc { keep: Vec::new() });
            let _ = self.apply("empty.toml", "");
        }
        if let Some(mut c) = self.child.take() {
            peregrine_host::signals::terminate(&mut c, Duration::from_secs(5));
        }
    }
}

const ROUTER_TC: &str = "[router]\nports = [\"a1\", \"b0\"]\nhook = \"tc\"\n";

const POLICER_A1: &str = "
[[qos]]
iface = \"a1\"
hook = \"tc\"
[[qos.rule]]
proto = \"udp\"
rate = \"20Mbit\"
burst = \"32KB\"
";

fn changes(s: &serde_json::Value) -> Vec<String> {
    s["changes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The router's ports and the programs they run, as `router list` says.
fn router_programs(ns: &str) -> Vec<(String, u64)> {
    let v = json(&pg_in(ns, &["router", "list", "--json"]), "router list");
    let mut out: Vec<(String, u64)> = v["attachments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["namespace"] == ns && r["stale"].as_bool() != Some(true))
        .filter_map(|r| Some((r["iface"].as_str()?.to_string(), r["prog_id"].as_u64()?)))
        .collect();
    out.sort();
    out
}

/// A restarted agent adopted the node as it was: the router's programs of
/// `ns` are still `before` and its status `s` reports no change.
fn assert_adopted(s: &serde_json::Value, ns: &str, before: &[(String, u64)]) {
    assert_eq!(
        router_programs(ns),
        before,
        "the new agent re-attached the router"
    );
    assert!(
        changes(s).is_empty(),
        "the new agent changed something instead of adopting: {:?}",
        changes(s)
    );
}

/// Router in the tc order with the policer: traffic is policed AND routed
/// (both components count it), in the order the declaration cannot get
/// wrong; the node's endpoint carries both; a SIGKILLed agent's successor
/// adopts the data plane (same programs, nothing re-attached) while pings
/// cross it without a loss.
#[test]
fn agent_composes_router_and_policer_and_adopts_after_kill() {
    let Some(t) = Topo::privileged_up("agc") else {
        return;
    };
    let dir = tmp("agent-compose");
    let mut a = Agent::start(&t.ns("R"), &dir, &format!("{ROUTER_TC}{POLICER_A1}"));
    a.wait_for(10, "ready", |s| s["ready"] == true);
    let s = a.status();
    let order = stages_on(&s, "a1");
    assert_eq!(order, ["policer (tc)", "router (tc)"], "{s:#}");
    assert!(
        t.ping("198.18.2.1"),
        "A reaches B through the agent's router"
    );
    let out = t.iperf3(&["-c", "198.18.2.1", "-u", "-b", "100M", "-t", "3"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = &v["end"]["sum"];
    let got = sum["bits_per_second"].as_f64().unwrap()
        * (1.0 - sum["lost_percent"].as_f64().unwrap() / 100.0);
    println!(
        "UDP 100 Mbit/s offered through policer (20 Mbit/s) + router: {:.2} Mbit/s received",
        got / 1e6
    );
    assert!(
        got > 20e6 * 0.95 && got < 20e6 * 1.01,
        "policed to 20 Mbit/s behind the router: {got}"
    );
    let (line, body) = a.http("/metrics");
    assert!(line.contains("200"), "{line}");
    let count = |needle: &str| -> u64 {
        body.lines()
            .filter(|l| l.starts_with("peregrine_node_packets_total{") && l.contains(needle))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let (forwarded, exceeded) = (
        count("component=\"router\",port=\"a1\",action=\"forward\""),
        count("component=\"policer\",iface=\"a1\",rule=\"0\",verdict=\"exceed\""),
    );
    println!("router a1 forward {forwarded}, policer a1 exceed {exceeded}");
    assert!(forwarded > 1000 && exceeded > 1000, "{body}");
    promtool_check(&body, "the agent's /metrics");
    assert!(a.http("/healthz").0.contains("200"));
    assert!(a.http("/readyz").0.contains("200"));

    // kill -9, pings crossing, a new agent: nothing re-attached.
    let before = router_programs(&t.ns("R"));
    assert_eq!(before.len(), 2, "{before:?}");
    let pinger = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.ns("A"),
            "ping",
            "-q",
            "-c",
            "200",
            "-i",
            "0.01",
            "-W",
            "1",
            "198.18.2.1",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    a.kill9();
    std::thread::sleep(Duration::from_millis(300));
    a.spawn();
    let ping = pinger.wait_with_output().unwrap();
    let ping = text(&ping.stdout);
    println!("{ping}");
    assert!(
        ping.contains(" 0% packet loss"),
        "pings through a kill -9 and restart: {ping}"
    );
    let s = a.status();
    assert_adopted(&s, &t.ns("R"), &before);
    assert_eq!(s["ready"], true, "{s:#}");
}

/// `tc_attach = "cls"`: the agent's router ports at tc are cls_bpf
/// filters, after the policer (tcx, first): UDP is policed to its rate
/// and routed; a filter deleted by hand is put back (drift); changing the declaration to tcx re-attaches every port as
/// a tcx link (and back), each change said in one line; an empty
/// declaration leaves the ports as the agent found them (no clsact).
#[test]
fn agent_router_ports_as_cls_filters_are_policed_first_and_change_way() {
    let Some(t) = Topo::privileged_up("agcl") else {
        return;
    };
    let r = t.ns("R");
    let cls = format!("{ROUTER_TC}tc_attach = \"cls\"\n{POLICER_A1}");
    let dir = tmp("agent-cls");
    let a = Agent::start(&r, &dir, &cls);
    a.wait_for(10, "ready", |s| s["ready"] == true);
    let hooks = |want: &str| {
        let v = json(&pg_in(&r, &["router", "list", "--json"]), "router list");
        let rows: Vec<_> = v["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| x["namespace"] == r.as_str())
            .map(|x| x["hook"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(rows, vec![want.to_string(); 2], "{v}");
    };
    hooks("tc (cls_bpf)");
    assert!(t.ping("198.18.2.1"), "A reaches B through the cls router");
    let out = t.iperf3(&["-c", "198.18.2.1", "-u", "-b", "100M", "-t", "2"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sum = &v["end"]["sum"];
    let got = sum["bits_per_second"].as_f64().unwrap()
        * (1.0 - sum["lost_percent"].as_f64().unwrap() / 100.0);
    assert!(
        got > 20e6 * 0.95 && got < 20e6 * 1.01,
        "policed to 20 Mbit/s before the cls router: {got}"
    );
    // Drift: b0's filter deleted by hand (`tc filter del`) is found in
    // the kernel (its record alone still reads live) and put back.
    let o = sh_in(
        &r,
        &[
            "tc", "filter", "del", "dev", "b0", "ingress", "pref", "65280",
        ],
        Duration::from_secs(5),
    );
    ok(&o, "tc filter del by hand");
    a.wait_for(5, "b0's filter put back", |s| {
        s["repairs"].as_u64() >= Some(1)
            && s["router"]["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|x| x[0] == "b0" && x[1] == true))
    });
    let f = sh_in(
        &r,
        &["tc", "filter", "show", "dev", "b0", "ingress"],
        Duration::from_secs(5),
    );
    assert!(text(&f.stdout).contains("peregrine"), "{}", text(&f.stdout));
    assert!(t.ping("198.18.2.1"), "routing again after the repair");

    let o = a.apply("tcx.toml", &format!("{ROUTER_TC}{POLICER_A1}"));
    ok(&o, "apply tc_attach tcx");
    assert!(
        text(&o.stdout).contains("~ router tc_attach cls -> tcx"),
        "{}",
        text(&o.stdout)
    );
    a.wait_for(10, "ready as tcx", |s| s["ready"] == true);
    hooks("tc");
    assert!(t.ping("198.18.2.1"), "A reaches B through the tcx router");
    ok(&a.apply("cls.toml", &cls), "apply tc_attach cls again");
    a.wait_for(10, "ready as cls", |s| s["ready"] == true);
    hooks("tc (cls_bpf)");
    ok(&a.apply("empty.toml", ""), "apply an empty declaration");
    a.wait_for(10, "nothing left", |_| router_programs(&r).is_empty());
    for port in ["a1", "b0"] {
        let q = sh_in(
            &r,
            &["tc", "-j", "qdisc", "show", "dev", port],
            Duration::from_secs(5),
        );
        assert!(
            !text(&q.stdout).contains("clsact"),
            "{port}: {}",
            text(&q.stdout)
        );
    }
}

/// The user's state is theirs: a router and a policer attached by hand
/// A router none of whose ports runs any more (attached by hand, its
/// interfaces deleted since: only its pins are left) does not lock the
/// agent out: its stale pins go, and the declared router attaches.
#[test]
fn agent_takes_away_a_dead_routers_stale_pins() {
    let ns = "agstale";
    let _g = Namespaces::add(&[ns]);
    for (a, b) in [("x0", "x1"), ("y0", "y1")] {
        ip(&[
            "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b,
        ]);
        ip(&["-n", ns, "link", "set", a, "up"]);
        ip(&["-n", ns, "link", "set", b, "up"]);
    }
    ok(
        &pg_in(ns, &["router", "attach", "x0", "--hook", "tc"]),
        "router attach x0",
    );
    ip(&["-n", ns, "link", "del", "x0"]);
    let dir = tmp("agent-stale");
    let a = Agent::start(ns, &dir, "[router]\nports = [\"y0\"]\nhook = \"tc\"\n");
    a.wait_for(10, "y0 a live router port", |s| {
        s["router"]["ports"]
            .as_array()
            .is_some_and(|p| p.iter().any(|x| x[0] == "y0" && x[1] == true))
    });
    let log = a.log();
    assert!(
        log.contains("stale pins of a router with no live port removed (x0)"),
        "{log}"
    );
    let s = a.status();
    assert!(s["errors"].as_array().unwrap().is_empty(), "{s:#}");
}

/// (one-shot commands, before the agent starts) are left running when
/// the agent's declaration names the same ports, with an error line that
/// says why, and still run after the agent applies an empty declaration.
#[test]
fn agent_leaves_a_hand_made_router_and_policer_alone() {
    let Some(t) = Topo::privileged_up("agh") else {
        return;
    };
    let r = t.ns("R");
    ok(
        &pg_in(&r, &["router", "attach", "a1", "b0"]),
        "router attach by hand",
    );
    let scratch = tmp("agent-hand-qos");
    let f = scratch.join("qos.toml");
    std::fs::write(
        &f,
        "[[rule]]\nproto = \"udp\"\nrate = \"20Mbit\"\nburst = \"32KB\"\n",
    )
    .unwrap();
    ok(
        &pg_in(&r, &["qos", "apply", f.to_str().unwrap(), "--iface", "a1"]),
        "qos apply by hand",
    );
    let before = router_programs(&r);
    assert_eq!(before.len(), 2, "{before:?}");
    let dir = tmp("agent-hand");
    let a = Agent::start(&r, &dir, &format!("{ROUTER_TC}{POLICER_A1}"));
    let s = a.status();
    let errors = s["errors"].to_string();
    assert!(errors.contains("router attached by hand"), "{s:#}");
    assert!(errors.contains("policer applied by hand"), "{s:#}");
    assert_eq!(s["ready"], false, "{s:#}");
    let o = a.apply("empty.toml", "");
    ok(&o, "apply an empty declaration");
    assert_eq!(
        router_programs(&r),
        before,
        "the agent touched the hand-made router"
    );
    let q = json(&pg_in(&r, &["qos", "list", "--json"]), "qos list");
    let live = q["policers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["iface"] == "a1" && p["stale"] == false && p["namespace"] == r.as_str());
    assert!(live, "the agent removed the hand-made policer: {q}");
    assert!(t.ping("198.18.2.1"), "the hand-made router still forwards");
}

/// Bad declarations: each one refused with one line per mistake naming
/// it, exit 2, and the running state and the agent's file unchanged.
#[test]
fn agent_refuses_bad_declarations_and_keeps_state() {
    let Some(t) = Topo::privileged_up("agb") else {
        return;
    };
    let dir = tmp("agent-bad");
    let good = format!("{ROUTER_TC}{POLICER_A1}");
    let a = Agent::start(&t.ns("R"), &dir, &good);
    a.wait_for(10, "ready", |s| s["ready"] == true);
    let before = a.status();
    let bad: &[(&str, &str)] = &[
        ("[router\nports = 1", "line 1"),
        ("[router]\nports = [\"a1\", \"a1\"]", "port a1 twice"),
        ("[router]\nports = \"a1\"", "ports is a list"),
        (
            "[cluster]\n[[cluster.node]]\nname = \"b\"\npod_cidr = \"198.18.81.1/24\"\naddress = \"198.18.90.2\"",
            "host bits set",
        ),
        ("[router]\nports = [\"a1\"]\nhook = \"sideways\"", "unknown hook"),
        ("[router]\nports = [\"a1\"]\nhook = \"tc\"\nmode = \"native\"", "hook \"tc\" takes none"),
        (
            "[router]\nports = [\"a1\"]\nhook = \"xdp\"\ntc_attach = \"cls\"",
            "hook \"xdp\" takes none",
        ),
        ("[router]\nports = [\"a1\"]\nspeed = 3", "unknown key \"speed\""),
        ("[[qos]]\n[[qos.rule]]\nrate = \"1M\"", "iface missing"),
        ("[[qos]]\niface = \"a1\"\n[[qos.rule]]\nrate = \"fast\"", "rate \"fast\""),
        (
            "[[qos]]\niface = \"a1\"\n[[qos.rule]]\nrate = \"1M\"\n[[qos]]\niface = \"a1\"\n[[qos.rule]]\nrate = \"2M\"",
            "on a1 twice",
        ),
        ("[[function]]\niface = \"b1\"\nbackend = \"pigeon\"", "pigeon"),
        ("[[function]]\nfunctions = \"7000=echo\"\nwarp = true", "--warp"),
        ("[[quic]]\nlisten = \"not-an-address\"", "not-an-address"),
        ("[extra]\nx = 1", "unknown section \"extra\""),
        (
            "[router]\nports = [\"a1\"]\n[[qos]]\niface = \"a1\"\nhook = \"xdp\"\n[[qos.rule]]\nrate = \"1M\"",
            "say hook = \"tc\" in [router]",
        ),
        (
            "[router]\nports = [\"a1\"]\nhook = \"xdp\"\n[[qos]]\niface = \"a1\"\nhook = \"xdp\"\n[[qos.rule]]\nrate = \"1M\"",
            "both need the XDP hook of a1",
        ),
        (
            "[router]\nports = [\"a1\"]\nhook = \"xdp\"\n[[qos]]\niface = \"a1\"\n[[qos.rule]]\nrate = \"1M\"",
            "router at XDP on a1 takes frames before the policer at tc there sees them",
        ),
        (
            "[[qos]]\niface = \"b1\"\n[[qos.rule]]\nrate = \"1M\"\n[[function]]\niface = \"b1\"\nfunctions = \"7000=echo\"",
            "takes frames before the policer at tc there sees them",
        ),
    ];
    for (i, (text, why)) in bad.iter().enumerate() {
        let o = a.apply(&format!("bad{i}.toml"), text);
        let err = common::text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "bad #{i} ({text:?}): {err}");
        assert!(
            err.contains(why),
            "bad #{i} ({text:?}) should say {why:?}: {err}"
        );
        for l in err.lines() {
            assert!(
                l.starts_with("peregrine: error: "),
                "bad #{i}: one line per mistake: {err}"
            );
        }
        let c = a.pg(&[
            "agent",
            "--check",
            "--config",
            dir.join(format!("bad{i}.toml")).to_str().unwrap(),
        ]);
        assert_eq!(c.status.code(), Some(2), "agent --check on bad #{i}");
    }
    let after = a.status();
    for k in ["router", "qos", "order", "services", "errors"] {
        assert_eq!(
            before[k], after[k],
            "{k} changed after refused declarations"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&a.config).unwrap(),
        good,
        "the agent's file changed"
    );
    // Several mistakes in one file: one line each.
    let o = a.apply(
        "many.toml",
        "[router]\nports = [\"a1\", \"a1\"]\n[[qos]]\niface = \"a1\"\n[[qos.rule]]\nrate = \"fast\"\n[extra]\n",
    );
    assert_eq!(
        common::text(&o.stderr).lines().count(),
        3,
        "{}",
        common::text(&o.stderr)
    );
    // Several mistakes in [router] alone: each named, not only the first.
    let o = a.apply(
        "many-router.toml",
        "[router]\nports = [\"a1\", \"a1\"]\nhook = \"sideways\"\nspeed = 3\n",
    );
    let err = common::text(&o.stderr);
    assert_eq!(err.lines().count(), 3, "{err}");
    for why in ["port a1 twice", "unknown hook", "unknown key \"speed\""] {
        assert!(err.contains(why), "should say {why:?}: {err}");
    }
}

/// Ports that come later are attached when they appear and cleaned up
/// when they go; a program detached by hand is put back and counted; the
/// file edited in place (inotify) and SIGHUP both reload; one-shot
/// commands in the agent's namespace are refused with a pointer to it.
#[test]
fn agent_follows_ports_repairs_drift_and_reloads() {
    let Some(t) = Topo::privileged_up("agp") else {
        return;
    };
    let r = t.ns("R");
    let dir = tmp("agent-ports");
    let a = Agent::start(
        &r,
        &dir,
        "[router]\nports = [\"a1\", \"b0\", \"c0\"]\nhook = \"tc\"\n",
    );
    a.wait_for(10, "waiting for c0", |s| {
        s["waiting"].as_array().is_some_and(|w| w.len() == 1) && s["ready"] == false
    });
    assert!(
        a.http("/readyz").0.contains("503"),
        "not ready while c0 is missing"
    );
    let c = format!("{}-C", t.p);
    let _ = peregrine_host::netns::delete(&c);
    ip(&["netns", "add", &c]);
    for round in 0..2 {
        let t0 = Instant::now();
        ip(&[
            "link", "add", "c0", "netns", &r, "type", "veth", "peer", "name", "c1", "netns", &c,
        ]);
        ip(&["-n", &r, "link", "set", "c0", "up"]);
        a.wait_for(5, "c0 attached", |s| {
            s["router"]["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|x| x[0] == "c0" && x[1] == true))
        });
        println!(
            "round {round}: c0 attached {} ms after it appeared",
            t0.elapsed().as_millis()
        );
        assert!(a.http("/readyz").0.contains("200"));
        ip(&["-n", &r, "link", "del", "c0"]);
        a.wait_for(5, "c0 cleaned up", |s| {
            s["router"]["ports"]
                .as_array()
                .is_some_and(|p| !p.iter().any(|x| x[0] == "c0"))
        });
    }
    let _ = peregrine_host::netns::delete(&c);
    // Drift: the router taken off b0 behind the agent's back.
    let o = Command::new("ip")
        .args([
            "netns",
            "exec",
            &r,
            env!("CARGO_BIN_EXE_peregrine"),
            "router",
            "detach",
            "b0",
        ])
        .env("PEREGRINE_AGENT_CHILD", "1")
        .output()
        .unwrap();
    ok(&o, "router detach b0 by hand");
    a.wait_for(5, "b0 repaired", |s| {
        s["repairs"].as_u64() >= Some(1)
            && s["router"]["ports"]
                .as_array()
                .is_some_and(|p| p.iter().any(|x| x[0] == "b0" && x[1] == true))
    });
    assert!(t.ping("198.18.2.1"), "routing again after the repair");
    // A one-shot command beside the agent is refused, pointing at it.
    let o = a.pg(&["router", "attach", "a1", "b0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("peregrine agent (pid"),
        "{}",
        text(&o.stderr)
    );
    // The file edited in place: the change is applied (inotify).
    std::fs::write(&a.config, format!("{ROUTER_TC}{POLICER_A1}")).unwrap();
    a.wait_for(5, "policer applied from the edited file", |s| {
        s["qos"]
            .as_array()
            .is_some_and(|q| q.len() == 1 && q[0]["live"] == true)
    });
    // SIGHUP re-reads it too (here after a write the watch also saw: the
    // reload finds nothing new and changes nothing).
    let pid = a.status()["pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        a.status()["pid"].as_u64(),
        Some(pid as u64),
        "SIGHUP stopped the agent"
    );
}

/// Together: the agent applying its declared policer on a1 while the user
/// changes that policer's rules by hand (`qos rule add`/`del`, `qos class`)
/// at the same moment. Each hand change is refused in one line pointing at
/// the agent (the agent would otherwise keep a rule it never declared, or
/// drop the user's at its next apply), and the policer holds exactly the
/// declared rule at the declared rate after every reload.
#[test]
fn hand_changes_to_the_agents_policer_at_once_are_refused_and_change_nothing() {
    let Some(t) = Topo::privileged_up("agh") else {
        return;
    };
    let r = t.ns("R");
    let dir = tmp("agent-hand-rules");
    let a = Agent::start(&r, &dir, &format!("{ROUTER_TC}{POLICER_A1}"));
    a.wait_for(10, "policer applied", |s| {
        s["qos"]
            .as_array()
            .is_some_and(|q| q.len() == 1 && q[0]["live"] == true)
    });
    let hands: Vec<Vec<&str>> = vec![
        vec![
            "qos", "rule", "add", "--iface", "a1", "--proto", "udp", "--dport", "9", "--rate", "0",
        ],
        vec!["qos", "rule", "del", "--iface", "a1", "1"],
        vec!["qos", "class", "del", "--iface", "a1", "bulk"],
    ];
    let rates = ["30Mbit", "20Mbit", "40Mbit", "20Mbit"];
    let refused = std::thread::scope(|sc| {
        let user = sc.spawn(|| {
            let mut refused = 0;
            let end = Instant::now() + Duration::from_secs(60);
            for i in 0..24 {
                assert!(Instant::now() < end, "hand changes take over 60 s");
                let o = a.pg(&hands[i % hands.len()]);
                let e = text(&o.stderr);
                assert_eq!(o.status.code(), Some(2), "hand change {i}: {e}");
                assert!(
                    e.contains("peregrine agent (pid") && e.trim().lines().count() == 1,
                    "hand change {i}: one line pointing at the agent: {e}"
                );
                refused += 1;
            }
            refused
        });
        for rate in rates {
            let o = a.apply(
                "node.toml",
                &format!("{ROUTER_TC}{}", POLICER_A1.replace("20Mbit", rate)),
            );
            ok(&o, &format!("apply with the policer at {rate}"));
        }
        user.join().unwrap()
    });
    assert_eq!(refused, 24);
    let rule = pod_policer_rule(&r, "a1").expect("the declared policer runs");
    assert_eq!(
        rule["rate"], "20000000 bit/s",
        "the last declared rate, nothing else: {rule:#}"
    );
    assert!(
        !a.log().contains("ERROR"),
        "the agent logged an error: {}",
        a.log()
    );
}

/// A function service in the server's namespace behind the router at tc:
/// the agent supervises it, the router delivers through its XDP hook (so
/// every request reaches it), and a SIGKILLed service is back within 1 s.
#[test]
fn agent_supervises_a_function_behind_the_router() {
    let Some(t) = Topo::privileged_up("agf") else {
        return;
    };
    let dir = tmp("agent-function");
    let decl = format!(
        "{ROUTER_TC}
[[function]]
name = \"echo-b\"
netns = \"{}\"
iface = \"b1\"
backend = \"afxdp\"
functions = \"7000=echo\"
cpus = \"1\"
",
        t.ns("B")
    );
    let a = Agent::start(&t.ns("R"), &dir, &decl);
    a.wait_for(10, "ready", |s| s["ready"] == true);
    // The service attaches its dispatcher in its own time.
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while Instant::now() < end {
        got = echo_replies(&t.ns("A"), "198.18.2.1", 7000, 5);
        if got == 5 {
            break;
        }
    }
    assert_eq!(got, 5, "the function answers: {}", a.log());
    let got = echo_replies(&t.ns("A"), "198.18.2.1", 7000, 400);
    println!("{got} of 400 replies through the router to the supervised function");
    assert_eq!(got, 400);
    let s = a.status();
    let pid = s["services"][0]["pid"].as_u64().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let t0 = Instant::now();
    a.wait_for(3, "service restarted", |s| {
        s["services"][0]["restarts"] == 1 && s["services"][0]["pid"].as_u64() != Some(pid)
    });
    let took = t0.elapsed();
    println!(
        "the function service was back (new pid) {} ms after SIGKILL",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(1), "restarted after {took:?}");
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while Instant::now() < end && got < 5 {
        got = echo_replies(&t.ns("A"), "198.18.2.1", 7000, 5);
    }
    assert_eq!(got, 5, "the restarted function answers");
}

/// The packaging: the systemd unit passes `systemd-analyze verify` (with
/// the binary under test and its generated man pages), the agent's man
/// page exists, and the example declaration checks clean.
#[test]
fn systemd_unit_verifies_and_example_declaration_checks() {
    let dir = tmp("agent-unit");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let man1 = dir.join("man/man1");
    std::fs::create_dir_all(&man1).unwrap();
    ok(&run(&["man", "--out", man1.to_str().unwrap()]), "man");
    assert!(man1.join("peregrine-agent.1").exists());
    let unit =
        std::fs::read_to_string(root.join("deploy/systemd/peregrine-agent.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/peregrine agent"));
    let f = dir.join("peregrine-agent.service");
    std::fs::write(
        &f,
        unit.replace("/usr/local/bin/peregrine", env!("CARGO_BIN_EXE_peregrine")),
    )
    .unwrap();
    let o = Command::new("systemd-analyze")
        .args(["verify", f.to_str().unwrap()])
        .env("MANPATH", dir.join("man"))
        .output()
        .expect("systemd-analyze (Debian package systemd; scripts/setup.sh installs it)");
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "systemd-analyze verify: {}",
        text(&o.stderr)
    );
    let example = root.join("examples/node.toml");
    let o = run(&["agent", "--check", "--config", example.to_str().unwrap()]);
    ok(&o, "agent --check examples/node.toml");
    assert!(text(&o.stdout).ends_with(": ok\n"), "{}", text(&o.stdout));
}

/// The programs at tcx ingress of `iface` in `ns`, in the order they run.
fn tcx_programs(ns: &str, iface: &str) -> Vec<u32> {
    peregrine_host::netns::run_in(ns, || {
        let idx = peregrine_bpf::link::ifindex(iface).unwrap();
        peregrine_bpf::tcx::attached_ids(idx, peregrine_bpf::TcxDirection::Ingress).unwrap()
    })
    .unwrap()
}

/// The agent killed with SIGKILL at 20 random points of a pass (issue 25:
/// kill -9 mid-reconcile; issue 28: chaos). Before each start its
/// declaration switches between two nodes of 16 tc router ports that share
/// 8, each with a policer on a different port, so every pass detaches 8
/// ports, attaches 8 and moves the policer. Started again after each kill,
/// the successor ends with exactly the declared state, whatever the dead
/// agent had done: every declared port runs the one router program, the
/// policed port the policer first, the others nothing; an empty
/// declaration then leaves no program on any port.
#[test]
fn agent_killed_mid_reconcile_ends_with_exactly_the_declared_state() {
    let Some(t) = Topo::privileged_up("agk") else {
        return;
    };
    let r = t.ns("R");
    let all: Vec<String> = (0..24).map(|i| format!("p{i}")).collect();
    for p in &all {
        let peer = format!("q{}", &p[1..]);
        ip(&[
            "-n", &r, "link", "add", p, "type", "veth", "peer", "name", &peer,
        ]);
        ip(&["-n", &r, "link", "set", p, "up"]);
        ip(&["-n", &r, "link", "set", &peer, "up"]);
    }
    // Node k: ports p(8k)..p(8k+15), the policer on the first.
    let node = |k: usize| -> (Vec<String>, String) {
        let ports: Vec<String> = all[8 * k..8 * k + 16].to_vec();
        let quoted: Vec<String> = ports.iter().map(|p| format!("{p:?}")).collect();
        let decl = format!(
            "[router]\nports = [{}]\nhook = \"tc\"\n{}",
            quoted.join(", "),
            POLICER_A1.replace("a1", &ports[0])
        );
        (ports, decl)
    };
    let dir = tmp("agent-chaos");
    let mut a = Agent::start(&r, &dir, &node(0).1);
    a.wait_for(20, "ready", |s| s["ready"] == true);
    a.kill9();
    let mut rng = ChaosRng::seeded();
    let mut kills_mid_pass = 0;
    for k in 0..20 {
        let (ports, decl) = node((k + 1) % 2);
        std::fs::write(&a.config, &decl).unwrap();
        a.launch();
        // A pass over 16 tc ports takes a few hundred ms here.
        std::thread::sleep(Duration::from_millis(rng.below(600)));
        a.kill9();
        a.spawn();
        a.wait_for(20, &format!("ready after kill {k}"), |s| s["ready"] == true);
        // What the successor had left to do tells where the kill landed.
        let left = changes(&a.status());
        eprintln!(
            "kill {k}: the successor made {} change(s): {left:?}",
            left.len()
        );
        kills_mid_pass += u32::from(!left.is_empty());
        let router = tcx_programs(&r, &ports[1])[0];
        for p in &all {
            let progs = tcx_programs(&r, p);
            let want = if p == &ports[0] {
                2
            } else {
                usize::from(ports.contains(p))
            };
            assert_eq!(
                progs.len(),
                want,
                "kill {k}: {p} runs {progs:?}\n{}",
                a.log()
            );
            if want > 0 {
                assert_eq!(
                    progs.last(),
                    Some(&router),
                    "kill {k}: {p}: one router program"
                );
            }
        }
        assert_ne!(
            tcx_programs(&r, &ports[0])[0],
            router,
            "kill {k}: the policer runs first on {}",
            ports[0]
        );
        a.kill9();
    }
    eprintln!("{kills_mid_pass} of 20 kills left work to the successor");
    assert!(
        kills_mid_pass > 0,
        "no kill landed before the end of a pass"
    );
    a.spawn();
    a.wait_for(20, "ready", |s| s["ready"] == true);
    ok(&a.apply("empty.toml", ""), "apply empty");
    for p in &all {
        assert!(tcx_programs(&r, p).is_empty(), "{p} keeps a program");
    }
    drop(a);
    t.remove();
}

/// The address every pod's host side has (the CNI ptp plugin's gateway:
/// one address on each host veth, a /32 route to each pod).
const POD_GW: &str = "198.18.100.1";

/// A pod made as the CNI ptp plugin makes one: namespace `pod`, its
/// `eth0` a veth whose host side `host` is in the node namespace `node`;
/// the pod's `ip`/32 on eth0, a route to the gateway on eth0 and the
/// default route through it; on the node the gateway on `host` and a
/// /32 route to the pod.
fn ptp_pod(node: &str, pod: &str, host: &str, addr: &str) {
    ip(&[
        "link", "add", host, "netns", node, "type", "veth", "peer", "name", "eth0", "netns", pod,
    ]);
    ip(&[
        "-n",
        node,
        "addr",
        "add",
        &format!("{POD_GW}/32"),
        "dev",
        host,
    ]);
    ip(&["-n", node, "link", "set", host, "up"]);
    ip(&[
        "-n",
        node,
        "route",
        "add",
        &format!("{addr}/32"),
        "dev",
        host,
    ]);
    ip(&[
        "-n",
        pod,
        "addr",
        "add",
        &format!("{addr}/32"),
        "dev",
        "eth0",
    ]);
    ip(&["-n", pod, "link", "set", "eth0", "up"]);
    ip(&[
        "-n",
        pod,
        "route",
        "add",
        &format!("{POD_GW}/32"),
        "dev",
        "eth0",
    ]);
    ip(&[
        "-n", pod, "route", "add", "default", "via", POD_GW, "dev", "eth0",
    ]);
}

/// The ADD the CNI plugin would send for `ptp_pod(_, ns, host, ip)`.
fn pod_port(ns: &str, host: &str, ip: &str, name: &str, bandwidth: Bandwidth) -> PodPort {
    PodPort {
        key: pod_key(name),
        netns: format!("/run/netns/{ns}"),
        host_iface: host.to_string(),
        ips: vec![format!("{ip}/32")],
        pod_namespace: Some("default".into()),
        pod_name: Some(name.to_string()),
        pod_uid: Some(format!("uid-{name}")),
        bandwidth,
        annotations: Default::default(),
    }
}

fn pod_key(name: &str) -> PodKey {
    PodKey {
        container_id: format!("{name}-0123456789abcdef"),
        ifname: "eth0".into(),
    }
}

/// `count` UDP datagrams from namespace `from` to `to`:9000, 50 ms apart,
/// with a receiver in namespace `rx`; how many arrived (at most 10 s).
fn udp_through(from: &str, rx: &str, to: &str, count: u32) -> u32 {
    let recv = format!(
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('{to}', 9000))\ns.settimeout(3)\nn = 0\ntry:\n    while n < {count}:\n        d, _ = s.recvfrom(100)\n        n += d.startswith(b'dgram')\nexcept socket.timeout:\n    pass\nprint(n)\n"
    );
    let server = Command::new("ip")
        .args(["netns", "exec", rx, "timeout", "10", "python3", "-c", &recv])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let send = format!(
        "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor i in range({count}):\n    s.sendto(b'dgram %d' % i, ('{to}', 9000))\n    time.sleep(0.05)\n"
    );
    ok(
        &sh_in(from, &["python3", "-c", &send], Duration::from_secs(10)),
        "UDP sender",
    );
    let out = server.wait_with_output().unwrap();
    text(&out.stdout).trim().parse().unwrap_or(0)
}

/// The agent holds no pod and no router runs in `node`.
fn assert_no_pods(a: &Agent, node: &str) {
    let s = a.status();
    assert!(status_pods(&s).is_empty(), "{s:#}");
    assert!(
        router_programs(node).is_empty(),
        "{:?}",
        router_programs(node)
    );
}

/// `qos stats --json` of the policer on `iface` in `ns`: its one rule
/// (None when no policer runs there).
fn pod_policer_rule(ns: &str, iface: &str) -> Option<serde_json::Value> {
    let o = pg_in(ns, &["qos", "stats", "--iface", iface, "--json"]);
    if !o.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rules = v["policers"][0]["rules"].as_array()?.clone();
    assert_eq!(rules.len(), 1, "one rule on {iface} in {ns}: {v:#}");
    Some(rules[0].clone())
}

/// The pods' host interfaces the agent's status shows, with their port
/// state.
fn status_pods(s: &serde_json::Value) -> Vec<(String, bool)> {
    s["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["host_iface"].as_str().unwrap().to_string(),
                p["port_live"] == true,
            )
        })
        .collect()
}

/// The `/metrics` value of the router counter of `port` and `action`
/// labelled with a pod: (its labels, value).
fn pod_counter(body: &str, port: &str, action: &str) -> Option<(String, u64)> {
    body.lines()
        .filter(|l| l.starts_with("peregrine_node_packets_total{"))
        .filter(|l| {
            l.contains(&format!("port=\"{port}\"")) && l.contains(&format!("action=\"{action}\""))
        })
        .find(|l| l.contains("pod=\""))
        .and_then(|l| {
            let (labels, v) = l.rsplit_once(' ')?;
            Some((labels.to_string(), v.parse().ok()?))
        })
}

/// Issue 26, the agent's side of the CNI plugin: two pods made as the ptp
/// plugin makes them, handed over with `pod_add`, join a router the node
/// declares none of (router attach's defaults: auto picks tc for veths at
/// their default offloads); a UDP datagram goes from one to the other
/// through it, counted with the pod's names; egress_rate is the exact
/// policer rule on the host side and a shaper on the pod's eth0,
/// ingress_rate a policer on the pod's eth0 in its namespace (which counts
/// what the router delivered); CHECK is ok;
/// a SIGKILLed agent's successor keeps the pods and adopts their ports
/// (same router programs, no change made); DEL of one leaves the other
/// running, DEL again is ok, GC removes the rest, pins included.
/// The counters of the egress shaper on eth0 in pod namespace `ns`.
fn pod_shaper(ns: &str) -> Option<peregrine_host::tc::ClassStats> {
    peregrine_host::netns::run_in(ns, || peregrine_qos::shaper::shaped("eth0"))
        .unwrap()
        .unwrap()
}

#[test]
fn agent_pods_join_the_router_are_policed_and_survive_a_restart() {
    if !peregrine_testbed::testing::privileged_here() {
        return;
    }
    let (node, pa, pb) = ("agpod-N", "agpod-A", "agpod-B");
    let _ns = Namespaces::add(&[node, pa, pb]);
    ok(
        &sh_in(
            node,
            &["sysctl", "-qw", "net.ipv4.ip_forward=1"],
            Duration::from_secs(5),
        ),
        "sysctl",
    );
    ptp_pod(node, pa, "hpa", "198.18.100.2");
    ptp_pod(node, pb, "hpb", "198.18.100.3");
    let dir = tmp("agent-pods");
    let mut a = Agent::start(node, &dir, "");
    let egress = Bandwidth {
        egress_rate: Some(10_000_000),
        ..Default::default()
    };
    let ingress = Bandwidth {
        ingress_rate: Some(20_000_000),
        ..Default::default()
    };
    let add_a = Request::PodAdd {
        pod: Box::new(pod_port(pa, "hpa", "198.18.100.2", "pod-a", egress)),
    };
    let add_b = Request::PodAdd {
        pod: Box::new(pod_port(pb, "hpb", "198.18.100.3", "pod-b", ingress)),
    };
    for req in [&add_a, &add_b] {
        let r = a.pods(req);
        println!("{req:?}\n -> {r:?}");
        assert!(r.ok, "{r:?}\n{}", a.log());
    }
    let s = a.status();
    assert_eq!(
        status_pods(&s),
        [("hpa".to_string(), true), ("hpb".to_string(), true)],
        "{s:#}"
    );
    assert_eq!(s["router"]["hook"], "tc", "{s:#}");
    let text_status = text(&a.pg(&["status"]).stdout);
    assert!(
        text_status.contains("pod default/pod-a (pod-a-012345/eth0): host iface hpa, 198.18.100.2/32, egress 10000000 bit/s"),
        "{text_status}"
    );
    // Re-ADD: the same record, nothing changes.
    let r = a.pods(&add_a);
    assert!(r.ok, "{r:?}");
    assert!(
        r.lines.iter().all(|l| l.contains("re-added")),
        "a re-ADD changed something: {r:?}"
    );
    for k in ["pod-a", "pod-b"] {
        let r = a.pods(&Request::PodCheck { key: pod_key(k) });
        assert!(r.ok, "CHECK {k}: {r:?}");
    }
    // Pod to pod through the router (the first datagram may wait for ARP).
    assert!(
        sh_in(
            pa,
            &["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.100.3"],
            Duration::from_secs(10)
        )
        .status
        .success(),
        "pod A pings pod B"
    );
    let got = udp_through(pa, pb, "198.18.100.3", 20);
    println!("{got} of 20 UDP datagrams pod A -> pod B");
    assert_eq!(got, 20);
    let (line, body) = a.http("/metrics");
    assert!(line.contains("200"), "{line}");
    let (labels, forwarded) =
        pod_counter(&body, "hpa", "forward").unwrap_or_else(|| panic!("{body}"));
    println!("{labels} {forwarded}");
    assert!(
        labels.contains("pod=\"pod-a\"") && labels.contains("namespace=\"default\""),
        "{labels}"
    );
    assert!(
        forwarded >= 20,
        "the router forwarded pod A's datagrams: {forwarded}"
    );
    promtool_check(&body, "the agent's /metrics with pods");
    // egress_rate: the policer on hpa, exactly the rule asked for.
    let rule = pod_policer_rule(node, "hpa").expect("a policer on hpa");
    println!("hpa: {rule}");
    assert_eq!(rule["rate"], "10000000 bit/s", "{rule}");
    // No burst asked: the policer's own default for the rate.
    let burst =
        peregrine_qos::config::default_burst(peregrine_bpf::policer::Rate::Bits(10_000_000));
    assert_eq!(rule["burst"], format!("{burst} B"), "{rule}");
    assert_eq!(rule["exceed"], "drop", "{rule}");
    assert!(rule["conform_packets"].as_u64() >= Some(20), "{rule}");
    let order = stages_on(&s, "hpa");
    assert_eq!(order, ["policer (tc)", "router (tc)"], "{s:#}");
    // egress_rate is shaped as well, on A's eth0 in A (where A's TCP feels
    // the queue): the shaper's class sent what A sent.
    let shaped = pod_shaper(pa).expect("a shaper on eth0 in pod A");
    println!("eth0 in pod A: {shaped:?}");
    assert!(shaped.packets >= 20, "{shaped:?}");
    assert!(pod_shaper(pb).is_none(), "pod B asked for no egress_rate");
    // ingress_rate: the policer on B's eth0, in B, counted what came.
    let rule = pod_policer_rule(pb, "eth0").expect("a policer on eth0 in pod B");
    println!("eth0 in pod B: {rule}");
    assert_eq!(rule["rate"], "20000000 bit/s", "{rule}");
    assert!(rule["conform_packets"].as_u64() >= Some(20), "{rule}");

    // kill -9 and a new agent: the pods kept, nothing re-attached.
    let before = router_programs(node);
    assert_eq!(before.len(), 2, "{before:?}");
    a.kill9();
    a.spawn();
    let s = a.status();
    assert_eq!(status_pods(&s).len(), 2, "{s:#}");
    assert_adopted(&s, node, &before);
    for k in ["pod-a", "pod-b"] {
        let r = a.pods(&Request::PodCheck { key: pod_key(k) });
        assert!(r.ok, "CHECK {k} after the restart: {r:?}");
    }

    // DEL of pod A: its port and policer go, pod B keeps running.
    let r = a.pods(&Request::PodDel {
        key: pod_key("pod-a"),
    });
    println!("DEL pod-a -> {r:?}");
    assert!(r.ok, "{r:?}");
    let s = a.status();
    assert_eq!(status_pods(&s), [("hpb".to_string(), true)], "{s:#}");
    let progs = router_programs(node);
    assert_eq!(progs.len(), 1, "{progs:?}");
    assert_eq!(progs[0].0, "hpb");
    assert!(
        pod_policer_rule(node, "hpa").is_none(),
        "the policer on hpa stayed"
    );
    assert!(pod_shaper(pa).is_none(), "the shaper in pod A stayed");
    assert!(
        a.pods(&Request::PodCheck {
            key: pod_key("pod-b")
        })
        .ok
    );
    let r = a.pods(&Request::PodCheck {
        key: pod_key("pod-a"),
    });
    assert!(!r.ok && r.lines.len() == 1, "{r:?}");
    let r = a.pods(&Request::PodDel {
        key: pod_key("pod-a"),
    });
    assert!(r.ok, "DEL again: {r:?}");
    let hpb_before = router_port_received(node, "hpb");
    let got = udp_through(pb, pa, "198.18.100.2", 10);
    assert_eq!(got, 10, "pod B still reaches pod A");
    assert!(
        router_port_received(node, "hpb") >= hpb_before + 10,
        "pod B's router port saw its datagrams"
    );

    // GC with nothing kept: pod B goes, and its in-pod policer.
    let r = a.pods(&Request::PodGc { keep: Vec::new() });
    println!("GC [] -> {r:?}");
    assert!(r.ok, "{r:?}");
    assert!(
        r.lines
            .iter()
            .any(|l| l.contains("pod default/pod-b") && l.contains("removed")),
        "{r:?}"
    );
    assert_no_pods(&a, node);
    assert!(
        pod_policer_rule(pb, "eth0").is_none(),
        "pod B's in-pod policer stayed"
    );
    let pins = json(&pg_in(pb, &["qos", "list", "--json"]), "qos list");
    assert!(
        pins["policers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["namespace"] != pb),
        "{pins:#}"
    );
    assert_eq!(s["ready"], true, "{s:#}");
}

/// The packets a router port received, every action summed (`router
/// stats --json` in `ns`).
fn router_port_received(ns: &str, port: &str) -> u64 {
    let v = json(&pg_in(ns, &["router", "stats", "--json"]), "router stats");
    v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == port)
        .and_then(|p| p["rx"].as_object())
        .map(|rx| rx.values().filter_map(|a| a["packets"].as_u64()).sum())
        .unwrap_or(0)
}

/// Pod ADDs the agent refuses, each in one line and leaving nothing: a
/// host interface that does not exist, an address that is not one, a
/// rate the policer cannot meter, a namespace that does not exist; DEL of a pod never added is ok; a pod whose
/// host interface vanished is DEL'd cleanly.
#[test]
fn agent_refuses_bad_pods_and_keeps_nothing_of_them() {
    if !peregrine_testbed::testing::privileged_here() {
        return;
    }
    let (node, pa, pb) = ("agpodr-N", "agpodr-A", "agpodr-B");
    let _ns = Namespaces::add(&[node, pa, pb]);
    ptp_pod(node, pa, "hpa", "198.18.101.2");
    let dir = tmp("agent-pods-bad");
    let a = Agent::start(node, &dir, "");
    let good = pod_port(pa, "hpa", "198.18.101.2", "pod-a", Bandwidth::default());
    let mut missing = good.clone();
    missing.host_iface = "nosuch0".into();
    let mut bad_ip = good.clone();
    bad_ip.ips = vec!["198.18.101.300/32".into()];
    let mut slow = good.clone();
    slow.bandwidth.egress_rate = Some(100);
    let mut no_netns = good.clone();
    no_netns.netns = "/run/netns/agpodr-nosuch".into();
    for (pod, why) in [
        (missing, "host interface nosuch0 does not exist"),
        (bad_ip, "198.18.101.300/32"),
        (slow, "between 1 kbit/s and 1 Tbit/s"),
        (no_netns, "agpodr-nosuch"),
    ] {
        let r = a.pods(&Request::PodAdd { pod: Box::new(pod) });
        println!("{r:?}");
        assert!(!r.ok, "{r:?}");
        assert_eq!(r.lines.len(), 1, "{r:?}");
        assert!(r.lines[0].contains(why), "should say {why:?}: {r:?}");
        assert_no_pods(&a, node);
    }
    assert!(
        a.log().contains("nosuch0 does not exist"),
        "logged: {}",
        a.log()
    );
    // Pod A's eth0 has a root qdisc someone else made: its egress_rate
    // (shaped there) is refused in one line, that qdisc stays, and nothing
    // of the pod is left (no ingress_rate policer either).
    let tc_in_a = |args: &[&str]| {
        let mut a = vec!["tc", "qdisc"];
        a.extend_from_slice(args);
        sh_in(pa, &a, Duration::from_secs(5))
    };
    ok(
        &tc_in_a(&["add", "dev", "eth0", "root", "handle", "1:", "htb"]),
        "the user's qdisc",
    );
    let mut theirs = good.clone();
    theirs.bandwidth = Bandwidth {
        egress_rate: Some(10_000_000),
        ingress_rate: Some(20_000_000),
        ..Default::default()
    };
    let r = a.pods(&Request::PodAdd {
        pod: Box::new(theirs),
    });
    println!("{r:?}");
    assert!(!r.ok && r.lines.len() == 1, "{r:?}");
    assert!(
        r.lines[0].contains("root qdisc peregrine did not make"),
        "{r:?}"
    );
    assert_no_pods(&a, node);
    assert!(
        pod_policer_rule(pa, "eth0").is_none(),
        "an ingress policer stayed"
    );
    let q = text(&tc_in_a(&["show", "dev", "eth0"]).stdout);
    assert!(q.contains("qdisc htb 1: root"), "the user's qdisc: {q}");
    ok(&tc_in_a(&["del", "dev", "eth0", "root"]), "tc qdisc del");
    let r = a.pods(&Request::PodDel {
        key: pod_key("never"),
    });
    assert!(r.ok, "DEL of an unknown pod: {r:?}");
    // The host side gone before DEL (the runtime removed the namespace).
    let r = a.pods(&Request::PodAdd {
        pod: Box::new(good),
    });
    assert!(r.ok, "{r:?}");
    assert_eq!(router_programs(node).len(), 1);
    ip(&["-n", node, "link", "del", "hpa"]);
    let r = a.pods(&Request::PodDel {
        key: pod_key("pod-a"),
    });
    assert!(r.ok, "DEL after the host iface went: {r:?}");
    let s = a.status();
    assert!(status_pods(&s).is_empty(), "{s:#}");
    assert!(s["router"].is_null(), "{s:#}");
    assert!(
        router_programs(node).is_empty(),
        "{:?}",
        router_programs(node)
    );
    // A router declared at XDP: its redirects would skip a pod's egress
    // policer at tc, so the ADD fails after the pass applied it, and is
    // undone whole (record, policer); the declared port stays.
    ptp_pod(node, pb, "hpb", "198.18.101.3");
    ok(
        &a.apply("xdp.toml", "[router]\nports = [\"hpb\"]\nhook = \"xdp\"\n"),
        "apply a router at XDP",
    );
    let progs = router_programs(node);
    assert_eq!(progs.len(), 1, "{progs:?}");
    let policed = pod_port(
        pb,
        "hpb",
        "198.18.101.3",
        "pod-b",
        Bandwidth {
            egress_rate: Some(10_000_000),
            ..Default::default()
        },
    );
    let r = a.pods(&Request::PodAdd {
        pod: Box::new(policed),
    });
    println!("{r:?}");
    assert!(!r.ok && r.lines.len() == 1, "{r:?}");
    assert!(r.lines[0].contains("XDP"), "{r:?}");
    let s = a.status();
    assert!(status_pods(&s).is_empty(), "{s:#}");
    assert_eq!(router_programs(node), progs, "the declared port changed");
    assert!(
        pod_policer_rule(node, "hpb").is_none(),
        "the refused pod's policer stayed"
    );
    assert!(
        !a.pods(&Request::PodCheck {
            key: pod_key("pod-b")
        })
        .ok
    );
    // Without a rate the same pod joins the router at XDP.
    let r = a.pods(&Request::PodAdd {
        pod: Box::new(pod_port(
            pb,
            "hpb",
            "198.18.101.3",
            "pod-b",
            Bandwidth::default(),
        )),
    });
    assert!(r.ok, "{r:?}");
    assert_eq!(
        router_programs(node),
        progs,
        "the declared port re-attached"
    );
    // DEL after the pod's namespace went (its veth, the host side
    // included, with it): ok, and the pins of its in-pod policer go too.
    ptp_pod(node, pa, "hpa", "198.18.101.2");
    let limited = pod_port(
        pa,
        "hpa",
        "198.18.101.2",
        "pod-a",
        Bandwidth {
            ingress_rate: Some(5_000_000),
            // Above the default floor (200 ms of 5 Mbit/s, 125 kB): kept.
            ingress_burst: Some(8 * 200_000),
            ..Default::default()
        },
    );
    let r = a.pods(&Request::PodAdd {
        pod: Box::new(limited),
    });
    assert!(r.ok, "{r:?}");
    let rule = pod_policer_rule(pa, "eth0").expect("a policer on eth0 in pod A");
    assert_eq!(rule["rate"], "5000000 bit/s", "{rule}");
    assert_eq!(rule["burst"], "200000 B", "{rule}");
    let cookie = peregrine_host::netns::run_in(pa, peregrine_host::netns::cookie)
        .unwrap()
        .unwrap();
    let pinned = || {
        peregrine_qos::attach::list()
            .into_iter()
            .filter(|p| p.cookie == cookie)
            .count()
    };
    assert_eq!(pinned(), 1);
    ok(
        &sh(&["ip", "netns", "del", pa], Duration::from_secs(5)),
        "ip netns del",
    );
    let r = a.pods(&Request::PodDel {
        key: pod_key("pod-a"),
    });
    println!("DEL after the namespace went: {r:?}");
    assert!(r.ok, "{r:?}");
    assert_eq!(pinned(), 0, "the in-pod policer's pins stayed");
    assert!(status_pods(&a.status()).iter().all(|p| p.0 != "hpa"));
}
