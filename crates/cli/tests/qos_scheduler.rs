//! The egress scheduler (`qos serve`) outside labs, as users run it:
//! namespaces made with plain `ip`, veths at their default offloads (TCP
//! arrives with partial checksums), every command through its own `ip
//! netns exec`, real iperf3 flows. The scheduler is fed on R's a1 and
//! sends out of b0; its shares are read at the receivers.
//!
//! Topology (common::Topo): A (a0, 198.18.1.1) <-> (a1) R (b0) <-> (b1,
//! 198.18.2.1) B.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use peregrine_bpf::xdp;
use peregrine_host::netns;
use peregrine_lab::measure::CpuWait;

mod common;
use common::{
    iperf_bytes, json_u64, ok, pg_in, qos_class, qos_gold_silver_sent, qos_stats, sh, tmp,
    ChaosRng, QosServe, Topo,
};

/// Two classes of one level sharing a 100 Mbit/s link by weight; every
/// class gets its flows by port, TCP and UDP.
fn wfq_file(gold: u32, silver: u32) -> String {
    let mut f = format!(
        r#"
[scheduler]
egress = "b0"
rate = "100Mbit"

[[class]]
name = "gold"
rate = "1Mbit"
ceil = "100Mbit"
weight = {gold}

[[class]]
name = "silver"
rate = "1Mbit"
ceil = "100Mbit"
weight = {silver}
"#
    );
    for (class, port) in [("gold", 5401), ("silver", 5402)] {
        for proto in ["tcp", "udp"] {
            f += &format!(
                "\n[[filter]]\nclass = \"{class}\"\nproto = \"{proto}\"\ndport = {port}\n"
            );
        }
    }
    f
}

/// `peregrine qos serve` in R, once it says it is scheduling.
fn serve(t: &Topo, name: &str, toml: &str) -> QosServe {
    let f = tmp(name).keep().join("qos.toml");
    std::fs::write(&f, toml).unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &t.ns("R")])
        .arg(env!("CARGO_BIN_EXE_peregrine"))
        .args(["qos", "serve", f.to_str().unwrap(), "--iface", "a1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            eprintln!("qos serve: {line}");
            let _ = tx.send(line);
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("qos serve says it is scheduling");
    assert!(first.starts_with("scheduling "), "{first}");
    QosServe(child)
}

/// Seconds each iperf3 flow is measured (after one omitted).
const FLOW_SECS: u32 = 5;
/// The window read from the class counters, from 1.5 s into the flows
/// (wall time; the counters' own stamps give the exact window).
const WINDOW_SECS: f64 = 3.0;

/// What two concurrent flows got.
struct Flows {
    /// Bytes each receiver got (gold, silver) after the omitted second.
    received: (u64, u64),
    /// Bytes each class sent in the middle three seconds, when both flows
    /// surely ran (the clients start and stop some ms apart).
    window: (u64, u64),
    /// That window's length by the counters' stamps, seconds.
    window_secs: f64,
    /// Seconds the scheduler was runnable but not running in the window
    /// (run queue or hypervisor steal): the link time it could not fill.
    sched_wait_s: f64,
}

/// Two iperf3 flows from A to B at once, for 4 s after 1 s omitted, to
/// ports 5401 (gold) and 5402 (silver), `args` for both.
fn two_flows(t: &Topo, server: &QosServe, args: &[&str]) -> Flows {
    two_flows_each(t, server, [args, args])
}

/// `two_flows` with each flow's own arguments (gold's, silver's).
fn two_flows_each(t: &Topo, server: &QosServe, args: [&[&str]; 2]) -> Flows {
    let servers: Vec<Child> = [5401, 5402]
        .iter()
        .map(|p| {
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &t.ns("B"),
                    "timeout",
                    "30",
                    "iperf3",
                    "-s",
                    "-1",
                ])
                .args(["-p", &p.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let clients: Vec<_> = [5401, 5402]
        .iter()
        .zip(args)
        .map(|(p, args)| {
            let a = t.ns("A");
            let mut full: Vec<String> = ["ip", "netns", "exec", &a, "iperf3", "--json"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            full.extend(
                [
                    "-c",
                    "198.18.2.1",
                    "-p",
                    &p.to_string(),
                    "-t",
                    &FLOW_SECS.to_string(),
                    "-O",
                    "1",
                ]
                .map(String::from),
            );
            full.extend(args.iter().map(|s| s.to_string()));
            std::thread::spawn(move || {
                let v: Vec<&str> = full.iter().map(String::as_str).collect();
                sh(&v, Duration::from_secs(25))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // The wait is measured over more than the counters' window (from
    // before the first read to after the second), so no wait inside the
    // window goes unseen.
    let wait0 = CpuWait::of_process(server.0.id());
    let before = qos_gold_silver_sent(t);
    std::thread::sleep(Duration::from_secs_f64(WINDOW_SECS));
    let after = qos_gold_silver_sent(t);
    let sched_wait_s = CpuWait::of_process(server.0.id()).since(&wait0);
    let (window, window_secs) = after.since(&before);
    let got: Vec<u64> = clients
        .into_iter()
        .map(|c| {
            let o = c.join().unwrap();
            ok(&o, "iperf3 client");
            iperf_bytes(&o).0
        })
        .collect();
    for mut s in servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    Flows {
        received: (got[0], got[1]),
        window,
        window_secs,
        sched_wait_s,
    }
}

/// The least the link must carry in the window: 95 of its 100 Mbit/s
/// (the scheduler is work-conserving), less the share of the window the
/// scheduler waited for a CPU. On 2 vCPUs with four iperf3 processes
/// beside it that wait can be a quarter of the window; the scheduler
/// cannot send while it waits, and the figures say how long that was.
fn link_min_mbit(f: &Flows) -> f64 {
    95.0 * (1.0 - f.sched_wait_s / f.window_secs).max(0.0)
}

/// The most the 100 Mbit/s link may carry in the window: its rate, and
/// its burst once (15 KB by default; 10 ms of the rate allowed). The window is the counters' own (stamped at
/// each publication), so a late publication moves no bytes into it.
fn link_max_mbit(f: &Flows) -> f64 {
    100.0 * (1.0 + 0.010 / f.window_secs)
}

/// Frames on the link in the window, Ethernet header included, Mbit/s.
fn link_mbit(f: &Flows) -> f64 {
    assert!(
        f.window_secs > 0.0,
        "the scheduler published no counters in the window"
    );
    (f.window.0 + f.window.1) as f64 * 8.0 / f.window_secs / 1e6
}

fn share(gold: u64, silver: u64) -> f64 {
    gold as f64 / (gold + silver) as f64
}

/// WFQ 80/20 under overload, UDP and TCP (default offloads: TCP's partial
/// checksums are finished by the scheduler, or B would drop every
/// segment): the receivers' shares are within 2 points of the weights and
/// the link is not exceeded. A weight changed at runtime (`qos class
/// change`) takes effect; SIGTERM stops the scheduler and detaches it.
#[test]
fn weighted_shares_hold_for_udp_and_tcp_and_follow_a_change() {
    let Some(t) = Topo::privileged_up("pgs1") else {
        return;
    };
    let mut server = serve(&t, "wfq", &wfq_file(80, 20));

    // UDP, each flow offering the whole link (1400 B datagrams), then TCP.
    for (what, args) in [
        ("udp", &["-u", "-b", "100M", "-l", "1400"][..]),
        ("tcp", &[][..]),
        ("tcp, 4 flows per class", &["-P", "4"][..]),
    ] {
        let f = two_flows(&t, &server, args);
        let ((g, s), (wg, ws)) = (f.received, f.window);
        let link_mbit = link_mbit(&f);
        eprintln!(
            "{what}: in the window gold's share {:.4}, {link_mbit:.2} Mbit/s of frames, \
             scheduler waited {:.0} ms for a CPU; receivers: gold {g} B, silver {s} B, \
             gold's share {:.4}",
            share(wg, ws),
            f.sched_wait_s * 1e3,
            share(g, s)
        );
        assert!(
            (share(wg, ws) - 0.8).abs() <= 0.02,
            "{what} share {}",
            share(wg, ws)
        );
        assert!(
            (link_min_mbit(&f)..=link_max_mbit(&f)).contains(&link_mbit),
            "{what}: the link is 100 Mbit/s: {link_mbit} ({:.0} ms of the window waiting for a CPU)",
            f.sched_wait_s * 1e3
        );
        // Whole runs, start and stop skew included.
        assert!(
            (share(g, s) - 0.8).abs() <= 0.04,
            "{what} received {}",
            share(g, s)
        );
    }

    let st = qos_stats(&t);
    let classes = st["scheduler"]["classes"].as_array().unwrap();
    assert_eq!(classes.len(), 2, "{st}");
    assert!(st["scheduler"]["running"].as_bool().unwrap(), "{st}");
    for c in classes {
        assert!(c["sent_packets"].as_u64().unwrap() > 1000, "{c}");
    }
    assert!(st["steered"].as_u64().unwrap() > 0, "{st}");
    // Only packets sent before R knew B's MAC (the FIB lookup says "no
    // neighbour"; the kernel resolves it, forwarding them) go unscheduled.
    assert!(st["unscheduled"].as_u64().unwrap() <= 4, "{st}");

    // The class figures on the Prometheus endpoint (scraped inside R),
    // promtool-clean: sent per class and the queue depth gauge.
    common::assert_qos_metrics_in(
        &t.ns("R"),
        "127.0.0.1:19481",
        &[
            "peregrine_qos_packets_total{iface=\"a1\",rule=\"class:gold\",counter=\"sent\"}",
            "peregrine_qos_queue_depth{iface=\"a1\",rule=\"class:silver\",counter=\"sent\"}",
        ],
    );

    // Equal weights now, at runtime.
    let o = pg_in(
        &t.ns("R"),
        &[
            "qos", "class", "change", "gold", "--iface", "a1", "--rate", "1Mbit", "--ceil",
            "100Mbit", "--weight", "20",
        ],
    );
    ok(&o, "qos class change");
    std::thread::sleep(Duration::from_millis(200));
    let (g, s) = two_flows(&t, &server, &["-u", "-b", "100M", "-l", "1400"]).window;
    eprintln!("udp after the change: gold's share {:.4}", share(g, s));
    assert!((share(g, s) - 0.5).abs() <= 0.02, "share {}", share(g, s));

    // A file applied over a running scheduler would starve it: refused.
    let scratch = tmp("over");
    let f = scratch.join("qos.toml");
    std::fs::write(&f, "[[rule]]\nrate = \"1Gbit\"\n").unwrap();
    let o = pg_in(
        &t.ns("R"),
        &[
            "qos",
            "apply",
            f.to_str().unwrap(),
            "--iface",
            "a1",
            "--hook",
            "xdp",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("a scheduler (qos serve, pid"), "{err}");
    // A bad change is refused in one line and changes nothing.
    let o = pg_in(
        &t.ns("R"),
        &[
            "qos", "class", "add", "x", "--iface", "a1", "--rate", "1Mbit", "--parent", "nope",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(
        qos_stats(&t)["scheduler"]["classes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // SIGTERM: stops, detaches, leaves nothing on a1.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = server.0.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < end, "qos serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let left = netns::run_in(&t.ns("R"), || {
        xdp::attached_prog_id(peregrine_bpf::link::ifindex("a1").unwrap()).unwrap()
    })
    .unwrap();
    assert_eq!(left, None, "XDP left on a1");
    t.remove();
}

/// Killed with SIGKILL, the scheduler cannot clean up: its sockets close
/// and class traffic goes to the kernel (fails open, counted
/// unscheduled), the attachment shows as stale and `qos detach --all`
/// removes it.
#[test]
fn a_killed_scheduler_fails_open_and_is_found_stale() {
    let Some(t) = Topo::privileged_up("pgs2") else {
        return;
    };
    let mut server = serve(&t, "killed", &wfq_file(80, 20));
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    // Class traffic still gets through, by the kernel.
    let (g, s) = two_flows(&t, &server, &["-u", "-b", "20M", "-l", "1000"]).received;
    assert!(g > 1_000_000 && s > 1_000_000, "gold {g} silver {s}");
    let o = pg_in(&t.ns("R"), &["qos", "list", "--json"]);
    ok(&o, "qos list");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mine: Vec<_> = v["policers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["iface"] == "a1" && p["namespace"] == t.ns("R").as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{v}");
    assert_eq!(mine[0]["stale"], true, "{v}");
    let o = pg_in(&t.ns("R"), &["qos", "detach", "a1"]);
    ok(&o, "qos detach");
    t.remove();
}

/// Strict priority: gold at priority 0 (assured 40 Mbit/s) offered 30
/// Mbit/s keeps all of it while silver at priority 7 floods the 100
/// Mbit/s link; silver gets the rest.
#[test]
fn a_priority_class_keeps_its_rate_under_a_flood() {
    let Some(t) = Topo::privileged_up("pgs3") else {
        return;
    };
    let file = wfq_file(1, 1)
        .replace(
            "name = \"gold\"\nrate = \"1Mbit\"",
            "name = \"gold\"\npriority = 0\nrate = \"40Mbit\"",
        )
        .replace(
            "name = \"silver\"\nrate = \"1Mbit\"",
            "name = \"silver\"\npriority = 7\nrate = \"1Mbit\"",
        );
    let server = serve(&t, "prio", &file);
    let f = two_flows_each(
        &t,
        &server,
        [
            &["-u", "-b", "30M", "-l", "1000"],
            &["-u", "-b", "150M", "-l", "1000"],
        ],
    );
    let (g, s) = f.received;
    // FLOW_SECS at 30 Mbit/s of payload.
    let gold = g as f64 * 8.0 / f64::from(FLOW_SECS) / 1e6;
    let link = link_mbit(&f);
    eprintln!(
        "priority: gold received {gold:.2} Mbit/s of 30, silver {s} B; link {link:.2} Mbit/s"
    );
    assert!(gold >= 30.0 * 0.99, "gold kept {gold} of 30 Mbit/s");
    assert!(
        (link_min_mbit(&f)..=link_max_mbit(&f)).contains(&link),
        "link {link} ({:.0} ms of the window waiting for a CPU)",
        f.sched_wait_s * 1e3
    );
    // Silver's queue stayed full: XDP dropped most of its excess before
    // the scheduler copied it (drop_ahead), counted among silver's drops;
    // gold's queue never filled, so none of gold's were.
    let st = qos_stats(&t);
    let sched = &st["scheduler"];
    let early = json_u64(sched, "early_dropped_packets");
    let silver_dropped = json_u64(&qos_class(&st, "silver"), "dropped_packets");
    eprintln!("silver dropped {silver_dropped}, {early} of them early, at XDP");
    assert_eq!(
        json_u64(&qos_class(&st, "gold"), "dropped_packets"),
        0,
        "{sched}"
    );
    assert!(early > 0, "{sched}");
    t.remove();
}

/// IPv6 through the scheduler (hop limit, MACs, the partial checksums of
/// UDP and TCP over IPv6 finished): a class by destination prefix, iperf3
/// UDP at 20 Mbit/s delivered whole and TCP shaped to the 50 Mbit/s link.
#[test]
fn ipv6_udp_and_tcp_go_through_the_scheduler() {
    let Some(t) = Topo::privileged_up("pgs4") else {
        return;
    };
    let file = r#"
[scheduler]
egress = "b0"
rate = "50Mbit"
[[class]]
name = "v6"
rate = "50Mbit"
[[filter]]
class = "v6"
dst = "2001:db8:2::/64"
"#;
    let _server = serve(&t, "v6", file);
    let o = t.iperf3(&[
        "-6",
        "-c",
        "2001:db8:2::1",
        "-u",
        "-b",
        "20M",
        "-l",
        "1000",
        "-t",
        "3",
    ]);
    ok(&o, "iperf3 -6 -u");
    let (_, bps) = iperf_bytes(&o);
    eprintln!("v6 udp: {:.2} Mbit/s received of 20", bps / 1e6);
    assert!(bps >= 20e6 * 0.99, "v6 udp got {bps}");
    let o = t.iperf3(&["-6", "-c", "2001:db8:2::1", "-t", "3"]);
    ok(&o, "iperf3 -6");
    let (_, bps) = iperf_bytes(&o);
    eprintln!(
        "v6 tcp: {:.2} Mbit/s goodput on a 50 Mbit/s link",
        bps / 1e6
    );
    assert!((40e6..=50e6).contains(&bps), "v6 tcp goodput {bps}");
    let st = qos_stats(&t);
    let v6 = &st["scheduler"]["classes"][0];
    assert_eq!(v6["name"], "v6", "{st}");
    assert!(v6["sent_packets"].as_u64().unwrap() > 5000, "{st}");
    t.remove();
}

/// `qos serve` killed with SIGKILL at 50 random points (a third in its
/// first 10 ms, a third in its first 60, the rest in its first 1.2 s)
/// while A sends numbered datagrams of the gold class to B, each started
/// again at once (issue 28, chaos): every next scheduler takes over what
/// the dead one left on a1 (its XDP program and pins are stale, not in
/// the way), every datagram that arrives is intact, and after a last
/// clean stop nothing is left on a1.
#[test]
fn a_scheduler_killed_at_random_points_is_replaced_and_corrupts_nothing() {
    use std::net::UdpSocket;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let Some(t) = Topo::privileged_up("pgs9") else {
        return;
    };
    let scratch = tmp("chaos-sched");
    let f = scratch.join("qos.toml");
    std::fs::write(&f, wfq_file(80, 20)).unwrap();
    let spawn = || {
        Command::new("ip")
            .args(["netns", "exec", &t.ns("R")])
            .arg(env!("CARGO_BIN_EXE_peregrine"))
            .args(["qos", "serve", f.to_str().unwrap(), "--iface", "a1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Datagram i: "chaos NNNNNNNN " and then i's byte pattern, 600 B.
    let datagram = |i: u64| -> Vec<u8> {
        let mut d = format!("chaos {i:08} ").into_bytes();
        d.extend((0..585u64).map(|k| (i.wrapping_mul(31) + k) as u8));
        d
    };
    let rx = netns::run_in(&t.ns("B"), || UdpSocket::bind("198.18.2.1:5401"))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (right, wrong) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let receiver = {
        let (stop, right, wrong) = (stop.clone(), right.clone(), wrong.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !stop.load(Ordering::Relaxed) {
                let Ok(len) = rx.recv(&mut buf) else { continue };
                let i = std::str::from_utf8(&buf[6..14.min(len)])
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok());
                if i.is_some_and(|i| buf[..len] == datagram(i)[..]) {
                    right.fetch_add(1, Ordering::Relaxed);
                } else {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let sender = {
        let stop = stop.clone();
        let tx = netns::run_in(&t.ns("A"), || UdpSocket::bind("198.18.1.1:0"))
            .unwrap()
            .unwrap();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = tx.send_to(&datagram(i), "198.18.2.1:5401");
                i += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let mut rng = ChaosRng::seeded();
    let xdp_on_a1 = || {
        netns::run_in(&t.ns("R"), || {
            xdp::attached_prog_id(peregrine_bpf::link::ifindex("a1").unwrap()).unwrap()
        })
        .unwrap()
    };
    let mut killed_attached = 0;
    for k in 0..50u64 {
        let before = xdp_on_a1();
        let mut child = spawn();
        std::thread::sleep(Duration::from_millis(
            rng.below([10, 60, 1200][k as usize % 3]),
        ));
        if let Ok(Some(st)) = child.try_wait() {
            let mut e = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e);
            panic!("kill {k}: qos serve exited by itself ({st}): {e}");
        }
        // Killed after its own program replaced the dead one's (or took
        // the empty hook).
        let now = xdp_on_a1();
        killed_attached += u32::from(now.is_some() && now != before);
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(
        killed_attached > 0 && killed_attached < 50,
        "kill points cover both sides of the attach ({killed_attached} of 50 after it)"
    );
    // A last scheduler starts over what the 50 dead ones left, schedules,
    // and stops cleanly.
    let server = serve(&t, "chaos-last", &wfq_file(80, 20));
    let before = right.load(Ordering::Relaxed);
    assert!(
        peregrine_testbed::testing::wait_until(Duration::from_secs(5), || right
            .load(Ordering::Relaxed)
            >= before + 200),
        "datagrams through the last scheduler"
    );
    let gold = qos_gold_silver_sent(&t).gold;
    assert!(gold > 0, "the last scheduler sent the gold class");
    drop(server);
    stop.store(true, Ordering::Relaxed);
    sender.join().unwrap();
    receiver.join().unwrap();
    eprintln!(
        "50 kills ({killed_attached} after the attach): {} datagrams intact, {} wrong",
        right.load(Ordering::Relaxed),
        wrong.load(Ordering::Relaxed)
    );
    assert_eq!(wrong.load(Ordering::Relaxed), 0, "corrupted datagrams");
    assert_eq!(xdp_on_a1(), None, "XDP left on a1");
    t.remove();
}
