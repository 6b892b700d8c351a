//! The htb engine (`qos serve` with `[scheduler] engine = "htb"`) outside
//! labs, as users run it: namespaces made with plain `ip`, veths at kernel
//! defaults, every command through its own `ip netns exec`, real iperf3
//! flows. The policer meters on R's a1; HTB shapes b0, classified by the
//! tc-egress classifier. Shares are read from the classes' kernel counters
//! (`qos stats --json`).
//!
//! Topology (common::Topo): A (a0) <-> (a1) R (b0) <-> (b1) B.
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use peregrine_host::netns;

mod common;
use common::{ok, pg_in, qos_gold_silver_sent, sh_in, spawn_quiet, text, tmp, QosServe, Topo};

/// Two classes under a 50 Mbit/s link: gold assured 40, silver 10, both
/// may borrow up to the link; flows by port, TCP and UDP.
fn file(engine_line: &str) -> String {
    let mut f = format!(
        "[scheduler]\n{engine_line}\negress = \"b0\"\nrate = \"50Mbit\"\n\n\
         [[class]]\nname = \"gold\"\nrate = \"40Mbit\"\nceil = \"50Mbit\"\n\n\
         [[class]]\nname = \"silver\"\nrate = \"10Mbit\"\nceil = \"50Mbit\"\n"
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

/// `toml` written to a file of the test's own directory: its path.
fn write_file(name: &str, toml: &str) -> String {
    let f = tmp(name).keep().join("qos.toml");
    std::fs::write(&f, toml).unwrap();
    f.display().to_string()
}

/// `qos serve` started in R, once the tree is in place (bounded wait).
fn serve(t: &Topo, name: &str, toml: &str) -> QosServe {
    let f = write_file(name, toml);
    let child = Command::new("ip")
        .args(["netns", "exec", &t.ns("R")])
        .arg(env!("CARGO_BIN_EXE_peregrine"))
        .args(["qos", "serve", &f, "--iface", "a1"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let s = QosServe(child);
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if root_qdisc(t).contains("7067:") && stats(t)["scheduler"]["engine"] == "htb" {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("qos serve did not build its tree in 10 s");
}

fn stats(t: &Topo) -> serde_json::Value {
    let o = pg_in(&t.ns("R"), &["qos", "stats", "--iface", "a1", "--json"]);
    if !o.status.success() {
        return serde_json::Value::Null;
    }
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["policers"][0].clone()
}

/// `tc qdisc show dev b0` in R (the test reads what users would).
fn root_qdisc(t: &Topo) -> String {
    let o = sh_in(
        &t.ns("R"),
        &["tc", "qdisc", "show", "dev", "b0"],
        Duration::from_secs(5),
    );
    text(&o.stdout)
}

/// Programs at tcx egress of b0 in R.
fn egress_programs(t: &Topo) -> usize {
    netns::run_in(&t.ns("R"), || {
        let ifindex = peregrine_bpf::link::ifindex("b0").unwrap();
        peregrine_bpf::tcx::attached_ids(ifindex, peregrine_bpf::TcxDirection::Egress)
            .map(|v| v.len())
            .unwrap_or(0)
    })
    .unwrap()
}

/// iperf3 clients from A to one-off servers in B on `ports`, concurrently
/// for `secs`; `extra` after the client's arguments.
fn flows(t: &Topo, dst: &str, ports: &[u16], secs: u32, extra: &[&str]) -> Vec<Child> {
    let b = t.ns("B");
    let mut kids = Vec::new();
    for p in ports {
        kids.push(spawn_quiet(&[
            "ip",
            "netns",
            "exec",
            &b,
            "timeout",
            "30",
            "iperf3",
            "-s",
            "-1",
            "-p",
            &p.to_string(),
        ]));
    }
    std::thread::sleep(Duration::from_millis(400));
    let a = t.ns("A");
    let secs = secs.to_string();
    for p in ports {
        let port = p.to_string();
        let mut args = vec![
            "ip", "netns", "exec", &a, "timeout", "30", "iperf3", "-c", dst, "-p", &port, "-t",
            &secs,
        ];
        args.extend_from_slice(extra);
        kids.push(spawn_quiet(&args));
    }
    kids
}

fn reap(kids: Vec<Child>) {
    for mut k in kids {
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Ok(Some(_)) = k.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = k.kill();
        let _ = k.wait();
    }
}

/// The share of gold in the class counters over a `window` taken 1.5 s
/// into flows that run 5 s.
fn gold_share(t: &Topo, dst: &str, extra: &[&str]) -> (f64, f64) {
    let kids = flows(t, dst, &[5401, 5402], 5, extra);
    std::thread::sleep(Duration::from_millis(1500));
    let before = qos_gold_silver_sent(t);
    std::thread::sleep(Duration::from_secs(2));
    let ((g, s), secs) = qos_gold_silver_sent(t).since(&before);
    reap(kids);
    let (g, s) = (g as f64, s as f64);
    let total_mbit = (g + s) * 8.0 / secs / 1e6;
    (100.0 * g / (g + s), total_mbit)
}

#[test]
fn htb_shares_80_20_udp_and_tcp_ipv4_and_ipv6() {
    let Some(t) = Topo::privileged_up("qhtb-share") else {
        return;
    };
    let _s = serve(&t, "qhtb-share", &file("engine = \"htb\""));
    for (what, dst, extra) in [
        ("UDP IPv4", "198.18.2.1", vec!["-u", "-b", "60M"]),
        ("UDP IPv6", "2001:db8:2::1", vec!["-u", "-b", "60M"]),
        ("TCP IPv4", "198.18.2.1", vec![]),
        ("TCP IPv6", "2001:db8:2::1", vec![]),
    ] {
        let (share, mbit) = gold_share(&t, dst, &extra);
        eprintln!("{what}: gold {share:.1} %, link {mbit:.1} Mbit/s");
        assert!(
            (share - 80.0).abs() <= 2.0,
            "{what}: gold's share {share:.1} %, want 80 +- 2"
        );
        assert!(
            mbit > 40.0 && mbit < 55.0,
            "{what}: the link carried {mbit:.1} Mbit/s, want ~50"
        );
    }
}

#[test]
fn htb_class_change_under_traffic_takes_effect() {
    let Some(t) = Topo::privileged_up("qhtb-change") else {
        return;
    };
    let _s = serve(&t, "qhtb-change", &file("engine = \"htb\""));
    let kids = flows(&t, "198.18.2.1", &[5402], 8, &["-u", "-b", "60M"]);
    let rate = |t: &Topo| {
        let a = qos_gold_silver_sent(t);
        std::thread::sleep(Duration::from_millis(1500));
        let ((_, silver), secs) = qos_gold_silver_sent(t).since(&a);
        silver as f64 * 8.0 / secs / 1e6
    };
    std::thread::sleep(Duration::from_millis(1000));
    let before = rate(&t);
    let o = pg_in(
        &t.ns("R"),
        &[
            "qos", "class", "change", "silver", "--iface", "a1", "--rate", "10Mbit", "--ceil",
            "20Mbit",
        ],
    );
    ok(&o, "qos class change");
    std::thread::sleep(Duration::from_millis(500));
    let after = rate(&t);
    reap(kids);
    eprintln!("silver alone: {before:.1} Mbit/s borrowing up to 50, {after:.1} with ceil 20");
    assert!(before > 44.0 && before < 53.0, "{before}");
    assert!(after > 18.0 && after < 21.5, "{after}");
}

/// The htb engine and a tc router on the same ports, in both orders: the
/// router forwards a1 -> b0, and the tree on b0 still shapes what it
/// forwards (a port that shapes its egress delivers with
/// bpf_redirect_neigh, through its qdisc, not with bpf_redirect_peer,
/// which would skip it). After the engine stops, the router delivers with
/// bpf_redirect_peer again and keeps forwarding.
#[test]
fn htb_engine_shapes_what_a_tc_router_forwards_in_either_order() {
    let Some(t) = Topo::privileged_up("qhtb-rt") else {
        return;
    };
    let router = |args: &[&str]| {
        let mut a = vec!["router"];
        a.extend_from_slice(args);
        ok(&pg_in(&t.ns("R"), &a), &a.join(" "));
    };
    let forwarded = || {
        common::router_port_stats(&t, "a1")["rx"]["forward"]["packets"]
            .as_u64()
            .unwrap()
    };
    for order in ["router first", "engine first"] {
        let engine = if order == "router first" {
            router(&["attach", "--hook", "tc", "a1", "b0"]);
            serve(&t, "qhtb-rt", &file("engine = \"htb\""))
        } else {
            let s = serve(&t, "qhtb-rt", &file("engine = \"htb\""));
            router(&["attach", "--hook", "tc", "a1", "b0"]);
            s
        };
        let before = forwarded();
        let (share, mbit) = gold_share(&t, "198.18.2.1", &["-u", "-b", "60M"]);
        let by_router = forwarded() - before;
        eprintln!(
            "{order}: gold {share:.1} %, link {mbit:.1} Mbit/s, router forwarded {by_router}"
        );
        assert!(
            mbit > 40.0 && mbit < 55.0,
            "{order}: the tree carried {mbit:.1} Mbit/s of what the router forwarded, want ~50"
        );
        assert!(
            (share - 80.0).abs() <= 2.0,
            "{order}: gold's share {share:.1} %, want 80 +- 2"
        );
        assert!(
            by_router > 10_000,
            "{order}: the router forwarded {by_router}"
        );
        drop(engine);
        // Unshaped again: the router still forwards, now past the tree.
        let before = forwarded();
        assert!(
            t.ping("198.18.2.1"),
            "{order}: forwards after the engine stopped"
        );
        assert!(forwarded() > before, "{order}: by the router");
        router(&["detach"]);
    }
}

#[test]
fn htb_kill_9_then_detach_or_next_start_leaves_nothing() {
    let Some(t) = Topo::privileged_up("qhtb-kill") else {
        return;
    };
    for then in ["detach", "next start"] {
        let s = serve(&t, "qhtb-kill", &file("engine = \"htb\""));
        assert_eq!(egress_programs(&t), 1, "the classifier at b0's tcx egress");
        let mut s = std::mem::ManuallyDrop::new(s);
        s.0.kill().unwrap();
        s.0.wait().unwrap();
        let list = pg_in(&t.ns("R"), &["qos", "list"]);
        assert!(
            text(&list.stdout).contains("stale"),
            "{}",
            text(&list.stdout)
        );
        if then == "detach" {
            ok(
                &pg_in(&t.ns("R"), &["qos", "detach", "a1"]),
                "qos detach a1",
            );
        } else {
            // The next start takes the killed one's place; its stop removes all.
            drop(serve(&t, "qhtb-kill", &file("engine = \"htb\"")));
        }
        assert_engine_gone(&t, then);
    }
}

#[test]
fn htb_bad_files_are_refused_with_nothing_applied() {
    let Some(t) = Topo::privileged_up("qhtb-bad") else {
        return;
    };
    for (toml, want) in [
        (file("engine = \"hfsc\""), "engine \"hfsc\""),
        (
            file("engine = \"htb\"")
                .replace("name = \"silver\"", "name = \"silver\"\npriority = 9"),
            "priority 9",
        ),
        (
            format!("hook = \"xdp\"\n{}", file("engine = \"htb\"")),
            "tc hook",
        ),
        (
            file("engine = \"htb\"").replace(
                "rate = \"10Mbit\"\nceil = \"50Mbit\"",
                "rate = \"10Mbit\"\nceil = \"5Mbit\"",
            ),
            "ceil",
        ),
    ] {
        let f = write_file("qhtb-bad", &toml);
        let o = pg_in(&t.ns("R"), &["qos", "serve", &f, "--iface", "a1"]);
        assert!(!o.status.success(), "{toml}");
        let e = text(&o.stderr);
        assert!(e.contains(want), "{e} (want {want})");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(!root_qdisc(&t).contains("htb"));
        assert_eq!(egress_programs(&t), 0);
        let list = pg_in(&t.ns("R"), &["qos", "list", "--json"]);
        assert!(!text(&list.stdout).contains(&t.ns("R")));
    }
}

#[test]
fn htb_refuses_to_replace_a_users_root_qdisc() {
    let Some(t) = Topo::privileged_up("qhtb-user") else {
        return;
    };
    let r = t.ns("R");
    let add = sh_in(
        &r,
        &[
            "tc", "qdisc", "add", "dev", "b0", "root", "handle", "1:", "tbf", "rate", "10mbit",
            "burst", "32kbit", "latency", "400ms",
        ],
        Duration::from_secs(5),
    );
    ok(&add, "tc qdisc add tbf");
    let f = write_file("qhtb-user", &file("engine = \"htb\""));
    let o = pg_in(&r, &["qos", "serve", &f, "--iface", "a1"]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("root qdisc peregrine did not make"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(root_qdisc(&t).contains("tbf 1:"), "{}", root_qdisc(&t));
    assert_eq!(egress_programs(&t), 0);
    let list = pg_in(&r, &["qos", "list", "--json"]);
    assert!(!text(&list.stdout).contains(&r), "nothing left on a1");
}

/// b0 with two TX queues: one HTB at the root still shapes every flow
/// (an HTB per queue under mq cannot be told its flows from tcx egress:
/// the TX queue is picked after it).
#[test]
fn htb_two_tx_queues_one_root_htb() {
    let Some(t) = Topo::privileged_up("qhtb-mq") else {
        return;
    };
    let (r, b) = (t.ns("R"), t.ns("B"));
    common::ip(&["-n", &r, "link", "del", "b0"]);
    common::ip(&[
        "link",
        "add",
        "b0",
        "netns",
        &r,
        "numtxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        "b1",
        "netns",
        &b,
    ]);
    for (ns, dev, v4, v6) in [
        (&r, "b0", "198.18.2.2/24", "2001:db8:2::2/64"),
        (&b, "b1", "198.18.2.1/24", "2001:db8:2::1/64"),
    ] {
        common::ip(&["-n", ns, "addr", "add", v4, "dev", dev]);
        common::ip(&["-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
        common::ip(&["-n", ns, "link", "set", dev, "up"]);
    }
    common::ip(&["-n", &b, "route", "add", "default", "via", "198.18.2.2"]);
    let _s = serve(&t, "qhtb-mq", &file("engine = \"htb\""));
    let q = root_qdisc(&t);
    assert!(q.contains("htb 7067: root"), "{q}");
    let (share, mbit) = gold_share(&t, "198.18.2.1", &["-u", "-b", "30M", "-P", "4"]);
    eprintln!("two TX queues, 4 flows per class: gold {share:.1} %, link {mbit:.1} Mbit/s");
    assert!((share - 80.0).abs() <= 2.0, "gold's share {share:.1} %");
    assert!(mbit > 40.0 && mbit < 55.0, "{mbit}");
}

/// The htb engine's class limit (`htb_limits` in htb_kern_user.h): ids
/// 1..HTB_MAX_CLASSES-1.
const HTB_LIMIT: u32 = peregrine_bpf::policer::HTB_MAX_CLASSES - 1;

/// `n` classes `c1`..`cn` under a 2 Gbit/s link, each with two filters:
/// UDP to 198.18.2.1 port 20000+i and port 40000+i. With `afxdp`, the
/// AF_XDP engine's file instead.
fn many_classes(n: u32, engine: &str) -> String {
    let mut f = format!("[scheduler]\nengine = \"{engine}\"\negress = \"b0\"\nrate = \"2Gbit\"\n");
    for i in 1..=n {
        f += &format!("\n[[class]]\nname = \"c{i}\"\nrate = \"1Mbit\"\nceil = \"100Mbit\"\n");
    }
    for base in [20000, 40000] {
        for i in 1..=n.min(20000) {
            f += &format!(
                "\n[[filter]]\nclass = \"c{i}\"\nproto = \"udp\"\ndst = \"198.18.2.1\"\ndport = {}\n",
                base + i
            );
        }
    }
    f
}

/// Sends `count` UDP datagrams from A to 198.18.2.1:`port` (a kernel
/// socket in A).
fn udp_to(t: &Topo, port: u16, count: u32) {
    netns::run_in(&t.ns("A"), || {
        let s = std::net::UdpSocket::bind("198.18.1.1:0").unwrap();
        for _ in 0..count {
            s.send_to(&[0u8; 100], ("198.18.2.1", port)).unwrap();
        }
    })
    .unwrap();
}

/// Packets the kernel's HTB class `name` sent, from `qos stats --json`;
/// and how many classes the stats list.
fn class_sent(t: &Topo, name: &str) -> (u64, usize) {
    let st = stats(t);
    let classes = st["scheduler"]["classes"]
        .as_array()
        .unwrap_or_else(|| panic!("no classes in the stats"));
    let c = classes
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no class {name} in the stats"));
    (c["sent_packets"].as_u64().unwrap(), classes.len())
}

/// Waits (bounded) until class `name` has sent `want` packets; what it
/// sent by then.
fn wait_sent(t: &Topo, name: &str, want: u64) -> u64 {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let (sent, _) = class_sent(t, name);
        if sent >= want || Instant::now() > end {
            return sent;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// 1,200 classes and 2,400 filters: traffic to a few classes lands in
/// exactly those HTB classes (the kernel's counters through `qos stats
/// --json`), a class and a rule added at runtime work, the stop leaves
/// nothing; a file of one class more than an engine takes is refused in
/// one line naming the engine and its limit, with nothing applied.
#[test]
fn htb_thousand_classes_classify_and_over_the_limit_is_refused() {
    let Some(t) = Topo::privileged_up("qhtb-1k") else {
        return;
    };
    let s = serve(&t, "qhtb-1k", &many_classes(1200, "htb"));
    let q = sh_in(
        &t.ns("R"),
        &["tc", "class", "show", "dev", "b0"],
        Duration::from_secs(5),
    );
    // 1,200 classes and the link class.
    assert_eq!(text(&q.stdout).lines().count(), 1201);
    // The neighbour resolved first: no datagram waits for ARP.
    assert!(t.ping("198.18.2.1"));
    // (class, port, datagrams): c999 by its second filter.
    let sent = [
        ("c7", 20007, 10),
        ("c500", 20500, 20),
        ("c1200", 21200, 30),
        ("c999", 40999, 40),
    ];
    for (_, port, n) in sent {
        udp_to(&t, port, n as u32);
    }
    for (name, _, n) in sent {
        assert_eq!(wait_sent(&t, name, n), n, "class {name}");
    }
    let (c8, listed) = class_sent(&t, "c8");
    assert_eq!(
        (c8, listed),
        (0, 1200),
        "c8 sent nothing; every class listed"
    );
    let total: u64 = stats(&t)["scheduler"]["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sent_packets"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 100, "no datagram in another class");

    // An add the kernel refuses part-way leaves no class behind: the new
    // class (id 1201) gets its HTB class, then its pfifo's handle 75b1:
    // (0x7100 + 1201) is refused, taken by a qdisc put under c7 by hand.
    // Once that handle is free the same add succeeds.
    let tc_in_r = |args: &[&str]| {
        let o = sh_in(
            &t.ns("R"),
            &[&["tc"], args].concat(),
            Duration::from_secs(5),
        );
        assert!(o.status.success(), "tc {args:?}: {}", text(&o.stderr));
    };
    let c7_leaf = |handle: &str| {
        tc_in_r(&[
            "qdisc", "replace", "dev", "b0", "parent", "7067:7", "handle", handle, "pfifo",
            "limit", "1000",
        ])
    };
    c7_leaf("75b1:");
    let add_extra = || {
        pg_in(
            &t.ns("R"),
            &[
                "qos", "class", "add", "extra", "--iface", "a1", "--rate", "1Mbit", "--ceil",
                "100Mbit",
            ],
        )
    };
    let refused = add_extra();
    let err = text(&refused.stderr);
    assert!(
        !refused.status.success() && err.trim().lines().count() == 1,
        "{err}"
    );
    let q = sh_in(
        &t.ns("R"),
        &["tc", "class", "show", "dev", "b0"],
        Duration::from_secs(5),
    );
    assert_eq!(
        text(&q.stdout).lines().count(),
        1201,
        "the refused add left its class: {err}"
    );
    c7_leaf("7107:");

    // A class and a rule to it at runtime.
    ok(&add_extra(), "qos class add extra");
    ok(
        &pg_in(
            &t.ns("R"),
            &[
                "qos",
                "rule",
                "add",
                "--iface",
                "a1",
                "--proto",
                "udp",
                "--dst",
                "198.18.2.1",
                "--dport",
                "29999",
                "--class",
                "extra",
            ],
        ),
        "qos rule add --class extra",
    );
    udp_to(&t, 29999, 5);
    assert_eq!(wait_sent(&t, "extra", 5), 5, "class extra");
    assert_eq!(class_sent(&t, "extra").1, 1201);

    drop(s);
    let q = root_qdisc(&t);
    assert!(!q.contains("htb") && !q.contains("7067"), "{q}");
    let classes = sh_in(
        &t.ns("R"),
        &["tc", "class", "show", "dev", "b0"],
        Duration::from_secs(5),
    );
    assert_eq!(text(&classes.stdout).trim(), "", "no class left");
    for (dev, dir) in [("a1", "ingress"), ("b0", "egress")] {
        let f = sh_in(
            &t.ns("R"),
            &["tc", "filter", "show", "dev", dev, dir],
            Duration::from_secs(5),
        );
        assert_eq!(text(&f.stdout).trim(), "", "no filter at {dev} {dir}");
    }
    assert_eq!(egress_programs(&t), 0, "no classifier left");
    let ingress = netns::run_in(&t.ns("R"), || {
        let ifindex = peregrine_bpf::link::ifindex("a1").unwrap();
        peregrine_bpf::tcx::attached_ids(ifindex, peregrine_bpf::TcxDirection::Ingress)
            .map(|v| v.len())
            .unwrap_or(0)
    })
    .unwrap();
    assert_eq!(ingress, 0, "no policer left at a1");
    let list = pg_in(&t.ns("R"), &["qos", "list", "--json"]);
    assert!(
        !text(&list.stdout).contains(&t.ns("R")),
        "no pin left: {}",
        text(&list.stdout)
    );

    // One class over each engine's limit.
    let afxdp_limit = peregrine_bpf::policer::MAX_CLASSES - 1;
    for (engine, limit) in [("htb", HTB_LIMIT), ("afxdp", afxdp_limit)] {
        let f = write_file("qhtb-1k", &many_classes(limit + 1, engine));
        let o = pg_in(&t.ns("R"), &["qos", "serve", &f, "--iface", "a1"]);
        assert!(!o.status.success(), "{engine}: {} classes taken", limit + 1);
        let e = text(&o.stderr);
        let want = format!(
            "{} classes: the {engine} engine takes at most {limit}",
            limit + 1
        );
        assert!(e.contains(&want), "{e} (want {want})");
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(!root_qdisc(&t).contains("htb"));
        assert_eq!(egress_programs(&t), 0);
        let list = pg_in(&t.ns("R"), &["qos", "list", "--json"]);
        assert!(!text(&list.stdout).contains(&t.ns("R")));
    }
}

/// `tc -j <what> show dev <dev>` in R, as JSON (what a user reads),
/// without HTB's count of packets sent unclassified (a counter, not a
/// setting).
fn tc_json(t: &Topo, what: &str, dev: &str) -> serde_json::Value {
    let o = sh_in(
        &t.ns("R"),
        &["tc", "-j", what, "show", "dev", dev],
        Duration::from_secs(5),
    );
    ok(&o, &format!("tc -j {what} show dev {dev}"));
    let mut v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("tc -j {what} show dev {dev}: {e}: {}", text(&o.stdout)));
    for q in v.as_array_mut().into_iter().flatten() {
        if let Some(o) = q["options"].as_object_mut() {
            o.remove("direct_packets_stat");
        }
    }
    v
}

/// `tc class show dev <dev>` in R, sorted lines (tc has no JSON for
/// classes).
fn tc_classes(t: &Topo, dev: &str) -> Vec<String> {
    let o = sh_in(
        &t.ns("R"),
        &["tc", "class", "show", "dev", dev],
        Duration::from_secs(5),
    );
    ok(&o, &format!("tc class show dev {dev}"));
    let mut lines: Vec<String> = text(&o.stdout).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// Every qdisc's (kind, handle, parent) in a `tc -j qdisc show`.
fn kinds_handles_parents(qdiscs: &serde_json::Value) -> Vec<(String, String, String)> {
    qdiscs
        .as_array()
        .unwrap_or_else(|| panic!("not a list of qdiscs: {qdiscs}"))
        .iter()
        .map(|q| {
            let s = |k: &str| q[k].as_str().unwrap_or("").to_string();
            let parent = if q["root"] == true {
                "root".to_string()
            } else {
                s("parent")
            };
            (s("kind"), s("handle"), parent)
        })
        .collect()
}

/// `tc args` in R, as a user types it; asserted to succeed.
fn tc_in_r(t: &Topo, args: &[&str]) {
    let o = sh_in(
        &t.ns("R"),
        &[&["tc"], args].concat(),
        Duration::from_secs(5),
    );
    assert!(o.status.success(), "tc {args:?}: {}", text(&o.stderr));
}

/// A user's own veth u0 (peer u1) in R, up, with their own HTB at its
/// root (handle `root`, e.g. "7067:") and one 5 Mbit/s class `minor`
/// under it as its default.
fn users_htb_on_u0(t: &Topo, root: &str, minor: &str) {
    let r = t.ns("R");
    common::ip(&[
        "-n", &r, "link", "add", "u0", "type", "veth", "peer", "name", "u1",
    ]);
    common::ip(&["-n", &r, "link", "set", "u0", "up"]);
    tc_in_r(
        t,
        &[
            "qdisc", "add", "dev", "u0", "root", "handle", root, "htb", "default", minor,
        ],
    );
    let class = format!("{root}{minor}");
    tc_in_r(
        t,
        &[
            "class", "add", "dev", "u0", "parent", root, "classid", &class, "htb", "rate", "5mbit",
        ],
    );
}

/// `qos class VERB ARGS --iface a1` in R, as a user types it.
fn qos_class(t: &Topo, verb: &str, args: &[&str]) -> std::process::Output {
    let mut a = vec!["qos", "class", verb];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--iface", "a1"]);
    pg_in(&t.ns("R"), &a)
}

/// `o` is a refusal (`what`): a nonzero exit and one line on stderr that
/// holds `want`.
fn assert_refused(o: &std::process::Output, what: &str, want: &str) {
    let e = text(&o.stderr);
    eprintln!("{what}: {}", e.trim());
    assert!(!o.status.success(), "{what}: taken");
    assert_eq!(e.trim().lines().count(), 1, "{what}: {e}");
    assert!(e.contains(want), "{what}: {e} (want {want})");
}

/// The qdiscs on u0, a1 and b0 (`tc -j qdisc show`) and the classes on
/// u0 and b0, as a user reads them.
#[derive(Debug, PartialEq)]
struct TcSnapshot {
    qdiscs: Vec<serde_json::Value>,
    classes: Vec<Vec<String>>,
}

impl TcSnapshot {
    fn take(t: &Topo) -> TcSnapshot {
        TcSnapshot {
            qdiscs: ["u0", "a1", "b0"]
                .iter()
                .map(|d| tc_json(t, "qdisc", d))
                .collect(),
            classes: ["u0", "b0"].iter().map(|d| tc_classes(t, d)).collect(),
        }
    }

    /// Every qdisc (kinds, handles, parents first, then whole) and class
    /// as in `before`.
    fn assert_as(&self, before: &TcSnapshot, what: &str) {
        for (i, dev) in ["u0", "a1", "b0"].iter().enumerate() {
            assert_eq!(
                kinds_handles_parents(&self.qdiscs[i]),
                kinds_handles_parents(&before.qdiscs[i]),
                "{what}: the qdiscs on {dev}"
            );
            assert_eq!(
                self.qdiscs[i], before.qdiscs[i],
                "{what}: the qdiscs on {dev}"
            );
        }
        assert!(
            self.classes == before.classes,
            "{what}: the classes on u0 or b0 changed"
        );
    }
}

/// The engine is gone: no HTB of its own and no classifier on b0, no
/// policer of R listed (no pin).
fn assert_engine_gone(t: &Topo, what: &str) {
    let q = root_qdisc(t);
    assert!(!q.contains("htb") && !q.contains("7067"), "{what}: {q}");
    assert_eq!(egress_programs(t), 0, "{what}: no classifier left");
    let list = pg_in(&t.ns("R"), &["qos", "list", "--json"]);
    assert!(
        !text(&list.stdout).contains(&t.ns("R")),
        "{what}: no pin left: {}",
        text(&list.stdout)
    );
}

/// The engine stopped (`assert_engine_gone`), and the user's u0 as in
/// `before`.
fn assert_stopped_leaving_u0(t: &Topo, before: &TcSnapshot) {
    assert_engine_gone(t, "after the stop");
    assert_eq!(
        tc_json(t, "qdisc", "u0"),
        before.qdiscs[0],
        "the user's u0 after the stop"
    );
    assert_eq!(
        tc_classes(t, "u0"),
        before.classes[0],
        "the user's u0 after the stop"
    );
}

/// A user's own qdiscs beside the engine's, made by hand with plain `tc`:
/// an HTB of their own at the root of u0, a veth of their own in R (with the
/// engine's handle 7067: and the class 7067:3 the engine's next class
/// would take), and a pfifo put under the engine's class gold on b0 with
/// handle 7103: (the queue the engine's next class would take). Every
/// `qos class add` the engine refuses (a ceiling below the rate, a rate
/// that is none, a name taken, a parent not defined, a name too long, an
/// add the kernel refuses part-way on the taken handle) exits nonzero with one line on stderr
/// naming the problem, and leaves every qdisc on u0, a1 and b0 exactly as
/// it was (`tc -j qdisc show`: kinds, handles, parents, options), the
/// classes on b0 and u0 as they were, and the engine's two classes in
/// `qos stats`. Once the user frees the handle the same add succeeds; the
/// engine's stop leaves the user's u0 as it was.
#[test]
fn htb_refused_class_add_leaves_a_users_qdiscs_and_the_engines_classes() {
    let Some(t) = Topo::privileged_up("qhtb-keep") else {
        return;
    };
    users_htb_on_u0(&t, "7067:", "3");
    tc_in_r(
        &t,
        &[
            "qdisc", "add", "dev", "u0", "parent", "7067:3", "handle", "7103:", "pfifo", "limit",
            "77",
        ],
    );
    let s = serve(&t, "qhtb-keep", &file("engine = \"htb\""));
    tc_in_r(
        &t,
        &[
            "qdisc", "replace", "dev", "b0", "parent", "7067:1", "handle", "7103:", "pfifo",
            "limit", "500",
        ],
    );
    let engine_classes = || {
        let mut names: Vec<String> = stats(&t)["scheduler"]["classes"]
            .as_array()
            .unwrap_or_else(|| panic!("no classes in the stats"))
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    let before = TcSnapshot::take(&t);
    let (qdiscs, classes) = (&before.qdiscs, &before.classes);
    let user_b0 = kinds_handles_parents(&qdiscs[2]);
    assert!(
        user_b0.contains(&("pfifo".into(), "7103:".into(), "7067:1".into())),
        "the user's pfifo under gold: {user_b0:?}"
    );
    assert_eq!(
        kinds_handles_parents(&qdiscs[0]),
        [
            ("htb".into(), "7067:".into(), "root".into()),
            ("pfifo".into(), "7103:".into(), "7067:3".into())
        ],
        "the user's u0"
    );
    // The link class and gold and silver on b0; u0's one class.
    assert_eq!((classes[1].len(), classes[0].len()), (3, 1), "{classes:?}");
    assert_eq!(engine_classes(), ["gold", "silver"]);

    let add = |args: &[&str]| qos_class(&t, "add", args);
    let long = "c".repeat(64);
    for (what, args, want) in [
        (
            "ceil below rate",
            &["bad", "--rate", "10Mbit", "--ceil", "5Mbit"][..],
            "ceil",
        ),
        ("rate not a rate", &["bad", "--rate", "fast"][..], "fast"),
        (
            "name taken",
            &["gold", "--rate", "1Mbit"][..],
            "\"gold\" exists",
        ),
        (
            "parent not defined",
            &["bad", "--parent", "nosuch", "--rate", "1Mbit"][..],
            "class \"bad\": parent \"nosuch\" is not defined",
        ),
        (
            "name too long",
            &[long.as_str(), "--rate", "1Mbit"][..],
            "characters",
        ),
        (
            "kernel refuses the queue's handle",
            &["extra", "--rate", "1Mbit", "--ceil", "50Mbit"][..],
            "class \"extra\": its queue (pfifo 7103: under 7067:3;",
        ),
    ] {
        assert_refused(&add(args), what, want);
        TcSnapshot::take(&t).assert_as(&before, what);
        assert_eq!(engine_classes(), ["gold", "silver"], "{what}");
    }

    // The user puts gold's queue back under another handle: the add is taken.
    tc_in_r(
        &t,
        &[
            "qdisc", "replace", "dev", "b0", "parent", "7067:1", "handle", "7101:", "pfifo",
            "limit", "500",
        ],
    );
    ok(
        &add(&["extra", "--rate", "1Mbit", "--ceil", "50Mbit"]),
        "qos class add extra",
    );
    assert_eq!(engine_classes(), ["extra", "gold", "silver"]);
    assert_eq!(tc_classes(&t, "b0").len(), 4);
    assert_eq!(tc_json(&t, "qdisc", "u0"), qdiscs[0], "the user's u0");
    assert_eq!(tc_classes(&t, "u0"), classes[0], "the user's u0");

    drop(s);
    assert_stopped_leaving_u0(&t, &before);
}

/// Changes to the tree that the kernel makes and takes back leave it as
/// it was, queues included, as `tc` shows it. A class "spare" (no
/// filter, a queue of 321 packets) gets a child and loses it again: spare
/// is a leaf again with its own 321-packet pfifo `7103:`, not the
/// kernel's default queue. Then a user puts a pfifo of their own, handle
/// `7104:` (the queue the next class would take), under gold: the add of
/// spare's child is refused in one line on that handle, and taken back
/// with spare's queue restored; a change of gold (its queue is the
/// user's now, so the kernel refuses the queue's part) is refused in one
/// line with gold's rate put back; a child under gold, which the file's
/// filters send to, is refused before anything changes. Every qdisc and
/// class on b0, and the user's own HTB on u0, are as before each refusal.
#[test]
fn htb_class_changes_taken_back_leave_the_tree_as_it_was() {
    let Some(t) = Topo::privileged_up("qhtb-back") else {
        return;
    };
    users_htb_on_u0(&t, "7067:", "3");
    let f = file("engine = \"htb\"")
        + "\n[[class]]\nname = \"spare\"\nrate = \"1Mbit\"\nceil = \"50Mbit\"\nqueue = 321\n";
    let s = serve(&t, "qhtb-back", &f);
    let class = |verb: &str, args: &[&str]| qos_class(&t, verb, args);
    let spare_queue = |t: &Topo| {
        let q = tc_json(t, "qdisc", "b0");
        let spare = q
            .as_array()
            .into_iter()
            .flatten()
            .find(|q| q["parent"] == "7067:3")
            .cloned()
            .unwrap_or_else(|| panic!("no queue under spare: {q}"));
        (
            spare["kind"].clone(),
            spare["handle"].clone(),
            spare["options"]["limit"].clone(),
        )
    };
    assert_eq!(
        spare_queue(&t),
        ("pfifo".into(), "7103:".into(), 321.into())
    );
    let before = TcSnapshot::take(&t);
    ok(
        &class("add", &["kid", "--parent", "spare", "--rate", "1Mbit"]),
        "qos class add kid --parent spare",
    );
    assert_eq!(
        tc_classes(&t, "b0").len(),
        5,
        "the link, gold, silver, spare, kid"
    );
    ok(&class("del", &["kid"]), "qos class del kid");
    assert_eq!(
        spare_queue(&t),
        ("pfifo".into(), "7103:".into(), 321.into()),
        "spare's own queue after its last child went"
    );
    TcSnapshot::take(&t).assert_as(&before, "a child added and deleted");

    tc_in_r(
        &t,
        &[
            "qdisc", "replace", "dev", "b0", "parent", "7067:1", "handle", "7104:", "pfifo",
            "limit", "500",
        ],
    );
    let before = TcSnapshot::take(&t);
    for (what, verb, args, want) in [
        (
            "an add whose queue's handle is taken",
            "add",
            &["kid", "--parent", "spare", "--rate", "1Mbit"][..],
            "class \"kid\": its queue (pfifo 7104: under 7067:4;",
        ),
        (
            "a child under a class rules send to",
            "add",
            &["kid", "--parent", "gold", "--rate", "1Mbit"][..],
            "class \"kid\": rule 0 sends packets to its parent \"gold\"",
        ),
        (
            "a change whose queue is the user's",
            "change",
            &["gold", "--rate", "20Mbit", "--ceil", "50Mbit"][..],
            "class \"gold\": its queue (pfifo 7101: under 7067:1)",
        ),
    ] {
        assert_refused(&class(verb, args), what, want);
        TcSnapshot::take(&t).assert_as(&before, what);
        assert_eq!(
            spare_queue(&t),
            ("pfifo".into(), "7103:".into(), 321.into()),
            "{what}"
        );
    }
    drop(s);
    assert_stopped_leaving_u0(&t, &before);
}

/// The htb engine full: a file of as many classes as it takes (each
/// 100 kbit/s under a 2 Gbit/s link, one filter), served beside a user's
/// own HTB made by hand on u0, a veth of their own in R. One class more
/// (`qos class add`) is refused in one line saying every class id is in
/// use; the user's qdiscs and classes on u0, the engine's qdiscs on b0
/// (`tc -j qdisc show`: kinds, handles, parents, options) and its classes
/// (the kernel's and `qos stats`'s) stay as they were.
#[test]
fn htb_class_add_past_the_limit_is_refused_leaving_every_qdisc() {
    let Some(t) = Topo::privileged_up("qhtb-full") else {
        return;
    };
    let r = t.ns("R");
    users_htb_on_u0(&t, "1:", "10");
    let mut f = "[scheduler]\nengine = \"htb\"\negress = \"b0\"\nrate = \"2Gbit\"\n".to_string();
    for i in 1..=HTB_LIMIT {
        f += &format!("\n[[class]]\nname = \"c{i}\"\nrate = \"100kbit\"\nceil = \"100Mbit\"\n");
    }
    f += "\n[[filter]]\nclass = \"c1\"\nproto = \"udp\"\ndport = 20001\n";
    let path = write_file("qhtb-full", &f);
    let child = Command::new("ip")
        .args(["netns", "exec", &r])
        .arg(env!("CARGO_BIN_EXE_peregrine"))
        .args(["qos", "serve", &path, "--iface", "a1"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let s = QosServe(child);
    let started = Instant::now();
    let end = started + Duration::from_secs(120);
    while !(root_qdisc(&t).contains("7067:") && stats(&t)["scheduler"]["engine"] == "htb") {
        assert!(
            Instant::now() < end,
            "qos serve did not build its tree in 120 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "{HTB_LIMIT} classes served after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let listed = || {
        stats(&t)["scheduler"]["classes"]
            .as_array()
            .map(Vec::len)
            .unwrap_or(0)
    };
    let before = TcSnapshot::take(&t);
    assert_eq!(
        (before.classes[0].len(), before.classes[1].len(), listed()),
        (1, HTB_LIMIT as usize + 1, HTB_LIMIT as usize),
        "u0's class; b0's classes and the link class; the classes listed"
    );
    let o = pg_in(
        &r,
        &[
            "qos", "class", "add", "one-more", "--iface", "a1", "--rate", "100kbit",
        ],
    );
    let e = text(&o.stderr);
    assert!(!o.status.success(), "one class past the limit taken");
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(
        e.contains("every class id is in use: this engine takes at most 16383 classes"),
        "{e}"
    );
    TcSnapshot::take(&t).assert_as(&before, "one class past the limit");
    assert_eq!(listed(), HTB_LIMIT as usize);

    drop(s);
    assert_stopped_leaving_u0(&t, &before);
}
