//! The tcx hooks (Linux 6.6+): tc programs at ingress or egress, several per
//! hook, each link removing only its own. Attaching is `link::Link` with
//! `Hook::Tcx`.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use crate::error::{BpfError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcxDirection {
    Ingress,
    Egress,
}

impl TcxDirection {
    pub(crate) fn attach_type(self) -> libbpf_sys::bpf_attach_type {
        match self {
            TcxDirection::Ingress => libbpf_sys::BPF_TCX_INGRESS,
            TcxDirection::Egress => libbpf_sys::BPF_TCX_EGRESS,
        }
    }

    /// The direction of a tcx link's attach type, as link info reports it.
    pub(crate) fn from_attach_type(t: u32) -> Result<TcxDirection> {
        match t {
            libbpf_sys::BPF_TCX_INGRESS => Ok(TcxDirection::Ingress),
            libbpf_sys::BPF_TCX_EGRESS => Ok(TcxDirection::Egress),
            _ => Err(BpfError::Invalid(format!(
                "attach type {t} is not a tcx direction"
            ))),
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TcxDirection::Ingress => "tcx ingress",
            TcxDirection::Egress => "tcx egress",
        }
    }
}

/// Number of tcx programs attached to `ifindex` (in the calling thread's
/// namespace) in `direction`.
pub fn attached_count(ifindex: u32, direction: TcxDirection) -> Result<u32> {
    // Safety: zeroed is the valid empty options struct; `sz` is set below.
    let mut opts: libbpf_sys::bpf_prog_query_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of_val(&opts) as _;
    // Safety: `opts` is valid for the call; no id arrays are passed, so the
    // kernel only fills in the count.
    let rc = unsafe {
        libbpf_sys::bpf_prog_query_opts(ifindex as i32, direction.attach_type(), &mut opts)
    };
    if rc < 0 {
        return Err(BpfError::Io {
            what: format!("querying {} on ifindex {ifindex}", direction.as_str()),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    // Safety: the kernel wrote the count; both union fields are that u32.
    Ok(unsafe { opts.__bindgen_anon_1.count })
}
