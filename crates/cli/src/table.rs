//! Tables, rates and times for people: `peregrine_units`'s, shared with
//! the libraries' reports.
pub use peregrine_units::{ns, si, Table};
