//! The BPF filesystem and peregrine's pin directory.
//!
//! Pins live in the bpffs of the *host*: the initial mount namespace, not
//! the caller's. `ip netns exec` (and some container runtimes) run each
//! command in a mount namespace of its own with a fresh /sys; a bpffs
//! mounted and pinned there dies with the command, and with it the router.
//!
//! When the caller's mount namespace is not the initial one, a short-lived
//! thread that stops sharing its filesystem context with the process
//! (unshare CLONE_FS, which setns into a mount namespace requires of a
//! multi-threaded process) joins the initial mount namespace, mounts bpffs
//! on /sys/fs/bpf there if it is missing, and opens that directory. The
//! process keeps the descriptor and reaches the host's bpffs through
//! `/proc/self/fd/N/...` from any thread: no thread of the process stays
//! in another namespace, and nothing needs the ptrace access to pid 1 that
//! `/proc/1/root` would (sandboxes deny it even to root).
//!
//! The initial mount namespace is pid 1's when this process may read it,
//! else kthreadd's (pid 2): kernel threads never change namespace.
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{BpfError, Result};

pub const BPFFS: &str = "/sys/fs/bpf";
/// The pin root as the host sees it (see `pin_root` for this process's path).
pub const PIN_ROOT: &str = "/sys/fs/bpf/peregrine";
const BPF_FS_MAGIC: i64 = 0xcafe4a11;

/// How this process reaches the host's /sys/fs/bpf.
enum Host {
    /// Same mount namespace: the plain path.
    Here,
    /// Another one: a directory descriptor opened inside it (kept open for
    /// the life of the process).
    Fd(OwnedFd),
    /// It could not be reached: the error, given to whoever needs a pin.
    Unreachable(String),
}

fn mnt_ns_of(pid: &str) -> Option<(u64, u64)> {
    std::fs::metadata(format!("/proc/{pid}/ns/mnt"))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The pid whose mount namespace is the initial one, if this process can
/// see one (pid 1, or kthreadd when pid 1 is not readable).
fn initial_pid() -> Option<&'static str> {
    if mnt_ns_of("1").is_some() {
        return Some("1");
    }
    let comm = std::fs::read_to_string("/proc/2/comm").unwrap_or_default();
    (comm.trim() == "kthreadd" && mnt_ns_of("2").is_some()).then_some("2")
}

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        let Some(pid) = initial_pid() else {
            return Host::Here;
        };
        if mnt_ns_of("self") == mnt_ns_of(pid) {
            return Host::Here;
        }
        match open_in_initial(pid) {
            Ok(fd) => Host::Fd(fd),
            Err(e) => Host::Unreachable(e.to_string()),
        }
    })
}

/// On a thread of its own, joins pid `pid`'s mount namespace, mounts bpffs
/// there if needed and opens its /sys/fs/bpf.
fn open_in_initial(pid: &str) -> Result<OwnedFd> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<OwnedFd> {
            let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
                .map_err(BpfError::io("opening the initial mount namespace"))?;
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                .map_err(|e| BpfError::MissingFeature(format!("unshare(CLONE_FS): {e}")))?;
            nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| {
                BpfError::MissingFeature(format!(
                    "entering the initial mount namespace (for the host's bpffs): {e}"
                ))
            })?;
            mount_bpffs()?;
            let dir = std::fs::File::open(BPFFS)
                .map_err(BpfError::io("opening the host's /sys/fs/bpf"))?;
            Ok(OwnedFd::from(dir))
        })
        .join()
        .unwrap_or_else(|_| Err(BpfError::Invalid("the bpffs thread panicked".into())))
    })
}

/// Where this process reaches the host's /sys/fs/bpf.
pub fn bpffs() -> PathBuf {
    match host() {
        Host::Fd(fd) => PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())),
        Host::Here | Host::Unreachable(_) => PathBuf::from(BPFFS),
    }
}

/// Where this process reaches the host's `/sys/fs/bpf/peregrine`.
pub fn pin_root() -> PathBuf {
    bpffs().join("peregrine")
}

/// Mounts bpffs on the host's /sys/fs/bpf when it is not there (it is not
/// mounted at boot on the project machines) and creates
/// `/sys/fs/bpf/peregrine/<sub>` in it.
pub fn pin_dir(sub: &str) -> Result<PathBuf> {
    ensure_mounted()?;
    let dir = pin_root().join(sub);
    std::fs::create_dir_all(&dir).map_err(BpfError::io(format!("creating {}", dir.display())))?;
    Ok(dir)
}

pub fn ensure_mounted() -> Result<()> {
    match host() {
        Host::Here => mount_bpffs(),
        // Mounted (if it was not) when the descriptor was opened.
        Host::Fd(_) => Ok(()),
        Host::Unreachable(e) => Err(BpfError::MissingFeature(format!(
            "cannot reach the host's bpffs: {e}"
        ))),
    }
}

/// Mounts bpffs on /sys/fs/bpf of the calling thread's mount namespace.
fn mount_bpffs() -> Result<()> {
    if is_bpffs(Path::new(BPFFS)) {
        return Ok(());
    }
    std::fs::create_dir_all(BPFFS).map_err(BpfError::io("creating /sys/fs/bpf"))?;
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| BpfError::MissingFeature(format!("cannot mount bpffs on {BPFFS}: {e}")))
}

fn is_bpffs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p)
        .map(|s| s.filesystem_type().0 == BPF_FS_MAGIC)
        .unwrap_or(false)
}

/// Whether the host's bpffs is mounted (nothing can be pinned otherwise).
pub fn mounted() -> bool {
    is_bpffs(&bpffs())
}

/// Removes a pin directory and everything pinned below it. Unlinking a pin
/// drops the kernel's reference; objects die when no one else holds them.
pub fn remove_pins(sub: &str) -> Result<()> {
    if !mounted() {
        return Ok(());
    }
    remove_pin_dir(&pin_root().join(sub))
}

/// `remove_pins` for a directory given whole (below the pin root), and the
/// directories above it that are left empty.
pub fn remove_pin_dir(dir: &Path) -> Result<()> {
    let root = pin_root();
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(BpfError::io(format!("removing {}", display(dir)))(e)),
    }
    let mut p = dir.parent();
    while let Some(d) = p {
        if !d.starts_with(&root) || std::fs::remove_dir(d).is_err() {
            break;
        }
        p = d.parent();
    }
    Ok(())
}

/// `p` (a path under `bpffs()`) as the host names it, for messages: the
/// `/proc/self/fd/N` this process goes through means nothing to a user.
pub fn display(p: &Path) -> String {
    match p.strip_prefix(bpffs()) {
        Ok(rest) => Path::new(BPFFS).join(rest).display().to_string(),
        Err(_) => p.display().to_string(),
    }
}
