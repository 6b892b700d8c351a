//! One-shot commands composed on one node, as users run them (issue 25):
//! the router and the policer on the same port, and the router delivering
//! into a namespace where `faas serve` attaches its XDP dispatcher. Every
//! command runs through its own `ip netns exec`; namespaces and veths are
//! made with plain `ip` at default offloads (so `router attach` picks tc).
//!
//! Topology (common::Topo): A (a0, 198.18.1.1) <-> (a1) R (b0) <-> (b1,
//! 198.18.2.1) B.
use std::net::UdpSocket;
use std::process::Output;
use std::time::{Duration, Instant};

use peregrine_bpf::{tcx, TcxDirection};
use peregrine_dataplane::{PinScope, RunningRouter};
use peregrine_host::netns;
use peregrine_testbed::testing::wait_until;

mod common;
use common::{
    assert_policed_udp, example_function, faas_functions, json, json_u64, ok, pg_in, policed_udp,
    qos_apply, qos_stats, router_port_stats, text, tmp, FaasServe, Topo, POLICED_UDP_RULE,
};

/// `peregrine router args` in R.
fn router(t: &Topo, args: &[&str]) -> Output {
    let mut a = vec!["router"];
    a.extend_from_slice(args);
    pg_in(&t.ns("R"), &a)
}

/// Packets the router forwarded from `port` (`router stats --json`).
fn forwarded(t: &Topo, port: &str) -> u64 {
    router_port_stats(t, port)["rx"]["forward"]["packets"]
        .as_u64()
        .unwrap()
}

/// The programs at R's a1 tcx ingress, in the order they run.
fn tc_chain(t: &Topo) -> Vec<u32> {
    netns::run_in(&t.ns("R"), || {
        let idx = peregrine_bpf::link::ifindex("a1").unwrap();
        tcx::attached_ids(idx, TcxDirection::Ingress).unwrap()
    })
    .unwrap()
}

/// R's policers as `qos list --json` shows them (run from B: the list
/// covers every namespace).
fn listed_policers(t: &Topo) -> Vec<serde_json::Value> {
    let v = json(&pg_in(&t.ns("B"), &["qos", "list", "--json"]), "qos list");
    v["policers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["namespace"] == t.ns("R").as_str())
        .cloned()
        .collect()
}

/// Attaches the router (auto: tc at default offloads) and the 20 Mbit/s
/// UDP policer on a1 at tc, in the order asked, and checks the outcome
/// is the same either way: iperf3 UDP at 100 Mbit/s is held to the rate
/// (the tolerance of the policer's own e2e test), the policer counts what
/// it drops, the router forwards what conforms (and not what exceeds), and
/// the tcx chain runs the policer first, as `qos list` says. With `cls`
/// the router's ports are cls_bpf filters (`--tc-attach cls`), which run
/// after every tcx program: the policer is first all the same.
fn router_and_policer_at_tc(p: &str, router_first: bool, cls: bool) {
    let Some(t) = Topo::privileged_up(p) else {
        return;
    };
    let what = match (router_first, cls) {
        (true, false) => "router then policer",
        (false, false) => "policer then router",
        (true, true) => "router (cls_bpf) then policer",
        (false, true) => "policer then router (cls_bpf)",
    };
    let attach_router = || {
        let mut args = vec!["attach", "a1", "b0"];
        if cls {
            args.extend(["--tc-attach", "cls"]);
        }
        let o = router(&t, &args);
        ok(&o, "router attach");
        let hook = if cls {
            "(tc as cls_bpf filters,"
        } else {
            "(tc,"
        };
        assert!(text(&o.stdout).contains(hook), "{}", text(&o.stdout));
    };
    let attach_policer = || {
        let o = qos_apply(&t, "cmp-udp", POLICED_UDP_RULE, &["--hook", "tc"]);
        ok(&o, "qos apply");
        assert!(text(&o.stdout).contains("(tc hook)"), "{}", text(&o.stdout));
    };
    if router_first {
        attach_router();
        attach_policer();
    } else {
        attach_policer();
        attach_router();
    }

    let before = forwarded(&t, "a1");
    let run = policed_udp(&t, "100M", what);
    let fwd = forwarded(&t, "a1") - before;
    eprintln!("{what}: the router forwarded {fwd} packets from a1");
    // iperf3 sends what a 1 ms pacing tick allows at once: 12.5
    // datagrams at 100 Mbit/s, of which the bucket passes the first 2.5
    // (a tick's worth of the rate), so the run can end on 10 dropped, or
    // on a few ticks' worth when the sender's timer fired late (11 seen
    // on an idle machine with 2 CPUs). 40: about 0.4% of the rate.
    assert_policed_udp(&run, what, 40);
    assert!(run.exceed > 0, "{what}: the policer dropped nothing");
    // What conformed, plus iperf3's control connection; never what the
    // policer dropped (at 5 times the rate, most of what was sent).
    assert!(
        fwd + 3 >= run.got,
        "{what}: {fwd} forwarded, {} arrived",
        run.got
    );
    assert!(
        fwd < run.sent / 2,
        "{what}: {fwd} forwarded of {} sent: the router saw what exceeded",
        run.sent
    );

    // The order: the policer first, whichever came first.
    let listed = listed_policers(&t);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let policer = listed[0]["prog_id"].as_u64().unwrap() as u32;
    let chain = tc_chain(&t);
    // The router's port is the second tcx link, or a cls_bpf filter.
    assert_eq!(
        chain.len(),
        if cls { 1 } else { 2 },
        "{what}: tcx links on a1: {chain:?}"
    );
    assert_eq!(chain[0], policer, "{what}: the policer runs first");
    assert_eq!(
        listed[0]["tc_order"],
        serde_json::json!(["policer", "router"]),
        "{what}"
    );
    let table = pg_in(&t.ns("R"), &["qos", "list"]);
    ok(&table, "qos list");
    assert!(
        text(&table.stdout).contains("tc (policer, then router)"),
        "{what}: {}",
        text(&table.stdout)
    );

    ok(&pg_in(&t.ns("R"), &["qos", "detach", "a1"]), "qos detach");
    ok(&router(&t, &["detach"]), "router detach");
    t.remove();
}

#[test]
fn router_then_policer_at_tc_polices() {
    router_and_policer_at_tc("cmp1", true, false);
}

#[test]
fn policer_then_router_at_tc_polices() {
    router_and_policer_at_tc("cmp2", false, false);
}

#[test]
fn cls_router_then_policer_polices() {
    router_and_policer_at_tc("cmp8", true, true);
}

#[test]
fn policer_then_cls_router_polices() {
    router_and_policer_at_tc("cmp9", false, true);
}

/// `out` failed (non-zero exit) with one error line that says each of
/// `says`. Warnings (`router attach --hook xdp` at default offloads warns
/// about the peers' offloads) and log lines may come before it.
fn refused_in_one_line(out: &Output, what: &str, says: &[&str]) {
    assert!(
        !out.status.success() && out.status.code().is_some_and(|c| c != 0),
        "{what}: {:?}",
        out.status
    );
    let e = text(&out.stderr);
    let lines: Vec<&str> = e
        .lines()
        .filter(|l| !l.starts_with("peregrine: warning:") && !l.contains(" INFO "))
        .collect();
    assert_eq!(lines.len(), 1, "{what}: one line: {e}");
    assert!(says.iter().all(|s| lines[0].contains(s)), "{what}: {e}");
}

/// The router at XDP on a1 and a policer there (at `hook`), in both
/// orders: the second is refused in one line that says `says`, exits
/// non-zero and leaves nothing behind, and the first keeps working. Ends
/// with the policer attached and no router.
fn router_at_xdp_and_policer_refuse_the_second(t: &Topo, hook: &str, says: [&str; 2]) {
    let qos_args: &[&str] = &["--hook", hook];
    // The router first.
    ok(
        &router(t, &["attach", "--hook", "xdp", "a1", "b0"]),
        "router attach --hook xdp",
    );
    let o = qos_apply(t, "cmp-second", POLICED_UDP_RULE, qos_args);
    refused_in_one_line(&o, "qos apply after the XDP router", &["a1", says[0]]);
    assert!(listed_policers(t).is_empty(), "no policer left");
    let before = forwarded(t, "a1");
    assert!(t.ping("198.18.2.1"), "the router still forwards");
    assert!(forwarded(t, "a1") > before, "through the router");
    ok(&router(t, &["detach"]), "router detach");

    // The policer first.
    ok(
        &qos_apply(t, "cmp-second", POLICED_UDP_RULE, qos_args),
        "qos apply",
    );
    let o = router(t, &["attach", "--hook", "xdp", "a1", "b0"]);
    refused_in_one_line(
        &o,
        "router attach --hook xdp after the policer",
        &["a1", says[1]],
    );
    let l = json(&router(t, &["list", "--json"]), "router list");
    assert!(
        !l["attachments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["namespace"] == t.ns("R").as_str()),
        "no router left: {l}"
    );
    let seen = json_u64(&qos_stats(t), "packets");
    assert!(t.ping("198.18.2.1"), "traffic passes the policer");
    assert!(
        json_u64(&qos_stats(t), "packets") > seen,
        "the policer still runs"
    );
}

/// Router and policer both at XDP on a1, in both orders: the hook is
/// taken.
#[test]
fn router_and_policer_at_xdp_refuse_the_second() {
    let Some(t) = Topo::privileged_up("cmp3") else {
        return;
    };
    let taken = "another XDP program is already attached";
    router_at_xdp_and_policer_refuse_the_second(&t, "xdp", [taken, taken]);
    ok(&pg_in(&t.ns("R"), &["qos", "detach", "a1"]), "qos detach");
    t.remove();
}

/// Whether the router in R delivers out of `port` with bpf_redirect_peer
/// (its flag in the router's maps, read from the pins).
fn peer_delivery(t: &Topo, port: &str) -> bool {
    let dir = netns::run_in(&t.ns("R"), || PinScope::Here.dir())
        .unwrap()
        .unwrap();
    RunningRouter::open(&dir)
        .unwrap()
        .peer_delivered(&[port.to_string()])
        .contains(&port.to_string())
}

const FUNCTION_PORT: u16 = 1232;

/// `faas serve`'s arguments for `functions` on b1 with AF_XDP, one CPU,
/// for at most 30 s.
fn serve_args_b1(functions: &str) -> Vec<&str> {
    vec![
        "--iface",
        "b1",
        "--backend",
        "afxdp",
        "--functions",
        functions,
        "--cpus",
        "1",
        "--duration",
        "30",
    ]
}

/// `faas serve` of `reverse` on b1 with AF_XDP in B, logging at info (its
/// refreshes of the router's delivery), for at most 30 s; returned once
/// it answers on its control socket (it serves by then).
fn serve_on_b1(t: &Topo) -> FaasServe {
    let functions = format!("{FUNCTION_PORT}=reverse");
    let mut args = serve_args_b1(&functions);
    args.push("--json");
    let s = FaasServe::start(&t.ns("B"), &args, &[("PEREGRINE_LOG", "info")]);
    assert!(
        wait_until(Duration::from_secs(10), || pg_in(
            &t.ns("B"),
            &["faas", "list", "--json"]
        )
        .status
        .success()),
        "faas serve did not come up"
    );
    s
}

/// Sends `n` requests from a std UDP socket in A to the function on B
/// (one every 200 us), and counts the right replies that arrive within
/// 3 s of the last request.
fn replies(t: &Topo, n: u32) -> u32 {
    let sock = netns::run_in(&t.ns("A"), || UdpSocket::bind("198.18.1.1:0"))
        .unwrap()
        .unwrap();
    sock.connect(("198.18.2.1", FUNCTION_PORT)).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let request = |i: u32| format!("compose request {i:05}").into_bytes();
    let mut answered = vec![false; n as usize];
    let mut buf = [0u8; 256];
    let mut take = |sock: &UdpSocket, answered: &mut Vec<bool>| {
        while let Ok(len) = sock.recv(&mut buf) {
            let mut r = buf[..len].to_vec();
            r.reverse();
            let i = std::str::from_utf8(&r)
                .ok()
                .and_then(|s| s.strip_prefix("compose request "))
                .and_then(|s| s.parse::<usize>().ok());
            if let Some(i) = i.filter(|&i| i < answered.len()) {
                answered[i] = true;
            }
        }
    };
    sock.set_nonblocking(true).unwrap();
    for i in 0..n {
        sock.send(&request(i)).unwrap();
        take(&sock, &mut answered);
        std::thread::sleep(Duration::from_micros(200));
    }
    sock.set_nonblocking(false).unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    while answered.iter().any(|a| !a) && Instant::now() < end {
        take(&sock, &mut answered);
    }
    answered.iter().filter(|a| **a).count() as u32
}

/// The tc router delivers into B while `faas serve --backend afxdp` runs
/// its XDP dispatcher on b1, started after the router or before it: a
/// client in A gets every reply; while it serves, port b0 delivers
/// through the veth (bpf_redirect_peer would skip b1's XDP hook), and
/// once it stops (Ctrl-C) b0 is back to peer delivery. The same with the
/// router's ports as cls_bpf filters (`--tc-attach cls`).
#[test]
fn faas_serve_behind_the_tc_router_answers_every_request() {
    let Some(t) = Topo::privileged_up("cmp4") else {
        return;
    };
    const N: u32 = 400;
    for (router_first, cls) in [(true, false), (false, false), (true, true), (false, true)] {
        let what = match (router_first, cls) {
            (true, false) => "router, then faas serve",
            (false, false) => "faas serve, then router",
            (true, true) => "router (cls_bpf), then faas serve",
            (false, true) => "faas serve, then router (cls_bpf)",
        };
        let attach = || {
            let mut args = vec!["attach", "a1", "b0"];
            if cls {
                args.extend(["--tc-attach", "cls"]);
            }
            let o = router(&t, &args);
            ok(&o, "router attach");
            let hook = if cls {
                "(tc as cls_bpf filters,"
            } else {
                "(tc,"
            };
            assert!(text(&o.stdout).contains(hook), "{}", text(&o.stdout));
            o
        };
        let mut serve = if router_first {
            attach();
            assert!(peer_delivery(&t, "b0"), "{what}: b1 runs no XDP yet");
            serve_on_b1(&t)
        } else {
            let s = serve_on_b1(&t);
            let o = attach();
            assert!(
                !text(&o.stdout).contains("bpf_redirect_peer on a1 b0"),
                "{what}: {}",
                text(&o.stdout)
            );
            s
        };
        assert!(t.ping("198.18.2.1"), "{what}: ping through the router");
        let got = replies(&t, N);
        eprintln!("{what}: {got} of {N} requests answered");
        assert_eq!(got, N, "{what}: every request answered");
        assert!(
            !peer_delivery(&t, "b0"),
            "{what}: b0 still delivers with bpf_redirect_peer past b1's XDP"
        );
        assert!(peer_delivery(&t, "a1"), "{what}: a0 runs no XDP");
        let stopped = serve.stop();
        assert!(stopped.ok, "{what}: faas serve: {}", stopped.stderr);
        if router_first {
            assert!(
                stopped
                    .stderr
                    .contains("router port b0 now delivers through b1's XDP hook"),
                "{what}: {}",
                stopped.stderr
            );
        }
        assert!(
            stopped.stderr.contains(
                "router port b0 delivers into b1's namespace with bpf_redirect_peer again"
            ),
            "{what}: {}",
            stopped.stderr
        );
        assert!(
            peer_delivery(&t, "b0"),
            "{what}: b0 back to peer delivery once faas serve stopped"
        );
        assert!(t.ping("198.18.2.1"), "{what}: ping after faas serve");
        ok(&router(&t, &["detach"]), "router detach");
    }
    t.remove();
}

/// The port of `loop.wat`, deployed beside the good function with a
/// 200 us time limit.
const LOOP_PORT: u16 = 1233;
/// Calls of the looping function per order.
const LOOP_CALLS: u64 = 20;

/// `faas deploy` of examples/functions/loop.wat on `LOOP_PORT` in B, 200 us.
fn deploy_loop(t: &Topo) -> Output {
    let wasm = example_function("loop.wat");
    let port = LOOP_PORT.to_string();
    pg_in(
        &t.ns("B"),
        &[
            "faas",
            "deploy",
            "--port",
            &port,
            "--wasm",
            &wasm,
            "--timeout",
            "200us",
        ],
    )
}

/// `LOOP_CALLS` requests that make loop.wat loop, from A, one every 10 ms;
/// the replies that came back (none should) within 300 ms of the last.
fn call_looping(a: &str) -> u32 {
    let sock = netns::run_in(a, || UdpSocket::bind("198.18.1.1:0"))
        .unwrap()
        .unwrap();
    sock.connect(("198.18.2.1", LOOP_PORT)).unwrap();
    for _ in 0..LOOP_CALLS {
        sock.send(b"!misbehave").unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 256];
    let mut answered = 0;
    while sock.recv(&mut buf).is_ok() && answered < LOOP_CALLS as u32 {
        answered += 1;
    }
    answered
}

/// A stage of `router_policer_and_function_in_every_order`.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// `router attach a1 b0` in R (tc at default offloads).
    Router,
    /// `qos apply` of the 20 Mbit/s UDP rule on a1 at tc, in R.
    Policer,
    /// `faas serve --backend afxdp` on b1 in B (XDP).
    Function,
}

/// The three one-shot commands of one node, started in each of their six
/// orders: the policer at tc on a1, the router at tc on a1 and b0, and a
/// function on AF_XDP behind the router in B. Whatever the order, every
/// stage works and its counters prove it: the policer holds iperf3 UDP to
/// its rate and counts the function's requests too (they match its
/// rule), the router forwards what conforms, every request gets its
/// reply while a WebAssembly function beside it is stopped at its time
/// limit on every call (none answered, each counted `timed_out`), and b0
/// delivers through b1's XDP hook while the function serves.
#[test]
fn router_policer_and_function_in_every_order() {
    let Some(t) = Topo::privileged_up("cmp5") else {
        return;
    };
    const N: u32 = 200;
    use Stage::*;
    let orders = [
        [Router, Policer, Function],
        [Router, Function, Policer],
        [Policer, Router, Function],
        [Policer, Function, Router],
        [Function, Router, Policer],
        [Function, Policer, Router],
    ];
    for order in orders {
        let what = format!("{order:?}");
        let mut serve = None;
        for stage in order {
            match stage {
                Router => ok(&router(&t, &["attach", "a1", "b0"]), "router attach"),
                Policer => ok(
                    &qos_apply(&t, "cmp-three", POLICED_UDP_RULE, &["--hook", "tc"]),
                    "qos apply",
                ),
                Function => serve = Some(serve_on_b1(&t)),
            }
        }
        let mut serve = serve.expect("the function serves");
        assert_eq!(tc_chain(&t).len(), 2, "{what}: policer and router on a1");
        assert_eq!(
            listed_policers(&t)[0]["tc_order"],
            serde_json::json!(["policer", "router"]),
            "{what}"
        );

        let run = policed_udp(&t, "100M", &what);
        assert_policed_udp(&run, &what, 40);

        // Beside the good function, one that loops past its time limit,
        // called while the good one is.
        ok(&deploy_loop(&t), "faas deploy loop.wat");
        let policed = json_u64(&qos_stats(&t), "packets");
        let fwd = forwarded(&t, "a1");
        let looping = std::thread::spawn({
            let a = t.ns("A");
            move || call_looping(&a)
        });
        let got = replies(&t, N);
        let answered_looping = looping.join().unwrap();
        eprintln!("{what}: {got} of {N} requests answered");
        assert_eq!(got, N, "{what}: every request answered");
        assert_eq!(answered_looping, 0, "{what}: the looping function answered");
        let looped = faas_functions(&t.ns("B"))[&LOOP_PORT].clone();
        assert_eq!(
            (
                looped["calls"].as_u64(),
                looped["errors_by_reason"]["timed_out"].as_u64()
            ),
            (Some(LOOP_CALLS), Some(LOOP_CALLS)),
            "{what}: every call of the looping function stopped at its limit: {looped}"
        );
        assert!(
            json_u64(&qos_stats(&t), "packets") >= policed + u64::from(N) + LOOP_CALLS,
            "{what}: the policer saw every request"
        );
        assert!(
            forwarded(&t, "a1") >= fwd + u64::from(N) + LOOP_CALLS,
            "{what}: the router forwarded every request"
        );
        assert!(
            !peer_delivery(&t, "b0"),
            "{what}: b0 delivers through b1's XDP hook while the function serves"
        );

        let stopped = serve.stop();
        assert!(stopped.ok, "{what}: faas serve: {}", stopped.stderr);
        assert!(peer_delivery(&t, "b0"), "{what}: b0 back to peer delivery");
        ok(&pg_in(&t.ns("R"), &["qos", "detach", "a1"]), "qos detach");
        ok(&router(&t, &["detach"]), "router detach");
        assert!(tc_chain(&t).is_empty(), "{what}: nothing left on a1");
    }
    t.remove();
}

/// What the link says attaching an XDP stage that takes frames where a
/// policer runs at tc, and the policer where such a stage runs.
const UNPOLICED: &str = "would pass unpoliced";
const NOT_SEEN: &str = "a policer there would not see them";

/// A policer at tc and an XDP stage that takes frames on one interface
/// cannot compose: XDP runs first, and what it redirects (the router at
/// XDP) or hands to AF_XDP (`faas serve`) never meets the policer. In
/// both orders, for the router on a1 and for the invoker on b1 (where B's
/// user polices): the second is refused in one line, leaves nothing
/// behind, and the first keeps working. (Before: accepted, and the
/// policer saw none of what the router forwarded.)
#[test]
fn a_policer_at_tc_and_an_xdp_stage_that_takes_frames_refuse_the_second() {
    let Some(t) = Topo::privileged_up("cmp6") else {
        return;
    };
    router_at_xdp_and_policer_refuse_the_second(&t, "tc", [NOT_SEEN, UNPOLICED]);
    let seen = json_u64(&qos_stats(&t), "packets");
    ok(
        &router(&t, &["attach", "--hook", "tc", "a1", "b0"]),
        "router at tc",
    );
    assert!(t.ping("198.18.2.1"), "policed, then routed at tc");
    assert!(
        json_u64(&qos_stats(&t), "packets") > seen,
        "the policer runs"
    );

    // B's user polices b1 at tc, then starts the AF_XDP invoker there.
    let dir = tmp("cmp-bypass-b1");
    let f = dir.join("qos.toml");
    std::fs::write(&f, POLICED_UDP_RULE).unwrap();
    let police_b1 = || {
        pg_in(
            &t.ns("B"),
            &["qos", "apply", f.to_str().unwrap(), "--iface", "b1"],
        )
    };
    ok(&police_b1(), "qos apply on b1");
    let functions = format!("{FUNCTION_PORT}=reverse");
    let mut args = vec!["faas", "serve"];
    args.extend(serve_args_b1(&functions));
    let o = pg_in(&t.ns("B"), &args);
    refused_in_one_line(
        &o,
        "faas serve (AF_XDP) after the tc policer on b1",
        &["b1", UNPOLICED],
    );
    ok(
        &pg_in(&t.ns("B"), &["qos", "detach", "b1"]),
        "qos detach b1",
    );
    // The invoker first: the policer is refused, the invoker answers.
    let mut s = serve_on_b1(&t);
    refused_in_one_line(
        &police_b1(),
        "qos apply on b1 after the AF_XDP invoker",
        &["b1", NOT_SEEN],
    );
    assert_eq!(replies(&t, 50), 50, "the invoker still answers");
    s.stop();
    ok(
        &pg_in(&t.ns("R"), &["qos", "detach", "a1"]),
        "qos detach a1",
    );
    ok(&router(&t, &["detach"]), "router detach");
    t.remove();
}

/// A tc router no pin names (one a process holds in memory: a bench's, a
/// program embedding peregrine_dataplane) switches its delivery to the
/// veth too when `faas serve` attaches its XDP dispatcher on the port's
/// peer: every request is answered, and the port delivers through b1's
/// XDP hook while the invoker runs. (Before, only pinned routers were
/// found: this one kept bpf_redirect_peer, skipped the dispatcher, and
/// every request was lost without a counter; `bench soak` met it.)
#[test]
fn an_unpinned_tc_router_delivers_through_the_invokers_xdp_hook() {
    let Some(t) = Topo::privileged_up("cmp7") else {
        return;
    };
    let ports = ["a1".to_string(), "b0".to_string()];
    let dp = peregrine_dataplane::Dataplane::router(
        Some(&t.ns("R")),
        &ports,
        peregrine_bpf::Hook::TC,
        peregrine_bpf::router::FibMode::Full,
        false,
    )
    .unwrap();
    let mut s = serve_on_b1(&t);
    let got = replies(&t, 50);
    let stopped = s.stop();
    assert_eq!(
        got, 50,
        "replies through the in-process router; faas serve said: {}",
        stopped.stderr
    );
    drop(dp);
    t.remove();
}
