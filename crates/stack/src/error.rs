//! The stack's one error: each message one line naming what failed.
use peregrine_bpf::BpfError;
use peregrine_host::HostError;
use peregrine_xsk::XskError;

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    // Transparent: the inner error's message and causes, not repeated.
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error(transparent)]
    Xsk(#[from] XskError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("binding {addr}: {reason}")]
    Bind {
        addr: std::net::SocketAddr,
        reason: String,
    },
    #[error("{0}")]
    Config(String),
}

pub type Result<T, E = StackError> = std::result::Result<T, E>;

impl From<StackError> for std::io::Error {
    fn from(e: StackError) -> std::io::Error {
        std::io::Error::other(e.to_string())
    }
}
