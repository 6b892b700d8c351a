//! A first look at QUIC goodput through the stack (root): namespaces
//! pg-qgp-a/b joined by a veth made with `ip` (default settings), a quinn
//! server in A sending `MiB` mebibytes on one stream, an ordinary quinn
//! client in B reading them. `--io afxdp`: the server's endpoint is a stack
//! socket; `kernel`: a kernel UDP socket (quinn-udp: GSO and GRO where the
//! kernel has them); `kernel-nogso`: the same, the server sending one
//! datagram per send (quinn told its socket takes one segment). Prints goodput and the process's CPU time per GB
//! (both ends and the stack's thread share the process). `bench quic` is
//! to replace this with the full comparison.
//!
//! cargo run --release -p peregrine-quic --example goodput -- afxdp 256
use std::net::{SocketAddr, UdpSocket as KernelUdp};
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_bpf::testing::NsPair;
use peregrine_host::netns::{self, NetnsGuard};
use peregrine_quic::endpoint_on_stack;
use peregrine_quic::tls::{client_config, server_config, Identity, Trust};
use peregrine_stack::{Stack, StackConfig};

const ALPN: &[&[u8]] = &[b"peregrine-goodput"];

/// User plus system CPU time of the whole process.
fn cpu() -> Duration {
    // Safety: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Safety: a valid pointer to a rusage for the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |v: libc::timeval| Duration::new(v.tv_sec as u64, v.tv_usec as u32 * 1000);
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// A kernel socket that quinn sees as taking one datagram per send.
#[derive(Debug)]
struct NoGso(Arc<dyn quinn::AsyncUdpSocket>);

impl quinn::AsyncUdpSocket for NoGso {
    fn create_io_poller(self: Arc<Self>) -> std::pin::Pin<Box<dyn quinn::UdpPoller>> {
        self.0.clone().create_io_poller()
    }
    fn try_send(&self, t: &quinn::udp::Transmit) -> std::io::Result<()> {
        self.0.try_send(t)
    }
    fn poll_recv(
        &self,
        cx: &mut std::task::Context,
        bufs: &mut [std::io::IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0.poll_recv(cx, bufs, meta)
    }
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
    fn max_transmit_segments(&self) -> usize {
        1
    }
    fn max_receive_segments(&self) -> usize {
        self.0.max_receive_segments()
    }
    fn may_fragment(&self) -> bool {
        self.0.may_fragment()
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let io = args
        .get(1)
        .map(String::as_str)
        .unwrap_or("afxdp")
        .to_string();
    let io = io.as_str();
    let mib: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(256);
    if !matches!(io, "afxdp" | "kernel" | "kernel-nogso") {
        eprintln!("goodput: the I/O is afxdp, kernel or kernel-nogso, not {io}");
        std::process::exit(2);
    }
    let _pair = NsPair::addressed("pg-qgp-a", "pg-qgp-b");
    let server_addr: SocketAddr = "198.18.0.1:4433".parse().unwrap();
    let mut stack = None;
    let (stack_sock, kernel_sock) = {
        let _in = NetnsGuard::enter("pg-qgp-a").unwrap();
        if io == "afxdp" {
            let s = Stack::open(StackConfig::new("eth0")).unwrap();
            let sock = s.bind(server_addr).unwrap();
            stack = Some(s);
            (Some(sock), None)
        } else {
            (None, Some(KernelUdp::bind(server_addr).unwrap()))
        }
    };
    let client = netns::run_in("pg-qgp-b", || KernelUdp::bind("198.18.0.2:0").unwrap()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cfg = server_config(Identity::self_signed(&["localhost".into()]).unwrap(), ALPN).unwrap();
    let bytes = mib << 20;
    let (secs, cpu_s) = rt.block_on(async move {
        let server = match (stack_sock, kernel_sock) {
            (Some(s), _) => endpoint_on_stack(s, Some(cfg)).unwrap(),
            (_, Some(k)) => {
                let rt = Arc::new(quinn::TokioRuntime);
                let mut sock = quinn::Runtime::wrap_udp_socket(&*rt, k).unwrap();
                if io == "kernel-nogso" {
                    sock = Arc::new(NoGso(sock));
                }
                quinn::Endpoint::new_with_abstract_socket(
                    quinn::EndpointConfig::default(),
                    Some(cfg),
                    sock,
                    rt,
                )
                .unwrap()
            }
            _ => unreachable!(),
        };
        tokio::spawn(async move {
            let conn = server.accept().await.unwrap().await.unwrap();
            let mut send = conn.open_uni().await.unwrap();
            let chunk = vec![0x5au8; 1 << 16];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len());
                send.write_all(&chunk[..n]).await.unwrap();
                left -= n;
            }
            send.finish().unwrap();
            let _ = conn.closed().await;
        });
        let mut ep = peregrine_quic::endpoint_on_kernel(client, None).unwrap();
        ep.set_default_client_config(client_config(Trust::Anything, ALPN).unwrap());
        let conn = ep.connect(server_addr, "localhost").unwrap().await.unwrap();
        let (t0, c0) = (Instant::now(), cpu());
        let mut recv = conn.accept_uni().await.unwrap();
        let mut got = 0usize;
        let mut buf = vec![0u8; 1 << 16];
        while let Some(n) = recv.read(&mut buf).await.unwrap() {
            got += n;
        }
        let (secs, cpu_s) = (t0.elapsed().as_secs_f64(), (cpu() - c0).as_secs_f64());
        assert_eq!(got, bytes, "received everything");
        conn.close(0u32.into(), b"done");
        ep.wait_idle().await;
        (secs, cpu_s)
    });
    let gbit = bytes as f64 * 8.0 / secs / 1e9;
    let gb = bytes as f64 / 1e9;
    println!(
        "io={io} bytes={bytes} seconds={secs:.3} goodput={:.0} Mbit/s process_cpu={cpu_s:.2} s ({:.2} CPU-s/GB)",
        gbit * 1000.0,
        cpu_s / gb
    );
    if let Some(s) = stack {
        println!("stack: {}", s.counters());
    }
}
