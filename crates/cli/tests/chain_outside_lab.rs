//! `chain ...` outside labs: a declaration without `lab` names network
//! namespaces made with plain `ip netns add`, every veth at its default
//! offloads (TX checksum offload and GSO on). The router (tc, picked by
//! `auto` from those offloads) steers into a container whose XDP network
//! function reflects the frames back; kernel-socket UDP and iperf3 TCP
//! must arrive intact (the function completes the partial checksums a
//! local sender leaves), and `router stats`/`list`/`detach` see the chain's
//! router as the namespace's own.
//!
//! Topology: P-A (a0) <-> (a1) P-R (b0) <-> (b1) P-B as in
//! router_outside_lab, plus the container P-C: (c1) P-R <-> (c0) P-C.
use std::net::UdpSocket;
use std::time::Duration;

use peregrine_host::netns;

mod common;
use common::{bin, ip, iperf_bytes, json, ok, pg_in, text, tmp, Topo};

/// The container P-C on R's port c1, removed on drop (before the Topo,
/// which is declared first).
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = netns::delete(&self.0);
    }
}

fn add_container(t: &Topo) -> Container {
    let (c, r) = (t.ns("C"), t.ns("R"));
    let _ = netns::delete(&c);
    ip(&["netns", "add", &c]);
    ip(&[
        "link", "add", "c0", "netns", &c, "type", "veth", "peer", "name", "c1", "netns", &r,
    ]);
    ip(&["-n", &c, "link", "set", "c0", "up"]);
    ip(&["-n", &r, "link", "set", "c1", "up"]);
    Container(c)
}

fn declaration(t: &Topo, name: &str) -> std::path::PathBuf {
    let path = tmp(name).keep().join("chain.toml");
    let text = format!(
        r#"router = "{r}"
ports = ["a1", "b0"]

[[nf]]
host = "{c}"
iface = "c0"
kind = "reflect"

[[chain]]
name = "v4"
match = {{ dst = "198.18.2.0/24" }}
hops = ["{c}"]

[[chain]]
name = "v6"
match = {{ dst = "2001:db8:2::/64" }}
hops = ["{c}"]
"#,
        r = t.ns("R"),
        c = t.ns("C"),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// No router attachment of R is listed.
fn assert_nothing_in_r(t: &Topo) {
    let listed = json(&pg_in(&t.ns("R"), &["router", "list", "--json"]), "list");
    assert!(
        !listed["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["namespace"] == t.ns("R").as_str()),
        "nothing of R listed: {listed}"
    );
}

fn chain(args: &[&str]) -> std::process::Output {
    let mut c = bin();
    c.arg("chain").args(args);
    c.output().unwrap()
}

/// Datagrams of every size 1..=1400 (step 7) from A to B through the
/// chain, on kernel sockets: each must arrive once, bytes intact.
fn udp_through(t: &Topo, dst: &str) {
    let any = if dst.contains(':') {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    };
    let bind = if dst.contains(':') {
        "[::]:7000"
    } else {
        "0.0.0.0:7000"
    };
    let rx = netns::run_in(&t.ns("B"), || UdpSocket::bind(bind))
        .unwrap()
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let tx = netns::run_in(&t.ns("A"), || UdpSocket::bind(any))
        .unwrap()
        .unwrap();
    let to = format!(
        "{}:7000",
        if dst.contains(':') {
            format!("[{dst}]")
        } else {
            dst.to_string()
        }
    );
    let sizes: Vec<usize> = (1..=1400).step_by(7).collect();
    let mut buf = vec![0u8; 2048];
    for &n in &sizes {
        let payload: Vec<u8> = (0..n).map(|i| (i * 31 + n) as u8).collect();
        tx.send_to(&payload, &to).unwrap();
        let got = rx
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("{n} B datagram to {dst} not received: {e}"));
        assert_eq!(&buf[..got], &payload[..], "{n} B datagram to {dst} intact");
    }
}

#[test]
fn chain_between_plain_namespaces_at_default_offloads() {
    let Some(t) = Topo::privileged_up("pgc1") else {
        return;
    };
    let _c = add_container(&t);
    let file = declaration(&t, "chain-outside.toml");
    let f = file.to_str().unwrap();
    let applied = chain(&["apply", f]);
    ok(&applied, "chain apply");
    assert!(
        text(&applied.stdout).contains("router (tc)"),
        "auto picks tc at default offloads: {}",
        text(&applied.stdout)
    );
    let again = chain(&["apply", f]);
    assert!(!again.status.success(), "a second apply is refused");
    assert_eq!(
        text(&again.stderr).lines().count(),
        1,
        "{}",
        text(&again.stderr)
    );

    assert!(t.ping("198.18.2.1"), "ping v4 through the chain");
    assert!(t.ping("2001:db8:2::1"), "ping v6 through the chain");
    udp_through(&t, "198.18.2.1");
    udp_through(&t, "2001:db8:2::1");
    for args in [
        &["-c", "198.18.2.1", "-t", "2"][..],
        &["-c", "2001:db8:2::1", "-t", "2"][..],
    ] {
        let o = t.iperf3(args);
        ok(&o, "iperf3 through the chain");
        let (bytes, _) = iperf_bytes(&o);
        assert!(bytes > 10_000_000, "TCP {args:?} carried {bytes} B");
    }

    let s = json(&chain(&["stats", f, "--json"]), "chain stats --json");
    let nf = &s["functions"][0];
    assert!(nf["packets"].as_u64().unwrap() > 1000, "{nf}");
    assert_eq!(
        nf["packets"], nf["sent"],
        "the reflector sent back all: {nf}"
    );
    assert!(
        nf["csum_completed"].as_u64().unwrap() > 1000,
        "partial checksums completed: {nf}"
    );
    let r = json(
        &pg_in(&t.ns("R"), &["router", "stats", "--json"]),
        "router stats in R",
    );
    let a1 = r["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["port"] == "a1")
        .unwrap()
        .clone();
    assert!(
        a1["rx"]["steer"]["packets"].as_u64().unwrap() > 1000,
        "A's traffic steered into the chain: {a1}"
    );

    ok(&chain(&["remove", f]), "chain remove");
    let xdp_on_c0 = netns::run_in(&t.ns("C"), || {
        peregrine_bpf::xdp::attached_prog_id(peregrine_bpf::link::ifindex("c0").unwrap()).unwrap()
    })
    .unwrap();
    assert_eq!(xdp_on_c0, None, "the network function is gone");
    assert_nothing_in_r(&t);
}

/// A declaration naming a namespace that does not exist: one line, and
/// nothing attached anywhere.
#[test]
fn chain_with_an_unknown_namespace_is_refused() {
    let Some(t) = Topo::privileged_up("pgc2") else {
        return;
    };
    let _c = add_container(&t);
    let scratch = tmp("chain-unknown");
    let path = scratch.join("chain.toml");
    let text_in = std::fs::read_to_string(declaration(&t, "chain-unknown-base.toml"))
        .unwrap()
        .replace(&format!("host = \"{}\"", t.ns("C")), "host = \"pgc2-nope\"")
        .replace(
            &format!("hops = [\"{}\"]", t.ns("C")),
            "hops = [\"pgc2-nope\"]",
        );
    std::fs::write(&path, text_in).unwrap();
    let o = chain(&["apply", path.to_str().unwrap()]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("pgc2-nope") && e.lines().count() == 1, "{e}");
    assert_nothing_in_r(&t);
}

/// No program on any port of R or on the container's c0.
fn assert_no_programs(t: &Topo) {
    let hooked = |ns: &str, iface: &str| {
        netns::run_in(ns, || {
            let idx = peregrine_bpf::link::ifindex(iface).unwrap();
            (
                peregrine_bpf::xdp::attached_prog_id(idx).unwrap(),
                peregrine_bpf::tcx::attached_count(idx, peregrine_bpf::tcx::TcxDirection::Ingress)
                    .unwrap(),
            )
        })
        .unwrap()
    };
    let end = std::time::Instant::now() + Duration::from_secs(3);
    let left = || {
        [
            (t.ns("R"), "a1"),
            (t.ns("R"), "b0"),
            (t.ns("R"), "c1"),
            (t.ns("C"), "c0"),
        ]
        .into_iter()
        .map(|(ns, i)| (i, hooked(&ns, i)))
        .filter(|(_, h)| *h != (None, 0))
        .collect::<Vec<_>>()
    };
    while !left().is_empty() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(left().is_empty(), "programs left: {:?}", left());
}

/// `chain apply` killed with -9 at several moments: `chain remove` takes
/// away whatever it left (or says in one line that nothing was applied),
/// no program stays on any port, and the next apply carries traffic.
#[test]
fn sigkilled_chain_apply_is_removed_and_applies_again() {
    let Some(t) = Topo::privileged_up("pgc3") else {
        return;
    };
    let _c = add_container(&t);
    let file = declaration(&t, "chain-killed.toml");
    let f = file.to_str().unwrap();
    for delay_ms in [5u64, 30, 100, 300] {
        let mut c = bin()
            .args(["chain", "apply", f])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = c.kill();
        let _ = c.wait();
        let removed = chain(&["remove", f]);
        if !removed.status.success() {
            let e = text(&removed.stderr);
            assert!(
                e.contains("nothing applied") && e.lines().count() == 1,
                "remove after apply killed at {delay_ms} ms: {e}"
            );
        }
        assert_no_programs(&t);
        assert_nothing_in_r(&t);
    }
    ok(&chain(&["apply", f]), "chain apply after the killed ones");
    udp_through(&t, "198.18.2.1");
    ok(&chain(&["remove", f]), "chain remove");
    assert_no_programs(&t);
}
