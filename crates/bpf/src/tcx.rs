//! tc programs attached through tcx bpf_links (Linux 6.6+): like `XdpLink`,
//! attached while the `TcxLink` lives and detached when it is dropped, so a
//! crashed process leaves nothing behind. Several tcx programs can share a
//! hook; each link removes only its own.
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use crate::error::{BpfError, Result};
use crate::xdp::ifindex;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcxDirection {
    Ingress,
    Egress,
}

impl TcxDirection {
    fn attach_type(self) -> libbpf_sys::bpf_attach_type {
        match self {
            TcxDirection::Ingress => libbpf_sys::BPF_TCX_INGRESS,
            TcxDirection::Egress => libbpf_sys::BPF_TCX_EGRESS,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            TcxDirection::Ingress => "tcx ingress",
            TcxDirection::Egress => "tcx egress",
        }
    }
}

#[derive(Debug)]
pub struct TcxLink {
    _fd: OwnedFd,
    pub iface: String,
    pub ifindex: u32,
    pub direction: TcxDirection,
}

impl TcxLink {
    /// Attaches the tc program `prog` to `iface` (in the calling thread's
    /// namespace), after any programs already there.
    pub fn attach(prog: &impl AsFd, iface: &str, direction: TcxDirection) -> Result<TcxLink> {
        let ifindex = ifindex(iface)?;
        // Safety: zeroed is the valid empty options struct; `sz` is set below.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        // Safety: the program fd is valid for the call; `opts` outlives it.
        let rc = unsafe {
            libbpf_sys::bpf_link_create(
                prog.as_fd().as_raw_fd(),
                ifindex as i32,
                direction.attach_type(),
                &opts,
            )
        };
        if rc < 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            let reason = match -rc {
                libc::EINVAL => {
                    format!("{err} (is the program of type tc, and the kernel 6.6+ with tcx?)")
                }
                _ => err.to_string(),
            };
            return Err(BpfError::Attach {
                iface: iface.to_string(),
                mode: direction.as_str(),
                reason,
            });
        }
        // Safety: a non-negative return is a new link fd that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(rc) };
        Ok(TcxLink {
            _fd: fd,
            iface: iface.to_string(),
            ifindex,
            direction,
        })
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
