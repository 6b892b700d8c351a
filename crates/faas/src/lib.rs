//! The serverless function invoker: functions keyed by UDP port, answered
//! from AF_XDP sockets (the request frame becomes its reply in place).

pub mod addrs;
pub mod baseline;
pub mod control;
pub mod functions;
pub mod invoker;
pub mod live;
pub mod metrics;
pub mod serve;
pub mod wasm;

pub use functions::{Function, Registry};
pub use serve::{serve, Backend, ServeConfig, ServeError, ServeReport, ServeStats, Server};
