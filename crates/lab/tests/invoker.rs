//! The AF_XDP invoker answering real UDP clients in a lab: every reply
//! checked against the function, over IPv4 and IPv6, and accepted by the
//! client kernel's UDP checksum check (a socket never sees a bad one).
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use peregrine_faas::baseline::SocketServer;
use peregrine_faas::functions::builtin;
use peregrine_faas::invoker::{AfXdpInvoker, InvokerConfig};
use peregrine_faas::Registry;
use peregrine_host::netns;
use peregrine_lab::load::{self, LoadConfig, LoadMetrics, LoadReport};
use peregrine_lab::Lab;
use peregrine_testbed::testing::wait_until;

mod common;
use common::{endpoint, pair, pair_with_queues, ping, privileged_lab};

fn expected(name: &str, req: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    builtin(name).unwrap().call(req, &mut out).unwrap();
    out
}

/// Deterministic payloads of 1..=1400 bytes.
fn payload(i: u32) -> Vec<u8> {
    let mut x = i.wrapping_mul(2654435761).wrapping_add(12345);
    let len = 1 + (x % 1400) as usize;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 94 + 32) as u8
        })
        .collect()
}

/// Sends 1500 requests over IPv4 and 1500 over IPv6 from host a, spread over
/// three functions, and checks every reply. Returns (sent, wrong, missing).
fn exercise(lab: &Lab) -> (u64, u32, u32) {
    exercise_from(lab, 1)
}

/// As `exercise`, round robin over `sockets` client sockets per family
/// (each its own source port: its own flow, hashed to a TX queue).
fn exercise_from(lab: &Lab, sockets: usize) -> (u64, u32, u32) {
    let mut wrong = 0;
    let mut missing = 0;
    let mut sent = 0u64;
    for (client, server) in [
        ("198.18.0.1:0", "198.18.0.2"),
        ("[2001:db8::1]:0", "2001:db8::2"),
    ] {
        let socks: Vec<UdpSocket> = (0..sockets).map(|_| client_socket(lab, client)).collect();
        let mut buf = vec![0u8; 2048];
        for i in 0..1500u32 {
            let sock = &socks[i as usize % sockets];
            let (port, name) =
                [(1232, "reverse"), (1233, "sha256"), (1234, "upper")][i as usize % 3];
            let req = payload(i);
            let to: SocketAddr = SocketAddr::new(server.parse().unwrap(), port);
            sock.send_to(&req, to).unwrap();
            sent += 1;
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    assert_eq!(from, to, "reply from the function's address and port");
                    if buf[..n] != expected(name, &req)[..] {
                        wrong += 1;
                    }
                }
                Err(_) => missing += 1,
            }
        }
    }
    (sent, wrong, missing)
}

fn check_counters(c: &peregrine_faas::invoker::Counters, sent: u64) {
    // A worker counts its replies after the TX ring took them, so the client
    // can hold the last reply before it is counted: wait for the count.
    wait_until(Duration::from_secs(2), || {
        c.replies.load(Ordering::Relaxed) >= sent
    });
    assert_eq!(c.replies.load(Ordering::Relaxed), sent);
    assert_eq!(
        c.malformed.load(Ordering::Relaxed)
            + c.failed.load(Ordering::Relaxed)
            + c.too_large.load(Ordering::Relaxed),
        0
    );
    // Room for every id a live registry may use; three are.
    let mut want = vec![0u64; c.per_function.len()];
    want[..3].fill(1000);
    assert_eq!(
        c.per_function
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect::<Vec<_>>(),
        want
    );
}

/// A UDP socket in host a bound to `addr`, waiting at most 1 s for a reply.
fn client_socket(lab: &Lab, addr: &str) -> UdpSocket {
    let sock = netns::run_in(&lab.ns("a"), || {
        UdpSocket::bind(addr.parse::<SocketAddr>().unwrap())
    })
    .unwrap()
    .unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    sock
}

/// The AF_XDP invoker on b:eth0 serving `functions`, as `cfg` says.
fn invoker_with(lab: &Lab, functions: &str, cfg: InvokerConfig) -> Result<AfXdpInvoker, String> {
    AfXdpInvoker::start(
        Some(&lab.ns("b")),
        "eth0",
        Registry::parse(functions).unwrap(),
        cfg,
    )
    .map_err(|e| e.to_string())
}

/// `workers` workers per queue, all pinned to CPU 1, their sockets as
/// `xsk` says (several on one queue share its UMEM).
fn on_cpu1(workers: u32, xsk: peregrine_xsk::XskConfig) -> InvokerConfig {
    InvokerConfig {
        cpus: vec![1],
        workers,
        xsk,
        ..Default::default()
    }
}

/// The AF_XDP invoker on b:eth0, one worker pinned to CPU 1.
fn invoker(lab: &Lab, functions: &str) -> AfXdpInvoker {
    invoker_with(lab, functions, on_cpu1(1, Default::default())).unwrap()
}

/// The closed-loop load client in host a: `connections` clients sending
/// `size`-byte requests to `functions` at `server` for `duration`, each
/// waiting up to 1 s for a reply.
fn closed_loop(
    lab: &Lab,
    functions: &str,
    server: &str,
    connections: usize,
    duration: Duration,
    size: usize,
    metrics: &LoadMetrics,
) -> LoadReport {
    let cfg = LoadConfig {
        server: server.parse().unwrap(),
        connections,
        duration,
        size,
        timeout: Duration::from_secs(1),
    };
    let reg = Registry::parse(functions).unwrap();
    netns::run_in(&lab.ns("a"), || load::run(&reg, &cfg, metrics))
        .unwrap()
        .unwrap()
}

const FUNCTIONS: &str = "1232=reverse,1233=sha256,1234=upper";

#[test]
fn afxdp_invoker_answers_every_request_correctly() {
    let Some(lab) = privileged_lab(pair("tfaas")) else {
        return;
    };
    let inv = invoker(&lab, FUNCTIONS);
    assert_eq!(inv.mode, "copy");
    assert!(
        inv.memory_bytes <= 9 << 20,
        "modest memory: {}",
        inv.memory_bytes
    );
    let (sent, wrong, missing) = exercise(&lab);
    assert_eq!((wrong, missing), (0, 0), "every reply right, none missing");
    check_counters(&inv.counters, sent);
    // ARP, ND and ping still reach the kernel behind the dispatcher.
    assert_eq!(ping("tfaas", "a", "198.18.0.2"), 0);
}

/// Busy polling (SO_PREFER_BUSY_POLL, SO_BUSY_POLL, SO_BUSY_POLL_BUDGET),
/// two workers sharing the queue's UMEM, and the dispatcher in generic XDP
/// (the sockets in skb mode): still every reply right.
#[test]
fn afxdp_invoker_with_busy_polling_and_shared_umem_answers_correctly() {
    let Some(lab) = privileged_lab(pair("tfaasbp")) else {
        return;
    };
    let busy_poll = peregrine_xsk::XskConfig {
        busy_poll: Some(peregrine_xsk::BusyPoll::default()),
        ..Default::default()
    };
    let cfg = InvokerConfig {
        xdp_mode: peregrine_bpf::XdpMode::Generic,
        ..on_cpu1(2, busy_poll)
    };
    let inv = invoker_with(&lab, FUNCTIONS, cfg).unwrap();
    assert_eq!(inv.mode, "skb");
    // One UMEM for the queue: the second socket adds only its two rings.
    assert!(
        inv.memory_bytes < (8 << 20) + (1 << 20),
        "{}",
        inv.memory_bytes
    );
    let (sent, wrong, missing) = exercise(&lab);
    assert_eq!((wrong, missing), (0, 0), "every reply right, none missing");
    check_counters(&inv.counters, sent);
}

/// Per-queue XDP redirect counts of `ns:iface` (veth's ethtool stats).
fn redirects_per_queue(ns: &str, iface: &str, queues: u32) -> Vec<u64> {
    let out = netns::run_in(ns, || {
        std::process::Command::new("ethtool")
            .args(["-S", iface])
            .output()
    })
    .unwrap()
    .unwrap();
    assert!(out.status.success(), "ethtool -S {iface} in {ns}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (0..queues)
        .map(|q| {
            let key = format!("rx_queue_{q}_xdp_redirect:");
            text.lines()
                .find_map(|l| l.trim().strip_prefix(key.as_str()))
                .unwrap_or_else(|| panic!("no {key} in ethtool -S {iface}: {text}"))
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

/// `--queues 2`: a two-queue veth, one worker on each RX queue. Requests
/// from 16 client flows per family spread over both queues; every one is
/// answered correctly, and the counters are exact: per function, per
/// dispatcher, and per queue (the queues' redirects add up to the requests).
#[test]
fn afxdp_invoker_serves_two_queues() {
    let Some(lab) = privileged_lab(pair_with_queues("tfaasmq", 2)) else {
        return;
    };
    // One queue served of two is refused: the other queue's requests would
    // be lost.
    let err = invoker_with(&lab, FUNCTIONS, InvokerConfig::default())
        .err()
        .expect("serving one of two queues must be refused");
    assert!(err.contains("2 RX queues"), "{err}");
    let cfg = InvokerConfig {
        queues: 2,
        ..on_cpu1(1, Default::default())
    };
    let inv = invoker_with(&lab, FUNCTIONS, cfg).unwrap();
    let before = redirects_per_queue(&lab.ns("b"), "eth0", 2);
    let (sent, wrong, missing) = exercise_from(&lab, 16);
    assert_eq!((wrong, missing), (0, 0), "every reply right, none missing");
    check_counters(&inv.counters, sent);
    for id in 0..3 {
        let s = inv.prog.stats(id).unwrap();
        assert_eq!(
            (s.packets, s.no_socket, s.disabled),
            (1000, 0, 0),
            "function {id}: every request to a socket"
        );
    }
    let after = redirects_per_queue(&lab.ns("b"), "eth0", 2);
    let per_queue: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        per_queue.iter().sum::<u64>(),
        sent,
        "every request redirected on one of the queues: {per_queue:?}"
    );
    assert!(
        per_queue.iter().all(|&n| n > 0),
        "both queues' workers served requests: {per_queue:?}"
    );
}

#[test]
fn socket_baselines_answer_every_request_correctly() {
    let Some(lab) = privileged_lab(pair("tfaasb")) else {
        return;
    };
    for mmsg in [false, true] {
        let reg = Registry::parse(FUNCTIONS).unwrap();
        let server = netns::run_in(&lab.ns("b"), || {
            if mmsg {
                SocketServer::mmsg(reg, 2, &[1])
            } else {
                SocketServer::simple(reg)
            }
        })
        .unwrap()
        .unwrap();
        let (sent, wrong, missing) = exercise(&lab);
        assert_eq!((wrong, missing), (0, 0), "mmsg={mmsg}");
        check_counters(&server.counters, sent);
    }
}

#[test]
fn functions_change_at_run_time_without_losing_others_requests() {
    use peregrine_bpf::dispatch::Policy;
    let Some(lab) = privileged_lab(pair("tfaasrt")) else {
        return;
    };
    let inv = invoker(&lab, "1232=reverse,1233=echo");
    let sock = client_socket(&lab, "198.18.0.1:0");
    let to_a: SocketAddr = "198.18.0.2:1232".parse().unwrap();
    let to_b: SocketAddr = "198.18.0.2:1233".parse().unwrap();
    let mut buf = vec![0u8; 2048];
    let (mut a_ok, mut b_ok, mut a_bad) = (0, 0, 0);
    for round in 0..600u32 {
        // Every 100 requests, change function B: off, on, port removed,
        // port back; function A must never notice.
        match round {
            100 => inv.prog.set_workers(1, 0, Policy::RoundRobin).unwrap(),
            200 => inv.prog.set_workers(1, 1, Policy::FlowHash).unwrap(),
            300 => inv.prog.remove_port(1233).unwrap(),
            400 => inv
                .prog
                .set_function(1, 1233, 1, Policy::RoundRobin)
                .unwrap(),
            _ => {}
        }
        let req = payload(round);
        sock.send_to(&req, to_a).unwrap();
        match sock.recv_from(&mut buf) {
            Ok((n, _)) if buf[..n] == expected("reverse", &req)[..] => a_ok += 1,
            _ => a_bad += 1,
        }
        sock.send_to(&req, to_b).unwrap();
        // While B is off or unrouted its datagrams go to the kernel (no
        // listener there): no reply to wait for.
        let b_served = !(100..200).contains(&round) && !(300..400).contains(&round);
        if b_served {
            let (n, from) = sock
                .recv_from(&mut buf)
                .expect("B answers while it has workers");
            assert_eq!(from, to_b);
            assert_eq!(&buf[..n], &req[..]);
            b_ok += 1;
        }
    }
    assert_eq!(
        (a_ok, a_bad),
        (600, 0),
        "function A lost nothing while B changed"
    );
    assert_eq!(
        b_ok, 400,
        "B answered exactly while it had workers and its port"
    );
    let s = inv.prog.stats(1).unwrap();
    assert_eq!(
        s.disabled, 100,
        "B's datagrams while it had no workers were counted and passed"
    );
}

#[test]
fn load_client_checks_every_reply_and_serves_metrics() {
    use std::io::{Read, Write};
    let Some(lab) = privileged_lab(pair("tfaasld")) else {
        return;
    };
    let _inv = invoker(&lab, FUNCTIONS);
    let metrics = LoadMetrics::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr: SocketAddr = "127.0.0.1:19464".parse().unwrap();
    let srv = metrics.serve(addr, stop.clone()).unwrap();
    for server_ip in ["198.18.0.2", "2001:db8::2"] {
        let r = closed_loop(
            &lab,
            FUNCTIONS,
            server_ip,
            8,
            Duration::from_secs(1),
            200,
            &metrics,
        );
        assert_eq!((r.wrong, r.missing), (0, 0), "{server_ip}: {r:?}");
        assert!(r.responses > 1000, "{server_ip}: {r:?}");
        assert_eq!(r.responses, r.requests);
        assert_eq!(r.latency.len(), r.responses);
    }
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(
        body.contains("peregrine_faas_load_responses_total"),
        "{body}"
    );
    assert!(
        body.contains("peregrine_faas_load_latency_seconds_bucket"),
        "{body}"
    );
    stop.store(true, Ordering::Relaxed);
    srv.join().unwrap();
}

/// Two workers on one queue share a UMEM (XDP_SHARED_UMEM). Function A
/// (reverse) takes sustained open-loop load while the workers of both
/// functions are scaled down and up every 250 ms; function B (echo) is used
/// by closed-loop clients at the same time. Nothing is lost or wrong on
/// either side: every request of A answered (checked in the client's kernel),
/// every request of B answered and checked.
#[test]
fn workers_scale_under_sustained_load_without_losing_requests() {
    use peregrine_bpf::dispatch::Policy;
    use peregrine_lab::openloop::{self, OpenLoopConfig, OpenLoopProgress};
    use peregrine_lab::pacing::Rate;
    use std::sync::atomic::AtomicBool;

    let Some(lab) = privileged_lab(pair("tfaasscale")) else {
        return;
    };
    // Deep rings: two busy-polling workers share CPU 1 and take turns.
    let deep = peregrine_xsk::XskConfig {
        frames: 32768,
        ring: 8192,
        ..Default::default()
    };
    let inv = invoker_with(&lab, "1232=reverse,1233=echo", on_cpu1(2, deep)).unwrap();
    let mut open = OpenLoopConfig::for_lab(
        lab.topology(),
        &endpoint("a", "eth0"),
        "198.18.0.2".parse().unwrap(),
        &Registry::parse("1232=reverse").unwrap(),
        200,
    )
    .unwrap();
    open.rate = Rate::Pps(150_000.0);
    open.duration = Duration::from_secs(4);
    open.flows = 64;
    let done = AtomicBool::new(false);
    let (a, b, changes) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let r = openloop::run(&open, &OpenLoopProgress::default());
            done.store(true, Ordering::Relaxed);
            r
        });
        let b = s.spawn(|| {
            closed_loop(
                &lab,
                "1233=echo",
                "198.18.0.2",
                4,
                Duration::from_secs(3),
                300,
                &LoadMetrics::new(),
            )
        });
        // Scale while both run: A 2 -> 1 -> 2 workers, B 2 -> 1 -> 2, in turn.
        let mut changes = 0;
        let mut step = 0u32;
        while !done.load(Ordering::Relaxed) && step < 40 {
            std::thread::sleep(Duration::from_millis(250));
            let (id, n) = (step % 2, if step % 4 < 2 { 1 } else { 2 });
            inv.prog.set_workers(id, n, Policy::RoundRobin).unwrap();
            changes += 1;
            step += 1;
        }
        (a.join().unwrap().unwrap(), b.join().unwrap(), changes)
    });
    assert!(changes >= 8, "scaled {changes} times under load");
    // Sustained: 150k/s x 4 s = 600k requests offered. The live generator
    // shares its CPU with the receiving side's dispatcher and AF_XDP copy
    // (veth delivers on the sender's CPU) and, as measured, does not always
    // make up the time it loses there. Measured 2026-11-23, 8 runs with no
    // other build running: 617,314 609,359 607,859 443,887 599,700 582,226
    // 599,261 590,961. With another build on the 2 vCPUs: 196k-358k (no
    // rate bound holds then; this one fails). The bound is the tightest
    // that held in every quiet run, the 444k one included.
    assert!(
        a.requests >= 440_000,
        "sustained load, 150k/s for 4 s (CPU taken by other processes?): {a:?}"
    );
    assert_eq!((a.wrong, a.missing), (0, 0), "function A: {a:?}");
    assert_eq!(a.replies, a.requests);
    assert_eq!((b.wrong, b.missing), (0, 0), "function B: {b:?}");
    assert!(b.responses > 1000, "function B served: {b:?}");
    assert_eq!(inv.counters.tx_ring_full.load(Ordering::Relaxed), 0);
    assert_eq!(inv.counters.malformed.load(Ordering::Relaxed), 0);
}
