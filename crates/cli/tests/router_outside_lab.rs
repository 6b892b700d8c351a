//! `router ...` outside labs, as users run it: namespaces made with plain
//! `ip netns add` and veths at their default offloads (TX checksum offload
//! and GSO on), every command through its own `ip netns exec`, which gives
//! each a fresh mount namespace and /sys. The router must outlive the
//! command that attached it (even one killed with -9), belong to the
//! namespace it was attached in, and be found, listed and removed from
//! any other command.
//!
//! Topology of one case `P`: P-A (a0, 198.18.1.1) <-> (a1) P-R (b0) <->
//! (b1, 198.18.2.1) P-B, P-R routing with Linux forwarding on as well (the
//! router passes what it does not forward to the kernel).
use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use peregrine_bpf::{tcx, xdp, TcxDirection};
use peregrine_host::netns;

mod common;
use common::{iperf_bytes, json, ok, pg_in, router_port_stats, sh_in, text, Topo, SEND_RAW};

/// What the router tests ask of a topology.
trait RouterTopo {
    /// `peregrine router args` in R.
    fn router(&self, args: &[&str]) -> Output;
    /// `router attach a1 b0` in R, which must succeed.
    fn attach(&self);
    /// `router detach` in R, which must succeed.
    fn detach(&self);
    fn hooked(&self) -> Vec<(Option<u32>, u32)>;
    fn listed(&self) -> Vec<serde_json::Value>;
    fn forwarded(&self, port: &str) -> (u64, u64);
    fn assert_clean(&self);
    /// `router detach --all` from B (not R's namespace), then nothing of
    /// R's router is left.
    fn detach_all_clean(&self);
}

impl RouterTopo for Topo {
    fn router(&self, args: &[&str]) -> Output {
        let mut a = vec!["router"];
        a.extend_from_slice(args);
        pg_in(&self.ns("R"), &a)
    }

    fn attach(&self) {
        ok(&self.router(&["attach", "a1", "b0"]), "router attach");
    }

    fn detach(&self) {
        ok(&self.router(&["detach"]), "router detach");
    }

    fn hooked(&self) -> Vec<(Option<u32>, u32)> {
        ["a1", "b0"]
            .iter()
            .map(|i| {
                netns::run_in(&self.ns("R"), || {
                    let idx = peregrine_bpf::link::ifindex(i).unwrap();
                    (
                        xdp::attached_prog_id(idx).unwrap(),
                        tcx::attached_count(idx, TcxDirection::Ingress).unwrap(),
                    )
                })
                .unwrap()
            })
            .collect()
    }

    /// The attachments `router list --json` shows in R.
    fn listed(&self) -> Vec<serde_json::Value> {
        let v = json(
            &pg_in(&self.ns("B"), &["router", "list", "--json"]),
            "router list --json",
        );
        v["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["namespace"] == self.ns("R").as_str())
            .cloned()
            .collect()
    }

    /// (packets, bytes) forwarded from port `port`, from `stats --json`.
    fn forwarded(&self, port: &str) -> (u64, u64) {
        let f = &router_port_stats(self, port)["rx"]["forward"];
        (f["packets"].as_u64().unwrap(), f["bytes"].as_u64().unwrap())
    }

    fn detach_all_clean(&self) {
        ok(
            &pg_in(&self.ns("B"), &["router", "detach", "--all"]),
            "detach --all",
        );
        self.assert_clean();
    }

    /// Nothing of a router is left on R's ports, in its pins or the list.
    fn assert_clean(&self) {
        let end = Instant::now() + Duration::from_secs(3);
        while self.hooked().iter().any(|h| *h != (None, 0)) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            self.hooked().iter().all(|h| *h == (None, 0)),
            "programs left on R's ports: {:?}",
            self.hooked()
        );
        assert!(
            self.listed().is_empty(),
            "still listed: {:?}",
            self.listed()
        );
    }
}

/// Attach from one `ip netns exec`, read counters from a second, detach
/// from a third: nothing is left after.
#[test]
fn attach_stats_detach_from_separate_ip_netns_exec() {
    let Some(t) = Topo::privileged_up("pgo1") else {
        return;
    };
    t.attach();
    assert_eq!(t.listed().len(), 2, "both ports listed");
    let before = t.forwarded("a1");
    assert!(t.ping("198.18.2.1"), "ping v4 through the router");
    assert!(t.ping("2001:db8:2::1"), "ping v6 through the router");
    let after = t.forwarded("a1");
    // The first packets of each family go to the kernel to resolve the
    // neighbour; the rest are forwarded.
    assert!(
        after.0 > before.0,
        "forward counters moved: {before:?} -> {after:?}"
    );
    let w = t.router(&["stats", "--watch", "-i", "200ms", "-c", "2", "--json"]);
    ok(&w, "router stats --watch");
    assert_eq!(text(&w.stdout).lines().count(), 2, "two samples");
    t.detach();
    t.assert_clean();
    let again = t.router(&["detach"]);
    assert!(!again.status.success(), "a second detach finds nothing");
}

/// A port joins a running router from a later `ip netns exec` (and leaves
/// it again) while the other ports keep forwarding: attach a1 alone (A ->
/// B then goes to the kernel: no port), add b0 (forwarded by the router),
/// take b0 out (the kernel again), then a1 (the router is gone).
#[test]
fn ports_join_and_leave_a_running_router() {
    let Some(t) = Topo::privileged_up("pgo5") else {
        return;
    };
    ok(&t.router(&["attach", "a1"]), "router attach a1");
    let no_port = |t: &Topo| {
        let v = json(&t.router(&["stats", "--json"]), "router stats --json");
        v["ports"][0]["rx"]["pass_no_port"]["packets"]
            .as_u64()
            .unwrap()
    };
    assert!(t.ping("198.18.2.1"), "the kernel forwards to B");
    let (f0, n0) = (t.forwarded("a1").0, no_port(&t));
    assert!(n0 >= 4, "b0 is no port yet: {n0} passed as no_port");

    let add = t.router(&["attach", "b0"]);
    ok(&add, "router attach b0 on a running router");
    assert!(
        text(&add.stdout).contains("its ports: a1 b0"),
        "{}",
        text(&add.stdout)
    );
    assert_eq!(t.listed().len(), 2, "both ports listed");
    let ids: Vec<_> = t.listed().iter().map(|a| a["prog_id"].clone()).collect();
    assert_eq!(ids[0], ids[1], "one program on both ports: {ids:?}");
    assert!(t.ping("198.18.2.1"), "ping through the router");
    assert!(
        t.forwarded("a1").0 >= f0 + 4,
        "a1 -> b0 forwarded by the router"
    );
    assert!(t.forwarded("b0").0 >= 4, "the replies too");
    for (args, says) in [
        (&["attach", "b0"][..], "b0 is already a port"),
        (
            &["attach", "b0", "--hook", "xdp"][..],
            "runs at the tc hook",
        ),
        (&["detach", "nope"][..], "nope is not a port"),
    ] {
        let o = t.router(args);
        assert!(!o.status.success(), "{args:?} refused");
        let e = text(&o.stderr);
        assert!(e.contains(says) && e.lines().count() == 1, "{args:?}: {e}");
    }

    ok(&t.router(&["detach", "b0"]), "router detach b0");
    assert_eq!(t.hooked()[1], (None, 0), "b0 runs nothing");
    assert_eq!(t.listed().len(), 1, "a1 is still attached");
    let n1 = no_port(&t);
    assert!(t.ping("198.18.2.1"), "the kernel forwards again");
    assert!(no_port(&t) >= n1 + 4, "b0 is no port any more");
    ok(
        &t.router(&["detach", "a1"]),
        "router detach a1 (the last port)",
    );
    t.assert_clean();
}

/// Routers of two namespaces are independent: attach in both, detach in S,
/// R still forwards and its counters still move.
#[test]
fn two_namespaces_have_their_own_routers() {
    let Some(r) = Topo::privileged_up("pgo2r") else {
        return;
    };
    let s = Topo::up("pgo2s");
    r.attach();
    s.attach();
    let twice = s.router(&["attach", "a1", "b0"]);
    assert!(!twice.status.success(), "S already has one");
    assert!(
        text(&twice.stderr).contains("a1 is already a port"),
        "{}",
        text(&twice.stderr)
    );
    s.detach();
    s.assert_clean();
    assert_eq!(r.listed().len(), 2, "R's router is still there");
    let before = r.forwarded("a1");
    assert!(r.ping("198.18.2.1"), "R still forwards");
    assert!(r.forwarded("a1").0 > before.0, "through R's router");
    assert!(!s.router(&["stats"]).status.success());
}

/// `peregrine ARGS` through `ip netns exec NS`, killed (SIGKILL) after
/// `delay`: a command stopped midway, as a user's kill -9 would.
fn killed_after(ns: &str, args: &[&str], delay: Duration) {
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_peregrine")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let _ = c.kill();
    let _ = c.wait();
}

/// `attach` killed with -9 (at several moments, and after it finished):
/// what it attached keeps forwarding, and `detach --all` removes it all,
/// stale pins included.
#[test]
fn sigkilled_attach_is_found_and_removed_by_detach_all() {
    let Some(t) = Topo::privileged_up("pgo3") else {
        return;
    };
    let bin = env!("CARGO_BIN_EXE_peregrine");
    for delay_ms in [5u64, 30, 80, 3000] {
        killed_after(
            &t.ns("R"),
            &["router", "attach", "a1", "b0"],
            Duration::from_millis(delay_ms),
        );
        let listed = t.listed();
        if listed.len() == 2 && listed.iter().all(|a| a["stale"] == false) {
            assert!(t.ping("198.18.2.1"), "forwards after attach was killed");
        }
        t.detach_all_clean();
    }
    // A namespace removed under its router: the next `router list`
    // removes its pins (nobody can own them any more) and says so.
    let gone = Topo::up("pgo3g");
    gone.attach();
    for n in ["A", "R", "B"] {
        netns::delete(&gone.ns(n)).unwrap();
    }
    // The kernel tears a deleted namespace down from a work queue, after
    // `ip netns delete` returns: its links go stale within moments.
    let list = || {
        Command::new(bin)
            .args(["router", "list", "--json"])
            .output()
            .unwrap()
    };
    let end = Instant::now() + Duration::from_secs(10);
    let mut said = String::new();
    while Instant::now() < end {
        let out = list();
        said.push_str(&text(&out.stderr));
        if said.contains("no longer exist") {
            break;
        }
        assert!(
            !text(&out.stdout).contains("\"stale\":true"),
            "a stale entry of a deleted namespace was listed: {}",
            text(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(said.contains("no longer exist"), "{said}");
    let out = list();
    assert!(
        !text(&out.stdout).contains("\"stale\":true"),
        "{}",
        text(&out.stdout)
    );
}

/// A port joining a running router (`router attach b0` next to a1's
/// router), killed with -9 at several moments: a1's router keeps running;
/// b0 is either a listed port that forwards or no port at all, and a new
/// `attach b0` then joins it; `detach --all` leaves nothing.
#[test]
fn sigkilled_join_leaves_the_running_router_whole() {
    let Some(t) = Topo::privileged_up("pgo6") else {
        return;
    };
    for delay_ms in [2u64, 10, 30, 80] {
        ok(&t.router(&["attach", "a1"]), "router attach a1");
        killed_after(
            &t.ns("R"),
            &["router", "attach", "b0"],
            Duration::from_millis(delay_ms),
        );
        let listed = t.listed();
        assert!(
            listed
                .iter()
                .any(|a| a["iface"] == "a1" && a["stale"] == false),
            "a1 still a live port after a join killed at {delay_ms} ms: {listed:?}"
        );
        if !listed.iter().any(|a| a["iface"] == "b0") {
            ok(
                &t.router(&["attach", "b0"]),
                "attach b0 again after the killed join",
            );
        }
        let before = t.forwarded("b0").0;
        assert!(
            t.ping("198.18.2.1"),
            "forwards after a join killed at {delay_ms} ms"
        );
        assert!(
            t.forwarded("b0").0 >= before + 4,
            "the replies are forwarded by b0's port (join killed at {delay_ms} ms)"
        );
        t.detach_all_clean();
    }
}

/// TCP through the router at default offloads: with tc and auto the
/// transfer completes at a real rate, and the router forwarded those
/// bytes; explicit XDP warns, naming the peer's setting.
#[test]
fn iperf3_tcp_through_the_tc_router() {
    let Some(t) = Topo::privileged_up("pgo4") else {
        return;
    };
    for hook in ["tc", "auto"] {
        let a = t.router(&["attach", "--hook", hook, "a1", "b0"]);
        ok(&a, "router attach");
        if hook == "auto" {
            let o = text(&a.stdout);
            assert!(
                o.contains("hook: tc (tx-checksumming"),
                "auto names its pick: {o}"
            );
        }
        for (dst, streams) in [
            ("198.18.2.1", "1"),
            ("198.18.2.1", "8"),
            ("2001:db8:2::1", "1"),
            ("2001:db8:2::1", "8"),
        ] {
            let before = t.forwarded("a1");
            let c = t.iperf3(&["-c", dst, "-t", "2", "-P", streams]);
            ok(&c, &format!("iperf3 {hook} {dst} -P {streams}"));
            let (bytes, bps) = iperf_bytes(&c);
            let after = t.forwarded("a1");
            let fwd = after.1 - before.1;
            eprintln!("hook {hook} {dst} -P {streams}: {:.2} Gbit/s, {bytes} B received, {fwd} B forwarded by the router", bps / 1e9);
            assert!(bps > 100e6, "{hook} {dst} -P {streams}: only {bps} bit/s");
            assert!(
                fwd as f64 >= bytes as f64 * 0.9,
                "{hook} {dst} -P {streams}: the router forwarded {fwd} B of the {bytes} B received"
            );
        }
        t.detach();
    }
    let x = t.router(&["attach", "--hook", "xdp", "a1", "b0"]);
    ok(&x, "attach --hook xdp");
    let e = text(&x.stderr);
    assert!(
        e.contains("peregrine: warning: tx-checksumming")
            && e.contains("peer a0")
            && e.contains("--hook tc"),
        "{e}"
    );
    t.detach();
    t.assert_clean();
}

/// Without the capabilities, and with a port given twice: one line each,
/// and nothing attached or pinned.
#[test]
fn attach_errors_are_one_line_and_leave_nothing() {
    let Some(t) = Topo::privileged_up("pgo5") else {
        return;
    };
    let r = t.ns("R");
    let bin = env!("CARGO_BIN_EXE_peregrine");
    let one_line = |o: &Output, needle: &str| {
        let e = text(&o.stderr);
        assert!(!o.status.success(), "{needle}: should fail");
        assert_eq!(e.lines().count(), 1, "one line: {e}");
        assert!(e.contains(needle), "{needle}: {e}");
    };
    // setpriv's options, and what the one line must say.
    for (setpriv, needle) in [
        (
            &["--inh-caps=-all", "--bounding-set=-all"][..],
            "needs root (CAP_BPF and CAP_NET_ADMIN)",
        ),
        (
            &[
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--inh-caps=-all",
            ][..],
            "needs root",
        ),
    ] {
        let mut cmd = vec!["setpriv"];
        cmd.extend_from_slice(setpriv);
        cmd.extend_from_slice(&[bin, "router", "attach", "a1", "b0"]);
        one_line(&sh_in(&r, &cmd, Duration::from_secs(20)), needle);
    }
    one_line(&t.router(&["attach", "a1", "a1"]), "same interface twice");
    one_line(
        &t.router(&["attach", "a1", "nosuch0"]),
        "no interface \"nosuch0\"",
    );
    one_line(
        &t.router(&["attach", "--hook", "tc", "--mode", "generic", "a1", "b0"]),
        "--hook tc takes none",
    );
    one_line(
        &t.router(&["attach", "--hook", "xdp", "--tc-attach", "cls", "a1", "b0"]),
        "--hook xdp takes none",
    );
    t.assert_clean();
    // A port asked to attach as a cls_bpf filter does not join a router of
    // tcx links silently, and the router is left as it was.
    ok(
        &t.router(&["attach", "a1", "--hook", "tc"]),
        "router attach a1",
    );
    one_line(
        &t.router(&["attach", "b0", "--tc-attach", "cls"]),
        "new ports join it that way",
    );
    let listed = t.listed();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(tc_state(&r, "b0"), (vec!["noqueue".to_string()], vec![]));
    t.detach_all_clean();
}

/// `router stats --json`'s rx counters of `port`, by action.
fn rx_actions(t: &Topo, port: &str) -> BTreeMap<String, u64> {
    router_port_stats(t, port)["rx"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(a, c)| (a.clone(), c["packets"].as_u64().unwrap()))
        .collect()
}

/// What Linux does not route, the router does not either, at both hooks,
/// and every such frame is counted under exactly one action: 802.1Q-tagged
/// IPv4 and IPv6 and a single 802.1ad tag are `pass_vlan` (Linux has no
/// VLAN device here and drops them; the tc hook used to forward them
/// untagged), a source that is R's own address (a1's 198.18.1.2, arriving
/// on a1) and 0.0.0.0 are martians, while 0.1.2.3 is forwarded (on Linux
/// 6.18 only 0.0.0.0 of 0/8 is martian). Round one checks what Linux alone
/// does with each kind; then `router attach a1 b0` (auto: tc at default
/// offloads) and `--hook xdp` must deliver the same to B.
#[test]
fn frames_linux_does_not_route_are_not_routed_and_counted_once_at_both_hooks() {
    use peregrine_bpf::fixture::frames::vlan;
    use peregrine_wire::ethertype;
    let Some(t) = Topo::privileged_up("pgo9") else {
        return;
    };
    const N: u64 = 20;
    const PORT: u16 = 7777;
    const MARK: &[u8] = b"pgo9 frame";
    let frame = frame_a0_to_a1(&t, PORT, MARK);
    let v4 = frame("198.18.1.1", "198.18.2.1");
    let v6 = frame("2001:db8:1::1", "2001:db8:2::1");
    // (what, frame, the action it counts under, datagrams B receives)
    let kinds: Vec<(&str, Vec<u8>, &str, u64)> = vec![
        (
            "802.1Q ipv4",
            vlan(&v4, ethertype::VLAN, 10),
            "pass_vlan",
            0,
        ),
        (
            "802.1Q ipv6",
            vlan(&v6, ethertype::VLAN, 10),
            "pass_vlan",
            0,
        ),
        (
            "802.1ad ipv4",
            vlan(&v4, ethertype::QINQ, 10),
            "pass_vlan",
            0,
        ),
        (
            "source is a1's own address",
            frame("198.18.1.2", "198.18.2.1"),
            "drop_martian",
            0,
        ),
        (
            "source 0.0.0.0",
            frame("0.0.0.0", "198.18.2.1"),
            "drop_martian",
            0,
        ),
        (
            "source 0.1.2.3",
            frame("0.1.2.3", "198.18.2.1"),
            "forward",
            N,
        ),
    ];
    // One socket for both families (IPv4 arrives mapped).
    let rx = netns::run_in(&t.ns("B"), || {
        std::net::UdpSocket::bind(("::", PORT)).unwrap()
    })
    .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let received = || -> u64 {
        let mut n = 0;
        let mut buf = [0u8; 256];
        // Bounded: at most what was sent, plus one timeout.
        for _ in 0..=N {
            match rx.recv(&mut buf) {
                Ok(len) if buf[..len].starts_with(MARK) => n += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        n
    };
    // Noise the test does not control: ARP, ND and MLD from the hosts.
    let noise = [
        "pass_not_ip",
        "pass_l2_group",
        "pass_local",
        "pass_link_local",
    ];
    assert!(t.ping("198.18.2.1"), "A reaches B (neighbours resolved)");
    for hook in ["linux", "auto", "xdp"] {
        match hook {
            "linux" => {}
            "auto" => ok(&t.router(&["attach", "a1", "b0"]), "router attach"),
            h => ok(
                &t.router(&["attach", "--hook", h, "a1", "b0"]),
                "router attach --hook xdp",
            ),
        }
        for (what, f, action, delivered) in &kinds {
            let before = (hook != "linux").then(|| rx_actions(&t, "a1"));
            let hex = f.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let n = N.to_string();
            let sent = sh_in(
                &t.ns("A"),
                &["python3", "-c", SEND_RAW, "a0", &n, &hex],
                Duration::from_secs(10),
            );
            ok(&sent, "python3 raw socket");
            assert_eq!(received(), *delivered, "{hook}: {what}: datagrams in B");
            if let Some(before) = before {
                let after = rx_actions(&t, "a1");
                let moved: BTreeMap<&str, u64> = after
                    .iter()
                    .filter(|(a, _)| !noise.contains(&a.as_str()))
                    .map(|(a, n)| (a.as_str(), n - before[a]))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                assert_eq!(
                    moved,
                    BTreeMap::from([(*action, N)]),
                    "{hook}: {what}: counted under {action} alone"
                );
            }
        }
        // An address R takes while the router runs makes that source a
        // martian from the next frame on, and giving it back lets it pass
        // again: the router's cached answer follows the host, as Linux.
        let f = frame("198.18.1.77", "198.18.2.1");
        let hex = f.iter().map(|b| format!("{b:02x}")).collect::<String>();
        for (step, delivered) in [("before", N), ("add", 0), ("del", N)] {
            if step != "before" {
                common::ip(&[
                    "-n",
                    &t.ns("R"),
                    "addr",
                    step,
                    "198.18.1.77/32",
                    "dev",
                    "b0",
                ]);
            }
            let sent = sh_in(
                &t.ns("A"),
                &["python3", "-c", SEND_RAW, "a0", &N.to_string(), &hex],
                Duration::from_secs(10),
            );
            ok(&sent, "python3 raw socket");
            assert_eq!(
                received(),
                delivered,
                "{hook}: source 198.18.1.77, R's address: {step}"
            );
        }
        if hook != "linux" {
            t.detach();
        }
    }
    t.assert_clean();
}

/// Issue 25: `lab down --all` from the root namespace removed a router a
/// user attached by hand outside any lab (its pins and its programs). It
/// keeps it now: only labs and the stale state of killed runs go.
#[test]
fn lab_down_all_keeps_a_router_attached_outside_labs() {
    let Some(t) = Topo::privileged_up("pgo10") else {
        return;
    };
    t.attach();
    let before = t.hooked();
    ok(&common::run(&["lab", "down", "--all"]), "lab down --all");
    assert_eq!(t.hooked(), before, "the user's router is still attached");
    assert_eq!(t.listed().len(), 2, "both ports still listed");
    assert!(t.ping("198.18.2.1"), "still routing");
    t.detach();
    t.assert_clean();
    t.remove();
}

/// A 100-byte UDP frame from A's a0 to R's a1 (their MACs) for `port`,
/// its payload starting with `mark`, between the addresses given.
fn frame_a0_to_a1(t: &Topo, port: u16, mark: &'static [u8]) -> impl Fn(&str, &str) -> Vec<u8> {
    use peregrine_bpf::fixture::frames::{spec, udp};
    let (a0, a1) = (
        common::mac_of(&t.ns("A"), "a0"),
        common::mac_of(&t.ns("R"), "a1"),
    );
    move |src, dst| {
        let s = peregrine_wire::UdpFrameSpec {
            src_mac: a0,
            dst_mac: a1,
            dst_port: port,
            frame_len: 100,
            ..spec(src, dst)
        };
        udp(&s, mark)
    }
}

/// Ports whose ifindexes are above 1024 (a1 5001, b0 5002) are routed and
/// counted exactly, at tc and at XDP: 50 IPv4 and 50 IPv6 datagrams from A
/// reach B, a1 counts exactly 100 forwarded, b0 exactly 100 sent. Before
/// the port tables were hashes, `router attach` refused such a port
/// ("beyond the router's port table").
#[test]
fn ports_with_ifindexes_above_1024_are_routed_and_counted_exactly_at_both_hooks() {
    if !peregrine_testbed::testing::privileged_here() {
        return;
    }
    const BASE: u32 = 5000;
    const N: u64 = 50;
    const PORT: u16 = 7778;
    const MARK: &[u8] = b"pgo11 frame";
    let t = Topo::up_at("pgo11", Some(BASE));
    let frame = frame_a0_to_a1(&t, PORT, MARK);
    let hex: Vec<String> = [
        frame("198.18.1.1", "198.18.2.1"),
        frame("2001:db8:1::1", "2001:db8:2::1"),
    ]
    .iter()
    .map(|f| f.iter().map(|b| format!("{b:02x}")).collect())
    .collect();
    let rx = netns::run_in(&t.ns("B"), || {
        std::net::UdpSocket::bind(("::", PORT)).unwrap()
    })
    .unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let received = || -> u64 {
        let mut n = 0;
        let mut buf = [0u8; 256];
        // Bounded: at most what was sent, plus one timeout.
        for _ in 0..=2 * N {
            match rx.recv(&mut buf) {
                Ok(len) if buf[..len].starts_with(MARK) => n += 1,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        n
    };
    let counts = |t: &Topo| {
        let a = router_port_stats(t, "a1");
        let b = router_port_stats(t, "b0");
        (
            a["ifindex"].as_u64().unwrap(),
            b["ifindex"].as_u64().unwrap(),
            a["rx"]["forward"]["packets"].as_u64().unwrap(),
            b["tx_packets"].as_u64().unwrap(),
        )
    };
    for hook in ["tc", "xdp"] {
        ok(
            &t.router(&["attach", "--hook", hook, "a1", "b0"]),
            "router attach",
        );
        assert!(t.ping("198.18.2.1"), "{hook}: ping v4 through the router");
        assert!(
            t.ping("2001:db8:2::1"),
            "{hook}: ping v6 through the router"
        );
        let (ia, ib, f0, tx0) = counts(&t);
        assert_eq!(
            (ia, ib),
            (u64::from(BASE) + 1, u64::from(BASE) + 2),
            "the ports' ifindexes"
        );
        assert!(f0 > 0 && tx0 > 0, "{hook}: pings forwarded: {f0} {tx0}");
        let mut args = vec!["python3", "-c", SEND_RAW, "a0"];
        let n = N.to_string();
        args.push(&n);
        args.extend(hex.iter().map(String::as_str));
        ok(
            &sh_in(&t.ns("A"), &args, Duration::from_secs(10)),
            "python3 raw socket",
        );
        assert_eq!(received(), 2 * N, "{hook}: datagrams in B");
        let (_, _, f1, tx1) = counts(&t);
        assert_eq!(f1 - f0, 2 * N, "{hook}: a1 counted every frame forwarded");
        assert_eq!(tx1 - tx0, 2 * N, "{hook}: b0 counted every frame sent");
        t.detach();
    }
    t.assert_clean();
}

/// The kinds of `dev`'s qdiscs in namespace `ns`, and the priorities of
/// the bpf filters at its clsact ingress, as `tc -j` lists them.
fn tc_state(ns: &str, dev: &str) -> (Vec<String>, Vec<u64>) {
    let read = |args: &[&str]| -> serde_json::Value {
        let o = sh_in(ns, args, Duration::from_secs(5));
        serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Array(Vec::new()))
    };
    let kinds = read(&["tc", "-j", "qdisc", "show", "dev", dev])
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["kind"].as_str().unwrap_or("").to_string())
        .collect();
    let mut prios: Vec<u64> = read(&["tc", "-j", "filter", "show", "dev", dev, "ingress"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "bpf" && f.get("options").is_some())
        .filter_map(|f| f["pref"].as_u64())
        .collect();
    prios.dedup();
    (kinds, prios)
}

/// `--tc-attach cls`, as a user runs it through `ip netns exec`: each port
/// is a cls_bpf filter in a clsact qdisc (no tcx link), listed as
/// "tc (cls_bpf)" with one program; a port joining later is attached the
/// same way; both families are routed and counted; a port taken out
/// leaves its device as it found it (no clsact); `detach --all` from
/// another namespace finds the rest by their records and removes them. An
/// attach killed with -9 at several moments leaves nothing `detach --all`
/// does not remove, and never a port listed live that does not forward.
#[test]
fn a_router_of_cls_bpf_filters_attaches_joins_leaves_and_goes_from_anywhere() {
    let Some(t) = Topo::privileged_up("pgo8") else {
        return;
    };
    let r = t.ns("R");
    let attach_cls = ["attach", "a1", "--hook", "tc", "--tc-attach", "cls"];
    let out = t.router(&attach_cls);
    ok(&out, "router attach a1 --tc-attach cls");
    assert!(
        text(&out.stdout).contains("as cls_bpf filters"),
        "{}",
        text(&out.stdout)
    );
    let joined = t.router(&["attach", "b0"]);
    ok(&joined, "router attach b0 (joins)");
    assert!(
        text(&joined.stdout).contains("added to the router (tc as cls_bpf filters) here: b0"),
        "{}",
        text(&joined.stdout)
    );
    let listed = t.listed();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed
            .iter()
            .all(|a| a["hook"] == "tc (cls_bpf)" && a["stale"] == false),
        "{listed:?}"
    );
    assert_eq!(listed[0]["prog_id"], listed[1]["prog_id"], "one program");
    for port in ["a1", "b0"] {
        let (kinds, prios) = tc_state(&r, port);
        assert!(kinds.contains(&"clsact".to_string()), "{port}: {kinds:?}");
        assert_eq!(prios, vec![0xff00], "{port}: our filter");
    }
    assert_eq!(t.hooked(), vec![(None, 0), (None, 0)], "no XDP, no tcx");
    let before = t.forwarded("a1").0;
    assert!(t.ping("198.18.2.1"), "ping v4 through the router");
    assert!(t.ping("2001:db8:2::1"), "ping v6 through the router");
    // The first frames of each family go to the kernel to resolve the
    // neighbours (fresh namespaces); the rest are forwarded.
    let (a1, b0) = (t.forwarded("a1").0, t.forwarded("b0").0);
    assert!(a1 >= before + 4, "a1 forwarded: {before} -> {a1}");
    assert!(b0 >= 4, "b0 forwarded the replies: {b0}");

    ok(&t.router(&["detach", "b0"]), "router detach b0");
    assert_eq!(tc_state(&r, "b0"), (vec!["noqueue".to_string()], vec![]));
    assert_eq!(t.listed().len(), 1, "a1 is still attached");
    assert!(t.ping("198.18.2.1"), "the kernel forwards b0's side again");
    t.detach_all_clean();
    assert_eq!(tc_state(&r, "a1"), (vec!["noqueue".to_string()], vec![]));

    for delay_ms in [2u64, 10, 30, 80] {
        killed_after(
            &r,
            &[
                "router",
                "attach",
                "a1",
                "b0",
                "--hook",
                "tc",
                "--tc-attach",
                "cls",
            ],
            Duration::from_millis(delay_ms),
        );
        let listed = t.listed();
        if listed.len() == 2 && listed.iter().all(|a| a["stale"] == false) {
            assert!(
                t.ping("198.18.2.1"),
                "listed live after a kill at {delay_ms} ms, and does not forward"
            );
        }
        t.detach_all_clean();
        for port in ["a1", "b0"] {
            assert_eq!(
                tc_state(&r, port),
                (vec!["noqueue".to_string()], vec![]),
                "{port} after an attach killed at {delay_ms} ms"
            );
        }
    }
}
