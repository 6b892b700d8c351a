//! QoS's errors: the products' one control error type (shared with the
//! data plane); AF_XDP errors arrive as `Lower`.
pub use peregrine_host::ControlError as QosError;

pub type Result<T, E = QosError> = std::result::Result<T, E>;
