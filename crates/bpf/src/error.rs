use std::io;

pub type Result<T, E = BpfError> = std::result::Result<T, E>;

/// Errors of the BPF layer. Each message names what failed and why.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("loading {object} failed: {reason}{}", verifier_tail(.log))]
    Load {
        object: &'static str,
        reason: String,
        log: String,
    },
    #[error("kernel feature missing: {0}")]
    MissingFeature(String),
    #[error("unknown interface {0:?}")]
    UnknownInterface(String),
    #[error("attaching {mode} to {iface} failed: {reason}")]
    Attach {
        iface: String,
        mode: &'static str,
        reason: String,
    },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Invalid(String),
    /// A resource limit of the process or the system refused it (the
    /// message names the limit and how to raise it).
    #[error("{0}")]
    Limit(String),
    #[error("{what}: {source}")]
    Libbpf {
        what: String,
        source: libbpf_rs::Error,
    },
}

/// Whether this process has no file descriptor left (opening "/" fails
/// with EMFILE). For calls that hide why they failed.
pub fn out_of_fds() -> bool {
    std::fs::File::open("/").is_err_and(|e| e.raw_os_error() == Some(libc::EMFILE))
}

fn verifier_tail(log: &str) -> String {
    if log.trim().is_empty() {
        String::new()
    } else {
        format!("; verifier log:\n{}", log.trim_end())
    }
}

impl BpfError {
    pub fn libbpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
        let what = what.into();
        move |source| BpfError::Libbpf { what, source }
    }

    /// `what` ran out of file descriptors (EMFILE): names the process's
    /// limit and how to raise it.
    pub fn too_many_open_files(what: &str) -> BpfError {
        use nix::sys::resource::{getrlimit, Resource};
        let soft = getrlimit(Resource::RLIMIT_NOFILE)
            .map(|(soft, _)| soft.to_string())
            .unwrap_or_else(|_| "?".into());
        BpfError::Limit(format!(
            "{what}: too many open files: this process may hold {soft} (RLIMIT_NOFILE); raise it (ulimit -n 4096)"
        ))
    }

    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> BpfError {
        let what = what.into();
        move |source| BpfError::Io { what, source }
    }
}
