//! `peregrine agent` as users run it: namespaces made with `ip`, the agent
//! started in the background through `ip netns exec`, its declaration
//! applied, changed and broken; iperf3, ping and Python clients through
//! what it composes; the agent killed with SIGKILL and started again.
mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

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
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, env!("CARGO_BIN_EXE_peregrine")])
            .args(["agent", "--config"])
            .arg(&self.config)
            .args(["--metrics", &self.metrics])
            .env("PEREGRINE_AGENT_DIR", self.dir.join("run"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("peregrine agent starts");
        self.child = Some(child);
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
    let order: Vec<String> = s["order"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["iface"] == "a1")
        .flat_map(|o| o["stages"].as_array().unwrap().iter())
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
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
    assert_eq!(
        router_programs(&t.ns("R")),
        before,
        "the new agent re-attached the router"
    );
    assert!(
        changes(&s).is_empty(),
        "the new agent changed something instead of adopting: {:?}",
        changes(&s)
    );
    assert_eq!(s["ready"], true, "{s:#}");
}

/// The user's state is theirs: a router and a policer attached by hand
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
    let f = tmp("agent-hand-qos").join("qos.toml");
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
        ("[router]\nports = []", "ports is empty"),
        ("[router]\nports = [\"a1\"]\nhook = \"sideways\"", "unknown hook"),
        ("[router]\nports = [\"a1\"]\nhook = \"tc\"\nmode = \"native\"", "hook \"tc\" takes none"),
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

/// `count` UDP requests from namespace `ns` to `dst`:`port`, each answered
/// by the echo function; how many replies came back intact. Stops after
/// 20 requests in a row go unanswered.
fn echo_replies(ns: &str, dst: &str, port: u16, count: u32) -> u32 {
    let py = format!(
        r#"
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.3)
ok = miss = 0
for i in range({count}):
    m = b'req-%d' % i
    s.sendto(m, ('{dst}', {port}))
    try:
        d, _ = s.recvfrom(2048)
        ok += d == m
        miss = 0
    except socket.timeout:
        miss += 1
        if miss == 20:
            break
print(ok)
"#
    );
    let o = sh_in(ns, &["python3", "-c", &py], Duration::from_secs(60));
    text(&o.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the client: {}", text(&o.stderr)))
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
