//! Functions deployed into a running `faas serve` while a kernel-socket
//! client keeps it busy, as a user would do it: namespaces and a veth made
//! with plain `ip` (default offloads), `faas serve`, `faas deploy`,
//! `faas undeploy` and `faas list` run through `ip netns exec`.
//!
//! Per backend (afxdp, socket), IPv4 and IPv6 requests alternate on a
//! built-in's port and on the port the test deploys, replaces and
//! undeploys. Every request sent while a function is deployed is answered
//! (none lost across the replacements), every request sent after a deploy
//! is acknowledged is answered by that version, and none sent after the
//! undeploy is acknowledged is. Meanwhile a trapping, a looping and a
//! memory-hungry function fail exactly the requests meant to make them
//! fail, counted under their reasons, and malformed modules are refused
//! with one line and change nothing.
mod common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{example_function, faas_functions, has_xdp, ip, pg_in, sh_in, text, tmp, FaasServe};
use peregrine_host::netns;
use peregrine_testbed::testing::{privileged_here, wait_until, NsPair};

const NATIVE: u16 = 1232;
const LIVE: u16 = 1300;
const SERVERS: [&str; 2] = ["198.18.0.2", "2001:db8::2"];

/// The client (a) and server (b) namespaces with both families' addresses.
fn pair(p: &str) -> NsPair {
    let pair = NsPair::new(&format!("{p}-a"), &format!("{p}-b"));
    for (ns, v4, v6) in [
        (&pair.a, "198.18.0.1/24", "2001:db8::1/64"),
        (&pair.b, "198.18.0.2/24", "2001:db8::2/64"),
    ] {
        ip(&["-n", ns, "addr", "add", v4, "dev", "eth0"]);
        ip(&["-n", ns, "addr", "add", v6, "dev", "eth0", "nodad"]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    pair
}

/// `faas serve` of the built-in on NATIVE with `backend` in `ns`, for at
/// most 60 s.
fn serve(ns: &str, backend: &str) -> FaasServe {
    let functions = format!("{NATIVE}=reverse");
    FaasServe::start(
        ns,
        &[
            "--backend",
            backend,
            "--cpus",
            "1",
            "--functions",
            &functions,
            "--duration",
            "60",
            "--json",
        ],
        &[],
    )
}

/// `serve`, returned once its control socket answers (at most 10 s).
fn serve_answering(ns: &str, backend: &str) -> FaasServe {
    let s = serve(ns, backend);
    assert!(
        wait_until(Duration::from_secs(10), || faas(ns, &["list", "--json"]).0),
        "{backend}: the server's control socket did not answer"
    );
    s
}

/// `faas <args>` in `ns`; (success, stdout, stderr).
fn faas(ns: &str, args: &[&str]) -> (bool, String, String) {
    let mut a = vec!["faas"];
    a.extend_from_slice(args);
    let o = pg_in(ns, &a);
    (o.status.success(), text(&o.stdout), text(&o.stderr))
}

/// A request of the load: its sequence number first, then bytes no
/// function maps to themselves in reverse.
fn payload(seq: u64) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend_from_slice(b"abcdefghijklmnop");
    p
}

/// Which function answered: the request's sequence and "echo" or
/// "reverse", or None for a reply no request of the load has.
fn decode(reply: &[u8]) -> Option<(u64, &'static str)> {
    if reply.len() != 24 {
        return None;
    }
    let seq = u64::from_le_bytes(reply[..8].try_into().unwrap());
    if reply == payload(seq) {
        return Some((seq, "echo"));
    }
    let mut r = reply.to_vec();
    r.reverse();
    let seq = u64::from_le_bytes(r[..8].try_into().unwrap());
    (r == payload(seq)).then_some((seq, "reverse"))
}

/// What the load client saw: each request (port, when it was sent), each
/// reply (sequence, function), and replies no request explains.
#[derive(Default)]
struct Seen {
    sent: Vec<(u16, Instant)>,
    replies: HashMap<u64, &'static str>,
    strange: Vec<Vec<u8>>,
}

/// Sends requests to NATIVE and LIVE in turn, alternating families, one
/// every 250 us, until `stop` (at most 30 s); replies are recorded by one
/// receiving thread per family.
fn load(
    client_ns: &str,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) -> Vec<std::thread::JoinHandle<()>> {
    let socks: Vec<Arc<UdpSocket>> = ["198.18.0.1:0", "[2001:db8::1]:0"]
        .iter()
        .map(|b| {
            let s = netns::run_in(client_ns, || {
                UdpSocket::bind(b.parse::<SocketAddr>().unwrap())
            })
            .unwrap()
            .unwrap();
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            Arc::new(s)
        })
        .collect();
    let mut threads = Vec::new();
    for s in &socks {
        let (s, stop, seen) = (s.clone(), stop.clone(), seen.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let until = Instant::now() + Duration::from_secs(40);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                if let Ok((n, _)) = s.recv_from(&mut buf) {
                    let mut seen = seen.lock().unwrap();
                    match decode(&buf[..n]) {
                        Some((seq, f)) if (seq as usize) < seen.sent.len() => {
                            assert!(
                                seen.replies.insert(seq, f).is_none(),
                                "request {seq} answered twice"
                            );
                        }
                        _ => seen.strange.push(buf[..n].to_vec()),
                    }
                }
            }
        }));
    }
    let sending = stop.clone();
    threads.push(std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(30);
        let mut seq = 0u64;
        while !sending.load(Ordering::Relaxed) && Instant::now() < until {
            let port = if seq.is_multiple_of(2) { NATIVE } else { LIVE };
            let family = (seq / 2 % 2) as usize;
            let to = SocketAddr::new(SERVERS[family].parse::<IpAddr>().unwrap(), port);
            {
                let mut seen = seen.lock().unwrap();
                seen.sent.push((port, Instant::now()));
            }
            socks[family].send_to(&payload(seq), to).unwrap();
            seq += 1;
            std::thread::sleep(Duration::from_micros(250));
        }
    }));
    threads
}

/// A deploy or undeploy as the test made it: when the command started and
/// when it returned (acknowledged), and the function from then on.
struct Change {
    started: Instant,
    acked: Instant,
    serves: Option<&'static str>,
}

fn change(server_ns: &str, args: &[&str], serves: Option<&'static str>) -> Change {
    let started = Instant::now();
    let (ok, out, err) = faas(server_ns, args);
    assert!(ok, "faas {args:?}: {out} {err}");
    Change {
        started,
        acked: Instant::now(),
        serves,
    }
}

/// Requests meant to make the misbehaving functions fail, each counted
/// once under its reason; a good request to each is still answered.
fn contain_misbehaving(client_ns: &str, server_ns: &str, what: &str) {
    let bad = [
        (1302u16, "trap.wat", "trapped", vec![]),
        (1303, "loop.wat", "timed_out", vec!["--timeout", "200us"]),
        (1304, "hog.wat", "memory_cap", vec!["--memory", "1MiB"]),
    ];
    for (port, file, _, extra) in &bad {
        let p = port.to_string();
        let f = example_function(file);
        let mut args = vec!["deploy", "--port", &p, "--wasm", &f];
        args.extend(extra.iter().copied());
        let (ok, _, err) = faas(server_ns, &args);
        assert!(ok, "{what}: deploying {file}: {err}");
    }
    let sock = netns::run_in(client_ns, || UdpSocket::bind("[::]:0"))
        .unwrap()
        .unwrap();
    let mut buf = [0u8; 2048];
    for (port, file, _, _) in &bad {
        for server in SERVERS {
            let server: IpAddr = server.parse().unwrap();
            let to = SocketAddr::new(server, *port);
            for _ in 0..2 {
                sock.send_to(b"!misbehave", to).unwrap();
            }
            sock.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            assert!(
                sock.recv_from(&mut buf).is_err(),
                "{what}: {file} answered a bad request"
            );
            sock.send_to(b"still here", to).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            // On a loss, what the server counted for the port says where.
            let (n, _) = sock.recv_from(&mut buf).unwrap_or_else(|e| {
                panic!(
                    "{what}: {file}: {e}; the server counted {:?}",
                    faas_functions(server_ns).get(port)
                )
            });
            assert_eq!(&buf[..n], b"still here", "{what}: {file}");
        }
    }
    // Two bad requests per family: exactly four failures, for the reason.
    let fs = faas_functions(server_ns);
    for (port, file, reason, _) in &bad {
        let f = &fs[port];
        assert_eq!(f["errors"], 4, "{what}: {file}: {f}");
        assert_eq!(f["calls"], 6, "{what}: {file}: {f}");
        assert_eq!(f["errors_by_reason"][reason], 4, "{what}: {file}: {f}");
    }
    for (port, _, _, _) in &bad {
        let (ok, _, err) = faas(server_ns, &["undeploy", "--port", &port.to_string()]);
        assert!(ok, "{what}: {err}");
    }
}

/// Each port with the deployment it runs (its generation), in port order.
fn deployments(ns: &str) -> Vec<(u16, serde_json::Value)> {
    let mut v: Vec<_> = faas_functions(ns)
        .into_iter()
        .map(|(p, f)| (p, f["generation"].clone()))
        .collect();
    v.sort_by_key(|(p, _)| *p);
    v
}

/// Malformed modules and limits are refused in one line and change nothing.
fn refuse_malformed(server_ns: &str, dir: &Path, what: &str) {
    let before = deployments(server_ns);
    let abi = r#"(memory (export "memory") 1)
        (func (export "alloc") (param i32) (result i32) (i32.const 0))
        (func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#;
    let cases: Vec<(&str, String, Vec<&str>, &str)> = vec![
        (
            "garbage.wasm",
            "\0asm\x01\0\0\0\x7f".into(),
            vec![],
            "end-of-file",
        ),
        ("text.wat", "(module (func".into(), vec![], "expected"),
        (
            "import.wat",
            format!(r#"(module (import "env" "f" (func)) {abi})"#),
            vec![],
            "imports env::f",
        ),
        (
            "nohandle.wat",
            r#"(module (memory (export "memory") 1))"#.into(),
            vec![],
            "must be",
        ),
        (
            "big.wat",
            abi.replace(
                "(memory (export \"memory\") 1)",
                "(memory (export \"memory\") 32)",
            ),
            vec!["--memory", "1MiB"],
            "above the cap",
        ),
    ];
    for (file, module, extra, why) in cases {
        let path: PathBuf = dir.join(file);
        std::fs::write(&path, module).unwrap();
        let p = path.display().to_string();
        for port in [LIVE, 1305] {
            let ps = port.to_string();
            let mut args = vec!["deploy", "--port", &ps, "--wasm", &p];
            args.extend(extra.iter().copied());
            let (ok, _, err) = faas(server_ns, &args);
            assert!(!ok && err.contains(why), "{what}: {file}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{what}: {file}: {err}");
        }
    }
    for (args, why) in [
        (vec!["--timeout", "50us"], "tick is 100"),
        (vec!["--memory", "1000"], "expected 64KiB"),
        (vec!["--name", "a b"], "name"),
    ] {
        let mut a = vec!["deploy", "--port", "1305", "--wasm"];
        let f = example_function("echo.wat");
        a.push(&f);
        a.extend(args);
        let o = pg_in(server_ns, &{
            let mut x = vec!["faas"];
            x.extend(a);
            x
        });
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{what}: {err}");
        assert!(
            err.contains(why) && err.trim_end().lines().count() == 1,
            "{what}: {err}"
        );
    }
    let after = deployments(server_ns);
    assert_eq!(before, after, "{what}: a refused deploy changed the server");
}

fn live_deployment(backend: &str, p: &str) {
    let pair = pair(p);
    let (client, server) = (pair.a.clone(), pair.b.clone());
    let dir = tmp(p);
    // A stale control socket (a server that died) is replaced.
    let path =
        peregrine_faas::control::path_for(netns::run_in(&server, netns::cookie).unwrap().unwrap());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&path);
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let mut serve = serve_answering(&server, backend);
    // A second server in the namespace is refused and leaves the first be.
    let o = pg_in(
        &server,
        &[
            "faas",
            "serve",
            "--backend",
            backend,
            "--functions",
            "1240=echo",
            "--duration",
            "1",
        ],
    );
    let err = text(&o.stderr);
    assert!(
        !o.status.success() && err.contains("already serves"),
        "{backend}: {err}"
    );
    assert!(
        path.exists(),
        "{backend}: the refused server removed the socket"
    );
    for s in SERVERS {
        let _ = sh_in(&client, &["ping", "-c1", "-W1", s], Duration::from_secs(3));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let threads = load(&client, stop.clone(), seen.clone());
    std::thread::sleep(Duration::from_millis(300));
    let (reverse, echo) = (
        example_function("reverse.wat"),
        example_function("echo.wat"),
    );
    let port = LIVE.to_string();
    let mut changes = Vec::new();
    for (file, f) in [
        (&reverse, "reverse"),
        (&echo, "echo"),
        (&reverse, "reverse"),
    ] {
        changes.push(change(
            &server,
            &["deploy", "--port", &port, "--wasm", file],
            Some(f),
        ));
        std::thread::sleep(Duration::from_millis(500));
    }
    contain_misbehaving(&client, &server, backend);
    refuse_malformed(&server, &dir, backend);
    std::thread::sleep(Duration::from_millis(300));
    changes.push(change(&server, &["undeploy", "--port", &port], None));
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let stopped = serve.stop();
    assert!(
        stopped.ok,
        "{backend}: faas serve failed: {}",
        stopped.stdout
    );
    assert!(
        !path.exists(),
        "{backend}: the control socket outlived its server"
    );

    let seen = seen.lock().unwrap();
    assert!(
        seen.strange.is_empty(),
        "{backend}: {} replies no request explains",
        seen.strange.len()
    );
    let first = changes[0].acked;
    let undeploy = changes.last().unwrap();
    let (mut native, mut live, mut after_switch) = (0, 0, 0);
    for (seq, (port, at)) in seen.sent.iter().enumerate() {
        let reply = seen.replies.get(&(seq as u64)).copied();
        if *port == NATIVE {
            assert_eq!(reply, Some("reverse"), "{backend}: native request {seq}");
            native += 1;
            continue;
        }
        if *at < first {
            continue; // before the first deploy: the kernel's
        }
        if *at >= undeploy.acked {
            assert_eq!(
                reply, None,
                "{backend}: request {seq} answered after the undeploy"
            );
            continue;
        }
        if *at >= undeploy.started {
            continue; // during the undeploy: either
        }
        // Deployed: answered, by the version acknowledged last before it.
        let reply = reply.unwrap_or_else(|| panic!("{backend}: request {seq} to port {LIVE} lost"));
        live += 1;
        let last_acked = changes.iter().rev().find(|c| c.acked <= *at).unwrap();
        let still_changing = changes.iter().any(|c| c.started <= *at && *at < c.acked);
        if !still_changing {
            assert_eq!(
                Some(reply),
                last_acked.serves,
                "{backend}: request {seq} answered by the wrong version"
            );
            after_switch += 1;
        }
    }
    eprintln!("{backend}: {native} native and {live} deployed-port requests answered, {after_switch} checked for their version");
    assert!(
        native > 2000 && after_switch > 1000,
        "{backend}: too little load ({native}, {after_switch})"
    );
}

#[test]
fn afxdp_deploy_replace_undeploy_under_load() {
    if !privileged_here() {
        return;
    }
    live_deployment("afxdp", "pg-live-x");
}

#[test]
fn socket_deploy_replace_undeploy_under_load() {
    if !privileged_here() {
        return;
    }
    live_deployment("socket", "pg-live-s");
}

/// The mmsg backend serves a fixed set of functions: deploy and undeploy
/// are refused in one line and change nothing; list still answers.
#[test]
fn mmsg_refuses_changes_in_one_line() {
    if !privileged_here() {
        return;
    }
    let pair = pair("pg-live-m");
    let mut serve = serve_answering(&pair.b, "mmsg");
    let before = deployments(&pair.b);
    let echo = example_function("echo.wat");
    let native = NATIVE.to_string();
    for args in [
        vec!["deploy", "--port", "1300", "--wasm", &echo],
        vec!["deploy", "--port", &native, "--wasm", &echo],
        vec!["undeploy", "--port", &native],
    ] {
        let (ok, _, err) = faas(&pair.b, &args);
        assert!(
            !ok && err.contains("fixed set of functions"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    assert_eq!(deployments(&pair.b), before);
    let stopped = serve.stop();
    assert!(stopped.ok, "faas serve failed: {}", stopped.stdout);
}

/// A user's `faas serve` (per backend) has a looping function deployed
/// with the longest time limit (`--timeout 10s`); a request makes it loop,
/// and while that call holds the only worker (a good request goes
/// unanswered, the call is not yet counted) the server is killed with
/// SIGKILL. What it made cannot
/// block the next start: its XDP program leaves eth0 with it (no program
/// is left attached), and its control socket, left behind, is taken over.
/// A fresh `faas serve` on the same interface starts, answers good
/// requests of both families with their bytes intact (the built-in's
/// reverse), knows nothing of the dead server's deployment, and stops
/// cleanly, leaving no XDP program and no control socket.
#[test]
fn killed_during_a_looping_call_the_next_serve_starts_and_answers() {
    if !privileged_here() {
        return;
    }
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let pair = pair("pg-live-k");
    let (client, server) = (pair.a.clone(), pair.b.clone());
    let path =
        peregrine_faas::control::path_for(netns::run_in(&server, netns::cookie).unwrap().unwrap());
    let sock = netns::run_in(&client, || UdpSocket::bind("[::]:0"))
        .unwrap()
        .unwrap();
    for s in SERVERS {
        let _ = sh_in(&client, &["ping", "-c1", "-W1", s], Duration::from_secs(3));
    }
    let mut buf = [0u8; 2048];
    const LOOPING: u16 = 1303;
    let looping = LOOPING.to_string();
    for backend in ["afxdp", "socket"] {
        let mut first = serve_answering(&server, backend);
        let (ok, _, err) = faas(
            &server,
            &[
                "deploy",
                "--port",
                &looping,
                "--wasm",
                &example_function("loop.wat"),
                "--timeout",
                "10s",
            ],
        );
        assert!(ok, "{backend}: deploying loop.wat: {err}");
        let to = |server: &str, port: u16| SocketAddr::new(server.parse().unwrap(), port);
        // Answered before the loop: the worker serves.
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        sock.send_to(b"before", to(SERVERS[0], NATIVE)).unwrap();
        let (n, _) = sock
            .recv_from(&mut buf)
            .unwrap_or_else(|e| panic!("{backend}: no answer before the loop: {e}"));
        assert_eq!(&buf[..n], b"erofeb", "{backend}");
        sock.send_to(b"!loop", to(SERVERS[0], LOOPING)).unwrap();
        // The call loops for up to 10 s on the only worker: a good request
        // then goes unanswered. The first ones sent may still be taken
        // before the loop (the socket backend reads its ports' sockets in
        // turn): an answered one is sent again, for at most 4 s and 64
        // requests.
        sock.set_read_timeout(Some(Duration::from_millis(1000)))
            .unwrap();
        let until = Instant::now() + Duration::from_secs(4);
        let held = (0..64).take_while(|_| Instant::now() < until).any(|_| {
            sock.send_to(b"behind", to(SERVERS[0], NATIVE)).unwrap();
            sock.recv_from(&mut buf).is_err()
        });
        assert!(held, "{backend}: the looping call never held the worker");
        let calls = faas_functions(&server)[&LOOPING]["calls"].clone();
        assert_eq!(calls, 0, "{backend}: the looping call had not ended");
        assert_eq!(
            has_xdp(&server, "eth0"),
            backend == "afxdp",
            "{backend}: its XDP program on eth0 while it serves"
        );
        kill(Pid::from_raw(first.0.id() as i32), Signal::SIGKILL).unwrap();
        let status = first.0.wait().unwrap();
        // Reaped: its drop must not signal a pid that may be reused.
        std::mem::forget(first);
        assert!(
            status.code().is_none(),
            "{backend}: it exited by itself: {status:?}"
        );
        assert!(
            wait_until(Duration::from_secs(2), || !has_xdp(&server, "eth0")),
            "{backend}: the dead server's XDP program stayed on eth0"
        );
        assert!(
            path.exists(),
            "{backend}: SIGKILL cannot remove the control socket"
        );
        // Whatever the dead server had queued is gone with it.
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        while sock.recv_from(&mut buf).is_ok() {}

        // It takes over the control socket the dead one left.
        let mut next = serve_answering(&server, backend);
        assert!(
            !faas_functions(&server).contains_key(&LOOPING),
            "{backend}: the dead server's deployment came back"
        );
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        for (i, s) in SERVERS.iter().enumerate() {
            for k in 0..5u8 {
                let mut req = format!("after {backend} {i} {k} ").into_bytes();
                req.extend((0..=255u8).map(|b| b.wrapping_mul(k + 1)));
                sock.send_to(&req, to(s, NATIVE)).unwrap();
                let (n, _) = sock
                    .recv_from(&mut buf)
                    .unwrap_or_else(|e| panic!("{backend}: {s}: request {k} unanswered: {e}"));
                req.reverse();
                assert_eq!(&buf[..n], &req[..], "{backend}: {s}: request {k}");
            }
        }
        let stopped = next.stop();
        assert!(stopped.ok, "{backend}: the next server: {}", stopped.stderr);
        assert!(!has_xdp(&server, "eth0"), "{backend}: an XDP program left");
        assert!(!path.exists(), "{backend}: the control socket left");
    }
}

/// The socket backend's one thread serves every port in turn: while a
/// client floods one port (a std UDP socket sending as fast as it can),
/// requests to another port are still answered, each within a second,
/// with their bytes intact. (On a server that read one port's socket
/// until it was empty, none of them was: the flood never let go.)
#[test]
fn socket_backend_answers_every_port_under_a_flood_on_one() {
    if !privileged_here() {
        return;
    }
    const OTHER: u16 = 1233;
    let pair = pair("pg-live-f");
    let (client, server) = (pair.a.clone(), pair.b.clone());
    let functions = format!("{NATIVE}=reverse,{OTHER}=echo");
    let mut served = FaasServe::start(
        &server,
        &[
            "--backend",
            "socket",
            "--functions",
            &functions,
            "--duration",
            "60",
        ],
        &[],
    );
    assert!(
        wait_until(Duration::from_secs(10), || faas(
            &server,
            &["list", "--json"]
        )
        .0),
        "the server's control socket did not answer"
    );
    let to = |port| SocketAddr::new(SERVERS[0].parse().unwrap(), port);
    let _ = sh_in(
        &client,
        &["ping", "-c1", "-W1", SERVERS[0]],
        Duration::from_secs(3),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (stop, client) = (stop.clone(), client.clone());
        std::thread::spawn(move || {
            netns::run_in(&client, || {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                let until = Instant::now() + Duration::from_secs(20);
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    if s.send_to(&[7u8; 1200], to(NATIVE)).is_ok() {
                        sent += 1;
                    }
                }
                sent
            })
            .unwrap()
        })
    };
    // The flood is under way once the server has answered some of it.
    assert!(
        wait_until(Duration::from_secs(5), || {
            faas_functions(&server)[&NATIVE]["calls"].as_u64() > Some(1000)
        }),
        "the flood did not reach the server"
    );
    let sock = netns::run_in(&client, || UdpSocket::bind("0.0.0.0:0"))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = [0u8; 2048];
    let mut answered = 0;
    for k in 0..10u8 {
        let req = format!("under the flood {k}").into_bytes();
        sock.send_to(&req, to(OTHER)).unwrap();
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            assert_eq!(&buf[..n], &req[..], "request {k}");
            answered += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sent = flood.join().unwrap();
    assert!(sent > 1000, "the flood sent {sent}");
    assert_eq!(
        answered, 10,
        "requests to port {OTHER} answered under the flood"
    );
    let stopped = served.stop();
    assert!(stopped.ok, "the server: {}", stopped.stderr);
}
