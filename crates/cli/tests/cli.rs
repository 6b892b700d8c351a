//! End-to-end tests of the `peregrine` binary as a user runs it: the main
//! job, Ctrl-C and SIGKILL hygiene, and one-line errors for bad input.
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use peregrine_testbed::testing::privileged;

mod common;
use common::{
    assert_live_metrics, json, ok, pair_lab_up, pair_topology, run, scrape, text, tmp,
    topology_file,
};

fn namespaces(lab: &str) -> Vec<String> {
    let p = format!("pg-{lab}-");
    std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&p))
                .collect()
        })
        .unwrap_or_default()
}

fn pins(lab: &str) -> bool {
    Path::new("/sys/fs/bpf/peregrine").join(lab).exists()
}

/// `lab down name` succeeds and leaves no namespace and no pin of it.
fn lab_down_leaves_nothing(name: &str) {
    ok(&run(&["lab", "down", name]), "lab down");
    assert!(namespaces(name).is_empty(), "namespaces of {name} left");
    assert!(!pins(name), "pins of {name} left");
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}

/// Starts `peregrine` with `args` in the background, stdout as given and
/// stderr discarded.
fn spawn(args: &[&str], stdout: Stdio) -> Child {
    common::bin()
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Asserts a failure with exactly one line on stderr, naming `needle`.
fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success(), "expected failure");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {err}");
    assert!(lines[0].starts_with("peregrine: error: "), "{err}");
    assert!(lines[0].contains(needle), "{err:?} should name {needle:?}");
}

/// `peregrine gen` in the test lab "tbad" from `from` to `to`, plus `extra`.
fn gen_in_tbad(from: &str, to: &str, extra: &[&str]) -> Output {
    let mut args = vec!["gen", "--lab", "tbad", "--from", from, "--to", to];
    args.extend_from_slice(extra);
    run(&args)
}

/// `args` with `extra` after them.
fn with<'a>(args: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    [args, extra].concat()
}

/// `faas load` from host a of `lab` to b (198.18.0.2) calling `functions`.
fn faas_load_in<'a>(lab: &'a str, functions: &'a str) -> [&'a str; 10] {
    [
        "faas",
        "load",
        "--lab",
        lab,
        "--host",
        "a",
        "--to",
        "198.18.0.2",
        "--functions",
        functions,
    ]
}

/// `lab exec lab host -- ping -c 2 -i 0.2 ip` (plus `extra` ping options)
/// succeeded.
fn ping_in(lab: &str, host: &str, ip: &str, extra: &[&str]) -> bool {
    let ping = [
        "lab", "exec", lab, host, "--", "ping", "-c", "2", "-i", "0.2",
    ];
    run(&[&ping[..], extra, &[ip]].concat()).status.success()
}

#[test]
fn main_job_runs_and_leaves_nothing() {
    if !privileged("main_job_runs_and_leaves_nothing") {
        return;
    }
    let dir = tmp("showcase");
    let out = run(&["showcase", "--trial", "0.5", "--out", dir.to_str().unwrap()]);
    ok(&out, "showcase");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("RFC 2544 throughput"), "{table}");
    let json = std::fs::read_to_string(dir.join("showcase.json")).unwrap();
    let r =
        peregrine_lab::results::ResultFile::<peregrine_lab::results::NoValues>::from_json(&json)
            .unwrap();
    // xdp router, tc router, Linux forwarding; AF_XDP invoker, recvmmsg.
    assert_eq!(r.runs.len(), 5);
    let xdp_saturated = &r.runs[0].trials[0];
    assert!(
        xdp_saturated.delivered_packets > 100_000,
        "{xdp_saturated:?}"
    );
    assert!(r.runs[1].rfc2544.as_ref().unwrap().throughput_pps > 10_000.0);
    assert!(r.runs[3..].iter().all(|run| run.rfc2544.is_some()));
    use peregrine_bench::showcase::{FORWARDING_FIGURE, INVOKER_FIGURE};
    for f in [
        format!("showcase-{FORWARDING_FIGURE}.png"),
        format!("showcase-{FORWARDING_FIGURE}.svg"),
        format!("showcase-{INVOKER_FIGURE}.png"),
        format!("showcase-{INVOKER_FIGURE}.svg"),
        "showcase.cmd".into(),
    ] {
        assert!(dir.join(&f).metadata().unwrap().len() > 10, "{f}");
    }
    assert!(namespaces("showcase").is_empty());
    assert!(!pins("showcase"));
    // `report` redraws the plots from the file.
    let json = dir.join("showcase.json");
    let v = common::json(
        &run(&["report", "--json", json.to_str().unwrap()]),
        "report",
    );
    assert_eq!(v["plots"].as_array().unwrap().len(), 4);
}

#[test]
fn ctrl_c_removes_the_lab() {
    if !privileged("ctrl_c_removes_the_lab") {
        return;
    }
    let dir = tmp("ctrlc");
    let f = topology_file(&dir, "tctrlc", &pair_topology("tctrlc"));
    let mut child = KillOnDrop(spawn(&["lab", "up", "--foreground", &f], Stdio::null()));
    wait_for("the lab", Duration::from_secs(20), || {
        namespaces("tctrlc").len() == 2
    });
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGINT).unwrap();
    let st = wait_child(&mut child.0, Duration::from_secs(20));
    assert!(st.success());
    assert!(namespaces("tctrlc").is_empty());
    assert!(!Path::new("/run/peregrine/labs/tctrlc.json").exists());
}

/// Kills the child if the test fails before it does, so no run outlives it.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGINT);
            let _ = wait_child(&mut self.0, Duration::from_secs(20));
        }
    }
}

fn wait_child(c: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let end = Instant::now() + timeout;
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > end {
            let _ = c.kill();
            panic!("child did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigkill_leaves_stale_state_that_the_next_run_removes() {
    if !privileged("sigkill_leaves_stale_state_that_the_next_run_removes") {
        return;
    }
    let dir = tmp("kill");
    // A benchmark mid-run: lab, XDP sinks, the generator anchored on lo, pins.
    let bench = ["bench", "gen", "--duration", "3", "--out"];
    let mut child = KillOnDrop(spawn(
        &with(&bench, &[dir.to_str().unwrap()]),
        Stdio::null(),
    ));
    wait_for("the benchmark's pins", Duration::from_secs(30), || {
        pins("benchgen")
    });
    std::thread::sleep(Duration::from_millis(500));
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGKILL).unwrap();
    wait_child(&mut child.0, Duration::from_secs(10));
    assert_eq!(namespaces("benchgen").len(), 2, "SIGKILL cannot clean up");
    let list = run(&["lab", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|l| l["name"] == "benchgen" && l["stale"] == true),
        "{v}"
    );

    // The next run finds and removes it.
    let f = topology_file(&dir, "tnext", &pair_topology("tnext"));
    ok(&run(&["lab", "up", &f]), "lab up after SIGKILL");
    assert!(namespaces("benchgen").is_empty());
    assert!(!pins("benchgen"));
    assert!(!Path::new("/run/peregrine/labs/benchgen.json").exists());
    lab_down_leaves_nothing("tnext");
}

#[test]
fn bad_input_gets_one_line_errors_and_changes_nothing() {
    if !privileged("bad_input_gets_one_line_errors_and_changes_nothing") {
        return;
    }
    let dir = tmp("bad");
    // A malformed topology file.
    let f = topology_file(
        &dir,
        "broken",
        "name = \"tbad\"\n[[host]]\nname = \"a\"\n[[link]]\na = \"a:eth0\"\nb = \"ghost:eth0\"\n",
    );
    assert_one_line_error(&run(&["lab", "up", &f]), "no host named \"ghost\"");
    let f2 = topology_file(&dir, "syntax", "name = \"tbad\"\n[[host]\n");
    assert_one_line_error(&run(&["lab", "up", &f2]), "line 2");
    assert!(namespaces("tbad").is_empty());
    assert_one_line_error(
        &run(&["lab", "up", "/nonexistent.toml"]),
        "no such file and not a built-in",
    );

    // A lab for the rest; a second `lab up` of it clashes.
    let good = topology_file(&dir, "tbad", &pair_topology("tbad"));
    assert!(run(&["lab", "up", &good]).status.success());
    let before = namespaces("tbad");
    assert_one_line_error(&run(&["lab", "up", &good]), "lab \"tbad\" already exists");
    assert_eq!(namespaces("tbad"), before);

    // An unknown interface.
    assert_one_line_error(
        &gen_in_tbad("a:nope0", "198.18.0.2", &["--count", "10"]),
        "nope0",
    );
    // A kernel/device feature that is missing: native XDP on loopback.
    assert_one_line_error(
        &gen_in_tbad("a:eth0", "198.18.0.2", &["--count", "10", "--sink", "b:lo"]),
        "no native XDP",
    );
    // Addresses outside the lab ranges are never sent to.
    assert_one_line_error(
        &gen_in_tbad(
            "a:eth0",
            "10.1.2.3",
            &["--src", "198.18.0.1", "--count", "10"],
        ),
        "outside 198.18.0.0/15",
    );
    assert_one_line_error(
        &gen_in_tbad(
            "a:eth0",
            "198.18.0.2",
            &["--count", "10", "--rate", "5 parsecs"],
        ),
        "unknown unit",
    );
    assert_one_line_error(
        &gen_in_tbad("a:eth0", "198.18.0.2", &[]),
        "--count or --duration",
    );
    assert_one_line_error(
        &run(&[
            "gen",
            "--lab",
            "nolab",
            "--from",
            "a:eth0",
            "--to",
            "198.18.0.2",
            "--count",
            "1",
        ]),
        "no lab named",
    );
    // Nothing was left attached by the failed runs: a clean run still works.
    let out = gen_in_tbad(
        "a:eth0",
        "198.18.0.2",
        &["--count", "1000", "--sink", "b:eth0", "--json"],
    );
    let v = json(&out, "gen --json");
    // gen --json prints a peregrine.result/1 file: one run, one trial.
    let t = &v["runs"][0]["trials"][0];
    assert_eq!(t["offered_packets"], 1000, "{v}");
    assert_eq!(t["delivered_packets"], 1000, "{v}");
    lab_down_leaves_nothing("tbad");
}

fn ping_sink_from_gen() -> bool {
    ping_in("chain", "gen", "198.19.0.1", &["-W", "2"])
}

/// Packets the router counted under `action` at port in0 (`router stats --json`).
fn in0_rx(action: &str) -> u64 {
    let out = run(&[
        "router", "stats", "--lab", "chain", "--host", "dut", "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let in0 = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == "in0")
        .cloned()
        .unwrap();
    in0["rx"][action]["packets"].as_u64().unwrap()
}

#[test]
fn router_and_chain_commands_work_and_leave_nothing() {
    if !privileged("router_and_chain_commands_work_and_leave_nothing") {
        return;
    }
    let chain_file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/chain.toml");
    assert!(run(&["lab", "up", "chain"]).status.success());
    let attach = [
        "router", "attach", "in0", "out0", "--lab", "chain", "--host", "dut",
    ];
    ok(&run(&attach), "router attach");
    assert_one_line_error(&run(&attach), "in0 is already a port");
    assert!(ping_sink_from_gen(), "ping through the data plane");
    assert!(in0_rx("forward") >= 2, "the router forwarded the ping");
    let detach = ["router", "detach", "--lab", "chain", "--host", "dut"];
    ok(&run(&detach), "router detach");
    assert!(!Path::new("/sys/fs/bpf/peregrine/chain/dp-dut").exists());
    assert_one_line_error(&run(&detach), "no router attached");

    ok(&run(&["chain", "apply", chain_file]), "chain apply");
    assert!(ping_sink_from_gen(), "ping through the data plane");
    assert!(in0_rx("steer") >= 2, "the ping entered the chain");
    // Per-function counters: c1 reflected the pings, c2 forwarded them.
    let st = json(
        &run(&["chain", "stats", chain_file, "--json"]),
        "chain stats --json",
    );
    let fns = st["functions"].as_array().unwrap();
    assert_eq!(fns.len(), 2, "{st}");
    for f in fns {
        assert!(f["packets"].as_u64().unwrap() >= 2, "{st}");
        assert!(f["sent"].as_u64().unwrap() >= 2, "{st}");
    }
    let out = run(&["chain", "stats", chain_file, "-c", "2", "-i", "200ms"]);
    ok(&out, "chain stats -c 2");
    assert!(String::from_utf8_lossy(&out.stdout).contains("packets/s"));
    assert!(run(&["chain", "remove", chain_file]).status.success());

    let dir = tmp("chainbad");
    let bad = topology_file(&dir, "badchain", "lab = \"chain\"\nrouter = \"dut\"\nports = [\"in0\"]\n[[chain]]\nname = \"x\"\nmatch = { dst = \"198.19.0.0/16\" }\nhops = [\"c9\"]\n");
    assert_one_line_error(&run(&["chain", "apply", &bad]), "hop \"c9\" has no [[nf]]");
    lab_down_leaves_nothing("chain");
}

/// `faas load` from host a of lab "tfcli" to b's `functions`, plus `extra`.
fn open_load_in_tfcli(functions: &str, extra: &[&str]) -> Output {
    run(&with(&faas_load_in("tfcli", functions), extra))
}

/// `faas serve` and the open-loop `faas load` as a user runs them: every
/// reply checked, Prometheus counters moving while the load runs, the
/// server's count equal to the client's; a function the open loop cannot
/// check is refused in one line; nothing left behind.
#[test]
fn faas_serve_and_open_loop_load_from_the_cli() {
    if !privileged("faas_serve_and_open_loop_load_from_the_cli") {
        return;
    }
    pair_lab_up("tfcli");
    let server = spawn(
        &with(
            &faas_serve_in("tfcli", "1232=reverse"),
            &[
                "--cpus",
                "1",
                "--duration",
                "6",
                "--frames",
                "16384",
                "--ring",
                "4096",
                "--json",
            ],
        ),
        Stdio::piped(),
    );
    std::thread::sleep(Duration::from_millis(1000));
    let scraper = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(1500));
        scrape("127.0.0.1:19466")
    });
    let load = open_load_in_tfcli(
        "1232=reverse",
        &[
            "--rate",
            "100kpps",
            "--duration",
            "2",
            "--metrics",
            "127.0.0.1:19466",
            "--json",
        ],
    );
    ok(&load, "faas load");
    // The load's JSON is a peregrine.result/1 file, as for every command
    // that measures: requests offered, correct replies delivered.
    let out: serde_json::Value = serde_json::from_slice(&load.stdout).unwrap();
    assert_eq!(out["schema"], "peregrine.result/1", "{out}");
    let r = &out["runs"][0]["trials"][0];
    let requests = r["offered_packets"].as_u64().unwrap();
    assert!(requests > 150_000, "{r}");
    assert_eq!(r["wrong"], 0, "{r}");
    // A VM stall longer than the server's rings (40 ms here) would drop
    // requests before the server sees them; none is allowed beyond 0.1%.
    let responses = r["delivered_packets"].as_u64().unwrap();
    assert!(requests - responses <= requests / 1000, "{r}");
    assert!(r["loss_ratio"].as_f64().unwrap() <= 0.001, "{r}");
    let metrics = scraper.join().unwrap();
    let live = metrics
        .lines()
        .find_map(|l| l.strip_prefix("peregrine_faas_load_responses_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(live > 0.0, "counters move while the load runs: {metrics}");
    let out = server.wait_with_output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["replies"].as_u64().unwrap(), responses, "{s}");
    assert_eq!(s["tx_ring_full"], 0, "{s}");
    let refused = open_load_in_tfcli("1233=sha256", &["--rate", "1000", "--duration", "1"]);
    assert_one_line_error(&refused, "sha256 needs the closed loop");
    lab_down_leaves_nothing("tfcli");
}

/// `faas serve` on host b of `lab` serving `functions`.
fn faas_serve_in<'a>(lab: &'a str, functions: &'a str) -> [&'a str; 8] {
    [
        "faas",
        "serve",
        "--lab",
        lab,
        "--host",
        "b",
        "--functions",
        functions,
    ]
}

/// Asserts exit status `code` (and prints stderr if not).
fn assert_code(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: stdout {} stderr {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Usage errors exit 2, clap's and ours alike; no subcommand prints the
/// usage (exit 2); units are parsed as docs/CLI.md says.
#[test]
fn usage_errors_exit_2() {
    /// `faas load` to 198.18.0.2 (no lab) calling `functions`, plus `extra`.
    fn load(functions: &'static str, extra: &[&'static str]) -> Vec<&'static str> {
        let args = [
            "faas",
            "load",
            "--to",
            "198.18.0.2",
            "--functions",
            functions,
        ];
        with(&args, extra)
    }
    /// `faas serve` of 1=echo (no lab), plus `extra`.
    fn serve(extra: &[&'static str]) -> Vec<&'static str> {
        with(&["faas", "serve", "--functions", "1=echo"], extra)
    }
    let none = run(&[]);
    assert_code(&none, 2, "no subcommand");
    assert!(String::from_utf8_lossy(&none.stdout).contains("Usage: peregrine"));
    for (args, needle) in [
        (load("1=echo", &["--rate", "fast"]), "--rate"),
        (load("1=echo", &["--duration", "5 parsecs"]), "--duration"),
        (load("1=echo", &["--max-loss", "2"]), "--max-loss"),
        (serve(&["--backend", "dpdk"]), "--backend"),
        (vec!["router", "stats", "-c", "0"], "--count"),
        (
            vec!["router", "attach", "eth0", "--mode", "turbo"],
            "--mode",
        ),
        (vec!["lab", "down"], "<NAME>"),
    ] {
        let out = run(&args);
        assert_code(&out, 2, &args.join(" "));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}"
        );
    }
    // A WebAssembly module that does not parse is refused before serving.
    let scratch = tmp("wasm");
    let bad_wat = scratch.join("bad.wat");
    std::fs::write(&bad_wat, "(module (func").unwrap();
    let bad_wasm = format!("1=wasm:{}", bad_wat.display());
    let files = tmp("exit2");
    let dir_arg = files.to_str().unwrap().to_string();
    let big = files.join("big.toml");
    std::fs::write(&big, "[[rule]]\nrate = \"999999999999Gbit\"\n").unwrap();
    let big = big.to_str().unwrap().to_string();
    let dup = files.join("dup.toml");
    std::fs::write(
        &dup,
        "[[rule]]\ndst = \"198.18.0.0/24\"\nrate = \"1Mbit\"\n[[rule]]\ndst = \"198.18.0.0/24\"\nrate = \"1Mbit\"\n",
    )
    .unwrap();
    let dup = dup.to_str().unwrap().to_string();
    // Our own validation: one line, exit 2.
    for (args, needle) in [
        (
            vec!["faas", "serve", "--functions", bad_wasm.as_str()],
            "bad.wat: expected",
        ),
        (
            load("1=wasm:/nonexistent/f.wat", &[]),
            "/nonexistent/f.wat: No such file",
        ),
        (
            vec!["faas", "load", "--to", "10.0.0.1", "--functions", "1=echo"],
            "outside 198.18.0.0/15",
        ),
        (load("1=nope", &[]), "unknown function \"nope\""),
        // 1M and 500ms parse; what is missing is the lab host.
        (
            load("1=echo", &["--rate", "1M", "--duration", "500ms"]),
            "give --lab and --host",
        ),
        (serve(&["--threads", "0"]), "--threads 0"),
        (serve(&["--cpus", "999"]), "CPU 999 does not exist"),
        (
            serve(&["--backend", "socket", "--threads", "2"]),
            "use --backend mmsg",
        ),
        (
            vec!["router", "stats", "--lab", "no-such-lab", "--host", "a"],
            "no-such-lab",
        ),
        // Issue 28: one rule for every command (usage and input errors
        // exit 2); these exited 1, or named no file, or clipped a rate.
        (
            vec!["qos", "apply", "--iface", "lo", "/nonexistent/q.toml"],
            "reading /nonexistent/q.toml",
        ),
        (
            vec!["chain", "apply", "/nonexistent/c.toml"],
            "reading /nonexistent/c.toml",
        ),
        (vec!["lab", "up", dir_arg.as_str()], "Is a directory"),
        (
            vec![
                "quic",
                "serve",
                "--listen",
                "198.18.0.1:4433",
                "--memory",
                "f=1",
                "--cert",
                "/nonexistent/c.pem",
                "--key",
                "/nonexistent/k.pem",
            ],
            "/nonexistent/c.pem",
        ),
        (
            vec![
                "qos", "rule", "add", "--iface", "nosuch0", "--rate", "1Mbit",
            ],
            "no interface \"nosuch0\"",
        ),
        (
            vec!["qos", "apply", "--iface", "lo", big.as_str()],
            "too large",
        ),
        (
            vec!["qos", "apply", "--iface", "lo", dup.as_str()],
            "dup.toml: rule 2: matches exactly",
        ),
        (
            vec![
                "faas",
                "serve",
                "--iface",
                "lo",
                "--functions",
                "1=echo",
                "--ring",
                "3",
            ],
            "ring 3 must be a power of two",
        ),
    ] {
        let out = run(&args);
        assert_code(&out, 2, &args.join(" "));
        assert_one_line_error(&out, needle);
    }
}

/// Man pages and completions come out of the binary (setup.sh installs them).
#[test]
fn man_pages_and_completions_are_generated() {
    let dir = tmp("man");
    let out = run(&["man", "--out", dir.to_str().unwrap()]);
    assert_code(&out, 0, "man");
    for page in [
        "peregrine.1",
        "peregrine-faas-load.1",
        "peregrine-router-stats.1",
        "peregrine-chain-stats.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    let page = std::fs::read_to_string(dir.join("peregrine.1")).unwrap();
    assert!(page.contains(".TH peregrine 1"), "{page}");
    let faas = std::fs::read_to_string(dir.join("peregrine-faas-load.1")).unwrap();
    assert!(faas.contains("max\\-loss"), "{faas}");
    let out = run(&["completions", "bash"]);
    assert_code(&out, 0, "completions");
    assert!(String::from_utf8_lossy(&out.stdout).contains("complete -F"));
    for shell in ["bash", "zsh"] {
        let out = run(&["completions", shell]);
        assert_code(&out, 0, shell);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("router"),
            "{shell}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every subcommand and every argument (flags and positionals) has help,
/// as `-h` shows it: each entry of a Commands, Arguments or Options list
/// has text beside it (or on the next line), and not only `[default: ..]`.
#[test]
fn every_argument_has_help() {
    fn walk(path: &mut Vec<String>, missing: &mut Vec<String>) {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("-h");
        let out = run(&args);
        assert_code(&out, 0, &args.join(" "));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.contains("Usage: peregrine"), "{args:?}: {text}");
        let lines: Vec<&str> = text.lines().collect();
        let mut section = "";
        let mut subcommands = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let indent = line.len() - line.trim_start().len();
            if indent == 0 {
                section = line.trim_end();
                continue;
            }
            let listed = ["Commands:", "Arguments:", "Options:"].contains(&section);
            if !listed || indent >= 10 || line.trim().is_empty() {
                continue;
            }
            let entry = line.trim();
            let (spec, help) = match entry.split_once("  ") {
                Some((spec, help)) => (spec, help.trim()),
                None => {
                    let next = lines.get(i + 1).copied().unwrap_or("");
                    let next_indent = next.len() - next.trim_start().len();
                    (entry, if next_indent >= 10 { next.trim() } else { "" })
                }
            };
            if help.is_empty() || help.starts_with('[') {
                missing.push(format!("peregrine {} {spec}", path.join(" ")));
            }
            if section == "Commands:" && spec != "help" {
                subcommands.push(spec.to_string());
            }
        }
        for sub in subcommands {
            path.push(sub);
            walk(path, missing);
            path.pop();
        }
    }
    let mut missing = Vec::new();
    walk(&mut Vec::new(), &mut missing);
    // The hidden commands, which no Commands list shows.
    for hidden in ["man", "completions"] {
        walk(&mut vec![hidden.to_string()], &mut missing);
    }
    assert!(missing.is_empty(), "arguments without help: {missing:#?}");
}

/// Exit status of `faas load` (no replies, loss above --max-loss) and of a
/// router attach that does not take; live Prometheus endpoints of `faas
/// serve`, `faas load` and `router stats` pass `promtool check metrics`;
/// `router stats --watch --json` prints one JSON object per sample.
#[test]
fn exit_status_and_live_metrics_pass_promtool() {
    if !privileged("exit_status_and_live_metrics_pass_promtool") {
        return;
    }
    pair_lab_up("tcode");
    let load = |functions: &str, extra: &[&str]| {
        let args = with(
            &faas_load_in("tcode", functions),
            &["--duration", "1s", "--connections", "4"],
        );
        run(&with(&args, extra))
    };
    // Nobody serves: no replies, exit 1.
    let out = load("1232=reverse", &["--json"]);
    assert_code(&out, 1, "load without a server");
    assert_one_line_error(&out, "no replies from 198.18.0.2");

    let server = spawn(
        &with(
            &faas_serve_in("tcode", "1232=reverse"),
            &[
                "--backend",
                "mmsg",
                "--duration",
                "10s",
                "--metrics",
                "127.0.0.1:19470",
                "--json",
            ],
        ),
        Stdio::piped(),
    );
    wait_for("the server's metrics", Duration::from_secs(5), || {
        !scrape("127.0.0.1:19470").is_empty()
    });
    // Half the connections send to a port nobody serves: each loses one
    // request a second (the timeout), above a tolerance of none.
    let out = load("1232=reverse,1233=echo", &["--json", "--max-loss", "0"]);
    assert_code(&out, 1, "load with half unanswered");
    assert_one_line_error(&out, "above --max-loss");
    let out = load(
        "1232=reverse,1233=echo",
        &["--max-loss", "1%", "--metrics", "127.0.0.1:19472"],
    );
    assert_code(&out, 0, "load within --max-loss");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("responses") && table.contains("p99"),
        "a table: {table}"
    );
    assert_live_metrics(
        "127.0.0.1:19470",
        "peregrine_faas_invoker_function_replies_total{backend=\"mmsg\",function=\"reverse\",port=\"1232\"}",
        "faas serve --metrics",
    );
    let out = server.wait_with_output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["replies"].as_u64().unwrap() > 0, "{s}");

    // The load client's endpoint, scraped while it runs.
    let mut client = spawn(
        &with(
            &faas_load_in("tcode", "1232=reverse"),
            &["--duration", "4s", "--metrics", "127.0.0.1:19473", "--json"],
        ),
        Stdio::null(),
    );
    assert_live_metrics(
        "127.0.0.1:19473",
        "peregrine_faas_load_requests_total",
        "faas load --metrics",
    );
    let _ = wait_child(&mut client, Duration::from_secs(10));

    // A router attach that cannot take (lo has no native XDP; asked for
    // XDP, since auto would pick tc, which lo takes) fails and leaves
    // nothing attached, not even on the port that took.
    let out = run(&[
        "router", "attach", "eth0", "lo", "--hook", "xdp", "--lab", "tcode", "--host", "a",
    ]);
    assert_code(&out, 1, "router attach on lo");
    // The XDP warning for eth0's peer (default offloads), then the error.
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("peregrine: warning: ") && lines[0].contains("--hook tc"),
        "{err}"
    );
    assert!(
        lines[1].starts_with("peregrine: error: ") && lines[1].contains("lo"),
        "{err}"
    );
    assert!(!Path::new("/sys/fs/bpf/peregrine/tcode/dp-a").exists());
    let ip = Command::new("ip")
        .args(["-n", "pg-tcode-a", "link", "show", "eth0"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&ip.stdout).contains("xdp"),
        "eth0 keeps no XDP"
    );

    // Router counters: JSON lines while watching, and the live endpoint.
    let out = run(&["router", "attach", "eth0", "--lab", "tcode", "--host", "a"]);
    assert_code(&out, 0, "router attach");
    let watcher = spawn(
        &[
            "router",
            "stats",
            "--lab",
            "tcode",
            "--host",
            "a",
            "-c",
            "4",
            "-i",
            "500ms",
            "--json",
            "--metrics",
            "127.0.0.1:19471",
        ],
        Stdio::piped(),
    );
    let _ = ping_in("tcode", "b", "198.18.0.1", &[]);
    std::thread::sleep(Duration::from_millis(600));
    assert_live_metrics(
        "127.0.0.1:19471",
        "peregrine_router_packets_total{port=\"eth0\",counter=\"rx_",
        "router stats --metrics",
    );
    let out = watcher.wait_with_output().unwrap();
    assert_code(&out, 0, "router stats --watch");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines[3]["time"].as_f64().unwrap() > lines[0]["time"].as_f64().unwrap());
    assert!(lines[0]["counters"][0]["pps"].is_number(), "{}", lines[0]);
    ok(
        &run(&["router", "detach", "--lab", "tcode", "--host", "a"]),
        "router detach",
    );
    lab_down_leaves_nothing("tcode");
}

/// `lab down --all` removes every lab: namespaces and pins.
#[test]
fn lab_down_all_removes_every_lab() {
    if !privileged("lab_down_all_removes_every_lab") {
        return;
    }
    pair_lab_up("tall");
    // A pin under the lab's directory, as a data plane leaves it.
    assert_code(
        &run(&["router", "attach", "eth0", "--lab", "tall", "--host", "a"]),
        0,
        "router attach",
    );
    assert!(!namespaces("tall").is_empty());
    assert!(pins("tall"));
    let out = run(&["lab", "down", "--all", "--json"]);
    assert_code(&out, 0, "lab down --all");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r["removed"].as_array().unwrap().iter().any(|n| n == "tall"),
        "{r}"
    );
    assert!(namespaces("tall").is_empty());
    assert!(!pins("tall"));
}

/// `peregrine args` started now in the background (killed after 60 s),
/// its stdout and stderr kept.
fn start_bounded(args: &[&str]) -> Child {
    Command::new("timeout")
        .args(["-s", "KILL", "60", env!("CARGO_BIN_EXE_peregrine")])
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Two `peregrine` runs started at the same time (`first` a moment
/// before `second`), each to its end; their outputs in that order.
fn race(first: &[&str], second: &[&str]) -> (Output, Output) {
    let (a, b) = (start_bounded(first), start_bounded(second));
    (a.wait_with_output().unwrap(), b.wait_with_output().unwrap())
}

/// Removes lab `name` when the test ends, passed or failed.
struct LabDownOnDrop(&'static str);

impl Drop for LabDownOnDrop {
    fn drop(&mut self) {
        let _ = run(&["lab", "down", self.0]);
    }
}

/// Lab `name` is whole (its record, live, both namespaces listed, a ping
/// across its link) or gone (no record, no namespace, no pin), never half
/// made; true when whole.
fn whole_or_gone(name: &str, what: &str) -> bool {
    let ns = namespaces(name);
    let list = json(&run(&["lab", "list", "--json"]), "lab list");
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .cloned();
    let recorded = Path::new("/run/peregrine/labs")
        .join(format!("{name}.json"))
        .exists();
    match listed {
        Some(l) => {
            assert!(recorded, "{what}: listed without its record: {l}");
            assert_eq!(l["stale"], false, "{what}: {l}");
            assert_eq!(l["owner_pid"], serde_json::Value::Null, "{what}: {l}");
            assert_eq!(ns.len(), 2, "{what}: namespaces {ns:?}");
            assert_eq!(l["namespaces"].as_array().unwrap().len(), 2, "{what}: {l}");
            assert!(
                ping_in(name, "a", "198.18.0.2", &["-W", "2"]),
                "{what}: the lab's link does not carry a ping"
            );
            true
        }
        None => {
            assert!(!recorded, "{what}: a record not listed");
            assert!(ns.is_empty(), "{what}: namespaces left: {ns:?}");
            assert!(!pins(name), "{what}: pins left");
            false
        }
    }
}

/// Two users (or scripts) run `lab up` of one lab at the same time, then
/// `lab down` of it at the same time, then `lab up` and `lab down` at the
/// same time, 5 rounds, each side starting first in turn. The lab lock
/// serialises them: of two `up`s exactly one builds the lab and the other
/// is refused in one line ("already exists"); of two `down`s exactly one
/// removes it (namespaces and the pins of a router attached in it) and
/// the other finds no lab; an `up` racing a `down` always builds, and the
/// `down` either removes the whole lab or finds none. After each race the
/// lab is whole or gone, never half made; a last `lab down` leaves no
/// namespace and no pin.
#[test]
fn racing_lab_up_and_down_leave_a_whole_lab_or_none() {
    if !privileged("racing_lab_up_and_down_leave_a_whole_lab_or_none") {
        return;
    }
    const LAB: &str = "tlabrace";
    let dir = tmp("labrace");
    let f = topology_file(&dir, LAB, &pair_topology(LAB));
    let _ = run(&["lab", "down", LAB]);
    let _down = LabDownOnDrop(LAB);
    let (up, down) = (["lab", "up", f.as_str()], ["lab", "down", LAB]);
    let router = ["router", "attach", "eth0", "--lab", LAB, "--host", "a"];
    let mut down_first = 0;
    for round in 0..5 {
        let what = format!("round {round}, two ups");
        let (a, b) = race(&up, &up);
        assert!(
            a.status.success() != b.status.success(),
            "{what}: exactly one builds: {:?} {:?}",
            text(&a.stderr),
            text(&b.stderr)
        );
        assert_one_line_error(
            if a.status.success() { &b } else { &a },
            &format!("lab \"{LAB}\" already exists"),
        );
        assert!(whole_or_gone(LAB, &what), "{what}: no lab");
        ok(&run(&router), "router attach");
        assert!(pins(LAB), "{what}: the router's pins");

        let what = format!("round {round}, two downs");
        let (a, b) = race(&down, &down);
        assert!(
            a.status.success() != b.status.success(),
            "{what}: exactly one removes: {:?} {:?}",
            text(&a.stderr),
            text(&b.stderr)
        );
        assert_one_line_error(
            if a.status.success() { &b } else { &a },
            &format!("no lab named \"{LAB}\""),
        );
        assert!(!whole_or_gone(LAB, &what), "{what}: the lab stayed");

        let what = format!("round {round}, up and down");
        let (u, d) = if round % 2 == 0 {
            race(&up, &down)
        } else {
            let (d, u) = race(&down, &up);
            (u, d)
        };
        ok(&u, &format!("{what}: lab up"));
        let whole = whole_or_gone(LAB, &what);
        if whole {
            down_first += 1;
            assert_one_line_error(&d, &format!("no lab named \"{LAB}\""));
            ok(&run(&router), "router attach");
            lab_down_leaves_nothing(LAB);
        } else {
            ok(&d, &format!("{what}: lab down"));
        }
        assert!(!whole_or_gone(LAB, &what), "{what}: after the last down");
        assert!(
            !Path::new("/run/peregrine/labs")
                .join(format!("{LAB}.json"))
                .exists(),
            "{what}: its record left"
        );
    }
    eprintln!("up and down: the down came first {down_first} of 5 times");
}
