//! The XDP router and service chains carrying real traffic in a lab: ping,
//! UDP through sockets (the receiving kernel checks every checksum), TCP with
//! iperf3, a route added with `ip route` while traffic runs, and a chain
//! whose filter drops what its ACL says.
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use peregrine_bpf::router::{action_name, FibMode, ACTIONS};
use peregrine_bpf::XdpMode;
use peregrine_dataplane::{Dataplane, DataplaneConfig, Hook};
use peregrine_lab::pacing::Rate;
use peregrine_lab::sinks::{Sink, SocketSink};
use peregrine_lab::traffic::{Backend, Generator};
use peregrine_lab::Lab;
use peregrine_testbed::gen::FrameSizes;
use peregrine_testbed::testing::wait_until;

mod common;
use common::{
    addr, chain, chain_for_xdp, delivered_after, drop_sink, endpoint, exec as run, offer,
    offer_counting, privileged_lab, udp_traffic,
};

/// Whether a TCP socket listens on `port` in namespace `ns` (read from the
/// namespace's own /proc/net, through the calling thread).
fn tcp_listening(ns: &str, port: u16) -> bool {
    let want = format!(":{port:04X} ");
    peregrine_host::netns::run_in(ns, || {
        ["tcp", "tcp6"].iter().any(|f| {
            std::fs::read_to_string(format!("/proc/thread-self/net/{f}"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .any(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    // local_address ends in :PORT, state 0A is LISTEN.
                    cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
                })
        })
    })
    .unwrap()
}

fn count(st: &peregrine_bpf::router::PortStats, name: &str) -> u64 {
    st.packets[(0..ACTIONS).find(|&a| action_name(a) == name).unwrap()]
}

/// A generator of stamped UDP datagrams from gen through the DUT (its
/// in0 receives live frames) to `dst`:`port`: from gen's own address over
/// sockets, from .100 up as live frames.
fn gen_through_dut(lab: &Lab, backend: Backend, dst: &str, port: u16) -> Generator {
    let src = if backend == Backend::Socket {
        "198.18.1.1"
    } else {
        "198.18.1.100"
    };
    let (from, to) = (endpoint("gen", "eth0"), endpoint("dut", "in0"));
    let (src, dst) = (addr(src, 20000), addr(dst, port));
    let mut spec = udp_traffic(lab, &from, &to, src, dst, FrameSizes::Fixed(128), 1);
    spec.stamp = true;
    spec.backend = backend;
    Generator::new(spec, Some((lab.ns("dut"), "in0".into()))).unwrap()
}

/// Sends `n` datagrams at `pps` (within 10 s) through the DUT to the sink's
/// 198.19.0.1:`port`; frames offered.
fn send_to_sink(lab: &Lab, backend: Backend, port: u16, n: u64, pps: f64) -> u64 {
    let gen = gen_through_dut(lab, backend, "198.19.0.1", port);
    offer(&gen, Rate::Pps(pps), n, Some(Duration::from_secs(10)))
}

/// The XDP router on the DUT's in0 and out0, native XDP, full FIB lookups.
fn router_on_dut(lab: &Lab) -> Dataplane {
    Dataplane::router(
        Some(&lab.ns("dut")),
        &["in0".into(), "out0".into()],
        Hook::Xdp(XdpMode::Native),
        FibMode::Full,
        false,
    )
    .unwrap()
}

/// Statistics of the network function on `host` of a deployed chain.
fn nf_stats(dp: &Dataplane, host: &str) -> peregrine_bpf::nf::NfStats {
    dp.nfs
        .iter()
        .find(|n| n.host == host)
        .unwrap()
        .prog
        .stats()
        .unwrap()
}

#[test]
fn router_carries_ping_udp_and_tcp_intact() {
    let Some(lab) = privileged_lab(chain_for_xdp("trt")) else {
        return;
    };
    let topo = lab.topo.clone();
    let mut dp = router_on_dut(&lab);
    dp.prepare_peers(&topo, "dut").unwrap();
    assert_eq!(
        run(
            "trt",
            "gen",
            &["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.19.0.1"]
        ),
        0
    );
    assert_eq!(
        run(
            "trt",
            "gen",
            &[
                "ping",
                "-6",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "2",
                "2001:db8:2::2"
            ]
        ),
        0
    );
    // TTL expiry is answered by the kernel (traceroute-style ping with ttl 1).
    assert_ne!(
        run(
            "trt",
            "gen",
            &["ping", "-c", "1", "-t", "1", "-W", "1", "198.19.0.1"]
        ),
        0
    );

    let before = dp.router.stats(in0_of(&dp)).unwrap();
    // UDP: a socket counts only datagrams its kernel accepted (IP and UDP
    // checksums, lengths), so every one arriving proves the rewrite intact.
    let sock = SocketSink::start(&lab.ns("sink"), "198.19.0.1:9".parse().unwrap()).unwrap();
    for backend in [Backend::Socket, Backend::Xdp] {
        let before_sock = sock.delivered().unwrap().packets;
        let sent = send_to_sink(&lab, backend, 9, 20_000, 100_000.0);
        assert_eq!(sent, 20_000, "{backend:?}");
        let got = delivered_after(&sock, before_sock, 20_000);
        assert_eq!(
            got,
            20_000,
            "{backend:?}: all accepted by the receiver ({} dropped at its socket so far, \
             router {:?})",
            sock.socket_drops().unwrap(),
            dp.router.stats(in0_of(&dp)).unwrap()
        );
    }
    let after = dp.router.stats(in0_of(&dp)).unwrap();
    assert!(
        count(&after, "forward") - count(&before, "forward") >= 40_000,
        "the XDP router, not the kernel, forwarded them"
    );
    drop(sock);

    // TCP with iperf3, both directions through the router: gen sends, then
    // (-R) the sink sends. Each direction's data enters the router on its
    // own port, and that port forwards it.
    let out0 = dp.ports[1].1.ifindex();
    for (reverse, data_port, dir) in [
        (false, in0_of(&dp), "gen -> sink"),
        (true, out0, "sink -> gen"),
    ] {
        assert!(!tcp_listening(&lab.ns("sink"), 5201), "port 5201 free");
        let server =
            std::thread::spawn(|| run("trt", "sink", &["iperf3", "-s", "-1", "-B", "198.19.0.1"]));
        assert!(
            wait_until(Duration::from_secs(5), || tcp_listening(
                &lab.ns("sink"),
                5201
            )),
            "iperf3 server listening within 5 s"
        );
        let before = count(&dp.router.stats(data_port).unwrap(), "forward");
        let mut args = vec![
            "iperf3",
            "-c",
            "198.19.0.1",
            "-t",
            "2",
            "--connect-timeout",
            "3000",
        ];
        if reverse {
            args.push("-R");
        }
        assert_eq!(
            run("trt", "gen", &args),
            0,
            "iperf3 through the router, {dir}"
        );
        assert_eq!(server.join().unwrap(), 0, "{dir}");
        let fwd = count(&dp.router.stats(data_port).unwrap(), "forward") - before;
        // Two seconds of TCP data: far more than handshakes and ACKs.
        assert!(
            fwd > 10_000,
            "{dir}: the router forwarded {fwd} data segments"
        );
    }
}

fn in0_of(dp: &Dataplane) -> u32 {
    dp.ports[0].1.ifindex()
}

#[test]
fn route_added_with_ip_route_takes_effect_while_traffic_runs() {
    let Some(lab) = privileged_lab(chain("troute")) else {
        return;
    };
    let sink = drop_sink(&lab, &endpoint("sink", "eth0"));
    let dp = router_on_dut(&lab);
    // 198.18.99.0/24 is routed nowhere yet.
    let gen = gen_through_dut(&lab, Backend::Xdp, "198.18.99.1", 9);
    let progress = Arc::new(AtomicU64::new(0));
    let in0 = in0_of(&dp);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            offer_counting(
                &gen,
                Rate::Pps(100_000.0),
                None,
                Some(Duration::from_secs(3)),
                &progress,
            )
        });
        assert!(
            wait_until(Duration::from_secs(2), || count(
                &dp.router.stats(in0).unwrap(),
                "pass_no_route"
            ) > 10_000),
            "unroutable frames go to the kernel"
        );
        assert_eq!(sink.delivered().unwrap().packets, 0, "no route yet");
        // The user's way: plain `ip route`, no restart of anything. The
        // progress counter trails sending by up to one BPF_PROG_RUN call, so
        // frames counted before the command were surely sent unrouted, and
        // frames sent after a count taken well after it surely routed.
        let before = progress.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            run(
                "troute",
                "dut",
                &["ip", "route", "add", "198.18.99.0/24", "via", "198.18.2.2"]
            ),
            0
        );
        // Frames counted once another 1,000 (100 calls of 10) have gone
        // out after the command returned were sent after the change.
        let returned = progress.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            wait_until(Duration::from_secs(2), || progress
                .load(std::sync::atomic::Ordering::Relaxed)
                >= returned + 1_000),
            "the generator keeps sending"
        );
        let after = progress.load(std::sync::atomic::Ordering::Relaxed);
        let offered = h.join().unwrap();
        let delivered = delivered_after(&sink, 0, offered - after);
        assert!(
            delivered >= offered - after && delivered <= offered - before,
            "delivered {delivered}: all {} sent after the change, none of the {before} sent before",
            offered - after
        );
        assert!(delivered > 100_000, "{delivered}");
    });
    assert!(count(&dp.router.stats(in0).unwrap(), "forward") > 100_000);
}

#[test]
fn chain_passes_both_functions_and_filters() {
    let Some(lab) = privileged_lab(chain_for_xdp("tchain")) else {
        return;
    };
    let cfg = DataplaneConfig::from_toml(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/chain.toml"
        ))
        .unwrap()
        .replace("lab = \"chain\"", "lab = \"tchain\""),
    )
    .unwrap();
    let dp = Dataplane::deploy(&lab.topo, &cfg).unwrap();
    assert_eq!(
        run(
            "tchain",
            "gen",
            &["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.19.0.1"]
        ),
        0,
        "ping through the chain"
    );
    let sock = SocketSink::start(&lab.ns("sink"), "198.19.0.1:9".parse().unwrap()).unwrap();
    let dns = SocketSink::start(&lab.ns("sink"), "198.19.0.1:53".parse().unwrap()).unwrap();
    let sent = send_to_sink(&lab, Backend::Socket, 9, 10_000, 50_000.0);
    assert_eq!(sent, 10_000);
    assert_eq!(
        delivered_after(&sock, 0, 10_000),
        10_000,
        "every datagram through c1 and c2, intact"
    );
    let sent53 = send_to_sink(&lab, Backend::Socket, 53, 1_000, 50_000.0);
    assert_eq!(sent53, 1_000);
    let c2_dropped = || nf_stats(&dp, "c2").dropped;
    assert!(
        wait_until(Duration::from_secs(5), || c2_dropped() >= 1_000),
        "c2 dropped the 1000 datagrams to port 53: {}",
        c2_dropped()
    );
    assert_eq!(
        dns.delivered().unwrap().packets,
        0,
        "c2's ACL drops UDP port 53"
    );
    let c1 = nf_stats(&dp, "c1");
    let c2 = nf_stats(&dp, "c2");
    assert!(c1.sent >= 11_000, "{c1:?}");
    assert!(c2.dropped >= 1_000 && c2.dropped < 1_010, "{c2:?}");
    assert!(c2.sent >= 10_000, "{c2:?}");
}
