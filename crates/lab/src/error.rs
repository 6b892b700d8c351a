pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// Errors of the lab. Each message is one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("topology: {0}")]
    Config(String),
    #[error("namespace: {0}")]
    Netns(String),
    #[error("netlink: {0}")]
    Netlink(String),
    #[error("lab {0:?} already exists; remove it with `peregrine lab down {0}`")]
    Exists(String),
    #[error("no lab named {0:?} (see `peregrine lab list`)")]
    NoSuchLab(String),
    #[error("interrupted")]
    Interrupted,
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    #[error(transparent)]
    Dataplane(#[from] peregrine_dataplane::DataplaneError),
    #[error(transparent)]
    Faas(#[from] peregrine_faas::invoker::InvokerError),
    #[error(transparent)]
    Bpf(#[from] peregrine_bpf::BpfError),
    /// A setting the caller chose that cannot work (which one, and why).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Other(String),
}
