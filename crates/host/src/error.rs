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

/// Errors of the products' control sides (the data plane's router and
/// chains, the QoS policer and scheduler): one type, so callers branch on
/// the same variants whichever product failed. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A declaration (file, fields) cannot work: which part, why.
    #[error("{0}")]
    Config(String),
    /// The request is wrong for this host as it is: an interface not
    /// there, a port given twice, a hook other than the one that runs. A
    /// command line reports it as a usage error.
    #[error("{0}")]
    Request(String),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Bpf(#[from] peregrine_bpf::BpfError),
    /// A layer above `host` (AF_XDP sockets), as it said it.
    #[error(transparent)]
    Lower(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Other(String),
}
