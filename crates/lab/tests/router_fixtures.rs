//! BPF_PROG_RUN fixtures for router.bpf.c, both programs (XDP and tcx
//! ingress). The router's FIB lookups need a real namespace with routes and
//! neighbours, so the fixtures run inside a small lab: a - r - b (routed),
//! r - c (out1, not a router port). The cases that need no FIB (TTL,
//! fragments, options, tags, malformed and cut frames, martians, checksums,
//! MACs) are in crates/bpf/src/router.rs.
use peregrine_bpf::fixture::frames::{
    bad_ip4_checksum, ip6_ext_header, spec, with_protocol, with_trailer, IPV6_DSTOPTS,
};
use peregrine_bpf::fixture::{
    assert_passed, check_all, check_table, router_actions_moved, Case, Expect, Fixture, TcAction,
    Verdict,
};
use peregrine_bpf::router::{action_name, FibMode, RouterProgram, ACTIONS};
use peregrine_bpf::{Hook, TcxDirection, XdpAction, XdpMode};
use peregrine_dataplane::Dataplane;
use peregrine_host::netns::NetnsGuard;
use peregrine_lab::{Lab, Lifetime, Topology};
use peregrine_testbed::testing::privileged;
use peregrine_wire::{ipproto, MacAddr, UdpFrameSpec};
use std::os::fd::{AsFd, BorrowedFd};

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

/// The same frame as the router must send it on to b: XDP (and tc into a
/// peer) rewrites the MACs itself.
fn routed(mut s: UdpFrameSpec) -> Vec<u8> {
    s.src_mac = mac("02:50:00:00:02:01");
    s.dst_mac = mac("02:50:00:00:0b:01");
    s.ttl -= 1;
    build(&s)
}

/// The frame as tc hands it to bpf_redirect_neigh: TTL decremented, MACs
/// as they came (the neighbour output writes them after the program).
fn routed_neigh(mut s: UdpFrameSpec) -> Vec<u8> {
    s.ttl -= 1;
    build(&s)
}

fn build(s: &UdpFrameSpec) -> Vec<u8> {
    peregrine_bpf::fixture::frames::udp(s, b"hello")
}

/// Which program a table runs through, and how its routed frames leave.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Via {
    Xdp,
    /// tc, bpf_redirect_neigh.
    TcNeigh,
    /// tc, out0 flagged for bpf_redirect_peer.
    TcPeer,
}

impl Via {
    /// The router's program that runs at this hook.
    fn prog(self, router: &RouterProgram) -> BorrowedFd<'_> {
        match self {
            Via::Xdp => router.prog().as_fd(),
            Via::TcNeigh | Via::TcPeer => router.tc_prog().as_fd(),
        }
    }
}

/// What a case expects, whichever hook runs it.
enum Outcome {
    /// Routed to b: the frame is (possibly with a trailer) this spec's.
    Forward(UdpFrameSpec),
    /// As Forward, the input and output frames changed alike by `edit`.
    ForwardEdited(UdpFrameSpec, fn(&[u8]) -> Vec<u8>),
    Pass,
    /// Passed to the kernel as this spec's frame.
    PassAs(UdpFrameSpec),
    Drop,
}

/// One row: the fixture for `via`, and the action it counts under.
fn fixture(via: Via, in0: u32, name: &str, input: Vec<u8>, out: &Outcome) -> Fixture {
    let tc = via != Via::Xdp;
    let name = format!("{via:?}: {name}");
    let routed_for = |s: &UdpFrameSpec| match via {
        Via::TcNeigh => routed_neigh(s.clone()),
        _ => routed(s.clone()),
    };
    // The same verdict is spelled differently at each hook.
    let at_hook = |x: XdpAction, t: TcAction| -> Verdict {
        if tc {
            t.into()
        } else {
            x.into()
        }
    };
    let (verdict, output) = match out {
        Outcome::Forward(s) => (
            at_hook(XdpAction::Redirect, TcAction::Redirect),
            Expect::Frame(routed_for(s)),
        ),
        Outcome::ForwardEdited(s, edit) => (
            at_hook(XdpAction::Redirect, TcAction::Redirect),
            Expect::Frame(edit(&routed_for(s))),
        ),
        Outcome::Pass => (at_hook(XdpAction::Pass, TcAction::Ok), Expect::Unchanged),
        Outcome::PassAs(s) => (
            at_hook(XdpAction::Pass, TcAction::Ok),
            Expect::Frame(build(s)),
        ),
        Outcome::Drop => (at_hook(XdpAction::Drop, TcAction::Shot), Expect::Unchanged),
    };
    Fixture::new(name, input, verdict, output).on(in0)
}

/// `fixture` for a table row (its action is the caller's to count).
fn row_fixture(via: Via, in0: u32, (name, input, out, _): Row) -> Fixture {
    fixture(via, in0, name, input, &out)
}

fn dstopts(f: &[u8]) -> Vec<u8> {
    ip6_ext_header(f, IPV6_DSTOPTS)
}

/// One row of a table: (name, input, outcome, action counted).
type Row = (&'static str, Vec<u8>, Outcome, &'static str);

/// Host a's frame to `dst` with `ttl`, routed on to b.
fn forwarded(name: &'static str, dst: &str, ttl: u8) -> Row {
    let s = from_a(dst, ttl);
    (name, build(&s), Outcome::Forward(s), "forward")
}

/// Host a's frame to `dst` with `ttl`, passed to the kernel as `action`.
fn passed(name: &'static str, dst: &str, ttl: u8, action: &'static str) -> Row {
    (name, build(&from_a(dst, ttl)), Outcome::Pass, action)
}

/// The FIB table, the same for every hook.
fn fib_table() -> Vec<Row> {
    use Outcome::{Drop, Forward, ForwardEdited, Pass, PassAs};
    // Neighbour solicitation (ICMPv6 to the solicited-node multicast group).
    let ns_frame = with_protocol(&build(&from_a("ff02::1:ff00:2", 255)), ipproto::ICMPV6);
    let mut foreign = from_a("198.19.0.5", 64);
    foreign.dst_mac = mac("02:50:00:00:01:99");
    // As a chain's container hands a frame back: addressed to the router
    // port it first came in by, arriving on another. Routed, not foreign,
    // and readdressed to the port it arrived on (the MAC from_a gives), so
    // the kernel takes it as its own if it gets it: the unresolved
    // neighbour case is passed so.
    let mut other_port = from_a("198.19.0.5", 64);
    other_port.dst_mac = mac("02:50:00:00:02:01");
    let mut other_port_no_neigh = from_a("198.19.99.5", 64);
    other_port_no_neigh.dst_mac = other_port.dst_mac;
    let mut bcast = from_a("198.19.0.5", 64);
    bcast.dst_mac = MacAddr::BROADCAST;
    let from_src = |src: &str| UdpFrameSpec {
        src_ip: src.parse().unwrap(),
        ..from_a("198.19.0.5", 64)
    };
    vec![
        forwarded("ipv4 forward", "198.19.0.5", 64),
        forwarded("ipv6 forward", "2001:db8:99::5", 64),
        forwarded("ipv4 ttl 2 forward", "198.19.0.5", 2),
        (
            "ipv4 trailing bytes trimmed",
            with_trailer(&build(&from_a("198.19.0.5", 64)), 10),
            Forward(from_a("198.19.0.5", 64)),
            "forward",
        ),
        (
            "ipv6 trailing bytes trimmed",
            with_trailer(&build(&from_a("2001:db8:99::5", 64)), 7),
            Forward(from_a("2001:db8:99::5", 64)),
            "forward",
        ),
        (
            "ipv6 destination options before udp",
            dstopts(&build(&from_a("2001:db8:99::5", 64))),
            ForwardEdited(from_a("2001:db8:99::5", 64), dstopts),
            "forward",
        ),
        (
            "addressed to another router port's mac",
            build(&other_port),
            Forward(from_a("198.19.0.5", 64)),
            "forward",
        ),
        (
            "another port's mac, unresolved neighbour",
            build(&other_port_no_neigh),
            PassAs(from_a("198.19.99.5", 64)),
            "pass_no_neigh",
        ),
        passed("unresolved neighbour", "198.19.99.5", 64, "pass_no_neigh"),
        passed("ipv4 ttl 1", "198.19.0.5", 1, "pass_ttl"),
        passed("ipv6 hop limit 1", "2001:db8:99::5", 1, "pass_ttl"),
        passed("local destination", "198.18.1.2", 64, "pass_local"),
        passed("ipv6 local destination", "2001:db8:1::2", 64, "pass_local"),
        // bpf_fib_lookup says NOT_FWDED for this as for local traffic; the
        // router's second lookup in the main table tells them apart.
        passed("no route", "198.18.200.1", 64, "pass_no_route"),
        passed("ipv6 no route", "2001:db8:77::1", 64, "pass_no_route"),
        passed(
            "egress not a router port",
            "198.19.77.5",
            64,
            "pass_no_port",
        ),
        ("ipv6 neighbour solicitation", ns_frame, Pass, "pass_local"),
        (
            "foreign destination mac",
            build(&foreign),
            Drop,
            "drop_otherhost",
        ),
        (
            "broadcast mac, unicast ip",
            build(&bcast),
            Pass,
            "pass_l2_group",
        ),
        (
            "bad ipv4 header checksum",
            bad_ip4_checksum(&build(&from_a("198.19.0.5", 64))),
            Drop,
            "drop_bad_csum",
        ),
        (
            "martian source 127.0.0.1",
            build(&from_src("127.0.0.1")),
            Drop,
            "drop_martian",
        ),
        // Linux refuses a source that is one of its own addresses (here
        // in0's, arriving on in0; out0's too) as a martian...
        (
            "source is in0's own address",
            build(&from_src("198.18.1.2")),
            Drop,
            "drop_martian",
        ),
        (
            "source is out0's own address",
            build(&from_src("198.18.2.1")),
            Drop,
            "drop_martian",
        ),
        // ... but not its neighbours', nor 0/8 other than 0.0.0.0 (Linux
        // 6.18 forwards 0.1.2.3).
        (
            "source is the neighbour of in0's address",
            build(&from_src("198.18.1.3")),
            Forward(from_src("198.18.1.3")),
            "forward",
        ),
        (
            "source 0.1.2.3",
            build(&from_src("0.1.2.3")),
            Forward(from_src("0.1.2.3")),
            "forward",
        ),
    ]
}

/// Runs the FIB table through `router` at `via`, then steering and chain
/// continuation; checks verdicts, frames and counters.
fn run_tables(router: &RouterProgram, via: Via, in0: u32, out0: u32) {
    let prog = via.prog(router);
    let table = fib_table();
    let forwards = table.iter().filter(|r| r.3 == "forward").count() as u64;
    let cases: Vec<Case<Vec<&str>>> = table
        .into_iter()
        .map(|row| {
            let action = row.3;
            Case::new(row_fixture(via, in0, row), vec![action])
        })
        .collect();
    let tx_before = router.stats(out0).unwrap().tx_packets;
    let bad = check_table(
        &prog,
        &cases,
        || router.stats(in0).unwrap(),
        router_actions_moved,
    );
    assert_passed(&format!("router {via:?}"), &bad);
    assert_eq!(
        router.stats(out0).unwrap().tx_packets - tx_before,
        forwards,
        "{via:?}"
    );

    // Steering: matched frames go to the chain's port unchanged (no TTL or
    // MAC rewrite: a container is a bump in the wire, not a router hop).
    router.set_port(in0, 0, true).unwrap();
    router
        .steer_prefix("198.19.5.0".parse().unwrap(), 24, out0, 1)
        .unwrap();
    router.steer_l4(17, 6000, out0, 2).unwrap();
    router.steer_mac(mac("02:50:00:00:0a:77"), out0, 3).unwrap();
    let mut by_port = from_a("198.19.0.5", 64);
    by_port.dst_port = 6000;
    let mut by_mac = from_a("198.19.0.5", 64);
    by_mac.src_mac = mac("02:50:00:00:0a:77");
    let redirect: Verdict = if via == Via::Xdp {
        XdpAction::Redirect.into()
    } else {
        TcAction::Redirect.into()
    };
    let steer = |name: &str, f: Vec<u8>| {
        Fixture::new(format!("{via:?}: {name}"), f, redirect, Expect::Unchanged).on(in0)
    };
    let steered = [
        steer(
            "steer by destination prefix",
            build(&from_a("198.19.5.9", 64)),
        ),
        steer("steer by udp port", build(&by_port)),
        steer("steer by source mac", build(&by_mac)),
        row_fixture(via, in0, forwarded("unmatched is routed", "198.19.0.5", 64)),
    ];
    // Chain continuation: frames coming back on out0 go on to in0 unchanged
    // (addressed to in0's MAC, not out0's: no "other host" drop there).
    router.set_port(out0, in0, false).unwrap();
    let back = Fixture::new(
        format!("{via:?}: chain continues"),
        build(&from_a("198.19.0.5", 64)),
        redirect,
        Expect::Unchanged,
    )
    .on(out0);
    let steer_before = count_in(&router.stats(in0).unwrap(), "steer");
    let back_before = count_in(&router.stats(out0).unwrap(), "steer");
    let steering: Vec<Fixture> = steered.into_iter().chain([back]).collect();
    assert_passed(
        &format!("router {via:?} steering"),
        &check_all(&prog, &steering),
    );
    assert_eq!(
        count_in(&router.stats(in0).unwrap(), "steer") - steer_before,
        3
    );
    assert_eq!(
        count_in(&router.stats(out0).unwrap(), "steer") - back_before,
        1
    );
    router.set_port(in0, 0, false).unwrap();
    router.set_port(out0, 0, false).unwrap();
}

#[test]
fn router_fixtures() {
    if !privileged("router_fixtures") {
        return;
    }
    let lab = Lab::up(Topology::from_toml(TOPO).unwrap(), Lifetime::Ephemeral).unwrap();
    let ns = lab.ns("r");
    // The router as `router attach in0 out0` sets it up in r, at XDP.
    let xdp_router = |fib| {
        Dataplane::router(
            Some(&ns),
            &["in0".into(), "out0".into()],
            Hook::Xdp(XdpMode::Native),
            fib,
            false,
        )
        .unwrap()
    };
    let dp = xdp_router(FibMode::Full);
    let in0 = dp.ports[0].1.ifindex();
    let out0 = dp.ports[1].1.ifindex();
    let in_r = NetnsGuard::enter(&ns).unwrap();
    run_tables(&dp.router, Via::Xdp, in0, out0);
    own_address_verdicts_follow_the_host(&dp.router, Via::Xdp, &ns, in0);

    // Direct FIB mode (BPF_FIB_LOOKUP_DIRECT) routes the same way here.
    drop(in_r);
    drop(dp);
    let direct = xdp_router(FibMode::Direct);
    let in_r = NetnsGuard::enter(&ns).unwrap();
    let fx = [
        forwarded("direct: ipv4 forward", "198.19.0.5", 64),
        forwarded("direct: ipv6 forward", "2001:db8:99::5", 64),
        passed(
            "direct: unresolved neighbour",
            "198.19.99.5",
            64,
            "pass_no_neigh",
        ),
    ]
    .map(|row| row_fixture(Via::Xdp, in0, row));
    assert_passed("router direct", &check_all(direct.router.prog(), &fx));
    drop(in_r);
    drop(direct);

    // The tc program, attached at tcx ingress of the same ports: the same
    // table, forwarding through bpf_redirect_neigh; then with out0 flagged
    // for bpf_redirect_peer (b's eth0 is in another namespace).
    let _in_r = NetnsGuard::enter(&ns).unwrap();
    let tc = RouterProgram::load(FibMode::Full).unwrap();
    let hook = Hook::Tcx(TcxDirection::Ingress);
    let links = [
        tc.attach("in0", hook, false).unwrap(),
        tc.attach("out0", hook, false).unwrap(),
    ];
    assert_eq!((links[0].ifindex, links[1].ifindex), (in0, out0));
    run_tables(&tc, Via::TcNeigh, in0, out0);
    tc.set_peer_delivery(out0, true).unwrap();
    run_tables(&tc, Via::TcPeer, in0, out0);
    assert!(
        tc.attach("in0", Hook::Tcx(TcxDirection::Egress), false)
            .is_err(),
        "no router at tcx egress"
    );
    tc.set_peer_delivery(out0, false).unwrap();
    own_address_verdicts_follow_the_host(&tc, Via::TcNeigh, &ns, in0);
}

/// The own-address source check asks the kernel's FIB, not a copy of the
/// addresses made at attach time: an address given to r later is a martian
/// source from the next frame on, and forwarded again once removed. The
/// router caches the FIB's answer per source: the first frame fills that
/// cache, and each address change must empty it (route generation), at
/// either hook.
fn own_address_verdicts_follow_the_host(router: &RouterProgram, via: Via, ns: &str, in0: u32) {
    let src = "198.18.1.77";
    let spec = UdpFrameSpec {
        src_ip: src.parse().unwrap(),
        ..from_a("198.19.0.5", 64)
    };
    let ip = |verb: &str| {
        let st = std::process::Command::new("ip")
            .args(["-n", ns, "addr", verb, "198.18.1.77/32", "dev", "out1"])
            .status()
            .unwrap();
        assert!(st.success(), "ip addr {verb}");
    };
    let expect = |what: &str, out: Outcome, action: &'static str| {
        let case = Case::new(fixture(via, in0, what, build(&spec), &out), vec![action]);
        let prog = via.prog(router);
        let bad = check_table(
            &prog,
            &[case],
            || router.stats(in0).unwrap(),
            router_actions_moved,
        );
        assert_passed(what, &bad);
    };
    expect(
        "a neighbour's source",
        Outcome::Forward(spec.clone()),
        "forward",
    );
    ip("add");
    expect(
        "the same source, now r's own",
        Outcome::Drop,
        "drop_martian",
    );
    ip("del");
    expect(
        "the same source, r's no more",
        Outcome::Forward(spec.clone()),
        "forward",
    );
}

fn count_in(st: &peregrine_bpf::router::PortStats, name: &str) -> u64 {
    st.packets[(0..ACTIONS).find(|&a| action_name(a) == name).unwrap()]
}
