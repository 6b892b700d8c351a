//! WebAssembly functions served like built-ins, through the AF_XDP invoker
//! and the socket baselines, to a kernel-socket client over IPv4 and IPv6
//! (namespaces and veths made with plain `ip`, default offloads). Replies
//! must be the function's result byte for byte; requests that make a
//! function trap, loop or exhaust its memory go unanswered and are counted,
//! and the same function answers the next request.
mod common;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use peregrine_faas::baseline::SocketServer;
use peregrine_faas::functions::{Function, Reverse};
use peregrine_faas::invoker::{AfXdpInvoker, Counters, InvokerConfig};
use peregrine_faas::wasm::{WasmErrors, WasmFunction, WasmLimits};
use peregrine_faas::Registry;
use peregrine_host::netns;
use peregrine_testbed::testing::{ip, privileged, wait_until, NsPair};

const A: &str = "pg-wasm-a";
const B: &str = "pg-wasm-b";

/// The client and server namespaces (`NsPair`), with both families'
/// addresses.
fn pair() -> NsPair {
    let p = NsPair::new(A, B);
    for (ns, v4, v6) in [
        (A, "198.18.0.1/24", "2001:db8::1/64"),
        (B, "198.18.0.2/24", "2001:db8::2/64"),
    ] {
        ip(&["-n", ns, "addr", "add", v4, "dev", "eth0"]);
        ip(&["-n", ns, "addr", "add", v6, "dev", "eth0", "nodad"]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    p
}

fn example(name: &str) -> Arc<WasmFunction> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/functions")
        .join(name);
    let limits = WasmLimits {
        memory: 1 << 20,
        timeout: Duration::from_millis(10),
    };
    Arc::new(WasmFunction::load(&path, limits).unwrap())
}

const REVERSE_WASM: u16 = 1300;
const REVERSE_NATIVE: u16 = 1301;
/// Reads the error count a misbehaving function must grow.
type ErrorCount = fn(&WasmErrors) -> u64;

/// The misbehaving examples' ports, files and the counter each must grow.
const BAD: [(u16, &str, ErrorCount); 3] = [
    (1302, "trap.wat", |e| e.trapped.load(Ordering::Relaxed)),
    (1303, "loop.wat", |e| e.timed_out.load(Ordering::Relaxed)),
    (1304, "hog.wat", |e| e.memory_cap.load(Ordering::Relaxed)),
];

/// A fresh registry: the WebAssembly and native reverse, and the
/// misbehaving functions (kept, to read their error counts).
fn registry() -> (Registry, Vec<Arc<WasmFunction>>) {
    let mut r = Registry::default();
    r.add(REVERSE_WASM, example("reverse.wat")).unwrap();
    r.add(REVERSE_NATIVE, Arc::new(Reverse)).unwrap();
    let bad: Vec<_> = BAD.iter().map(|(_, file, _)| example(file)).collect();
    for ((port, _, _), f) in BAD.iter().zip(&bad) {
        r.add(*port, f.clone()).unwrap();
    }
    (r, bad)
}

/// Runs the client's requests against a server in B; returns the requests
/// that must have been answered.
fn exchange(counters: &Counters, bad: &[Arc<WasmFunction>], what: &str) -> u64 {
    let mut answered = 0u64;
    let mut refused = 0u64;
    for (sock, server) in common::clients_in(A) {
        // Neighbour resolved first (see default_offloads.rs: the kernel's
        // first solicitation after link-up may go unanswered for 1 s).
        let _ = Command::new("ip")
            .args(["netns", "exec", A, "ping", "-c1", "-W1"])
            .arg(server.to_string())
            .output();
        let mut buf = vec![0u8; 2048];
        let mut ask = |port: u16, req: &[u8], wait: Duration| -> Option<Vec<u8>> {
            sock.set_read_timeout(Some(wait)).unwrap();
            sock.send_to(req, SocketAddr::new(server, port)).unwrap();
            let (n, from) = sock.recv_from(&mut buf).ok()?;
            assert_eq!(from, SocketAddr::new(server, port), "{what}");
            Some(buf[..n].to_vec())
        };
        for port in [REVERSE_WASM, REVERSE_NATIVE] {
            for size in [1usize, 2, 7, 8, 9, 64, 200, 511, 1000, 1400] {
                let req: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
                let reply = ask(port, &req, Duration::from_secs(1));
                let mut want = Vec::new();
                Reverse.call(&req, &mut want).unwrap();
                assert_eq!(
                    reply,
                    Some(want),
                    "{what}: port {port}, {size} B to {server}"
                );
                answered += 1;
            }
        }
        for ((port, file, counter), f) in BAD.iter().zip(bad) {
            let before = counter(f.errors());
            let reply = ask(*port, b"!misbehave", Duration::from_millis(300));
            assert_eq!(reply, None, "{what}: {file} answered a bad request");
            refused += 1;
            assert!(
                wait_until(Duration::from_secs(1), || counter(f.errors()) == before + 1),
                "{what}: {file}'s failure not counted"
            );
            let reply = ask(*port, b"still here", Duration::from_secs(1));
            assert_eq!(reply.as_deref(), Some(&b"still here"[..]), "{what}: {file}");
            answered += 1;
        }
    }
    assert!(
        wait_until(Duration::from_secs(2), || counters
            .failed
            .load(Ordering::Relaxed)
            == refused),
        "{what}: failed {counters:?}"
    );
    answered
}

#[test]
fn wasm_functions_serve_on_every_backend_and_failures_are_contained() {
    if !privileged("wasm_functions_serve_on_every_backend_and_failures_are_contained") {
        return;
    }
    let _pair = pair();
    let one_cpu = vec![
        1 % std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    ];
    for backend in ["afxdp", "socket", "mmsg"] {
        let (registry, bad) = registry();
        let (counters, _server): (Arc<Counters>, Box<dyn std::any::Any>) = match backend {
            "afxdp" => {
                let inv = AfXdpInvoker::start(
                    Some(B),
                    "eth0",
                    registry,
                    InvokerConfig {
                        cpus: one_cpu.clone(),
                        ..Default::default()
                    },
                )
                .unwrap();
                (inv.counters.clone(), Box::new(inv))
            }
            "socket" => {
                let s = netns::run_in(B, || SocketServer::simple(registry))
                    .unwrap()
                    .unwrap();
                (s.counters.clone(), Box::new(s))
            }
            _ => {
                let s = netns::run_in(B, || SocketServer::mmsg(registry, 1, &one_cpu))
                    .unwrap()
                    .unwrap();
                (s.counters.clone(), Box::new(s))
            }
        };
        let answered = exchange(&counters, &bad, backend);
        assert!(
            wait_until(Duration::from_secs(2), || counters
                .replies
                .load(Ordering::Relaxed)
                == answered),
            "{backend}: {counters:?}"
        );
        assert_eq!(counters.malformed.load(Ordering::Relaxed), 0, "{backend}");
        // Each misbehaving function failed once per family, for its reason.
        for ((_, file, counter), f) in BAD.iter().zip(&bad) {
            assert_eq!(counter(f.errors()), 2, "{backend}: {file}");
        }
    }
}
