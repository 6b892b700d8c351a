//! Chaos (issue 28, item 4): a long-running command killed with SIGKILL at
//! random points under traffic, then started again, as an init system or a
//! user would. Every time, what the dead process attached goes with it or
//! is adopted by the next run, the next run serves, and no reply is ever
//! wrong; after the last clean stop nothing is left.
//!
//! The kill points are random in [0, 10 ms), [0, 60 ms) or [0, 1.2 s) after the start
//! (before the program is attached, while sockets are set up, while
//! serving); the seed
//! is printed, and `PEREGRINE_CHAOS_SEED` replays a run.
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use peregrine_host::netns;
use peregrine_testbed::testing::{privileged_here, wait_until, NsPair};

mod common;
use common::{has_xdp, pg_in, text, ChaosRng, FaasServe};

const A: &str = "pg-chaos-a";
const B: &str = "pg-chaos-b";
const SERVER: &str = "198.18.0.1";
const PORT: u16 = 1232;
/// Kill points per run of the test.
const KILLS: u32 = 50;

/// What the client in B saw: replies that are the reverse of a request it
/// sent, and anything else (a wrong reply).
#[derive(Default)]
struct Seen {
    right: AtomicU64,
    wrong: Mutex<Vec<String>>,
}

/// A client in B sending a numbered request every 500 us to the function
/// in A until `stop`, from one unconnected socket (a dead server's port
/// answers ICMP unreachable; that is no error here), checking every
/// reply.
fn client(stop: Arc<AtomicBool>, seen: Arc<Seen>) -> std::thread::JoinHandle<()> {
    let sock = netns::run_in(B, || UdpSocket::bind("198.18.0.2:0"))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_micros(500)))
        .unwrap();
    let server: SocketAddr = format!("{SERVER}:{PORT}").parse().unwrap();
    std::thread::spawn(move || {
        let mut sent = HashSet::new();
        let mut buf = [0u8; 512];
        let mut i: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            let req = format!("chaos request {i:08}");
            if sock.send_to(req.as_bytes(), server).is_ok() {
                sent.insert(req);
            }
            i += 1;
            while let Ok((len, from)) = sock.recv_from(&mut buf) {
                let mut r = buf[..len].to_vec();
                r.reverse();
                let ok = from == server && std::str::from_utf8(&r).is_ok_and(|s| sent.contains(s));
                if ok {
                    seen.right.fetch_add(1, Ordering::Relaxed);
                } else {
                    seen.wrong.lock().unwrap().push(format!(
                        "{from}: {:?}",
                        String::from_utf8_lossy(&buf[..len])
                    ));
                }
            }
        }
    })
}

/// Starts `what` with `start` and kills it with SIGKILL, `KILLS` times, at
/// random points 0-10 ms, 0-60 ms or 0-1.2 s after the start (a third
/// each: the start itself, loading, attaching and making sockets, is
/// short). After every kill the dead process's XDP program must leave A's
/// eth0 within 2 s. Some kills must land before the attach and some after.
fn kill_at_random_points(what: &str, start: impl Fn() -> Child, seen: &Seen) {
    let mut rng = ChaosRng::seeded();
    let started = Instant::now();
    let mut killed_attached = 0;
    for k in 0..KILLS {
        let mut child = start();
        let within = [10, 60, 1200][k as usize % 3];
        std::thread::sleep(Duration::from_millis(rng.below(within)));
        let attached = has_xdp(A, "eth0");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
        let status = child.wait().unwrap();
        assert!(
            status.code().is_none() || !status.success(),
            "{what}, kill {k}: it exited by itself: {status:?}"
        );
        killed_attached += u32::from(attached);
        assert!(
            wait_until(Duration::from_secs(2), || !has_xdp(A, "eth0")),
            "{what}, kill {k}: the dead process's XDP program stayed on eth0"
        );
    }
    eprintln!(
        "{what}: {KILLS} kills in {:.1} s, {killed_attached} of them while its program was attached; {} right answers so far",
        started.elapsed().as_secs_f64(),
        seen.right.load(Ordering::Relaxed)
    );
    assert!(
        killed_attached > 0 && killed_attached < KILLS,
        "{what}: kill points cover both sides of the attach ({killed_attached} of {KILLS} after it)"
    );
}

/// `faas serve --backend afxdp` of `reverse` in A, killed with SIGKILL at
/// 50 random points under a steady stream of requests: after each kill
/// the dead server's XDP program is gone (A's eth0 goes back to the
/// kernel), the next server starts over the stale control socket, and no
/// reply is wrong. A last server answers, stops cleanly and leaves
/// nothing: no XDP program, no control socket.
#[test]
fn faas_serve_killed_at_random_points_serves_again_and_never_answers_wrong() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let functions = format!("{PORT}=reverse");
    let args = [
        "--iface",
        "eth0",
        "--backend",
        "afxdp",
        "--functions",
        functions.as_str(),
        "--cpus",
        "1",
        "--duration",
        "60",
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let traffic = client(stop.clone(), seen.clone());
    let spawn = || {
        Command::new("ip")
            .args([
                "netns",
                "exec",
                A,
                env!("CARGO_BIN_EXE_peregrine"),
                "faas",
                "serve",
            ])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    kill_at_random_points("faas serve", spawn, &seen);

    // A last server: it answers, and leaves nothing once stopped.
    let mut serve = FaasServe::start(A, &args, &[]);
    assert!(
        wait_until(Duration::from_secs(10), || pg_in(
            A,
            &["faas", "list", "--json"]
        )
        .status
        .success()),
        "the last server did not come up"
    );
    let before = seen.right.load(Ordering::Relaxed);
    assert!(
        wait_until(Duration::from_secs(5), || seen
            .right
            .load(Ordering::Relaxed)
            >= before + 200),
        "the last server answers"
    );
    let stopped = serve.stop();
    assert!(stopped.ok, "faas serve: {}", stopped.stderr);
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    let wrong = seen.wrong.lock().unwrap();
    assert!(
        wrong.is_empty(),
        "wrong replies: {:?}",
        &wrong[..wrong.len().min(5)]
    );
    assert!(!has_xdp(A, "eth0"), "an XDP program left on eth0");
    let sock = peregrine_faas::control::path_in(Some(A)).unwrap();
    assert!(!sock.exists(), "{} left behind", sock.display());
}

/// `quic serve --io afxdp` in A, killed with SIGKILL at 50 random points
/// while a client in B fetches a 64 KiB body over and over with `quic get`
/// on kernel sockets (one connection each, 1 s timeout): after each kill
/// the dead server's XDP program is gone, the next one binds the same
/// address and port, and every body that arrives is whole and intact. A
/// last server serves, stops on SIGINT and leaves no XDP program.
#[test]
fn quic_serve_killed_at_random_points_serves_again_and_never_answers_wrong() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let pg = env!("CARGO_BIN_EXE_peregrine");
    let serve = move || {
        Command::new("ip")
            .args(["netns", "exec", A, pg, "quic", "serve"])
            .args(["--listen", "198.18.0.1:4433", "--io", "afxdp"])
            .args(["--memory", "body=64KiB", "--duration", "60s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let sha = peregrine_quic::http3::memory_sha256(64 << 10);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Seen::default());
    let traffic = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = Command::new("ip")
                    .args(["netns", "exec", B, pg, "quic", "get"])
                    .arg("https://198.18.0.1:4433/body")
                    .args(["--io", "kernel", "--insecure", "--json", "--timeout", "1s"])
                    .output()
                    .unwrap();
                if !out.status.success() {
                    continue; // no server, or it died mid-transfer
                }
                let v: serde_json::Value =
                    serde_json::from_str(text(&out.stdout).trim()).unwrap_or_default();
                if v["bytes"] == 64u64 << 10 && v["sha256"] == sha.as_str() {
                    seen.right.fetch_add(1, Ordering::Relaxed);
                } else {
                    seen.wrong.lock().unwrap().push(v.to_string());
                }
            }
        })
    };
    kill_at_random_points("quic serve", serve, &seen);

    let mut last = serve();
    let before = seen.right.load(Ordering::Relaxed);
    assert!(
        wait_until(Duration::from_secs(15), || seen
            .right
            .load(Ordering::Relaxed)
            >= before + 3),
        "the last server serves"
    );
    kill(Pid::from_raw(last.id() as i32), Signal::SIGINT).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || last
            .try_wait()
            .unwrap()
            .is_some()),
        "quic serve stops on SIGINT"
    );
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    let wrong = seen.wrong.lock().unwrap();
    assert!(
        wrong.is_empty(),
        "wrong answers: {:?}",
        &wrong[..wrong.len().min(5)]
    );
    assert!(!has_xdp(A, "eth0"), "an XDP program left on eth0");
}
