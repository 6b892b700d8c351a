//! The process's resource limits.
use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

/// Raises the soft limit of open files to the hard one, as Go's runtime
/// does at start: every BPF map, program, link and AF_XDP socket is a file
/// descriptor, and shells and init systems often leave the soft limit at
/// 1024 under a far higher hard one. Returns the limit in force.
pub fn raise_open_files() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Some(hard);
    }
    Some(soft)
}

/// The soft limit of `r`, None when unlimited (or unreadable).
fn soft_limit(r: Resource) -> Option<u64> {
    match getrlimit(r) {
        Ok((soft, _)) if soft != RLIM_INFINITY => Some(soft),
        _ => None,
    }
}

/// The process's address-space limit (`ulimit -v`, RLIMIT_AS) in bytes,
/// None when there is none.
pub fn address_space() -> Option<u64> {
    soft_limit(Resource::RLIMIT_AS)
}

/// The soft limit of `r`: Ok(None) when unlimited, an error when it
/// cannot be read.
fn soft_limit_read(r: Resource) -> std::io::Result<Option<u64>> {
    let (soft, _) = getrlimit(r)?;
    Ok((soft != RLIM_INFINITY).then_some(soft))
}

/// The process's locked-memory limit (`ulimit -l`, RLIMIT_MEMLOCK) in
/// bytes: Ok(None) when unlimited, an error when it cannot be read.
pub fn locked_memory() -> std::io::Result<Option<u64>> {
    soft_limit_read(Resource::RLIMIT_MEMLOCK)
}

/// How many files the process may hold open (`ulimit -n`, the soft
/// RLIMIT_NOFILE): Ok(None) when unlimited, an error when it cannot be
/// read.
pub fn open_files() -> std::io::Result<Option<u64>> {
    soft_limit_read(Resource::RLIMIT_NOFILE)
}

/// Why a thread could not be started (`what`: which): EAGAIN is a
/// resource limit. Under an address-space limit (`ulimit -v`) it is that
/// one (the thread's stack did not fit), named with its value; without
/// one, the limit on threads (RLIMIT_NPROC, kernel.threads-max).
pub fn thread_refused(what: &str, e: &std::io::Error) -> String {
    if e.raw_os_error() != Some(libc::EAGAIN) {
        return format!("{what}: {e}");
    }
    match address_space() {
        Some(bytes) => format!(
            "{what}: no room for its stack under the address-space limit ({} KiB, RLIMIT_AS); raise it (ulimit -v)",
            bytes / 1024
        ),
        None => format!(
            "{what}: the limit on threads is reached (RLIMIT_NPROC {}, or kernel.threads-max); raise it (ulimit -u)",
            soft_limit(Resource::RLIMIT_NPROC).map_or("unlimited".to_string(), |n| n.to_string())
        ),
    }
}
