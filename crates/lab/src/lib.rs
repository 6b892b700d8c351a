//! The packet lab: topologies in network namespaces, traffic generators,
//! receiver-side sinks, measurement (rates, loss, CPU, latency), RFC 2544
//! search, results and plots.

pub mod command;
pub mod compare;
pub mod error;
pub mod lab;
pub mod topology;

pub use command::LabCmd;
pub use error::{LabError, Result};
pub use lab::{Lab, Lifetime};
pub use topology::{Endpoint, Topology};
pub mod faasload;
pub mod iopath;
pub mod load;
pub mod measure;
pub mod netmodes;
pub mod openloop;
pub mod pacing;
pub mod plot;
pub mod results;
pub mod sinks;
pub mod traffic;
pub mod trial;
