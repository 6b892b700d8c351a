//! Shared by the lab crate's privileged integration tests (lab, dataplane,
//! invoker): labs from the built-in topologies, commands run in a lab host,
//! counted runs of the generator and counting sinks.
// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_host::nl::Netlink;
use peregrine_lab::pacing::{Limit, Rate};
use peregrine_lab::sinks::{Sink, XdpSink};
use peregrine_lab::topology::builtin;
use peregrine_lab::traffic::{Generator, TrafficSpec};
use peregrine_lab::{lab, Endpoint, Lab, Lifetime, Topology};
use peregrine_testbed::gen::FrameSizes;
use peregrine_testbed::testing::privileged_here;
use peregrine_wire::UdpFrameSpec;

/// The built-in topology `text` (e.g. `builtin::PAIR`) renamed `name`.
pub fn topology(text: &str, name: &str) -> Topology {
    let mut t = Topology::from_toml(text).unwrap();
    t.name = name.into();
    t
}

/// The built-in pair topology (a:eth0 <-> b:eth0) renamed `name`.
pub fn pair(name: &str) -> Topology {
    topology(builtin::PAIR, name)
}

/// The built-in pair topology with `queues` RX/TX queues on its veth.
pub fn pair_with_queues(name: &str, queues: u32) -> Topology {
    let mut t = pair(name);
    t.links[0].queues = queues;
    t
}

/// The built-in chain topology (gen -> dut with c1, c2 -> sink) renamed
/// `name`.
pub fn chain(name: &str) -> Topology {
    topology(builtin::CHAIN, name)
}

/// `chain` with TX checksum offload off on every link, as the XDP hook
/// needs for what kernel sockets send (ping, sockets, iperf3): a frame it
/// redirects keeps the partial checksum TX offload left, and the receiver
/// drops it. The tc hook needs no such setting.
pub fn chain_for_xdp(name: &str) -> Topology {
    let mut t = chain(name);
    for l in &mut t.links {
        l.offloads.tx = Some(false);
    }
    t
}

/// `t` brought up as an ephemeral lab (removed when dropped).
pub fn up(t: Topology) -> Lab {
    Lab::up(t, Lifetime::Ephemeral).unwrap()
}

/// How a privileged test starts: `t` brought up as an ephemeral lab, or
/// None, building nothing, when the test cannot run here (the skip is
/// reported under the test's name: `privileged_here`).
pub fn privileged_lab(t: Topology) -> Option<Lab> {
    privileged_here().then(|| up(t))
}

/// Runs `cmd` in `host` of lab `lab`; its exit code.
pub fn exec(lab: &str, host: &str, cmd: &[&str]) -> i32 {
    let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    lab::exec(lab, host, &cmd).unwrap()
}

/// One ping from `host` to `ip`; its exit code. One reply within 5 s: a
/// bridge port may still be coming up right after the lab is built, and the
/// first ARP request can go unanswered.
pub fn ping(lab: &str, host: &str, ip: &str) -> i32 {
    exec(lab, host, &["ping", "-c", "1", "-w", "5", ip])
}

/// Waits (up to 5 s) until `sink` has counted `want` frames more than
/// `before`; how many it counted.
pub fn delivered_after(sink: &dyn Sink, before: u64, want: u64) -> u64 {
    peregrine_lab::sinks::delivered_after(sink, before, want, Duration::from_secs(5)).unwrap()
}

/// A native XDP sink dropping (and counting) what arrives at `at`.
pub fn drop_sink(lab: &Lab, at: &Endpoint) -> XdpSink {
    XdpSink::attach(
        &lab.ns(&at.host),
        &at.iface,
        XdpAction::Drop,
        XdpMode::Native,
    )
    .unwrap()
}

/// Runs `gen` at `rate` until it has sent `count` frames or `within` has
/// passed (at least one given), counting into `progress`; frames offered.
pub fn offer_counting(
    gen: &Generator,
    rate: Rate,
    count: Option<u64>,
    within: Option<Duration>,
    progress: &Arc<AtomicU64>,
) -> u64 {
    let limit = Limit {
        count,
        duration: within,
    };
    gen.run(rate, limit, progress).unwrap().packets
}

/// Runs `gen` at `rate` until it has sent `count` frames (or `within` has
/// passed, if given); frames offered.
pub fn offer(gen: &Generator, rate: Rate, count: u64, within: Option<Duration>) -> u64 {
    offer_counting(gen, rate, Some(count), within, &Arc::new(AtomicU64::new(0)))
}

/// The interface `iface` of lab host `host`.
pub fn endpoint(host: &str, iface: &str) -> Endpoint {
    Endpoint {
        host: host.into(),
        iface: iface.into(),
    }
}

/// `ip:port` (an IPv4 or IPv6 address without brackets).
pub fn addr(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

/// Live UDP traffic (`TrafficSpec::live`) leaving `from` for `to`, between
/// the MAC addresses the lab gave them and from `src` to `dst`, TTL 64.
pub fn udp_traffic(
    lab: &Lab,
    from: &Endpoint,
    to: &Endpoint,
    src: SocketAddr,
    dst: SocketAddr,
    sizes: FrameSizes,
    flows: u32,
) -> TrafficSpec {
    let mut nl = Netlink::new().unwrap();
    let frame = UdpFrameSpec {
        src_mac: nl.mac_of(&lab.ns(&from.host), &from.iface).unwrap(),
        dst_mac: nl.mac_of(&lab.ns(&to.host), &to.iface).unwrap(),
        ..UdpFrameSpec::between(src, dst, 0)
    };
    TrafficSpec::live(lab.ns(&from.host), from.iface.clone(), frame, sizes, flows)
}

/// Runs `gen` at `pps` until it has sent `count` frames (or `within` has
/// passed, if given) and asserts that it offered every one (`what` names
/// the run in the message).
pub fn offer_all(gen: &Generator, pps: f64, count: u64, within: Option<Duration>, what: &str) {
    let offered = offer(gen, Rate::Pps(pps), count, within);
    assert_eq!(offered, count, "{what}: frames offered");
}
