//! The process's resource limits.
use nix::sys::resource::{getrlimit, setrlimit, Resource};

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
