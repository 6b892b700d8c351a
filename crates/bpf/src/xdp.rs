//! XDP attachment through bpf_link: the program stays attached while the
//! `XdpLink` lives (or while its pin exists) and is detached when both are gone,
//! so a crashed process never leaves a program behind unless it pinned it.
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

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
    fn flags(self) -> u32 {
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
    fn hook(self) -> &'static str {
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

/// Interface index of `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(name).map_err(|_| BpfError::UnknownInterface(name.to_string()))
}

/// ID of the XDP program attached to `ifindex` (any mode), if one is.
pub fn attached_prog_id(ifindex: u32) -> Result<Option<u32>> {
    // Safety: bpf_xdp_query_opts is plain data; zeroed is its documented
    // initial state with `sz` set.
    let mut opts: libbpf_sys::bpf_xdp_query_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of_val(&opts) as _;
    // Safety: `opts` is a valid, sized options struct for the call's duration.
    let rc = unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut opts) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: format!("querying XDP on ifindex {ifindex}"),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    Ok((opts.prog_id != 0).then_some(opts.prog_id))
}

/// An XDP program attached to one interface through a bpf_link.
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
    pub iface: String,
    pub ifindex: u32,
    pub mode: XdpMode,
}

impl XdpLink {
    /// Attaches `prog` to interface `iface` (resolved in the calling thread's
    /// network namespace). Fails if another program is attached there.
    pub fn attach(prog: &impl AsFd, iface: &str, mode: XdpMode) -> Result<XdpLink> {
        let ifindex = ifindex(iface)?;
        // Safety: zeroed is the valid empty options struct; `sz` is set below.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        opts.flags = mode.flags();
        // Safety: the program fd is valid for the call; `opts` outlives it.
        let rc = unsafe {
            libbpf_sys::bpf_link_create(
                prog.as_fd().as_raw_fd(),
                ifindex as i32,
                libbpf_sys::BPF_XDP,
                &opts,
            )
        };
        if rc < 0 {
            let err = std::io::Error::from_raw_os_error(-rc);
            let reason = match -rc {
                libc::EBUSY | libc::EEXIST => "another XDP program is already attached".to_string(),
                libc::EOPNOTSUPP if mode == XdpMode::Native => {
                    "the driver has no native XDP; use generic mode".to_string()
                }
                libc::EINVAL => {
                    format!("{err} (kernel refused the link; is the program type XDP?)")
                }
                _ => err.to_string(),
            };
            return Err(BpfError::Attach {
                iface: iface.to_string(),
                mode: mode.hook(),
                reason,
            });
        }
        // Safety: a non-negative return is a new link fd that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(rc) };
        Ok(XdpLink {
            fd,
            iface: iface.to_string(),
            ifindex,
            mode,
        })
    }

    /// Pins the link so the attachment outlives this process.
    pub fn pin(&self, path: &Path) -> Result<()> {
        let c = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| BpfError::Invalid(format!("pin path {} holds a NUL", path.display())))?;
        // Safety: valid fd and NUL-terminated path for the call's duration.
        let rc = unsafe { libbpf_sys::bpf_obj_pin(self.fd.as_raw_fd(), c.as_ptr()) };
        if rc < 0 {
            return Err(BpfError::Io {
                what: format!("pinning XDP link at {}", path.display()),
                source: std::io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(())
    }
}
