pub type Result<T, E = QosError> = std::result::Result<T, E>;

/// Errors of QoS. Each message is one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum QosError {
    /// A rules file or a rule's fields cannot work: which part, why.
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    #[error(transparent)]
    Bpf(#[from] peregrine_bpf::BpfError),
    #[error(transparent)]
    Xsk(#[from] peregrine_xsk::XskError),
    #[error("{0}")]
    Other(String),
}
