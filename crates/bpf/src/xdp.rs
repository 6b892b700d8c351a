//! The XDP hook: its modes and what is attached there. Attaching is
//! `link::Link` with `Hook::Xdp`.
use std::fmt;

use crate::error::{BpfError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpMode {
    /// Driver mode: the program runs in the driver's receive path (veth has it).
    #[default]
    Native,
    /// skb mode: works on every device, after the skb is built (slower).
    Generic,
}

impl XdpMode {
    pub(crate) fn flags(self) -> u32 {
        match self {
            XdpMode::Native => libbpf_sys::XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => libbpf_sys::XDP_FLAGS_SKB_MODE,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
    }
    pub(crate) fn hook(self) -> &'static str {
        match self {
            XdpMode::Native => "XDP (native)",
            XdpMode::Generic => "XDP (generic)",
        }
    }
}

impl fmt::Display for XdpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for XdpMode {
    type Err = BpfError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "native" | "drv" => Ok(XdpMode::Native),
            "generic" | "skb" => Ok(XdpMode::Generic),
            _ => Err(BpfError::Invalid(format!(
                "unknown XDP mode {s:?}: expected native or generic"
            ))),
        }
    }
}

/// ID of the XDP program attached to `ifindex` (any mode), if one is.
pub fn attached_prog_id(ifindex: u32) -> Result<Option<u32>> {
    let q = query(ifindex)?;
    Ok((q.prog_id != 0).then_some(q.prog_id))
}

/// The mode program `prog_id` runs in on `ifindex` (in the calling thread's
/// namespace); an XDP link does not say it, the interface does.
pub(crate) fn mode_of(ifindex: u32, prog_id: u32) -> Result<XdpMode> {
    let q = query(ifindex)?;
    if q.skb_prog_id == prog_id {
        Ok(XdpMode::Generic)
    } else if q.drv_prog_id == prog_id {
        Ok(XdpMode::Native)
    } else {
        Err(BpfError::Invalid(format!(
            "XDP program {prog_id} is not attached to ifindex {ifindex} in this namespace"
        )))
    }
}

/// What XDP programs `ifindex` (of the calling thread's namespace) runs.
fn query(ifindex: u32) -> Result<crate::rtlink::XdpQuery> {
    Ok(crate::rtlink::get(ifindex)?.xdp)
}
