//! Errors of AF_XDP set-up and use.

#[derive(Debug, thiserror::Error)]
pub enum XskError {
    // The OS error is in the message and not a `source` too: printed as a
    // chain of causes it would appear twice.
    #[error("AF_XDP on {iface} queue {queue}: {what}: {error}")]
    Sys {
        iface: String,
        queue: u32,
        what: &'static str,
        error: std::io::Error,
    },
    #[error("unknown interface {0:?}")]
    UnknownInterface(String),
    #[error("AF_XDP configuration: {0}")]
    Config(String),
    /// A resource limit refused it (the message names the limit).
    #[error("AF_XDP on {iface} queue {queue}: {what}")]
    Limit {
        iface: String,
        queue: u32,
        what: String,
    },
}

pub type Result<T, E = XskError> = std::result::Result<T, E>;

/// Senders behind `std::io` traits (the lab's paths) report AF_XDP failures
/// as I/O errors with the same one-line message.
impl From<XskError> for std::io::Error {
    fn from(e: XskError) -> Self {
        let kind = match &e {
            XskError::Sys { error, .. } => error.kind(),
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, e.to_string())
    }
}

/// Maps a failed system call on `iface` queue `queue` to an `XskError`.
/// Out of file descriptors (EMFILE), it names the process's limit instead
/// of what the call was for.
pub(crate) fn sys_err(
    iface: &str,
    queue: u32,
    what: &'static str,
) -> impl Fn(std::io::Error) -> XskError {
    let iface = iface.to_string();
    move |error| {
        if error.raw_os_error() == Some(libc::EMFILE) {
            let soft = match peregrine_host::limits::open_files() {
                Ok(Some(soft)) => soft.to_string(),
                Ok(None) => "unlimited".to_string(),
                Err(_) => "?".to_string(),
            };
            return XskError::Limit {
                iface: iface.clone(),
                queue,
                what: format!(
                    "{what}: too many open files: this process may hold {soft} (RLIMIT_NOFILE); raise it (ulimit -n 4096)"
                ),
            };
        }
        XskError::Sys {
            iface: iface.clone(),
            queue,
            what,
            error,
        }
    }
}

/// AF_XDP errors reach the products' control error (QoS's scheduler) as
/// they are.
impl From<XskError> for peregrine_host::ControlError {
    fn from(e: XskError) -> Self {
        peregrine_host::ControlError::Lower(Box::new(e))
    }
}
