//! tc over netlink on a veth made with plain `ip` (privileged).
use peregrine_host::netns;
use peregrine_host::tc::Tc;
use peregrine_testbed::testing::{privileged_here, run, NsPair};

/// `root_qdisc` reads one device's root alone: nothing for veth's built-in
/// default (the kernel answers that request with its ACK only, which once
/// left the request waiting forever), a user's qdisc by its handle and
/// kind, and nothing again once it is gone.
#[test]
fn root_qdisc_sees_the_default_and_a_users_qdisc() {
    if !privileged_here() {
        return;
    }
    let pair = NsPair::new("pg-tctest-a", "pg-tctest-b");
    let root = || {
        netns::run_in(&pair.a, || {
            let idx = peregrine_bpf::link::ifindex("eth0").expect("eth0");
            Tc::open()
                .expect("netlink")
                .root_qdisc(idx)
                .expect("root qdisc")
        })
        .expect("enter the namespace")
    };
    assert_eq!(
        root(),
        None,
        "veth's default noqueue is no root qdisc of anyone"
    );
    let tc = |args: &[&str]| run("tc", &[&["-n", pair.a.as_str()], args].concat());
    tc(&[
        "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "tbf", "rate", "10mbit", "burst",
        "32k", "latency", "50ms",
    ]);
    let q = root().expect("the user's tbf");
    assert_eq!((q.handle, q.kind.as_str()), (0x1_0000, "tbf"));
    assert!(q.is_root());
    tc(&["qdisc", "del", "dev", "eth0", "root"]);
    assert_eq!(root(), None);
}
