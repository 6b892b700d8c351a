//! peregrine-bpf's `Link` on both hooks, with the lab's programs (a sink at
//! XDP, the reply checker at tcx).

use crate::replycheck::{CheckedFunction, ReplyCheckProgram};
use crate::testing::{in_fresh_netns, privileged};
use peregrine_bpf::link::{ifindex, Hook, Link, XdpProgram};
use peregrine_bpf::sink::SinkProgram;
use peregrine_bpf::{bpffs, tcx, xdp, XdpAction, XdpMode};

fn attached(hook: Hook, ifindex: u32) -> bool {
    match hook {
        Hook::Xdp(_) => xdp::attached_prog_id(ifindex).unwrap().is_some(),
        Hook::Tcx(d) => tcx::attached_count(ifindex, d).unwrap() > 0,
    }
}

/// For both hooks: a pinned link keeps the program attached after its
/// value is dropped, comes back from the pin knowing what it is attached
/// to, and detaches once unpinned and dropped.
#[test]
fn pinned_links_come_back_from_their_pin_and_detach_when_unpinned() {
    if !privileged("pinned_links_come_back_from_their_pin_and_detach_when_unpinned") {
        return;
    }
    let sub = format!("link-test-{}", std::process::id());
    let dir = bpffs::pin_dir(&sub).unwrap();
    in_fresh_netns(|| {
        let lo = ifindex("lo").unwrap();
        let sink = SinkProgram::load(XdpAction::Pass).unwrap();
        let check = ReplyCheckProgram::load(1232, 64, CheckedFunction::Echo).unwrap();
        let links = [
            sink.attach("lo", XdpMode::Generic).unwrap(),
            check.attach_tcx("lo").unwrap(),
        ];
        for link in links {
            let hook = link.hook;
            let path = dir.join(hook.as_str().replace(' ', "-"));
            link.pin(&path).unwrap();
            assert!(link.pin(&dir.join("again")).is_err(), "{hook}: one pin");
            drop(link);
            assert!(attached(hook, lo), "{hook}: attached while pinned");
            let back = Link::from_pin(&path).unwrap();
            assert_eq!(
                (back.hook, back.ifindex, back.iface.as_str()),
                (hook, lo, "lo")
            );
            assert_eq!(back.pinned_at(), Some(path.as_path()));
            assert_eq!(back.to_string(), format!("{hook} on lo (ifindex {lo})"));
            drop(back);
            assert!(attached(hook, lo), "{hook}: a reopened link keeps the pin");
            drop(Link::from_pin(&path).unwrap().unpin().unwrap());
            assert!(!path.exists(), "{hook}: pin removed");
            assert!(!attached(hook, lo), "{hook}: detached once unpinned");
        }
    });
    bpffs::remove_pins(&sub).unwrap();
}

/// At tcx ingress the policer takes the head of the chain whenever it
/// comes (`Placement::First`), the others append in order, and
/// `tcx::attached_ids` reads them in the order they run.
#[test]
fn the_policer_goes_first_at_tcx_and_the_others_append() {
    if !privileged("the_policer_goes_first_at_tcx_and_the_others_append") {
        return;
    }
    in_fresh_netns(|| {
        let lo = ifindex("lo").unwrap();
        let ids = || tcx::attached_ids(lo, tcx::TcxDirection::Ingress).unwrap();
        assert!(ids().is_empty());
        let first = ReplyCheckProgram::load(1232, 64, CheckedFunction::Echo).unwrap();
        let _a = first.attach_tcx("lo").unwrap();
        let a = ids();
        assert_eq!(a.len(), 1);
        let policer = peregrine_bpf::policer::PolicerProgram::load().unwrap();
        let _p = policer.attach("lo", Hook::TC).unwrap();
        let p = ids();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1..], a[..], "the policer went before what was there");
        let last = ReplyCheckProgram::load(1232, 64, CheckedFunction::Echo).unwrap();
        let _b = last.attach_tcx("lo").unwrap();
        let b = ids();
        assert_eq!(b.len(), 3);
        assert_eq!(b[..2], p[..], "a later program appends after both");
        assert_eq!(
            tcx::attached_count(lo, tcx::TcxDirection::Ingress).unwrap(),
            3
        );
    });
}
