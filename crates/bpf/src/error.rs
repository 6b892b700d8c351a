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
    #[error("{what}: {source}")]
    Libbpf {
        what: String,
        source: libbpf_rs::Error,
    },
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

    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> BpfError {
        let what = what.into();
        move |source| BpfError::Io { what, source }
    }
}
