//! The data plane's errors: the products' one control error type (shared
//! with QoS), so a caller branches on `Config`, `Request`, ... the same way.
pub use peregrine_host::ControlError as DataplaneError;

pub type Result<T, E = DataplaneError> = std::result::Result<T, E>;
