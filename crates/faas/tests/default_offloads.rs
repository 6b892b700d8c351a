//! The invoker as users run it: namespaces and veths made with plain `ip`,
//! veths left at the kernel's defaults (TX checksum offload on, so a local
//! sender's requests carry only the partial pseudo-header checksum), and an
//! ordinary kernel-socket client. Every reply must be the function's result;
//! a request with a wrong checksum is counted `bad_checksum`, not answered.
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use peregrine_faas::functions::builtin;
use peregrine_faas::invoker::{AfXdpInvoker, InvokerConfig};
use peregrine_faas::Registry;
use peregrine_host::netns;
use peregrine_testbed::testing::{privileged, wait_until, NsPair};

mod common;
use common::{raw_socket, send_all};

const A: &str = "pg-tcsum-a";
const B: &str = "pg-tcsum-b";

/// The client and server namespaces (`NsPair`), with both families'
/// addresses.
fn pair() -> NsPair {
    NsPair::addressed(A, B)
}

/// TX checksum offload of `ns`'s eth0, as ethtool reports it.
fn tx_checksum_on(ns: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ethtool", "-k", "eth0"])
        .output()
        .expect("ethtool runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.starts_with("tx-checksumming: on"))
}

/// Sends one UDP datagram with a deliberately wrong checksum from a raw
/// socket in namespace `ns` (the kernel adds the IPv4 header only).
fn send_bad_checksum(ns: &str, to: [u8; 4], port: u16) {
    netns::run_in(ns, || {
        let fd = raw_socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_UDP);
        let payload = b"corrupted";
        let mut dgram = Vec::new();
        dgram.extend_from_slice(&40000u16.to_be_bytes());
        dgram.extend_from_slice(&port.to_be_bytes());
        dgram.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        dgram.extend_from_slice(&0x1234u16.to_be_bytes()); // neither full nor partial
        dgram.extend_from_slice(payload);
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes(to),
            },
            sin_zero: [0; 8],
        };
        send_all(&fd, &dgram, &sin);
    })
    .unwrap();
}

#[test]
fn kernel_socket_clients_at_default_offloads_are_answered() {
    if !privileged("kernel_socket_clients_at_default_offloads_are_answered") {
        return;
    }
    let _pair = pair();
    assert!(
        tx_checksum_on(A),
        "the client's veth keeps the kernel's default TX checksum offload"
    );
    let inv = AfXdpInvoker::start(
        Some(B),
        "eth0",
        Registry::parse("1232=reverse,1233=echo").unwrap(),
        InvokerConfig {
            cpus: vec![
                1 % std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1),
            ],
            ..Default::default()
        },
    )
    .unwrap();
    let mut sent = 0u64;
    for (sock, server) in common::clients_in(A) {
        sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        // Resolve the neighbour first: right after link-up the kernel's
        // first neighbour solicitation goes unanswered and the next one is
        // sent a RetransTimer (1 s) later, longer than the 1 s this test
        // waits per reply. Measured without peregrine too (a Python UDP
        // echo server in B, the same `ip` pair: the first IPv6 reply after
        // 1.00-1.02 s, 3 of 3 runs; nstat: B received one of A's two
        // solicitations), so it is the kernel's, not the invoker's.
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                A,
                "ping",
                "-c1",
                "-W1",
                &server.to_string(),
            ])
            .output();
        let mut buf = vec![0u8; 2048];
        for (port, func) in [(1232u16, "reverse"), (1233, "echo")] {
            for size in [1usize, 2, 7, 64, 200, 511, 800, 1000, 1400] {
                let req: Vec<u8> = (0..size).map(|i| (i * 7 + size) as u8).collect();
                sock.send_to(&req, SocketAddr::new(server, port)).unwrap();
                sent += 1;
                let (n, from) = sock.recv_from(&mut buf).unwrap_or_else(|e| {
                    let c = &inv.counters;
                    panic!("{server}:{port} {size} B: no reply ({e}); {c:?}",)
                });
                assert_eq!(from, SocketAddr::new(server, port));
                let mut want = Vec::new();
                builtin(func).unwrap().call(&req, &mut want).unwrap();
                // The kernel socket verified the reply's full UDP checksum.
                assert_eq!(&buf[..n], &want[..], "{func} {size} B from {server}");
            }
        }
    }
    let c = &inv.counters;
    assert!(wait_until(Duration::from_secs(2), || {
        c.replies.load(Ordering::Relaxed) == sent
    }));
    assert_eq!(c.malformed.load(Ordering::Relaxed), 0);
    assert_eq!(c.bad_checksum.load(Ordering::Relaxed), 0);

    // A wrong checksum is neither the full nor the partial value: counted
    // and dropped, never answered.
    send_bad_checksum(A, [198, 18, 0, 2], 1232);
    assert!(
        wait_until(Duration::from_secs(2), || c
            .bad_checksum
            .load(Ordering::Relaxed)
            == 1),
        "bad_checksum {}",
        c.bad_checksum.load(Ordering::Relaxed)
    );
    assert_eq!(c.malformed.load(Ordering::Relaxed), 0);
    assert_eq!(c.replies.load(Ordering::Relaxed), sent);
}
