//! bench router's TCP runner as a user's hosts would have it: two
//! namespaces made with plain `ip`, a veth at its default offloads, real
//! iperf3 at both ends. 8 streams for 20 s print more JSON than a pipe
//! holds (~38 KB per 10 s), which the runner must read while iperf3 runs.
use std::time::{Duration, Instant};

use peregrine_bench::tcp::{iperf3, TcpTransfer};
use peregrine_testbed::testing::{ip, privileged, NsPair};

const A: &str = "pg-btcp-a";
const B: &str = "pg-btcp-b";

/// The two namespaces (`NsPair`), addressed.
fn pair() -> NsPair {
    let p = NsPair::new(A, B);
    for (ns, addr) in [(A, "198.18.0.1/24"), (B, "198.18.0.2/24")] {
        ip(&["-n", ns, "addr", "add", addr, "dev", "eth0"]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
    }
    p
}

#[test]
fn a_long_many_stream_transfer_is_read_whole() {
    if !privileged("a_long_many_stream_transfer_is_read_whole") {
        return;
    }
    let _pair = pair();
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
