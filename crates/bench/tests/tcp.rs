//! bench router's TCP runner as a user's hosts would have it: two
//! namespaces made with plain `ip`, a veth at its default offloads, real
//! iperf3 at both ends. 8 streams for 20 s print more JSON than a pipe
//! holds (~38 KB per 10 s), which the runner must read while iperf3 runs.
use std::process::Command;
use std::time::{Duration, Instant};

use peregrine_bench::tcp::{iperf3, TcpTransfer};
use peregrine_bpf::testing::privileged;

const A: &str = "pg-btcp-a";
const B: &str = "pg-btcp-b";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The two namespaces, removed on drop (and first, if a killed run left them).
struct Pair;

impl Pair {
    fn new() -> Pair {
        for ns in [A, B] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        ip(&["netns", "add", A]);
        ip(&["netns", "add", B]);
        let p = Pair;
        ip(&[
            "link", "add", "eth0", "netns", A, "type", "veth", "peer", "name", "eth0", "netns", B,
        ]);
        for (ns, addr) in [(A, "198.18.0.1/24"), (B, "198.18.0.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
        }
        p
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [A, B] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

#[test]
fn a_long_many_stream_transfer_is_read_whole() {
    if !privileged("a_long_many_stream_transfer_is_read_whole") {
        return;
    }
    let _pair = Pair::new();
    let start = Instant::now();
    let f = iperf3(&TcpTransfer {
        client_ns: A.into(),
        server_ns: B.into(),
        server: "198.18.0.2".parse().unwrap(),
        streams: 8,
        duration: Duration::from_secs(20),
    })
    .unwrap();
    assert_eq!(f.streams, 8);
    assert!(f.gbit_s > 0.1, "{f:?}");
    assert!((19.0..21.0).contains(&f.seconds), "{f:?}");
    assert!(f.cpu_cores > 0.0 && f.cpu_cores_per_gbit_s > 0.0, "{f:?}");
    assert!(
        start.elapsed() < Duration::from_secs(35),
        "{:?}",
        start.elapsed()
    );
}
