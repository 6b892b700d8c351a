pub type Result<T, E = DataplaneError> = std::result::Result<T, E>;

/// Errors of the data plane. Each message is one line naming the problem.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// The declaration (file or arguments) cannot work: which part, why.
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Host(#[from] peregrine_host::HostError),
    #[error(transparent)]
    Bpf(#[from] peregrine_bpf::BpfError),
    #[error("{0}")]
    Other(String),
}
