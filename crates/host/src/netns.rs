//! Network namespaces: created and removed the way `ip netns` does (a bind
//! mount under /run/netns), entered by the calling thread with setns and left
//! again when the guard drops.
#![allow(unsafe_code)] // this module holds unsafe code; each block says why it is sound
use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{setns, unshare, CloneFlags};

use crate::error::{HostError, Result};

pub const NETNS_RUN_DIR: &str = "/run/netns";

/// A /run/netns name's path; an absolute path (a CNI runtime's
/// `/var/run/netns/cni-...`, `/proc/PID/ns/net`) is taken as it is.
pub fn path(name: &str) -> PathBuf {
    Path::new(NETNS_RUN_DIR).join(name)
}

pub fn exists(name: &str) -> bool {
    path(name).exists()
}

/// Names of all namespaces under /run/netns.
pub fn list() -> Vec<String> {
    crate::fs::list_dir(Path::new(NETNS_RUN_DIR))
}

pub fn open(name: &str) -> Result<File> {
    File::open(path(name)).map_err(|e| HostError::Netns(format!("opening namespace {name}: {e}")))
}

/// Creates a namespace named `name` (fails if it exists).
pub fn create(name: &str) -> Result<()> {
    std::fs::create_dir_all(NETNS_RUN_DIR)
        .map_err(|e| HostError::Netns(format!("creating {NETNS_RUN_DIR}: {e}")))?;
    let target = path(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&target)
        .map_err(|e| HostError::Netns(format!("creating namespace {name}: {e}")))?;
    // unshare moves the calling thread for good, so do it on a thread of its own.
    let t = target.clone();
    let res = std::thread::spawn(move || -> std::result::Result<(), String> {
        unshare(CloneFlags::CLONE_NEWNET).map_err(|e| format!("unshare(CLONE_NEWNET): {e}"))?;
        mount(
            Some("/proc/thread-self/ns/net"),
            &t,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| format!("bind-mounting the namespace: {e}"))
    })
    .join()
    .unwrap_or_else(|_| Err("namespace thread panicked".into()));
    if let Err(e) = res {
        let _ = std::fs::remove_file(&target);
        return Err(HostError::Netns(format!("creating namespace {name}: {e}")));
    }
    Ok(())
}

/// Removes namespace `name`; its interfaces go with it once no process is in it.
pub fn delete(name: &str) -> Result<()> {
    let p = path(name);
    if !p.exists() {
        return Ok(());
    }
    let _ = umount2(&p, MntFlags::MNT_DETACH);
    std::fs::remove_file(&p)
        .map_err(|e| HostError::Netns(format!("removing namespace {name}: {e}")))
}

/// While alive, the calling thread is in another network namespace.
pub struct NetnsGuard {
    original: File,
}

impl NetnsGuard {
    pub fn enter(name: &str) -> Result<NetnsGuard> {
        let original = File::open("/proc/thread-self/ns/net")
            .map_err(|e| HostError::Netns(format!("opening own namespace: {e}")))?;
        let target = open(name)?;
        setns(target.as_fd(), CloneFlags::CLONE_NEWNET)
            .map_err(|e| HostError::Netns(format!("entering namespace {name}: {e}")))?;
        Ok(NetnsGuard { original })
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Err(e) = setns(self.original.as_fd(), CloneFlags::CLONE_NEWNET) {
            // Staying in the wrong namespace would misdirect every later call.
            panic!("cannot return to the original network namespace: {e}");
        }
    }
}

/// Runs `f` with the calling thread in namespace `name`.
pub fn run_in<T>(name: &str, f: impl FnOnce() -> T) -> Result<T> {
    let _g = NetnsGuard::enter(name)?;
    Ok(f())
}

/// Joins namespace `ns` with a mount namespace of the caller's own in which
/// /sys is a fresh sysfs of that namespace, as `ip netns exec` does, so
/// /sys/class/net shows its interfaces. Used by a child about to exec (from
/// `pre_exec`) and by a short-lived thread (`with_sysfs`); either way the
/// private mounts die with the caller.
fn enter_with_sysfs(ns: &File) -> nix::Result<()> {
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)?;
    unshare(CloneFlags::CLONE_NEWNS)?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )?;
    let _ = umount2("/sys", MntFlags::MNT_DETACH);
    mount(
        Some("sysfs"),
        "/sys",
        Some("sysfs"),
        MsFlags::empty(),
        None::<&str>,
    )
}

/// For a child process about to exec (called from `pre_exec`).
pub fn enter_for_exec(ns: &File) -> std::io::Result<()> {
    Ok(enter_with_sysfs(ns)?)
}

/// A command that runs `prog` in namespace `ns` (with that namespace's
/// /sys, as `ip netns exec` does).
pub fn command(ns: &str, prog: &str) -> Result<std::process::Command> {
    use std::os::unix::process::CommandExt;
    let target = open(ns)?;
    let mut c = std::process::Command::new(prog);
    // Safety: the closure runs in the forked child before exec and only
    // makes syscalls (setns, unshare, mount); it allocates nothing.
    unsafe {
        c.pre_exec(move || enter_for_exec(&target));
    }
    Ok(c)
}

/// Writes a sysctl in the calling thread's namespace
/// (`net.ipv4.ip_forward` -> /proc/sys/net/ipv4/ip_forward).
pub fn write_sysctl(key: &str, value: &str) -> Result<()> {
    if key.contains("..") || key.starts_with('/') {
        return Err(HostError::Config(format!("invalid sysctl name {key:?}")));
    }
    let p = Path::new("/proc/sys").join(key.replace('.', "/"));
    std::fs::write(&p, value)
        .map_err(|e| HostError::Netns(format!("setting sysctl {key}={value}: {e}")))
}

/// Runs `f` on a short-lived thread that is in namespace `ns` and sees that
/// namespace's /sys (a private mount of sysfs made inside it), for the
/// settings netlink does not carry, like threaded NAPI.
pub fn with_sysfs<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    with_sysfs_of(open(ns)?, ns, f)
}

/// `with_sysfs` for the calling thread's own namespace, which may have no
/// name (entered by setns, or by `ip netns exec`).
pub fn with_sysfs_here<T: Send>(f: impl FnOnce() -> T + Send) -> Result<T> {
    let here = File::open("/proc/thread-self/ns/net")
        .map_err(|e| HostError::Netns(format!("opening own namespace: {e}")))?;
    with_sysfs_of(here, "this namespace", f)
}

fn with_sysfs_of<T: Send>(target: File, ns: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .spawn_scoped(s, || -> Result<T> {
                enter_with_sysfs(&target).map_err(|e| {
                    HostError::Netns(format!("entering {ns} with its own /sys: {e}"))
                })?;
                Ok(f())
            })
            .map_err(|e| {
                HostError::Netns(crate::limits::thread_refused(
                    &format!("entering {ns} with its own /sys: starting a thread"),
                    &e,
                ))
            })?
            .join()
            .unwrap_or_else(|_| Err(HostError::Netns(format!("sysfs thread for {ns} panicked"))))
    })
}

/// `run_in` for an optional namespace: None runs `f` where the thread is.
pub fn run_in_opt<T>(name: Option<&str>, f: impl FnOnce() -> T) -> Result<T> {
    match name {
        Some(n) => run_in(n, f),
        None => Ok(f()),
    }
}

/// Runs `f` with the calling thread in the namespace `ns` refers to (an
/// open /run/netns or /proc/PID/ns/net file), then back.
pub fn run_in_file<T>(ns: &File, f: impl FnOnce() -> T) -> Result<T> {
    let original = File::open("/proc/thread-self/ns/net")
        .map_err(|e| HostError::Netns(format!("opening own namespace: {e}")))?;
    setns(ns.as_fd(), CloneFlags::CLONE_NEWNET)
        .map_err(|e| HostError::Netns(format!("entering a namespace: {e}")))?;
    let _back = NetnsGuard { original };
    Ok(f())
}

/// The cookie of the calling thread's network namespace: the kernel's
/// identity for it, unique while the machine runs (inode numbers of
/// namespaces are reused once one is freed; cookies never are).
pub fn cookie() -> Result<u64> {
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| HostError::Netns(format!("a socket to read the namespace cookie: {e}")))?;
    peregrine_io::sockopt::get::<u64>(
        &sock,
        libc::SOL_SOCKET,
        crate::uapi::SO_NETNS_COOKIE as libc::c_int,
    )
    .map_err(|e| {
        HostError::Netns(format!(
            "reading the namespace cookie (SO_NETNS_COOKIE, Linux 5.14+): {e}"
        ))
    })
}

/// A network namespace found on the host, open.
pub struct Found {
    /// Its name under /run/netns, or "pid N" for one only a process holds.
    pub label: String,
    /// Whether `label` is a /run/netns name.
    pub named: bool,
    pub file: File,
}

/// The network namespaces named under /run/netns (each once, by inode):
/// the first of `find_all`, found without opening every process's.
pub fn find_named() -> Vec<Found> {
    let mut all = find_from(false);
    all.retain(|f| f.named);
    all
}

/// Every network namespace this process can find: the ones named under
/// /run/netns first, then those of processes (each once, by inode).
pub fn find_all() -> Vec<Found> {
    find_from(true)
}

fn find_from(processes: bool) -> Vec<Found> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    let mut add = |label: String, named: bool, path: PathBuf| {
        if let Ok(file) = File::open(&path) {
            if let Ok(m) = file.metadata() {
                if seen.insert((m.dev(), m.ino())) {
                    out.push(Found { label, named, file });
                }
            }
        }
    };
    let mut names = list();
    names.sort();
    for n in names {
        add(n.clone(), true, path(&n));
    }
    if !processes {
        return out;
    }
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort();
    for pid in pids {
        add(
            format!("pid {pid}"),
            false,
            PathBuf::from(format!("/proc/{pid}/ns/net")),
        );
    }
    out
}

/// The label of the namespace with cookie `c` among `found` (cookies read
/// by entering each), if one is.
pub fn label_of_cookie(found: &[(String, u64)], c: u64) -> Option<&str> {
    found
        .iter()
        .find(|(_, fc)| *fc == c)
        .map(|(l, _)| l.as_str())
}

/// The label of the namespace with cookie `c` among `names` (`cookies()`),
/// or "netns cookie C" when none has it.
pub fn cookie_name(names: &[(String, u64)], c: u64) -> String {
    names
        .iter()
        .find(|(_, nc)| *nc == c)
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| format!("netns cookie {c}"))
}

/// Runs `f` in the network namespace whose cookie is `cookie` (the
/// calling thread's, or one of those `find_all` finds); None when none is.
pub fn run_in_cookie<T>(cookie: u64, f: impl FnOnce() -> T) -> Option<T> {
    if self::cookie().ok()? == cookie {
        return Some(f());
    }
    let ns = find_all()
        .into_iter()
        .find(|n| run_in_file(&n.file, self::cookie).is_ok_and(|c| c.ok() == Some(cookie)))?;
    run_in_file(&ns.file, f).ok()
}

/// (label, cookie) of every namespace `find_all` finds; the host's own
/// (pid 1's) is labelled "host".
pub fn cookies() -> Vec<(String, u64)> {
    let init = File::open("/proc/1/ns/net")
        .ok()
        .and_then(|f| run_in_file(&f, cookie).ok()?.ok());
    let mut out: Vec<(String, u64)> = Vec::new();
    if let Some(c) = init {
        out.push(("host".into(), c));
    }
    for f in find_all() {
        if let Ok(Ok(c)) = run_in_file(&f.file, cookie) {
            if !out.iter().any(|(_, o)| *o == c) {
                out.push((f.label, c));
            }
        }
    }
    out
}
