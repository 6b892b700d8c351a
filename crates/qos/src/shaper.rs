//! One rate shaped on an interface's egress, in the calling thread's
//! namespace: a root `htb 7073:` whose single class `7073:1` (rate = ceil)
//! takes every packet (HTB's default class), over a pfifo leaf `7074:` of
//! about 100 ms of the rate. This is what the CNI `bandwidth` plugin does
//! with TBF, here through `host::tc`.
//!
//! A shaper queues what a policer would drop. A local TCP sender is then
//! held back by its own queue (TCP small queues) instead of losing the
//! tail of each flight, and so gets the rate. The agent shapes a pod's
//! `egress_rate` this way on the pod's interface, inside the pod's
//! namespace.
//!
//! The record of what peregrine made is the handle: only a root qdisc
//! `7073:` is ever changed or removed, and a root someone else made is
//! never replaced.
use peregrine_host::tc::{handle, ClassStats, HtbClass, Tc};

use crate::error::{QosError, Result};

/// The shaper's root qdisc major ("ps"; the htb engine's is 7067).
pub const SHAPER_MAJOR: u16 = 0x7073;
/// Its one class's minor.
pub const CLASS_MINOR: u16 = 1;
/// Its leaf pfifo's major.
pub const LEAF_MAJOR: u16 = 0x7074;
/// The leaf queue holds about this much of the rate.
const QUEUE_MS: u64 = 100;

/// What `shape` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shaped {
    /// The shaper was made.
    Added,
    /// Ours was there; it now has the rate and burst asked for.
    Changed,
}

/// The leaf's packet limit for `rate_bps`: QUEUE_MS of full-size frames,
/// 16 to 10,000.
fn queue_limit(rate_bps: u64) -> u32 {
    (rate_bps / 8 * QUEUE_MS / 1000 / 1514).clamp(16, 10_000) as u32
}

fn ifindex_of(iface: &str) -> Result<u32> {
    peregrine_bpf::link::ifindex(iface)
        .map_err(|_| QosError::Request(format!("no interface {iface} here")))
}

/// Shapes `iface`'s egress to `rate_bps` (bit/s) with a bucket of
/// `burst` bytes; a shaper of ours already there gets the new rate (its
/// queue is kept). A root qdisc someone else made is refused in one line.
pub fn shape(iface: &str, rate_bps: u64, burst: u64) -> Result<Shaped> {
    if rate_bps == 0 {
        return Err(QosError::Config(format!(
            "shaping {iface}: a rate of 0 would stop it"
        )));
    }
    let ifindex = ifindex_of(iface)?;
    let tc = Tc::open()?;
    let class = HtbClass {
        classid: handle(SHAPER_MAJOR, CLASS_MINOR),
        parent: handle(SHAPER_MAJOR, 0),
        rate_bps,
        ceil_bps: rate_bps,
        burst,
        cburst: burst,
        prio: 0,
        quantum: 1514,
    };
    let leaf = handle(SHAPER_MAJOR, CLASS_MINOR);
    match tc.root_qdisc(ifindex)? {
        Some(q) if q.handle >> 16 == u32::from(SHAPER_MAJOR) => {
            tc.set_htb_class(ifindex, &class, false)?;
            tc.set_pfifo(ifindex, leaf, LEAF_MAJOR, queue_limit(rate_bps), true)?;
            Ok(Shaped::Changed)
        }
        Some(q) => Err(QosError::Request(format!(
            "{iface} has a root qdisc peregrine did not make ({} {:x}:): not replacing it",
            q.kind,
            q.handle >> 16
        ))),
        None => {
            tc.add_htb(ifindex, None, SHAPER_MAJOR, CLASS_MINOR)?;
            let built = tc.set_htb_class(ifindex, &class, true).and_then(|()| {
                tc.set_pfifo(ifindex, leaf, LEAF_MAJOR, queue_limit(rate_bps), false)
            });
            if let Err(e) = built {
                // Nothing half-made stays: the root takes its class along.
                let _ = tc.del_root(ifindex, handle(SHAPER_MAJOR, 0));
                return Err(e.into());
            }
            Ok(Shaped::Added)
        }
    }
}

/// Removes the shaper of `iface` if it is ours: true when one went. An
/// interface that is gone has none.
pub fn unshape(iface: &str) -> Result<bool> {
    let Ok(ifindex) = peregrine_bpf::link::ifindex(iface) else {
        return Ok(false);
    };
    let tc = Tc::open()?;
    match tc.root_qdisc(ifindex)? {
        Some(q) if q.handle >> 16 == u32::from(SHAPER_MAJOR) => {
            tc.del_root(ifindex, q.handle)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The counters of `iface`'s shaper class, if the shaper is there.
pub fn shaped(iface: &str) -> Result<Option<ClassStats>> {
    let Ok(ifindex) = peregrine_bpf::link::ifindex(iface) else {
        return Ok(None);
    };
    let tc = Tc::open()?;
    match tc.root_qdisc(ifindex)? {
        Some(q) if q.handle >> 16 == u32::from(SHAPER_MAJOR) => Ok(tc
            .classes(ifindex, SHAPER_MAJOR)?
            .into_iter()
            .find(|c| c.classid == handle(SHAPER_MAJOR, CLASS_MINOR))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_holds_about_100_ms_within_bounds() {
        assert_eq!(queue_limit(10_000_000), 82);
        assert_eq!(queue_limit(1_000), 16);
        assert_eq!(queue_limit(1_000_000_000), 8256);
        assert_eq!(queue_limit(400_000_000_000), 10_000);
    }
}
