//! The receiving end of a redirect: veth drops frames redirected to it
//! (XDP_REDIRECT) unless its peer runs an XDP program, so the data plane
//! (and the lab's generator) put a counting pass-through there.
use peregrine_bpf::sink::SinkProgram;
use peregrine_bpf::{Link, XdpAction, XdpMode, XdpProgram};
use peregrine_host::netns;

use crate::error::Result;

/// A counting pass-through XDP program on a veth that had none.
pub struct PassThrough {
    pub ns: String,
    pub iface: String,
    pub prog: SinkProgram,
    pub link: Link,
}

/// Makes `ns:iface` accept redirected frames: attaches a pass-through program
/// if no XDP program runs there (None if one already does).
pub fn ensure_xdp_receiver(ns: &str, iface: &str) -> Result<Option<PassThrough>> {
    netns::run_in(ns, || receiver_here(ns, iface))?
}

/// Makes the veth peer of `port` (an interface of the calling thread's
/// namespace; the peer may be in any namespace) accept redirected frames,
/// as `ensure_xdp_receiver`. None when `port` is no veth or its peer
/// already runs XDP.
pub fn ensure_peer_receives(port: &str) -> Result<Option<PassThrough>> {
    let Some(end) = peregrine_host::veth::peer_end(port)? else {
        return Ok(None);
    };
    let iface = end.name()?;
    end.run_in(|| receiver_here(&peer_label(&end), &iface))?
}

/// The name a port's peer's pass-through pin carries for the peer's
/// namespace: no spaces ("pid 42" -> "pid42"), "here" for the caller's.
pub(crate) fn peer_label(end: &peregrine_host::veth::PeerEnd) -> String {
    match &end.ns {
        Some(n) => n.label.replace(' ', ""),
        None => "here".to_string(),
    }
}

fn receiver_here(ns: &str, iface: &str) -> Result<Option<PassThrough>> {
    let idx = peregrine_bpf::link::ifindex(iface)?;
    if peregrine_bpf::xdp::attached_prog_id(idx)?.is_some() {
        return Ok(None);
    }
    let prog = SinkProgram::load(XdpAction::Pass)?;
    let link = prog.attach(iface, XdpMode::Native)?;
    tracing::info!("{ns}:{iface} had no XDP program; attached a pass-through so redirected frames are not dropped");
    Ok(Some(PassThrough {
        ns: ns.to_string(),
        iface: iface.to_string(),
        prog,
        link,
    }))
}
