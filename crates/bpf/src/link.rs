//! Programs attached to a network interface through a bpf_link, at an XDP
//! hook or a tcx hook. The attachment lasts while its `Link` lives or while
//! the link is pinned in bpffs, and ends when both are gone: a crashed
//! process leaves nothing behind unless it pinned the link, and a pinned
//! link survives the process that attached it (`Link::from_pin` takes it
//! back). Both hooks work the same way, so an attachment is one type.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{BpfError, Result};
use crate::prog_names;
use crate::tcx::TcxDirection;
use crate::xdp::XdpMode;

/// Where on an interface a program runs: the one hook type of the router,
/// the policer and every other program (`--hook xdp|tc`, a file's `hook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Xdp(XdpMode),
    Tcx(TcxDirection),
}

impl Hook {
    /// tcx ingress, what `tc` names: where the router and policer run at tc.
    pub const TC: Hook = Hook::Tcx(TcxDirection::Ingress);

    /// "xdp" or "tc": the hook without its mode or direction.
    pub fn kind(self) -> &'static str {
        match self {
            Hook::Xdp(_) => "xdp",
            Hook::Tcx(_) => "tc",
        }
    }

    /// At the XDP hook (any mode).
    pub fn is_xdp(self) -> bool {
        matches!(self, Hook::Xdp(_))
    }

    fn attach_type(self) -> libbpf_sys::bpf_attach_type {
        match self {
            Hook::Xdp(_) => libbpf_sys::BPF_XDP,
            Hook::Tcx(d) => d.attach_type(),
        }
    }

    /// bpf_link_create flags: the XDP mode; at tcx where in the chain
    /// (`Placement::First`: BPF_F_BEFORE with no relative program, the
    /// head; otherwise none, the tail).
    fn flags(self, placement: Placement) -> u32 {
        match (self, placement) {
            (Hook::Xdp(mode), _) => mode.flags(),
            (Hook::Tcx(_), Placement::First) => libbpf_sys::BPF_F_BEFORE,
            (Hook::Tcx(_), Placement::Last) => 0,
        }
    }

    /// "XDP (native)", "tcx ingress", ...
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Xdp(mode) => mode.hook(),
            Hook::Tcx(d) => d.as_str(),
        }
    }

    /// Why the kernel refused to attach here, from its errno.
    fn refusal(self, errno: i32) -> String {
        let err = std::io::Error::from_raw_os_error(errno);
        match (self, errno) {
            (Hook::Xdp(_), libc::EBUSY | libc::EEXIST) => {
                "another XDP program is already attached".to_string()
            }
            (Hook::Xdp(XdpMode::Native), libc::EOPNOTSUPP) => {
                "the driver has no native XDP; use generic mode".to_string()
            }
            (Hook::Xdp(_), libc::EINVAL) => {
                format!("{err} (kernel refused the link; is the program type XDP?)")
            }
            (Hook::Tcx(_), libc::EINVAL) => {
                format!("{err} (is the program of type tc, and the kernel 6.6+ with tcx?)")
            }
            _ => err.to_string(),
        }
    }
}

/// peregrine's XDP programs that take frames away from the stack
/// (redirect, AF_XDP), by program name, and what they are for people. The
/// policer at XDP (its scheduler hands class traffic to AF_XDP) is not
/// among them: one interface has one policer, at one hook.
const XDP_TAKERS: [(&str, &str); 4] = [
    (prog_names::ROUTER_XDP, "the router at XDP"),
    (prog_names::DISPATCH, "an AF_XDP function service"),
    (prog_names::STACK_STEER, "an AF_XDP UDP/QUIC service"),
    (prog_names::NF, "a service chain at XDP"),
];

/// Refuses a link that would make a policer at tc ingress police nothing:
/// an XDP program of peregrine's that takes frames (`XDP_TAKERS`) runs
/// before tcx ingress, so what it redirects or hands to AF_XDP never
/// meets the policer. Both orders are refused, in one line; programs that
/// are not peregrine's are not judged.
fn refuse_bypass(prog: BorrowedFd<'_>, ifindex: u32, iface: &str, hook: Hook) -> Result<()> {
    let name_of = crate::maps::program_name_of;
    let taker = |name: &str| XDP_TAKERS.iter().find(|(n, _)| *n == name).map(|t| t.1);
    let clash = match hook {
        Hook::Xdp(_) => {
            let Some(what) = taker(&crate::maps::program_name(prog)?) else {
                return Ok(());
            };
            // A kernel without tcx (before 6.6) has no policer there.
            crate::tcx::attached_ids(ifindex, TcxDirection::Ingress)
                .unwrap_or_default()
                .into_iter()
                .find(|&id| name_of(id) == prog_names::POLICER_TC)
                .map(|id| {
                    format!(
                        "a policer runs at tc ingress there (program {id}), and {what} would \
                         take frames before it: they would pass unpoliced; police where the \
                         traffic enters before {iface}, or detach that policer first"
                    )
                })
        }
        Hook::Tcx(TcxDirection::Ingress) => {
            if crate::maps::program_name(prog)? != prog_names::POLICER_TC {
                return Ok(());
            }
            crate::xdp::attached_prog_id(ifindex)?.and_then(|id| {
                taker(&name_of(id)).map(|what| {
                    format!(
                        "{what} (program {id}) takes frames there before tc ingress: a \
                         policer there would not see them; police where the traffic enters \
                         before {iface}, or run it without XDP"
                    )
                })
            })
        }
        Hook::Tcx(_) => None,
    };
    match clash {
        None => Ok(()),
        Some(reason) => Err(BpfError::Attach {
            iface: iface.to_string(),
            mode: hook.as_str(),
            reason,
        }),
    }
}

/// An XDP mode names the XDP hook in that mode, so APIs taking
/// `impl Into<Hook>` still take a bare `XdpMode`.
impl From<XdpMode> for Hook {
    fn from(mode: XdpMode) -> Self {
        Hook::Xdp(mode)
    }
}

/// "xdp (native)", "xdp (generic)", "tc" (ingress), "tc egress".
impl fmt::Display for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Hook::Xdp(m) => write!(f, "xdp ({m})"),
            Hook::Tcx(TcxDirection::Ingress) => f.write_str("tc"),
            Hook::Tcx(TcxDirection::Egress) => f.write_str("tc egress"),
        }
    }
}

/// `xdp` (native mode) or `tc` (`tcx`: ingress), as `--hook` and files
/// give it.
impl std::str::FromStr for Hook {
    type Err = BpfError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "xdp" => Ok(Hook::Xdp(XdpMode::Native)),
            "tc" | "tcx" => Ok(Hook::TC),
            _ => Err(BpfError::Invalid(format!(
                "unknown hook {s:?}: expected xdp or tc"
            ))),
        }
    }
}

/// Where a program goes among the others at a tcx hook, which runs several
/// in order (an XDP hook runs one: the placement means nothing there).
///
/// The order at tcx ingress is decided here, once: the policer goes
/// `First`, so it meters what arrives before any program that redirects
/// it (the router's `bpf_redirect_neigh`/`bpf_redirect_peer` end the chain:
/// a policer after it never sees what it forwards), whichever was attached
/// first. Everything else goes `Last`, in the order it is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// The head of the chain (the policer's place).
    First,
    /// After the programs already there.
    #[default]
    Last,
}

/// The name of interface `ifindex` in the calling thread's network
/// namespace ("ifindex N" when there is none).
pub fn iface_name(ifindex: u32) -> String {
    nix::net::if_::if_indextoname(ifindex)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("ifindex {ifindex}"))
}

/// Interface index of `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(name).map_err(|e| match e {
        nix::errno::Errno::ENODEV | nix::errno::Errno::EINVAL => {
            BpfError::UnknownInterface(name.to_string())
        }
        // glibc looks names up through a socket of its own; when it
        // cannot open one it answers ENOENT, not why.
        _ if crate::error::out_of_fds() => {
            BpfError::too_many_open_files(&format!("looking up {name}"))
        }
        e => BpfError::Io {
            what: format!("looking up interface {name}"),
            source: e.into(),
        },
    })
}

/// A program attached to one interface's hook through a bpf_link.
#[derive(Debug)]
pub struct Link {
    fd: OwnedFd,
    pub iface: String,
    pub ifindex: u32,
    pub hook: Hook,
    pin: OnceLock<PathBuf>,
}

impl Link {
    /// Attaches `prog` to `hook` of interface `iface` (resolved in the
    /// calling thread's network namespace). XDP fails if another program is
    /// attached there; tcx runs after the programs already there.
    pub fn attach(prog: &impl AsFd, iface: &str, hook: Hook) -> Result<Link> {
        Link::attach_with(prog, iface, hook, Placement::Last)
    }

    /// `attach` at `placement` among a tcx hook's programs (see
    /// `Placement`; XDP takes one program whatever it says).
    pub fn attach_with(
        prog: &impl AsFd,
        iface: &str,
        hook: Hook,
        placement: Placement,
    ) -> Result<Link> {
        let ifindex = ifindex(iface)?;
        refuse_bypass(prog.as_fd(), ifindex, iface, hook)?;
        // Safety: zeroed is the valid empty options struct; `sz` is set
        // below. Its tcx relative fd and id stay 0: BPF_F_BEFORE without a
        // relative program is the head of the chain.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of_val(&opts) as _;
        opts.flags = hook.flags(placement);
        // Safety: the program fd is valid for the call; `opts` outlives it.
        let rc = unsafe {
            libbpf_sys::bpf_link_create(
                prog.as_fd().as_raw_fd(),
                ifindex as i32,
                hook.attach_type(),
                &opts,
            )
        };
        if rc < 0 {
            return Err(BpfError::Attach {
                iface: iface.to_string(),
                mode: hook.as_str(),
                reason: hook.refusal(-rc),
            });
        }
        Ok(Link {
            // Safety: a non-negative return is a new link fd that we now own.
            fd: unsafe { OwnedFd::from_raw_fd(rc) },
            iface: iface.to_string(),
            ifindex,
            hook,
            pin: OnceLock::new(),
        })
    }

    /// Takes back a link pinned at `path` (by this or an earlier process).
    /// Dropping it leaves the program attached while the pin exists; `unpin`
    /// then drop detaches it. The interface's name and the XDP mode are
    /// looked up in the calling thread's network namespace, which should be
    /// the interface's.
    pub fn from_pin(path: &Path) -> Result<Link> {
        let fd = open_pinned(path)?;
        let info = link_info(fd.as_fd(), path)?;
        // Safety: `type_` says which union member the kernel filled in.
        let (ifindex, hook) = unsafe {
            match info.type_ {
                libbpf_sys::BPF_LINK_TYPE_XDP => {
                    let ifindex = info.__bindgen_anon_1.xdp.ifindex;
                    let mode = crate::xdp::mode_of(ifindex, info.prog_id)?;
                    (ifindex, Hook::Xdp(mode))
                }
                libbpf_sys::BPF_LINK_TYPE_TCX => {
                    let tcx = info.__bindgen_anon_1.tcx;
                    (
                        tcx.ifindex,
                        Hook::Tcx(TcxDirection::from_attach_type(tcx.attach_type)?),
                    )
                }
                other => {
                    return Err(BpfError::Invalid(format!(
                        "{} is a link of type {other}, not an XDP or tcx attachment",
                        path.display()
                    )))
                }
            }
        };
        let iface = iface_name(ifindex);
        Ok(Link {
            fd,
            iface,
            ifindex,
            hook,
            pin: OnceLock::from(path.to_path_buf()),
        })
    }

    /// Pins the link at `path` so the attachment outlives this process. A
    /// link has one pin.
    pub fn pin(&self, path: &Path) -> Result<()> {
        if let Some(at) = self.pin.get() {
            return Err(BpfError::Invalid(format!(
                "{self} is already pinned at {}",
                at.display()
            )));
        }
        pin_fd(self.fd.as_fd(), path).map_err(|e| match e {
            BpfError::Io { source, .. } => BpfError::Io {
                what: format!("pinning the link of {self} at {}", path.display()),
                source,
            },
            e => e,
        })?;
        let _ = self.pin.set(path.to_path_buf());
        Ok(())
    }

    /// Swaps the program this link runs for `prog` in one step (the kernel's
    /// link update): no packet sees the interface without a program, or
    /// half of one configuration and half of another.
    pub fn replace_program(&self, prog: &impl AsFd) -> Result<()> {
        // Safety: both fds are valid for the call; NULL options: no
        // expected old program.
        let rc = unsafe {
            libbpf_sys::bpf_link_update(
                self.fd.as_raw_fd(),
                prog.as_fd().as_raw_fd(),
                std::ptr::null(),
            )
        };
        if rc < 0 {
            return Err(BpfError::Io {
                what: format!("replacing the program of {self}"),
                source: std::io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(())
    }

    /// Where the link is pinned, if it is.
    pub fn pinned_at(&self) -> Option<&Path> {
        self.pin.get().map(PathBuf::as_path)
    }

    /// Removes the link's pin; the returned link detaches when dropped.
    pub fn unpin(mut self) -> Result<Link> {
        if let Some(path) = self.pin.take() {
            std::fs::remove_file(&path)
                .map_err(BpfError::io(format!("removing the pin {}", path.display())))?;
        }
        Ok(self)
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} on {} (ifindex {})",
            self.hook, self.iface, self.ifindex
        )
    }
}

impl AsFd for Link {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What a pinned link is attached to, read without entering its network
/// namespace (the kernel answers for any namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedLink {
    /// The program the link runs.
    pub prog_id: u32,
    /// The link's own id.
    pub link_id: u32,
    /// The interface, in the namespace the link was made in; 0 once the
    /// interface (or its whole namespace) is gone or the link was detached.
    pub ifindex: u32,
    /// True for an XDP link, false for tcx.
    pub xdp: bool,
}

impl PinnedLink {
    /// The link still runs its program on a live interface.
    pub fn live(&self) -> bool {
        self.ifindex != 0
    }

    pub fn hook_kind(&self) -> &'static str {
        if self.xdp {
            "xdp"
        } else {
            "tc"
        }
    }
}

/// Opens the BPF object (link, program, map) pinned at `path`.
pub fn open_pinned(path: &Path) -> Result<OwnedFd> {
    let c = pin_path(path)?;
    // Safety: NUL-terminated path valid for the call.
    let rc = unsafe { libbpf_sys::bpf_obj_get(c.as_ptr()) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: format!("opening the pin {}", crate::bpffs::display(path)),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    // Safety: a non-negative return is a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc) })
}

/// Pins the BPF object `fd` (link, program, map) at `path`.
pub fn pin_fd(fd: BorrowedFd<'_>, path: &Path) -> Result<()> {
    let c = pin_path(path)?;
    // Safety: valid fd and NUL-terminated path for the call's duration.
    let rc = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: format!("pinning at {}", crate::bpffs::display(path)),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(())
}

/// What the link pinned at `path` is attached to.
pub fn pinned_link(path: &Path) -> Result<PinnedLink> {
    let fd = open_pinned(path)?;
    let info = link_info(fd.as_fd(), path)?;
    // Safety: `type_` says which union member the kernel filled in.
    let (ifindex, xdp) = unsafe {
        match info.type_ {
            libbpf_sys::BPF_LINK_TYPE_XDP => (info.__bindgen_anon_1.xdp.ifindex, true),
            libbpf_sys::BPF_LINK_TYPE_TCX => (info.__bindgen_anon_1.tcx.ifindex, false),
            other => {
                return Err(BpfError::Invalid(format!(
                    "{} is a link of type {other}, not an XDP or tcx attachment",
                    path.display()
                )))
            }
        }
    };
    Ok(PinnedLink {
        prog_id: info.prog_id,
        link_id: info.id,
        ifindex,
        xdp,
    })
}

/// Detaches the link pinned at `path` now (BPF_LINK_DETACH: whoever else
/// holds it, the program leaves the interface before this returns) and
/// removes the pin. Unlinking alone would detach only once the kernel frees
/// the link, later and from a work queue.
pub fn detach_pinned(path: &Path) -> Result<()> {
    if let Ok(fd) = open_pinned(path) {
        // Safety: a valid link fd for the call. A link already detached (its
        // interface gone) answers ENOLINK, which is the state wanted.
        let _ = unsafe { libbpf_sys::bpf_link_detach(fd.as_raw_fd()) };
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(BpfError::io(format!("removing the pin {}", path.display()))(e)),
    }
}

fn pin_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| BpfError::Invalid(format!("pin path {} holds a NUL", path.display())))
}

/// The kernel's description of the link `fd` (pinned at `path`).
fn link_info(fd: BorrowedFd<'_>, path: &Path) -> Result<libbpf_sys::bpf_link_info> {
    // Safety: zeroed is the valid empty info struct (no pointers to fill).
    let mut info: libbpf_sys::bpf_link_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of_val(&info) as u32;
    // Safety: `info` and `len` outlive the call; `len` is info's size.
    let rc = unsafe { libbpf_sys::bpf_link_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc < 0 {
        return Err(BpfError::Io {
            what: format!("reading what the link {} is", path.display()),
            source: std::io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(info)
}

/// A loaded XDP program that is attached as it is, with nothing to set up
/// per interface (the router, which registers its ports, is not one).
pub trait XdpProgram {
    /// The program, for attaching and for BPF_PROG_RUN.
    fn prog(&self) -> &libbpf_rs::ProgramMut<'static>;

    /// Attaches the program to `iface` in `mode` (see `Link::attach`).
    fn attach(&self, iface: &str, mode: XdpMode) -> Result<Link> {
        Link::attach(self.prog(), iface, Hook::Xdp(mode))
    }
}

/// Declares the wrapper of a program that is only ever attached as XDP: a
/// struct owning its loaded skeleton, and `XdpProgram` for the skeleton's
/// program `$prog`. The wrappers differ only in config and map accessors.
/// Exported for the lab's programs in peregrine-testbed.
#[macro_export]
macro_rules! xdp_program {
    ($name:ident, $skel:ident, $prog:ident) => {
        pub struct $name {
            skel: $crate::loader::Loaded<$skel<'static>>,
        }

        impl $crate::link::XdpProgram for $name {
            fn prog(&self) -> &libbpf_rs::ProgramMut<'static> {
                &self.skel.progs.$prog
            }
        }
    };
}
pub use crate::xdp_program;
