//! Plain filesystem reads the host's objects are listed with (namespaces
//! under /run/netns, pins under bpffs), and the lock files that serialize
//! changes between processes.
use std::fs::File;
use std::path::Path;

/// Names of the entries of directory `dir` (none if it cannot be read).
pub fn list_dir(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// An exclusive advisory lock (flock) on a lock file: held until dropped,
/// or until the process dies (the kernel releases it then; nothing stale
/// is left to clean). Serializes read-modify-write changes that several
/// processes may make at once (two `qos rule add`, a lab going up while
/// another goes down).
pub struct FileLock(#[allow(dead_code)] nix::fcntl::Flock<File>);

impl FileLock {
    /// Takes the lock on `path` (made, with its directory, if missing),
    /// waiting for whoever holds it.
    pub fn exclusive(path: &Path) -> std::io::Result<FileLock> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut f = File::create(path)?;
        // A signal (SIGHUP to reload, our handlers do not restart system
        // calls) interrupts the wait: wait again, unless asked to stop.
        loop {
            match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive) {
                Ok(l) => return Ok(FileLock(l)),
                Err((back, nix::errno::Errno::EINTR)) if !crate::signals::stop_requested() => {
                    f = back
                }
                Err((_, e)) => return Err(std::io::Error::from(e)),
            }
        }
    }
}
