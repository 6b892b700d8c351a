//! The command line's units: the parsers are `peregrine-units` (shared with
//! config files).
pub use peregrine_units::{fraction, micros, ByteSize, DurationArg, RateSetting as RateArg};
