//! The tcx hooks (Linux 6.6+): tc programs at ingress or egress, several per
//! hook, run in order, each link removing only its own. Attaching is
//! `link::Link` with `Hook::Tcx` (and a `link::Placement`); `attached_ids`
//! says the order.
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

/// The ids of the programs attached to `ifindex` (in the calling thread's
/// namespace) in `direction`, in the order they run: the first runs first.
pub fn attached_ids(ifindex: u32, direction: TcxDirection) -> Result<Vec<u32>> {
    // A program may come between asking the count and reading the ids
    // (ENOSPC): ask again, a few times.
    let mut want = attached_count(ifindex, direction)?;
    for _ in 0..4 {
        let mut ids = vec![0u32; want as usize + 4];
        // Safety: zeroed is the valid empty options struct; `sz` is set
        // below.
        let mut opts: libbpf_sys::bpf_prog_query_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        opts.prog_ids = ids.as_mut_ptr();
        opts.__bindgen_anon_1.count = ids.len() as u32;
        // Safety: `opts` is valid for the call and `prog_ids` points at
        // `count` u32s, which `ids` holds and outlives the call; the kernel
        // writes at most `count` of them.
        let rc = unsafe {
            libbpf_sys::bpf_prog_query_opts(ifindex as i32, direction.attach_type(), &mut opts)
        };
        // Safety: the kernel wrote the count (how many are attached, also
        // when they did not fit); both union fields are that u32.
        let n = unsafe { opts.__bindgen_anon_1.count };
        if rc == -libc::ENOSPC {
            want = n;
            continue;
        }
        if rc < 0 {
            return Err(BpfError::Io {
                what: format!("querying {} on ifindex {ifindex}", direction.as_str()),
                source: std::io::Error::from_raw_os_error(-rc),
            });
        }
        ids.truncate((n as usize).min(ids.len()));
        return Ok(ids);
    }
    Err(BpfError::Invalid(format!(
        "the programs at {} on ifindex {ifindex} kept changing while read",
        direction.as_str()
    )))
}
