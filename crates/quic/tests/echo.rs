//! quinn over the stack: a QUIC server whose endpoint is a stack socket
//! (AF_XDP, in namespace A) and an ordinary quinn client on a kernel UDP
//! socket (namespace B), across a veth pair made with `ip` at default
//! settings. A 4 MiB stream is echoed back intact, v4 and v6.
use std::net::{SocketAddr, UdpSocket as KernelUdp};
use std::sync::Arc;
use std::time::Duration;

use peregrine_host::netns::{self, NetnsGuard};
use peregrine_quic::endpoint_on_stack;
use peregrine_quic::tls::{client_config, server_config, Identity, Trust};
use peregrine_stack::{Stack, StackConfig};
use peregrine_testbed::testing::{privileged_here, NsPair};

const A: &str = "pg-quic-a";
const B: &str = "pg-quic-b";
const ALPN: &[&[u8]] = &[b"peregrine-echo"];
const SIZE: usize = 4 << 20;

fn data() -> Vec<u8> {
    (0..SIZE).map(|i| (i * 7 + i / 4096) as u8).collect()
}

#[test]
fn a_stream_is_echoed_through_the_stack_v4_and_v6() {
    if !privileged_here() {
        return;
    }
    let _pair = NsPair::addressed(A, B);
    let (stack, socks) = {
        let _in_a = NetnsGuard::enter(A).unwrap();
        let stack = Stack::open(StackConfig::new("eth0")).unwrap();
        let socks = [
            stack.bind("198.18.0.1:4433".parse().unwrap()).unwrap(),
            stack.bind("[2001:db8::1]:4433".parse().unwrap()).unwrap(),
        ];
        (stack, socks)
    };
    let clients = netns::run_in(B, || {
        [
            KernelUdp::bind("198.18.0.2:0").unwrap(),
            KernelUdp::bind("[2001:db8::2]:0").unwrap(),
        ]
    })
    .unwrap();
    let id = Identity::self_signed(&["localhost".into()]).unwrap();
    let server_cfg = server_config(id, ALPN).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let want = Arc::new(data());
    for (sock, client) in socks.into_iter().zip(clients) {
        let server_addr: SocketAddr = sock.local_addr();
        let want = want.clone();
        let server_cfg = server_cfg.clone();
        rt.block_on(async move {
            let server = endpoint_on_stack(sock, Some(server_cfg)).unwrap();
            let serving = tokio::spawn(async move {
                let conn = server.accept().await.expect("a connection").await.unwrap();
                let (mut send, mut recv) = conn.accept_bi().await.unwrap();
                let got = recv.read_to_end(SIZE + 1).await.unwrap();
                send.write_all(&got).await.unwrap();
                send.finish().unwrap();
                // Until the client has everything and closes.
                let _ = conn.closed().await;
                server.wait_idle().await;
                got.len()
            });
            let mut ep = peregrine_quic::endpoint_on_kernel(
                client,
                None,
                peregrine_quic::KernelOffload::GsoGro,
            )
            .unwrap();
            ep.set_default_client_config(client_config(Trust::Anything, ALPN).unwrap());
            let run = async {
                let conn = ep.connect(server_addr, "localhost").unwrap().await.unwrap();
                let (mut send, mut recv) = conn.open_bi().await.unwrap();
                send.write_all(&want).await.unwrap();
                send.finish().unwrap();
                let back = recv.read_to_end(SIZE + 1).await.unwrap();
                conn.close(0u32.into(), b"done");
                back
            };
            let back = tokio::time::timeout(Duration::from_secs(30), run)
                .await
                .unwrap_or_else(|_| panic!("echo through {server_addr} within 30 s"));
            assert!(back == *want, "{server_addr}: the echo differs");
            ep.wait_idle().await;
            let served = tokio::time::timeout(Duration::from_secs(10), serving)
                .await
                .expect("the server finishes")
                .unwrap();
            assert_eq!(served, SIZE);
        });
    }
    let c = stack.counters();
    assert!(c.rx_bytes >= 2 * SIZE as u64, "{c}");
    // Every receive-side drop is zero; a TX ring momentarily full is
    // QUIC's loss to recover, shown, not failed.
    assert_eq!(c.drops() - c.tx_ring_full, 0, "{c}");
    eprintln!("stack counters: {c}");
}

/// HTTP/3 (h3 on h3-quinn) over the stack: a GET of a 1 MiB body from a
/// server on the stack (v6) by a client on a kernel socket; the body
/// arrives whole and equal.
#[test]
fn an_http3_get_through_the_stack() {
    use bytes::{Buf, Bytes};
    if !privileged_here() {
        return;
    }
    const C: &str = "pg-quic-c";
    const D: &str = "pg-quic-d";
    const BODY: usize = 1 << 20;
    let _pair = NsPair::addressed(C, D);
    let (_stack, sock) = {
        let _in = NetnsGuard::enter(C).unwrap();
        let stack = Stack::open(StackConfig::new("eth0")).unwrap();
        let sock = stack.bind("[2001:db8::1]:443".parse().unwrap()).unwrap();
        (stack, sock)
    };
    let client = netns::run_in(D, || KernelUdp::bind("[2001:db8::2]:0").unwrap()).unwrap();
    let body: Bytes = (0..BODY)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<_>>()
        .into();
    let id = Identity::self_signed(&["localhost".into()]).unwrap();
    let server_cfg = server_config(id, &[b"h3"]).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let served = body.clone();
    let got = rt.block_on(async move {
        let server_addr = sock.local_addr();
        let server = endpoint_on_stack(sock, Some(server_cfg)).unwrap();
        tokio::spawn(async move {
            let conn = server.accept().await.unwrap().await.unwrap();
            let mut h3 = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn))
                .await
                .unwrap();
            if let Ok(Some(resolver)) = h3.accept().await {
                let (req, mut stream) = resolver.resolve_request().await.unwrap();
                assert_eq!(req.uri().path(), "/file");
                // The request's end (a GET has no body) is read before the
                // answer, so dropping the stream stops nothing the client
                // is still finishing.
                while stream.recv_data().await.unwrap().is_some() {}
                let resp = http::Response::builder().status(200).body(()).unwrap();
                stream.send_response(resp).await.unwrap();
                stream.send_data(served).await.unwrap();
                stream.finish().await.unwrap();
            }
            // Keep the connection until the client closes it.
            let _ = h3.accept().await;
        });
        let mut ep =
            peregrine_quic::endpoint_on_kernel(client, None, peregrine_quic::KernelOffload::GsoGro)
                .unwrap();
        ep.set_default_client_config(client_config(Trust::Anything, &[b"h3"]).unwrap());
        let get = async {
            let conn = ep.connect(server_addr, "localhost").unwrap().await.unwrap();
            let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn))
                .await
                .unwrap();
            let drive = tokio::spawn(async move {
                let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            });
            let req = http::Request::get(format!("https://{server_addr}/file"))
                .body(())
                .unwrap();
            let mut stream = send.send_request(req).await.unwrap();
            stream.finish().await.unwrap();
            let resp = stream.recv_response().await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut got = Vec::new();
            while let Some(mut chunk) = stream.recv_data().await.unwrap() {
                let n = chunk.remaining();
                got.extend_from_slice(&chunk.copy_to_bytes(n));
            }
            drop(send);
            drive.abort();
            got
        };
        let got = tokio::time::timeout(Duration::from_secs(30), get)
            .await
            .expect("the GET within 30 s");
        ep.close(0u32.into(), b"done");
        got
    });
    assert_eq!(got.len(), BODY);
    assert!(got[..] == body[..], "the body differs");
}
