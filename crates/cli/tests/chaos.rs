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
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use peregrine_host::netns;
use peregrine_testbed::testing::{privileged_here, wait_until, NsPair};

mod common;
use common::{pg_in, text, FaasServe};

const A: &str = "pg-chaos-a";
const B: &str = "pg-chaos-b";
const SERVER: &str = "198.18.0.1";
const PORT: u16 = 1232;
/// Kill points per run of the test.
const KILLS: u32 = 50;

/// xorshift64*: the kill points, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("PEREGRINE_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("chaos seed {seed} (PEREGRINE_CHAOS_SEED={seed} replays it)");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Whether `iface` of namespace `ns` runs an XDP program.
fn has_xdp(ns: &str, iface: &str) -> bool {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show", iface])
        .output()
        .unwrap();
    text(&out.stdout).contains("\"xdp\"")
}

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
    let mut rng = Rng::seeded();
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
    let started = Instant::now();
    let mut killed_serving = 0;
    for k in 0..KILLS {
        let mut serve = FaasServe::start(A, &args, &[]);
        // A third of the kills in the first 10 ms and a third in the first
        // 60: the start itself (loading, attaching, making sockets) is
        // short.
        let within = [10, 60, 1200][k as usize % 3];
        std::thread::sleep(Duration::from_millis(rng.below(within)));
        let serving = has_xdp(A, "eth0");
        let pid = Pid::from_raw(serve.0.id() as i32);
        kill(pid, Signal::SIGKILL).unwrap();
        let status = serve.0.wait().unwrap();
        assert!(
            status.code().is_none() || !status.success(),
            "kill {k}: the server exited by itself: {status:?}"
        );
        killed_serving += u32::from(serving);
        assert!(
            wait_until(Duration::from_secs(2), || !has_xdp(A, "eth0")),
            "kill {k}: the dead server's XDP program stayed on eth0"
        );
    }
    eprintln!(
        "{KILLS} kills in {:.1} s, {killed_serving} of them while the program was attached; {} right replies so far",
        started.elapsed().as_secs_f64(),
        seen.right.load(Ordering::Relaxed)
    );
    assert!(
        killed_serving > 0 && killed_serving < KILLS,
        "kill points cover both sides of the attach ({killed_serving} of {KILLS} after it)"
    );

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
