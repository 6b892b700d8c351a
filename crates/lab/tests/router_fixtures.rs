//! BPF_PROG_RUN fixtures for router.bpf.c. The router's FIB lookups need a
//! real namespace with routes and neighbours, so the fixtures run inside a
//! small lab: a - r - b (routed), r - c (out1, not a router port).
//! The cases that need no FIB (TTL, fragments, options, tags, malformed and
//! cut frames) are in crates/bpf/src/router.rs.
use peregrine_bpf::fixture::frames::{spec, with_protocol};
use peregrine_bpf::fixture::{
    assert_passed, check, check_table, router_actions_moved, Case, Expect, Fixture,
};
use peregrine_bpf::router::{action_name, FibMode, ACTIONS};
use peregrine_bpf::testing::privileged;
use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_dataplane::Dataplane;
use peregrine_host::netns::NetnsGuard;
use peregrine_lab::{Lab, Lifetime, Topology};
use peregrine_wire::{ipproto, MacAddr, UdpFrameSpec};

const TOPO: &str = r#"
name = "rfix"
# Host a stays silent (no IPv6: no MLD or ND), so the only frames r:in0
# sees are the fixtures and its counters can be checked exactly.
[[host]]
name = "a"
addr = { eth0 = ["198.18.1.1/24"] }
mac = { eth0 = "02:50:00:00:0a:01" }
sysctl = { "net.ipv6.conf.all.disable_ipv6" = "1" }
[[host]]
name = "b"
addr = { eth0 = ["198.18.2.2/24", "2001:db8:2::2/64"] }
mac = { eth0 = "02:50:00:00:0b:01" }
[[host]]
name = "c"
addr = { eth0 = ["198.18.3.2/24"] }
mac = { eth0 = "02:50:00:00:0c:01" }
[[host]]
name = "r"
addr = { in0 = ["198.18.1.2/24", "2001:db8:1::2/64"], out0 = ["198.18.2.1/24", "2001:db8:2::1/64"], out1 = ["198.18.3.1/24"] }
mac = { in0 = "02:50:00:00:01:01", out0 = "02:50:00:00:02:01", out1 = "02:50:00:00:03:01" }
sysctl = { "net.ipv4.conf.all.forwarding" = "1", "net.ipv6.conf.all.forwarding" = "1" }
route = [
  { to = "198.19.0.0/16", via = "198.18.2.2" },
  { to = "2001:db8:99::/48", via = "2001:db8:2::2" },
  { to = "198.19.99.0/24", via = "198.18.2.99" },
  { to = "198.19.77.0/24", via = "198.18.3.2" },
]
neigh = [
  { dev = "out0", ip = "198.18.2.2", mac = "02:50:00:00:0b:01" },
  { dev = "out0", ip = "2001:db8:2::2", mac = "02:50:00:00:0b:01" },
  { dev = "out1", ip = "198.18.3.2", mac = "02:50:00:00:0c:01" },
]
[[link]]
a = "a:eth0"
b = "r:in0"
[[link]]
a = "r:out0"
b = "b:eth0"
[[link]]
a = "r:out1"
b = "c:eth0"
"#;

fn mac(s: &str) -> MacAddr {
    s.parse().unwrap()
}

/// A UDP frame as host a sends it to the router.
fn from_a(dst: &str, ttl: u8) -> UdpFrameSpec {
    let src = if dst.contains(':') {
        "2001:db8:1::1"
    } else {
        "198.18.1.1"
    };
    UdpFrameSpec {
        src_mac: mac("02:50:00:00:0a:01"),
        dst_mac: mac("02:50:00:00:01:01"),
        src_port: 4000,
        dst_port: 5000,
        ttl,
        frame_len: 100,
        ..spec(src, dst)
    }
}

/// The same frame as the router must send it on to b.
fn routed(mut s: UdpFrameSpec) -> Vec<u8> {
    s.src_mac = mac("02:50:00:00:02:01");
    s.dst_mac = mac("02:50:00:00:0b:01");
    s.ttl -= 1;
    build(&s)
}

fn build(s: &UdpFrameSpec) -> Vec<u8> {
    peregrine_bpf::fixture::frames::udp(s, b"hello")
}

#[test]
fn router_fixtures() {
    if !privileged("router_fixtures") {
        return;
    }
    let lab = Lab::up(Topology::from_toml(TOPO).unwrap(), Lifetime::Ephemeral).unwrap();
    let ns = lab.ns("r");
    let dp = Dataplane::router(
        Some(&ns),
        &["in0".into(), "out0".into()],
        XdpMode::Native,
        FibMode::Full,
        false,
    )
    .unwrap();
    let in0 = dp.ports[0].1.ifindex;
    let out0 = dp.ports[1].1.ifindex;
    let _in_r = NetnsGuard::enter(&ns).unwrap();

    let pass =
        |name: &str, f: Vec<u8>| Fixture::new(name, f, XdpAction::Pass, Expect::Unchanged).on(in0);
    let forward = |name: &str, s: UdpFrameSpec| {
        Fixture::new(
            name,
            build(&s),
            XdpAction::Redirect,
            Expect::Frame(routed(s)),
        )
        .on(in0)
    };
    // Neighbour solicitation (ICMPv6 to the solicited-node multicast group).
    let ns_frame = with_protocol(&build(&from_a("ff02::1:ff00:2", 255)), ipproto::ICMPV6);
    let table: Vec<(Fixture, &str)> = vec![
        (forward("ipv4 forward", from_a("198.19.0.5", 64)), "forward"),
        (
            forward("ipv6 forward", from_a("2001:db8:99::5", 64)),
            "forward",
        ),
        (
            forward("ipv4 ttl 2 forward", from_a("198.19.0.5", 2)),
            "forward",
        ),
        (
            pass("unresolved neighbour", build(&from_a("198.19.99.5", 64))),
            "pass_no_neigh",
        ),
        (
            pass("local destination", build(&from_a("198.18.1.2", 64))),
            "pass_local",
        ),
        (
            pass("no route", build(&from_a("198.18.200.1", 64))),
            // No table entry at all: bpf_fib_lookup says NOT_FWDED, which
            // the router counts with local traffic (the kernel answers).
            "pass_local",
        ),
        (
            pass(
                "egress not a router port",
                build(&from_a("198.19.77.5", 64)),
            ),
            "pass_no_port",
        ),
        (pass("ipv6 neighbour solicitation", ns_frame), "pass_local"),
    ];
    let cases: Vec<Case<Vec<&str>>> = table
        .into_iter()
        .map(|(fx, action)| Case::new(fx, vec![action]))
        .collect();
    let bad = check_table(
        dp.router.prog(),
        &cases,
        || dp.router.stats(in0).unwrap(),
        router_actions_moved,
    );
    assert_passed("router", &bad);
    assert_eq!(dp.router.stats(out0).unwrap().tx_packets, 3);

    // Steering: matched frames go to the chain's port unchanged (no TTL or
    // MAC rewrite: a container is a bump in the wire, not a router hop).
    dp.router.set_port(in0, 0, true).unwrap();
    dp.router
        .steer_prefix("198.19.5.0".parse().unwrap(), 24, out0, 1)
        .unwrap();
    dp.router.steer_l4(17, 6000, out0, 2).unwrap();
    dp.router
        .steer_mac(mac("02:50:00:00:0a:77"), out0, 3)
        .unwrap();
    let mut by_port = from_a("198.19.0.5", 64);
    by_port.dst_port = 6000;
    let mut by_mac = from_a("198.19.0.5", 64);
    by_mac.src_mac = mac("02:50:00:00:0a:77");
    let steer = |name: &str, f: Vec<u8>| {
        Fixture::new(name, f, XdpAction::Redirect, Expect::Unchanged).on(in0)
    };
    let steered = [
        steer(
            "steer by destination prefix",
            build(&from_a("198.19.5.9", 64)),
        ),
        steer("steer by udp port", build(&by_port)),
        steer("steer by source mac", build(&by_mac)),
        Fixture::new(
            "unmatched is routed",
            build(&from_a("198.19.0.5", 64)),
            XdpAction::Redirect,
            Expect::Frame(routed(from_a("198.19.0.5", 64))),
        )
        .on(in0),
    ];
    // Chain continuation: frames coming back on out0 go on to in0 unchanged.
    dp.router.set_port(out0, in0, false).unwrap();
    let back = Fixture::new(
        "chain continues",
        build(&from_a("198.19.0.5", 64)),
        XdpAction::Redirect,
        Expect::Unchanged,
    )
    .on(out0);
    let failures: Vec<String> = steered
        .iter()
        .chain([&back])
        .filter_map(|f| check(dp.router.prog(), f).err())
        .map(|m| m.to_string())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let st = dp.router.stats(in0).unwrap();
    assert_eq!(count_in(&st, "steer"), 3);

    // Direct FIB mode (BPF_FIB_LOOKUP_DIRECT) routes the same way here.
    drop(_in_r);
    drop(dp);
    let direct = Dataplane::router(
        Some(&ns),
        &["in0".into(), "out0".into()],
        XdpMode::Native,
        FibMode::Direct,
        false,
    )
    .unwrap();
    let _in_r = NetnsGuard::enter(&ns).unwrap();
    let fx = [
        Fixture::new(
            "direct: ipv4 forward",
            build(&from_a("198.19.0.5", 64)),
            XdpAction::Redirect,
            Expect::Frame(routed(from_a("198.19.0.5", 64))),
        )
        .on(in0),
        Fixture::new(
            "direct: ipv6 forward",
            build(&from_a("2001:db8:99::5", 64)),
            XdpAction::Redirect,
            Expect::Frame(routed(from_a("2001:db8:99::5", 64))),
        )
        .on(in0),
        pass(
            "direct: unresolved neighbour",
            build(&from_a("198.19.99.5", 64)),
        ),
    ];
    let failures: Vec<String> = fx
        .iter()
        .filter_map(|f| check(direct.router.prog(), f).err())
        .map(|m| m.to_string())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn count_in(st: &peregrine_bpf::router::PortStats, name: &str) -> u64 {
    st.packets[(0..ACTIONS).find(|&a| action_name(a) == name).unwrap()]
}
