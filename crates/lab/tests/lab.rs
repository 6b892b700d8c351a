//! Privileged lab tests: real namespaces, veth, bridges, macvlan, VXLAN,
//! XDP sinks and the generator. Each test uses its own lab name.
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use peregrine_bpf::{XdpAction, XdpMode};
use peregrine_host::netns;
use peregrine_lab::lab::{self, ns_name};
use peregrine_lab::pacing::Rate;
use peregrine_lab::results::{DropCount, Limiter};
use peregrine_lab::sinks::{Sink, SocketSink, XdpSink};
use peregrine_lab::traffic::{Backend, Generator, TrafficSpec};
use peregrine_lab::trial::{measure_trial, DropPoint, DropProbes, TrialSetup};
use peregrine_lab::{Endpoint, Lab, LabError, Lifetime, Topology};
use peregrine_testbed::gen::FrameSizes;
use peregrine_testbed::testing::{privileged_here, wait_until};

mod common;
use common::{
    addr, delivered_after, drop_sink, endpoint, offer_all, offer_counting, pair, pair_with_queues,
    ping, privileged_lab, udp_traffic, up,
};

fn namespaces_of(lab: &str) -> Vec<String> {
    let p = format!("pg-{lab}-");
    netns::list()
        .into_iter()
        .filter(|n| n.starts_with(&p))
        .collect()
}

fn assert_no_residue(lab: &str) {
    assert!(
        namespaces_of(lab).is_empty(),
        "namespaces left: {:?}",
        namespaces_of(lab)
    );
    assert!(
        !Path::new(lab::STATE_DIR)
            .join(format!("{lab}.json"))
            .exists(),
        "state file left"
    );
    assert!(
        !Path::new(peregrine_bpf::bpffs::PIN_ROOT).join(lab).exists(),
        "pins left"
    );
}

#[test]
fn lab_lifecycle_leaves_nothing_behind() {
    if !privileged_here() {
        return;
    }
    {
        let lab = Lab::up(pair("tlife"), Lifetime::Persistent).unwrap();
        assert_eq!(namespaces_of("tlife").len(), 2);
        assert_eq!(ping("tlife", "a", "198.18.0.2"), 0);
        assert_eq!(ping("tlife", "a", "2001:db8::2"), 0);
        // An XDP program and a pin, both must go with the lab.
        let mut sink =
            XdpSink::attach(&lab.ns("b"), "eth0", XdpAction::Pass, XdpMode::Native).unwrap();
        sink.pin(&lab.pin_dir().unwrap().join("sink-b-eth0"))
            .unwrap();
        assert!(Path::new("/sys/fs/bpf/peregrine/tlife/sink-b-eth0").exists());
        std::mem::forget(lab); // persistent: still there after the value is gone
    }
    assert_eq!(namespaces_of("tlife").len(), 2);
    assert!(lab::list().iter().any(|l| l.name == "tlife" && !l.stale));
    let removed = lab::down("tlife").unwrap();
    assert_eq!(removed.len(), 2);
    assert_no_residue("tlife");
    assert!(matches!(lab::down("tlife"), Err(LabError::NoSuchLab(_))));
}

#[test]
fn ephemeral_lab_goes_on_drop() {
    let Some(lab) = privileged_lab(pair("teph")) else {
        return;
    };
    assert_eq!(namespaces_of("teph").len(), 2);
    drop(lab);
    assert_no_residue("teph");
}

#[test]
fn bridges_macvlans_and_vxlan_carry_traffic() {
    if !privileged_here() {
        return;
    }
    let t = Topology::from_toml(
        r#"
name = "tdev"
[[host]]
name = "sw"
[[host]]
name = "c1"
addr = { eth0 = ["198.18.10.1/24", "2001:db8:10::1/64"] }
[[host]]
name = "c2"
addr = { eth0 = ["198.18.10.2/24", "2001:db8:10::2/64"] }
[[host]]
name = "m1"
addr = { mv0 = ["198.18.20.1/24"] }
[[host]]
name = "m2"
addr = { mv0 = ["198.18.20.2/24"] }
[[host]]
name = "v1"
addr = { u0 = ["198.18.30.1/24"], vx0 = ["198.18.40.1/24", "2001:db8:40::1/64"] }
[[host]]
name = "v2"
addr = { u0 = ["198.18.30.2/24"], vx0 = ["198.18.40.2/24", "2001:db8:40::2/64"] }
[[link]]
a = "c1:eth0"
b = "sw:p1"
[[link]]
a = "c2:eth0"
b = "sw:p2"
[[link]]
a = "sw:up0"
b = "sw:up0peer"
[[link]]
a = "v1:u0"
b = "v2:u0"
[[bridge]]
host = "sw"
name = "br0"
ports = ["p1", "p2"]
[[macvlan]]
host = "m1"
name = "mv0"
parent = "sw:up0"
[[macvlan]]
host = "m2"
name = "mv0"
parent = "sw:up0"
[[vxlan]]
host = "v1"
name = "vx0"
vni = 42
dev = "u0"
local = "198.18.30.1"
remote = "198.18.30.2"
[[vxlan]]
host = "v2"
name = "vx0"
vni = 42
dev = "u0"
local = "198.18.30.2"
remote = "198.18.30.1"
"#,
    )
    .unwrap();
    let _lab = up(t);
    assert_eq!(ping("tdev", "c1", "198.18.10.2"), 0, "through the bridge");
    assert_eq!(
        ping("tdev", "c1", "2001:db8:10::2"),
        0,
        "IPv6 through the bridge"
    );
    assert_eq!(ping("tdev", "m1", "198.18.20.2"), 0, "macvlan bridge mode");
    assert_eq!(ping("tdev", "v1", "198.18.40.2"), 0, "over VXLAN");
    assert_eq!(ping("tdev", "v1", "2001:db8:40::2"), 0, "IPv6 over VXLAN");
}

#[test]
fn clashing_lab_is_refused_and_creates_nothing() {
    let Some(_first) = privileged_lab(pair("tclash")) else {
        return;
    };
    let before = namespaces_of("tclash");
    let err = Lab::up(pair("tclash"), Lifetime::Ephemeral)
        .err()
        .expect("second lab up must fail");
    assert!(matches!(err, LabError::Exists(_)), "{err}");
    assert_eq!(namespaces_of("tclash"), before);
}

#[test]
fn failure_midway_leaves_nothing_half_built() {
    if !privileged_here() {
        return;
    }
    // Valid on paper, refused by the kernel: the gateway is on no subnet.
    let mut t = pair("thalf");
    t.hosts[0].routes.push(peregrine_lab::topology::Route {
        to: "198.19.0.0/16".into(),
        via: Some("198.18.99.1".parse().unwrap()),
        dev: None,
    });
    let err = Lab::up(t, Lifetime::Persistent)
        .err()
        .expect("route via an unreachable gateway must fail");
    let msg = err.to_string();
    assert!(msg.contains("adding route 198.19.0.0/16"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert_no_residue("thalf");
}

#[test]
fn stale_state_is_found_and_removed() {
    if !privileged_here() {
        return;
    }
    // What a killed run leaves: namespaces and a state file owned by a dead pid.
    netns::create(&ns_name("tstale", "a")).unwrap();
    netns::create(&ns_name("tstale", "b")).unwrap();
    std::fs::create_dir_all(lab::STATE_DIR).unwrap();
    let st = lab::LabState {
        name: "tstale".into(),
        topology: pair("tstale"),
        owner_pid: Some(u32::MAX - 1),
        token: 7,
    };
    std::fs::write(
        Path::new(lab::STATE_DIR).join("tstale.json"),
        serde_json::to_string(&st).unwrap(),
    )
    .unwrap();
    peregrine_bpf::bpffs::pin_dir("tstale").unwrap();
    assert!(lab::list().iter().any(|l| l.name == "tstale" && l.stale));
    let removed = lab::cleanup_stale().unwrap();
    assert!(removed.contains(&"tstale".to_string()));
    assert_no_residue("tstale");
}

/// A namespace made with plain `ip` whose name looks like a lab's
/// (`pg-<lab>-<host>`, as a user or another tool may name theirs) is not a
/// lab's: no state file records it. Stale cleanup and `lab down --all`
/// leave it and its interfaces alone, `lab list` does not show it, `lab
/// down <name>` says there is no such lab, and a lab of that name that
/// would need it is refused in one line instead of taking it over.
#[test]
fn a_namespace_that_only_looks_like_a_labs_is_left_alone() {
    if !privileged_here() {
        return;
    }
    let mine = ["pg-tmine-a", "pg-tmine-b"];
    let ip = |args: &[&str]| {
        let st = std::process::Command::new("ip")
            .args(args)
            .status()
            .unwrap();
        assert!(st.success(), "ip {args:?}");
    };
    for n in mine {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", n])
            .stderr(std::process::Stdio::null())
            .status();
        ip(&["netns", "add", n]);
    }
    ip(&[
        "-n", mine[0], "link", "add", "eth0", "type", "veth", "peer", "eth0", "netns", mine[1],
    ]);
    let kept = || {
        let all = netns::list();
        mine.iter().all(|n| all.contains(&n.to_string()))
    };
    lab::cleanup_stale().unwrap();
    assert!(kept(), "stale cleanup removed a namespace it did not make");
    assert!(!lab::list().iter().any(|l| l.name == "tmine"));
    assert!(matches!(lab::down("tmine"), Err(LabError::NoSuchLab(_))));
    lab::down_all().unwrap();
    assert!(kept(), "lab down --all removed a namespace it did not make");
    let err = Lab::up(pair("tmine"), Lifetime::Ephemeral)
        .err()
        .expect("a lab over someone else's namespaces")
        .to_string();
    assert!(
        err.contains("pg-tmine-a exists and is not a lab's") && !err.contains('\n'),
        "{err}"
    );
    assert!(kept(), "a refused lab removed what was there");
    let o = std::process::Command::new("ip")
        .args(["-n", mine[0], "link", "show", "eth0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "the user's veth went");
    for n in mine {
        ip(&["netns", "del", n]);
    }
}

/// A lab whose state file cannot be parsed (or read) owns no namespace
/// anyone can prove: `lab down`, stale cleanup, `lab down --all`, `lab up`
/// of that name and `lab exec` each fail in one line naming the file, and
/// none removes the namespaces the file may have recorded, nor the file.
/// Repaired, the file is the lab's again and `lab down` removes it all.
#[test]
fn an_unusable_state_file_is_an_error_and_removes_nothing() {
    if !privileged_here() {
        return;
    }
    let name = "tbadstate";
    let file = Path::new(lab::STATE_DIR).join(format!("{name}.json"));
    /// Whatever the test leaves, removed at the end (also when it fails).
    struct Cleanup(&'static str, std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for h in ["a", "b"] {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &ns_name(self.0, h)])
                    .stderr(std::process::Stdio::null())
                    .status();
            }
            let _ = std::fs::remove_dir(&self.1);
            let _ = std::fs::remove_file(&self.1);
            let _ = peregrine_bpf::bpffs::remove_pins(self.0);
        }
    }
    let _cleanup = Cleanup(name, file.clone());
    std::mem::forget(Lab::up(pair(name), Lifetime::Persistent).unwrap());
    let good = std::fs::read(&file).unwrap();
    let kept = |what: &str| {
        assert_eq!(namespaces_of(name).len(), 2, "{what} removed namespaces");
        assert!(file.exists(), "{what} removed the state file");
    };
    let names_the_file = |what: &str, e: LabError| {
        let msg = e.to_string();
        assert!(
            msg.contains(&file.display().to_string()) && !msg.contains('\n'),
            "{what}: {msg}"
        );
    };
    // Cut short: no longer JSON. Then not a file at all: unreadable.
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    for broken in ["unparsable", "unreadable"] {
        if broken == "unreadable" {
            std::fs::remove_file(&file).unwrap();
            std::fs::create_dir(&file).unwrap();
        }
        names_the_file(broken, lab::down(name).unwrap_err());
        kept("lab down");
        names_the_file(broken, lab::cleanup_stale().unwrap_err());
        kept("stale cleanup");
        names_the_file(broken, lab::down_all().unwrap_err());
        kept("lab down --all");
        names_the_file(
            broken,
            Lab::up(pair(name), Lifetime::Ephemeral).err().unwrap(),
        );
        kept("lab up");
        names_the_file(broken, lab::state(name).unwrap_err());
        let cmd = ["true".to_string()];
        names_the_file(broken, lab::exec(name, "a", &cmd).unwrap_err());
        let listed = lab::list().into_iter().find(|l| l.name == name).unwrap();
        assert!(listed.error.is_some() && !listed.stale, "{listed:?}");
    }
    std::fs::remove_dir(&file).unwrap();
    std::fs::write(&file, &good).unwrap();
    assert_eq!(lab::down(name).unwrap().len(), 2);
    assert_no_residue(name);
}

/// An ephemeral lab's handle dropped after its lab was taken down and
/// made again by another run (`lab down` elsewhere, then `lab up` of the
/// same name by another process) leaves that run's lab whole: its state
/// has another token. So does one whose lab was built again through
/// another handle of the same process.
#[test]
fn a_lab_handle_leaves_a_lab_of_its_name_made_since_by_another_run() {
    if !privileged_here() {
        return;
    }
    let name = "thandle";
    let file = Path::new(lab::STATE_DIR).join(format!("{name}.json"));
    let mut other = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let handle = Lab::up(pair(name), Lifetime::Ephemeral).unwrap();
    // The other run's lab in its place: the same namespaces, its owner.
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    state["owner_pid"] = other.id().into();
    state["token"] = 12345.into();
    std::fs::write(&file, state.to_string()).unwrap();
    drop(handle);
    let left = namespaces_of(name);
    let file_left = file.exists();
    assert!(lab::down(name).is_ok());
    // In this process too: a handle kept after its lab was taken down
    // (`lab down`) and built again under the same name leaves the new lab
    // to the new handle.
    let old = Lab::up(pair(name), Lifetime::Ephemeral).unwrap();
    lab::down(name).unwrap();
    let new = Lab::up(pair(name), Lifetime::Ephemeral).unwrap();
    drop(old);
    let new_left = namespaces_of(name);
    drop(new);
    let gone = namespaces_of(name);
    let _ = other.kill();
    let _ = other.wait();
    assert_no_residue(name);
    assert_eq!(left.len(), 2, "the other run's namespaces: {left:?}");
    assert!(file_left, "the other run's state file");
    assert_eq!(
        new_left.len(),
        2,
        "the new handle's namespaces: {new_left:?}"
    );
    assert!(gone.is_empty(), "the new handle removed its lab: {gone:?}");
}

/// Frames from a:eth0 to b in a pair lab.
fn traffic(lab: &Lab, backend: Backend, stamp: bool) -> (TrafficSpec, Endpoint) {
    traffic_v(lab, backend, stamp, false)
}

/// As `traffic`, over IPv6 when `v6`.
fn traffic_v(lab: &Lab, backend: Backend, stamp: bool, v6: bool) -> (TrafficSpec, Endpoint) {
    let from = endpoint("a", "eth0");
    let peer = lab.peer_of(&from).unwrap();
    // Live frames vary the source address per flow (.101 up), clear of
    // the receiver's own .2; sockets must bind the host's own address.
    let src = match (backend != Backend::Socket, v6) {
        (true, false) => "198.18.0.101",
        (false, false) => "198.18.0.1",
        (true, true) => "2001:db8::101",
        (false, true) => "2001:db8::1",
    };
    let dst = if v6 { "2001:db8::2" } else { "198.18.0.2" };
    let sizes = FrameSizes::Fixed(64);
    let mut spec = udp_traffic(lab, &from, &peer, addr(src, 1024), addr(dst, 9), sizes, 4);
    spec.stamp = stamp;
    spec.backend = backend;
    (spec, peer)
}

/// A generator of `spec` that anchors its live frames at `peer`'s interface.
fn generator_to(lab: &Lab, spec: TrafficSpec, peer: &Endpoint) -> Generator {
    Generator::new(spec, Some((lab.ns(&peer.host), peer.iface.clone()))).unwrap()
}

/// Sends `count` frames of `spec` (stamped) at 50k/s to a UDP socket on
/// `addr` at `peer` and asserts every one offered and accepted by the
/// receiving kernel (valid IP header and UDP checksums, right lengths),
/// with a latency sample each; the socket and the samples, for the
/// caller's checks of what they measured.
fn every_frame_accepted_by_a_socket(
    lab: &Lab,
    spec: TrafficSpec,
    peer: &Endpoint,
    addr: &str,
    count: u64,
) -> (SocketSink, Histogram<u64>) {
    assert!(spec.stamp, "latency is measured on stamped frames");
    let backend = spec.backend;
    let sock = SocketSink::start(&lab.ns(&peer.host), addr.parse().unwrap()).unwrap();
    let gen = generator_to(lab, spec, peer);
    let within = Some(Duration::from_secs(5));
    offer_all(&gen, 50_000.0, count, within, &format!("{backend:?}"));
    assert_eq!(
        delivered_after(&sock, 0, count),
        count,
        "{backend:?}: every datagram to {addr} accepted by the kernel"
    );
    let latency = sock.take_latency().unwrap();
    assert_eq!(
        latency.len(),
        count,
        "{backend:?}: a latency sample per frame"
    );
    (sock, latency)
}

/// The drop counter of the receiving end of the generator's veth (`peer`):
/// its `rx_dropped`, where veth counts the generator's redirected frames it
/// refused because that queue's XDP ring was full (see `DropProbes`). Loss
/// beyond it is counted nowhere.
fn ring_drops(lab: &Lab, peer: &Endpoint) -> DropProbes {
    let point = DropPoint::rx(lab.ns(&peer.host), &peer.iface, Limiter::Sink);
    DropProbes::new(vec![point], Limiter::Unattributed).unwrap()
}

/// Frames the counters saw dropped, all together.
fn total(drops: &[DropCount]) -> u64 {
    drops.iter().map(|d| d.packets).sum()
}

/// Most of a trial's frames the sink's veth may refuse at its full XDP ring
/// before the trial no longer measures the generator (see
/// `generator_holds_the_requested_rate`): the pacing tolerance.
const MAX_REFUSED: f64 = 0.01;

/// Paced trials into an XDP drop sink deliver the requested rate in every
/// window, and a count is exact. Every frame offered is delivered or was
/// refused by the receiving veth at its full XDP ring, counted there
/// (`rx_dropped` of b:eth0); loss counted nowhere fails the test.
///
/// Refusals are the receiver's, not the generator's: the sink's NAPI
/// normally runs on the generator's CPU right after each batch, but a
/// frame the peer's own stack sends (ARP, ND, MLD, a ping reply) from the
/// other CPU schedules that queue's NAPI there, where it stays while the
/// ring is never empty; if that CPU is busy (softirq pushed to a starved
/// ksoftirqd), the 256-slot ring fills in 128-256 us and veth refuses
/// frames. Measured 2026-11-27 (`peregrine gen` at 2 Mpps for 2 s with a
/// busy loop and 500 pings/s from b on CPU 1): 2 of 8 runs lost 63,233 and
/// 11,941 frames, each exactly b's `rx_dropped` and a's
/// `tx_queue_0_xdp_xmit_errors`; at 1 Mpps none in 30 trials, 18 of them
/// beside such load. So refused frames excuse the windows they fell in, up to
/// `MAX_REFUSED` of a trial: more means the machine was too busy for the
/// windows (measured at the sink) to say anything about the pacing.
#[test]
fn generator_holds_the_requested_rate() {
    let Some(lab) = privileged_lab(pair("trate")) else {
        return;
    };
    let (spec, peer) = traffic(&lab, Backend::Xdp, false);
    let sink = drop_sink(&lab, &peer);
    let gen = Generator::new(spec, None).unwrap();
    let drops = ring_drops(&lab, &peer);
    let setup = TrialSetup {
        gen: &gen,
        sink: &sink,
        duration: Duration::from_secs(3),
        mean_frame_bytes: 64.0,
        loss_tolerance: 0.0,
        drops: &drops,
    };
    for rate in [1_000_000.0, 100_000.0] {
        let before = sink.delivered().unwrap().packets;
        let t = measure_trial(&setup, "fixed", Rate::Pps(rate), &mut |_| {}).unwrap();
        let refused = total(&t.drops);
        // What the drain after the trial did not see arrive yet is waited for.
        let want = t.offered_packets.saturating_sub(refused);
        let delivered = delivered_after(&sink, before, want);
        assert_eq!(
            delivered + refused,
            t.offered_packets,
            "{rate} pps: every frame offered delivered or counted refused, none extra: \
             {delivered} delivered, {refused} refused ({:?}), {} counted nowhere; sink {:?}; {t:?}",
            t.drops,
            t.offered_packets as i64 - (delivered + refused) as i64,
            sink.stats().unwrap()
        );
        assert!(
            refused as f64 <= MAX_REFUSED * t.offered_packets as f64,
            "{rate} pps: {refused} of {} frames refused at the sink's full XDP ring ({:?}): \
             its NAPI was starved on a busy CPU; this run measured the machine, not the generator",
            t.offered_packets,
            t.drops
        );
        // A 3 s trial has a window ending near 1 s and 2 s (the one at 3 s
        // races the generator's end): each is checked, none filtered out.
        assert!(t.windows.len() >= 2, "{t:?}");
        let mut checked = 0;
        let mut prev_wait = 0.0;
        for w in &t.windows {
            assert!(
                (0.95..1.25).contains(&w.seconds),
                "window at {:.2}s lasted {:.3}s",
                w.t_s,
                w.seconds
            );
            checked += 1;
            // Pacing holds within 1%. A window may fall short by the time
            // its threads were kept off a CPU (run queue or hypervisor
            // steal: 40 ms was seen on a 2-vCPU VM), and the absolute
            // schedule repays that in the next one, so each side is excused
            // by the wait of the window and the one before; and by the
            // frames the receiver refused (at worst all in this window).
            let err = (w.delivered_pps - rate) / rate;
            let excused =
                (w.cpu_wait_s + prev_wait) / w.seconds + refused as f64 / (rate * w.seconds);
            prev_wait = w.cpu_wait_s;
            assert!(
                err.abs() < 0.01 + excused,
                "window at {:.2}s: {:.0} pps delivered for {rate} requested ({:.2}%, {:.1} ms waiting for a CPU, {refused} frames refused in the trial)",
                w.t_s,
                w.delivered_pps,
                err * 100.0,
                w.cpu_wait_s * 1e3
            );
        }
        assert!(checked >= 2, "{checked} windows checked: {t:?}");
        // The whole trial likewise, short by at most what all its windows
        // waited for a CPU and what the receiver refused.
        let err = (t.delivered_pps - rate) / rate;
        let waited: f64 = t.windows.iter().map(|w| w.cpu_wait_s).sum();
        let excused = waited / t.duration_s + refused as f64 / t.offered_packets.max(1) as f64;
        assert!(
            err.abs() < 0.01 + excused,
            "whole trial {:.0} pps for {rate} ({:.0} ms waiting for a CPU, {refused} frames refused): {:?}",
            t.delivered_pps,
            waited * 1e3,
            t.windows
        );
    }
    // A count is exact: every frame offered arrives or is counted refused
    // at the sink's ring, none extra. At 2 Mpps a starved receiver refuses
    // more (the runs measured above): that says nothing about the count,
    // which is checked whole either way.
    let (before, drops0) = (sink.delivered().unwrap(), drops.snapshot().unwrap());
    offer_all(&gen, 2_000_000.0, 1_234_567, None, "a count");
    let counted = drops.since(&drops0).unwrap();
    let refused = total(&counted);
    let delivered = delivered_after(&sink, before.packets, 1_234_567u64.saturating_sub(refused));
    assert_eq!(
        delivered + refused,
        1_234_567,
        "a count: {delivered} delivered, {refused} refused ({counted:?}); sink {:?}",
        sink.stats().unwrap()
    );
    assert_eq!(
        gen.made().unwrap().1,
        0,
        "no frame the generator could not build"
    );
}

#[test]
fn frames_arrive_intact_at_a_socket_with_latency() {
    let Some(lab) = privileged_lab(pair("tsock")) else {
        return;
    };
    for backend in Backend::ALL {
        let (spec, peer) = traffic(&lab, backend, true);
        let (_, latency) =
            every_frame_accepted_by_a_socket(&lab, spec, &peer, "198.18.0.2:9", 50_000);
        assert!(latency.value_at_quantile(0.5) > 0);
    }
}

#[test]
fn af_xdp_sink_receives_every_frame_intact() {
    let Some(lab) = privileged_lab(pair("txsk")) else {
        return;
    };
    let (mut spec, peer) = traffic(&lab, Backend::Xdp, true);
    spec.flows = 16;
    let sink =
        peregrine_lab::sinks::XskSink::start(&lab.ns(&peer.host), &peer.iface, 9, 1, &[1]).unwrap();
    assert_eq!(sink.mode, "copy", "veth has no zero-copy AF_XDP");
    assert!(
        sink.memory_bytes <= 40 << 20,
        "bounded memory per socket: {}",
        sink.memory_bytes
    );
    let gen = generator_to(&lab, spec, &peer);
    // 250k/s: integrity and accounting are tested here, not capacity, and
    // the rings (4096) then ride out a 16 ms stall of the receiving vCPU.
    let within = Some(Duration::from_secs(10));
    offer_all(&gen, 250_000.0, 1_000_000, within, "to AF_XDP");
    // The receiver counts what it took and refreshes the kernel's drop
    // counters every 4096 polls: wait until every frame is one or the other.
    wait_until(Duration::from_secs(5), || {
        sink.delivered().unwrap().packets + sink.kernel_drops() >= 1_000_000
    });
    // Every frame is accounted for: received, or dropped by the kernel at
    // the socket and counted (a receiver preempted for ~10 ms on this VM can
    // overflow even deep rings); none is lost silently, none corrupted.
    let delivered = sink.delivered().unwrap().packets;
    let drops = sink.kernel_drops();
    assert_eq!(
        delivered + drops,
        1_000_000,
        "delivered {delivered}, kernel drops {drops}"
    );
    // Drops come from the receiving thread being preempted (by whatever
    // else runs on CPU 1) for longer than its 4096-deep ring lasts at
    // 250k/s (16 ms); nothing in the test can prevent that on a shared
    // 2-vCPU VM. Measured 2026-11-23, 22 runs on a quiet machine: 18 x 0,
    // 95, 369, 444, 578 drops. With other builds running on both vCPUs runs
    // saw 2191 drops, but then frames were also lost before the socket
    // (the sum above failed) or the generator could not offer 1M in 10 s:
    // such a run is not a valid measurement. 0.1% stays the bound: the
    // largest quiet-machine count (578) with margin, and a receiver that
    // loses frames steadily (not in stalls) still fails it.
    assert!(
        drops <= 1_000,
        "at most 0.1% dropped at the socket: {drops} (delivered {delivered})"
    );
    assert_eq!(
        sink.corrupt(),
        0,
        "and every frame received passed the checksum checks"
    );
    assert_eq!(sink.take_latency().unwrap().len(), delivered);
}

/// `--threads 2`: two sending threads on two CPUs, each on its own queue of
/// a two-queue veth. The count is split between them and every frame of it
/// is accounted for at the receiving veth, none extra, at a paced rate and
/// flat out: counted by the XDP sink, or counted by veth as dropped because
/// it found that queue's XDP ring full (the sender's redirect could not
/// queue it: the receiving veth's `rx_dropped`, see `ring_drops`). Flat
/// out, a queue's NAPI that a frame of the peer's own stack moved to the
/// other sender's CPU stays there while its ring is never empty, and that
/// CPU cannot serve both: the ring fills (1 run in 10 on 2026-11-27: 21,779
/// frames, b's `rx_dropped` = a's `tx_queue_0_xdp_xmit_errors` = a's
/// `tx_dropped`). The run of 2026-11-25 that delivered 1,952,671 of
/// 2,000,001 came before the test read that counter. What could still go
/// missing uncounted is in docs/LAB.md ("Where frames are counted").
#[test]
fn two_generator_threads_deliver_an_exact_count() {
    let Some(lab) = privileged_lab(pair_with_queues("tthr", 2)) else {
        return;
    };
    let (mut spec, peer) = traffic(&lab, Backend::Xdp, false);
    spec.cpus = vec![0, 1];
    spec.flows = 16;
    let sink = drop_sink(&lab, &peer);
    let gen = Generator::new(spec, None).unwrap();
    let drops = ring_drops(&lab, &peer);
    for (rate, count) in [
        (Rate::Pps(1_000_000.0), 1_000_001u64),
        (Rate::Max, 2_000_001),
    ] {
        let before = (sink.delivered().unwrap().packets, drops.snapshot().unwrap());
        let progress = Arc::new(AtomicU64::new(0));
        let offered = offer_counting(
            &gen,
            rate,
            Some(count),
            Some(Duration::from_secs(20)),
            &progress,
        );
        assert_eq!(offered, count, "{rate:?}: offered");
        assert_eq!(
            progress.load(std::sync::atomic::Ordering::Relaxed),
            count,
            "{rate:?}: progress"
        );
        // Frames still in flight when the senders return are waited for.
        let mut now = (0, vec![]);
        wait_until(Duration::from_secs(5), || {
            now = (
                sink.delivered().unwrap().packets - before.0,
                drops.since(&before.1).unwrap(),
            );
            now.0 + total(&now.1) >= count
        });
        let (delivered, counted) = now;
        let dropped = total(&counted);
        eprintln!(
            "{rate:?}: {count} sent, {delivered} delivered, {dropped} dropped at a full veth ring"
        );
        assert_eq!(
            delivered + dropped,
            count,
            "{rate:?}: every frame of both threads delivered or counted dropped, none extra \
             ({delivered} delivered, {dropped} dropped: {counted:?}; {} counted nowhere; sink {:?})",
            count as i64 - (delivered + dropped) as i64,
            sink.stats().unwrap()
        );
    }
    let (made, errors) = gen.made().unwrap();
    assert_eq!(
        (made, errors),
        (3_000_002, 0),
        "frames built over both threads"
    );
}

/// IPv6 traffic from every backend reaches a socket in the receiving
/// kernel (which checks the mandatory UDP checksum and the lengths) and an
/// XDP sink counts the live frames at the driver.
#[test]
fn ipv6_traffic_is_delivered_and_counted() {
    let Some(lab) = privileged_lab(pair("tv6")) else {
        return;
    };
    for backend in Backend::ALL {
        let (mut spec, peer) = traffic_v(&lab, backend, true, true);
        spec.sizes = FrameSizes::Fixed(96);
        let (sock, _) =
            every_frame_accepted_by_a_socket(&lab, spec, &peer, "[2001:db8::2]:9", 20_000);
        // 96-byte frames, 92 without the FCS: 92 - 14 - 40 - 8 = 30 payload
        // bytes each, the meta (and its send time) included.
        assert_eq!(sock.delivered().unwrap().bytes, 20_000 * 30, "{backend:?}");
    }
    // Live IPv6 frames counted by an XDP sink at the receiving driver.
    let (mut spec, peer) = traffic_v(&lab, Backend::Xdp, false, true);
    spec.sizes = FrameSizes::Fixed(96);
    let sink = drop_sink(&lab, &peer);
    let gen = Generator::new(spec, None).unwrap();
    let within = Some(Duration::from_secs(5));
    offer_all(&gen, 1_000_000.0, 500_000, within, "IPv6 to XDP");
    assert_eq!(delivered_after(&sink, 0, 500_000), 500_000);
    assert_eq!(
        sink.delivered().unwrap().bytes,
        500_000 * 92,
        "bytes without FCS"
    );
}

/// tcx through bpf_link: two programs share a hook, each link detaches only
/// its own, and dropping the last leaves the hook empty.
#[test]
fn tcx_links_attach_side_by_side_and_detach_on_drop() {
    use peregrine_bpf::tcx::{attached_count, TcxDirection};
    use peregrine_testbed::replycheck::{CheckedFunction, ReplyCheckProgram};
    let Some(lab) = privileged_lab(pair("ttcx")) else {
        return;
    };
    let count = || {
        netns::run_in(&lab.ns("a"), || {
            let ifindex = peregrine_bpf::link::ifindex("eth0").unwrap();
            attached_count(ifindex, TcxDirection::Ingress).unwrap()
        })
        .unwrap()
    };
    assert_eq!(count(), 0);
    let p1 = ReplyCheckProgram::load(1232, 200, CheckedFunction::Reverse).unwrap();
    let p2 = ReplyCheckProgram::load(1233, 64, CheckedFunction::Echo).unwrap();
    let l1 = netns::run_in(&lab.ns("a"), || p1.attach_tcx("eth0"))
        .unwrap()
        .unwrap();
    let l2 = netns::run_in(&lab.ns("a"), || p2.attach_tcx("eth0"))
        .unwrap()
        .unwrap();
    assert_eq!(count(), 2);
    // Traffic still flows through both (they pass what is not theirs).
    assert_eq!(ping("ttcx", "b", "198.18.0.1"), 0);
    drop(l1);
    assert_eq!(count(), 1);
    drop(l2);
    assert_eq!(count(), 0);
    let err = netns::run_in(&lab.ns("a"), || p1.attach_tcx("nope0"))
        .unwrap()
        .unwrap_err();
    assert!(err.to_string().contains("nope0"), "{err}");
}
