pub type Result<T, E = HostError> = std::result::Result<T, E>;

/// Errors from the host's kernel objects. Each message is one line naming
/// the problem.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{0}")]
    Config(String),
    #[error("namespace: {0}")]
    Netns(String),
    #[error("netlink: {0}")]
    Netlink(String),
    #[error("interrupted")]
    Interrupted,
    #[error("{0}")]
    Other(String),
}
