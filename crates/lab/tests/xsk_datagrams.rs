//! AF_XDP behind the datagram trait: a kernel UDP client in one namespace
//! talks to an `XskDatagrams` echo server in the other, and every answer
//! arrives intact (the client kernel checks each UDP checksum).
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use peregrine_bpf::dispatch::{slot, DispatchProgram, Policy};
use peregrine_bpf::{XdpMode, XdpProgram};
use peregrine_host::netns;
use peregrine_io::{DatagramIo, RecvBatch, Transmit};
use peregrine_lab::{Lab, Lifetime, Topology};
use peregrine_testbed::testing::privileged;
use peregrine_wire::{MacAddr, UdpFrameSpec};
use peregrine_xsk::{Xsk, XskConfig, XskDatagrams};

const PORT: u16 = 4000;

fn mac_of(ns: &str, iface: &str) -> MacAddr {
    let path = format!("/sys/class/net/{iface}/address");
    let text = netns::with_sysfs(ns, || std::fs::read_to_string(path)).unwrap();
    text.unwrap().trim().parse().unwrap()
}

#[test]
fn af_xdp_datagrams_echo_kernel_udp_client() {
    if !privileged("af_xdp_datagrams_echo_kernel_udp_client") {
        return;
    }
    let mut topo = Topology::from_toml(peregrine_lab::topology::builtin::PAIR).unwrap();
    topo.name = "txdgram".into();
    let lab = Lab::up(topo, Lifetime::Ephemeral).unwrap();
    let (ns_a, ns_b) = (lab.ns("a"), lab.ns("b"));

    let prog = DispatchProgram::load().unwrap();
    let _link = netns::run_in(&ns_b, || prog.attach("eth0", XdpMode::Native))
        .unwrap()
        .unwrap();
    let xsk = netns::run_in(&ns_b, || Xsk::open("eth0", 0, XskConfig::default()))
        .unwrap()
        .unwrap();
    prog.register_socket(slot(0, 0, 0), xsk.fd()).unwrap();
    prog.set_function(0, PORT, 1, Policy::RoundRobin).unwrap();
    let local = UdpFrameSpec {
        src_mac: mac_of(&ns_b, "eth0"),
        dst_mac: mac_of(&ns_a, "eth0"),
        src_ip: "198.18.0.2".parse().unwrap(),
        dst_ip: "198.18.0.1".parse().unwrap(),
        src_port: PORT,
        dst_port: 0,
        ttl: 64,
        frame_len: 0,
    };
    let mut server = XskDatagrams::new(xsk, local, 64);
    assert_eq!(server.local_addr(), "198.18.0.2:4000".parse().unwrap());

    let client = netns::run_in(&ns_a, || UdpSocket::bind("198.18.0.1:0"))
        .unwrap()
        .unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let requests: Vec<Vec<u8>> = (0..200u32)
        .map(|i| (0..1 + (i * 7) % 1400).map(|k| (k ^ i) as u8).collect())
        .collect();
    let to: SocketAddr = server.local_addr();
    let mut batch = RecvBatch::new(64, 2048);
    let mut buf = vec![0u8; 2048];
    for req in &requests {
        client.send_to(req, to).unwrap();
        // The server never blocks: poll until the request is in.
        let start = Instant::now();
        while batch.recv(&mut server).unwrap() == 0 {
            assert!(start.elapsed() < Duration::from_secs(2), "request lost");
        }
        let echoes: Vec<Vec<u8>> = batch
            .iter()
            .map(|(d, _)| d.iter().rev().copied().collect())
            .collect();
        let transmits: Vec<Transmit> = batch
            .iter()
            .zip(&echoes)
            .map(|((_, meta), e)| Transmit {
                destination: meta.source,
                source: None,
                contents: e,
            })
            .collect();
        assert_eq!(transmits.len(), 1);
        assert_eq!(transmits[0].destination, Some(client.local_addr().unwrap()));
        assert_eq!(server.send(&transmits).unwrap(), 1);
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!(from, to, "the answer comes from the server's address");
        let want: Vec<u8> = req.iter().rev().copied().collect();
        assert_eq!(&buf[..n], &want[..]);
    }
    // Without a destination there is nowhere to send.
    let lost = Transmit {
        destination: None,
        source: None,
        contents: b"x",
    };
    assert!(server.send(&[lost]).is_err());
}
