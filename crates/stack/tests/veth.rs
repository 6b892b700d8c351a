//! The stack as users run it: two namespaces joined by a veth pair made
//! with plain `ip` (the kernel's default offloads: the peer's datagrams
//! carry only the partial pseudo-header checksum), the stack on one end, an
//! ordinary kernel UDP socket on the other. Every datagram arrives intact
//! and is counted exactly, both ways, v4 and v6; the host keeps answering
//! ARP, ND and ping; a neighbour whose MAC changes is followed without a
//! restart; a bound datagram is redirected by the steering program.
use std::io::IoSliceMut;
use std::net::{IpAddr, SocketAddr, UdpSocket as KernelUdp};
use std::process::Command;
use std::time::Duration;

use peregrine_bpf::fixture::{check, Expect, Fixture};
use peregrine_bpf::XdpAction;
use peregrine_host::netns::{self, NetnsGuard};
use peregrine_io::{RecvMeta, Transmit};
use peregrine_stack::{Stack, StackConfig, UdpSocket};
use peregrine_testbed::testing::{ip, privileged_here, wait_until, NsPair};
use peregrine_wire::{MacAddr, UdpFrameSpec};

const A: &str = "pg-stack-a";
const B: &str = "pg-stack-b";

/// Datagram `i`'s bytes: its length varies from 0 to 1400, its content
/// says which one it is.
fn datagram(i: usize) -> Vec<u8> {
    let len = (i * 37) % 1401;
    (0..len).map(|j| (i * 131 + j * 7) as u8).collect()
}

/// The peer's kernel socket, made in namespace B.
fn peer(addr: &str) -> KernelUdp {
    let s = netns::run_in(B, || KernelUdp::bind(addr).unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

fn run(ns: &str, cmd: &[&str]) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(cmd)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// `n` datagrams peer -> stack in bursts (kept under the socket buffers),
/// each received intact and in order by the stack's socket in batches.
fn peer_to_stack(peer: &KernelUdp, sock: &UdpSocket, to: SocketAddr, n: usize) {
    let mut bufs = vec![vec![0u8; 2048]; 32];
    let mut meta = vec![RecvMeta::default(); 32];
    let mut next = 0;
    for burst in (0..n).collect::<Vec<_>>().chunks(32) {
        for &i in burst {
            peer.send_to(&datagram(i), to).unwrap();
        }
        let end = burst.last().unwrap() + 1;
        while next < end {
            let mut slices: Vec<IoSliceMut> = bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let got = sock
                .recv_batch(&mut slices, &mut meta)
                .unwrap_or_else(|e| panic!("datagram {next} of {n} to {to}: {e}"));
            for k in 0..got {
                assert_eq!(meta[k].source, Some(peer.local_addr().unwrap()));
                assert_eq!(
                    &bufs[k][..meta[k].len],
                    &datagram(next)[..],
                    "datagram {next}"
                );
                next += 1;
            }
        }
    }
}

/// `n` datagrams stack -> peer in batches of up to 32 (`send_batch`),
/// each received intact and in order by the peer.
fn stack_to_peer(sock: &UdpSocket, peer: &KernelUdp, n: usize) {
    let to = peer.local_addr().unwrap();
    let mut buf = vec![0u8; 2048];
    let mut i = 0;
    while i < n {
        let data: Vec<Vec<u8>> = (i..(i + 32).min(n)).map(datagram).collect();
        let t: Vec<Transmit> = data
            .iter()
            .map(|d| Transmit {
                destination: Some(to),
                source: None,
                contents: d,
            })
            .collect();
        let mut sent = 0;
        let mut tries = 0;
        while sent < t.len() {
            match sock.send_batch(&t[sent..]) {
                Ok(k) => sent += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries < 1000 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("sending to {to}: {e}"),
            }
        }
        for k in i..i + t.len() {
            let (len, from) = peer
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("peer waiting for datagram {k} of {n}: {e}"));
            assert_eq!(from, sock.local_addr());
            assert_eq!(&buf[..len], &datagram(k)[..], "datagram {k}");
        }
        i += t.len();
    }
}

/// The kernel's neighbour entry for `ip` in namespace A, as `ip neigh`
/// shows it.
fn kernel_neigh(ip_addr: &str) -> String {
    let out = Command::new("ip")
        .args(["-n", A, "neigh", "show", ip_addr, "dev", "eth0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Gives the peer's eth0 (namespace B) MAC `mac`.
fn set_peer_mac(mac: MacAddr) {
    ip(&["-n", B, "link", "set", "eth0", "address", &mac.to_string()]);
}

#[test]
fn datagrams_both_ways_v4_v6_with_arp_nd_ping_and_neighbour_changes() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let v4_peer = peer("198.18.0.2:7000");
    let v6_peer = peer("[2001:db8::2]:7000");
    let _in_a = NetnsGuard::enter(A).unwrap();
    // No neighbour known yet: the stack's first datagrams wait for the
    // kernel to resolve it.
    ip(&["-n", A, "neigh", "flush", "dev", "eth0"]);
    let stack = Stack::open(StackConfig::new("eth0")).unwrap();
    let mut v4 = stack.bind("198.18.0.1:4433".parse().unwrap()).unwrap();
    let mut v6 = stack.bind("[2001:db8::1]:4433".parse().unwrap()).unwrap();
    v4.set_read_timeout(Some(Duration::from_secs(3)));
    v6.set_read_timeout(Some(Duration::from_secs(3)));
    const N: usize = 1000;

    // Stack first (neighbours resolved by the kernel on demand), then peer.
    stack_to_peer(&v4, &v4_peer, N);
    stack_to_peer(&v6, &v6_peer, N);
    peer_to_stack(&v4_peer, &v4, v4.local_addr(), N);
    peer_to_stack(&v6_peer, &v6, v6.local_addr(), N);
    // The MTU (1500 at veth's default) bounds a datagram: the largest
    // goes, one byte more is refused in one line.
    let mut big = vec![0u8; 2048];
    for (sock, peer_sock, max) in [(&v4, &v4_peer, 1472), (&v6, &v6_peer, 1452)] {
        let to = peer_sock.local_addr().unwrap();
        assert_eq!(sock.max_payload(to.ip()), max);
        let e = sock.send_to(&vec![1u8; max + 1], to).unwrap_err();
        assert!(e.to_string().contains("MTU"), "{e}");
        assert_eq!(sock.send_to(&vec![9u8; max], to).unwrap(), max);
        let (n, _) = peer_sock.recv_from(&mut big).unwrap();
        assert_eq!((n, big[..n].iter().all(|&b| b == 9)), (max, true));
    }
    let c = stack.counters();
    assert_eq!(
        (c.tx_datagrams - 2, c.rx_datagrams),
        (2 * N as u64, 2 * N as u64),
        "{c}"
    );
    assert!(
        c.tx_held >= 2,
        "the first datagrams waited for ARP and ND: {c}"
    );
    assert_eq!(c.drops(), 0, "{c}");
    let x = stack.xdp_counters().unwrap();
    assert_eq!(x.steer.redirected, 2 * N as u64);
    assert_eq!(
        (x.steer.no_socket, x.xsk.rx_dropped, x.xsk.rx_ring_full),
        (0, 0, 0)
    );

    // The host is still the kernel's: ARP, ND and ping, both ways, with
    // the neighbour tables flushed so they must be asked again.
    ip(&["-n", B, "neigh", "flush", "dev", "eth0"]);
    for target in ["198.18.0.1", "2001:db8::1"] {
        assert!(
            run(B, &["ping", "-c", "2", "-i", "0.2", "-W", "2", target]),
            "ping {target}"
        );
    }
    ip(&["-n", A, "neigh", "flush", "dev", "eth0"]);
    for target in ["198.18.0.2", "2001:db8::2"] {
        assert!(
            run(A, &["ping", "-c", "2", "-i", "0.2", "-W", "2", target]),
            "ping {target}"
        );
    }
    // A kernel socket on another port of the stack's host still works.
    let kernel_side = KernelUdp::bind("198.18.0.1:5555").unwrap();
    kernel_side
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    v4_peer
        .send_to(b"to the kernel", "198.18.0.1:5555")
        .unwrap();
    let mut b = [0u8; 64];
    let (n, _) = kernel_side.recv_from(&mut b).unwrap();
    assert_eq!(&b[..n], b"to the kernel");
    assert_eq!(
        stack.counters().rx_datagrams,
        2 * N as u64,
        "not the stack's"
    );

    // The peer changes its MAC and says so (gratuitous ARP, unsolicited
    // NA): the kernel updates its table, the stack follows the event.
    let new_mac = MacAddr([0x02, 0x50, 0xaa, 0xbb, 0xcc, 0x07]);
    for key in [
        "net.ipv4.conf.eth0.arp_notify=1",
        "net.ipv6.conf.eth0.ndisc_notify=1",
    ] {
        assert!(run(B, &["sysctl", "-qw", key]), "{key}");
    }
    set_peer_mac(new_mac);
    for (peer_ip, sock, peer_sock) in [
        ("198.18.0.2", &v4, &v4_peer),
        ("2001:db8::2", &v6, &v6_peer),
    ] {
        let ip_addr: IpAddr = peer_ip.parse().unwrap();
        let followed = wait_until(Duration::from_secs(5), || {
            stack.neighbour_mac(ip_addr) == Some(new_mac)
        });
        assert!(
            followed,
            "{peer_ip}: the stack has {:?}, the kernel {}",
            stack.neighbour_mac(ip_addr),
            kernel_neigh(peer_ip)
        );
        stack_to_peer(sock, peer_sock, 100);
    }
    // An administrator's change is followed too.
    let admin_mac = MacAddr([0x02, 0x50, 0xaa, 0xbb, 0xcc, 0x08]);
    set_peer_mac(admin_mac);
    ip(&[
        "-n",
        A,
        "neigh",
        "replace",
        "198.18.0.2",
        "lladdr",
        &admin_mac.to_string(),
        "dev",
        "eth0",
        "nud",
        "reachable",
    ]);
    assert!(wait_until(Duration::from_secs(5), || {
        stack.neighbour_mac("198.18.0.2".parse().unwrap()) == Some(admin_mac)
    }));
    stack_to_peer(&v4, &v4_peer, 100);
    let c = stack.counters();
    assert_eq!(c.drops(), 0, "{c}");

    // The steering program with the stack's real sockets in its XSKMAP:
    // a bound datagram is redirected, another port passes.
    let frame = |port: u16| {
        UdpFrameSpec::between(
            "198.18.0.2:7000".parse().unwrap(),
            SocketAddr::new("198.18.0.1".parse().unwrap(), port),
            8,
        )
        .build(b"fixture!")
        .unwrap()
    };
    let prog = peregrine_bpf::XdpProgram::prog(stack.program());
    check(
        prog,
        &Fixture::new(
            "bound, socket there",
            frame(4433),
            XdpAction::Redirect,
            Expect::Unchanged,
        ),
    )
    .unwrap();
    check(
        prog,
        &Fixture::new(
            "other port",
            frame(4434),
            XdpAction::Pass,
            Expect::Unchanged,
        ),
    )
    .unwrap();

    // Unbinding gives the port back to the kernel.
    drop(v4);
    let k = KernelUdp::bind("198.18.0.1:4433").unwrap();
    k.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    v4_peer.send_to(b"kernel again", "198.18.0.1:4433").unwrap();
    let (n, _) = k.recv_from(&mut b).unwrap();
    assert_eq!(&b[..n], b"kernel again");
}

#[test]
fn async_readiness_wakes_a_waiting_task() {
    if !privileged_here() {
        return;
    }
    const A2: &str = "pg-stack-c";
    const B2: &str = "pg-stack-d";
    let _p = NsPair::new(A2, B2);
    for (ns, v4) in [(A2, "198.18.1.1/24"), (B2, "198.18.1.2/24")] {
        ip(&["-n", ns, "addr", "add", v4, "dev", "eth0"]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
    }
    let peer = netns::run_in(B2, || KernelUdp::bind("198.18.1.2:7000").unwrap()).unwrap();
    let _in = NetnsGuard::enter(A2).unwrap();
    let stack = Stack::open(StackConfig::new("eth0")).unwrap();
    let sock = stack.bind("0.0.0.0:0".parse().unwrap()).unwrap();
    let port = sock.local_addr().port();
    assert_ne!(port, 0, "the kernel picked a port");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let to: SocketAddr = format!("198.18.1.1:{port}").parse().unwrap();
    let got = rt.block_on(async {
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            for i in 0..10u8 {
                peer.send_to(&[i; 100], to).unwrap();
            }
            peer
        });
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while got.len() < 10 && tokio::time::Instant::now() < deadline {
            let mut buf = vec![0u8; 256];
            let mut meta = [RecvMeta::default()];
            let n = tokio::time::timeout(
                Duration::from_secs(3),
                std::future::poll_fn(|cx| {
                    sock.poll_recv(cx, &mut [IoSliceMut::new(&mut buf)], &mut meta)
                }),
            )
            .await
            .expect("woken within 3 s")
            .unwrap();
            assert_eq!(n, 1);
            got.push(buf[..meta[0].len].to_vec());
        }
        // The socket answers from the any-address binding with the
        // route's source address.
        let peer = sender.join().unwrap();
        sock.send_to(b"answer", peer.local_addr().unwrap()).unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut b = [0u8; 16];
        let (n, from) = peer.recv_from(&mut b).unwrap();
        assert_eq!((&b[..n], from), (&b"answer"[..], to));
        got
    });
    assert_eq!(got, (0..10u8).map(|i| vec![i; 100]).collect::<Vec<_>>());
    assert_eq!(stack.counters().drops(), 0);
}

/// Several queues and sockets: a veth pair with 2 RX/TX queues per end
/// (one AF_XDP socket each), 4 stack sockets on 4 ports, 4 peer sockets
/// each sending to every stack socket from its own thread (the peer's
/// flows spread over the queues). Each stack socket receives exactly its
/// own datagrams, each once and intact, whichever socket's call or thread
/// drained the ring; in each flow's order once the sender's kernel has
/// resolved the stack's MAC (before, it may send the datagrams it held for
/// ARP after newer ones: docs/STACK.md).
#[test]
fn several_queues_and_sockets_each_get_their_own_datagrams() {
    if !privileged_here() {
        return;
    }
    const E: &str = "pg-stack-e";
    const F: &str = "pg-stack-f";
    let _pair = NsPair::new(E, F);
    ip(&["-n", E, "link", "del", "eth0"]);
    ip(&[
        "-n",
        E,
        "link",
        "add",
        "eth0",
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        F,
        "numtxqueues",
        "2",
        "numrxqueues",
        "2",
    ]);
    for (ns, v4) in [(E, "198.18.2.1/24"), (F, "198.18.2.2/24")] {
        ip(&["-n", ns, "addr", "add", v4, "dev", "eth0"]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
    }
    const PER_FLOW: usize = 200;
    let peers: Vec<KernelUdp> = netns::run_in(F, || {
        (0..4)
            .map(|_| KernelUdp::bind("198.18.2.2:0").unwrap())
            .collect()
    })
    .unwrap();
    let _in = NetnsGuard::enter(E).unwrap();
    let stack = Stack::open(StackConfig::new("eth0")).unwrap();
    assert_eq!(stack.queues(), 2);
    let socks: Vec<UdpSocket> = (0..4)
        .map(|i| {
            let mut s = stack
                .bind(format!("198.18.2.1:{}", 5000 + i).parse().unwrap())
                .unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3)));
            s
        })
        .collect();
    // Each message names its stack socket, its peer, its number and round.
    let msg = |round: usize, to: usize, from: usize, n: usize| {
        format!("to {to} from {from} #{n} round {round}").into_bytes()
    };
    // Round 0 starts with F's neighbour entry for E unresolved: F's kernel
    // holds each flow's first datagrams until ARP answers, then sends them
    // while the senders' new ones already go straight out, so those may
    // overtake them (docs/STACK.md). Round 1 finds the neighbour resolved.
    for round in 0..2 {
        std::thread::scope(|s| {
            for (from, p) in peers.iter().enumerate() {
                s.spawn(move || {
                    for n in 0..PER_FLOW {
                        for to in 0..4 {
                            let dst: SocketAddr =
                                format!("198.18.2.1:{}", 5000 + to).parse().unwrap();
                            p.send_to(&msg(round, to, from, n), dst).unwrap();
                        }
                        if n % 16 == 15 {
                            // Stay under the receive queues' depth.
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                });
            }
            for (to, sock) in socks.iter().enumerate() {
                s.spawn(move || {
                    let mut got: Vec<Vec<usize>> = vec![vec![]; 4];
                    let mut buf = [0u8; 64];
                    for _ in 0..4 * PER_FLOW {
                        let (len, src) = sock.recv_from(&mut buf).unwrap_or_else(|e| {
                            panic!("round {round}: socket {to}: {e} after {got:?}")
                        });
                        let text = String::from_utf8_lossy(&buf[..len]).into_owned();
                        let word = |i: usize| text.split(' ').nth(i).unwrap().to_string();
                        let from: usize = word(3).parse().unwrap();
                        let n: usize = word(4)[1..].parse().unwrap();
                        // Intact, for this socket, of this round.
                        assert_eq!(buf[..len], msg(round, to, from, n)[..], "from {src}");
                        got[from].push(n);
                    }
                    for (from, seq) in got.iter().enumerate() {
                        let mut once = seq.clone();
                        once.sort_unstable();
                        assert_eq!(
                            once,
                            (0..PER_FLOW).collect::<Vec<_>>(),
                            "round {round}: socket {to}, peer {from}: every datagram once"
                        );
                        // The stack keeps the order of each RX queue, and
                        // the sender keeps a flow on one TX queue (veth:
                        // the same RX queue): in order once nothing is
                        // held for the neighbour.
                        if round == 1 {
                            assert_eq!(seq, &once, "round 1: socket {to}, peer {from}: in order");
                        }
                    }
                });
            }
        });
    }
    let c = stack.counters();
    assert_eq!(c.rx_datagrams, 2 * 16 * PER_FLOW as u64, "{c}");
    assert_eq!(c.drops(), 0, "{c}");
}

/// Next hops are the kernel's routes: a destination behind a gateway is
/// sent to the gateway's MAC (the peer, which owns that address on its
/// loopback); a destination the kernel has no route for is refused in one
/// line once the route lookup said so, and the datagram held meanwhile is
/// counted as dropped.
#[test]
fn next_hops_follow_the_kernels_routes() {
    if !privileged_here() {
        return;
    }
    const G: &str = "pg-stack-g";
    const H: &str = "pg-stack-h";
    let _pair = NsPair::addressed(G, H);
    ip(&["-n", H, "addr", "add", "198.19.5.5/32", "dev", "lo"]);
    ip(&[
        "-n",
        G,
        "route",
        "add",
        "198.19.5.0/24",
        "via",
        "198.18.0.2",
    ]);
    let far = netns::run_in(H, || KernelUdp::bind("198.19.5.5:7000").unwrap()).unwrap();
    far.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _in = NetnsGuard::enter(G).unwrap();
    let stack = Stack::open(StackConfig::new("eth0")).unwrap();
    let sock = stack.bind("198.18.0.1:4433".parse().unwrap()).unwrap();
    let to: SocketAddr = "198.19.5.5:7000".parse().unwrap();
    for i in 0..10u8 {
        sock.send_to(&[i; 300], to).unwrap();
    }
    let mut b = [0u8; 512];
    for i in 0..10u8 {
        let (n, from) = far.recv_from(&mut b).unwrap();
        assert_eq!((n, b[0], from), (300, i, sock.local_addr()));
    }
    // The gateway's MAC is what the stack knows of 198.18.0.2.
    assert!(stack.neighbour_mac("198.18.0.2".parse().unwrap()).is_some());
    // No route: the first datagram waits for the lookup, then is dropped
    // and counted; later ones are refused at once.
    let nowhere: SocketAddr = "198.19.9.9:7000".parse().unwrap();
    sock.send_to(b"lost", nowhere).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        stack.counters().tx_no_neighbour == 1
    }));
    let e = sock.send_to(b"refused", nowhere).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NetworkUnreachable, "{e}");
    assert!(e.to_string().contains("no route to 198.19.9.9"), "{e}");
}
