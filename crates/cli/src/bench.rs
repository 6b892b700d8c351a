//! The benchmarks' commands and arguments are peregrine-bench's (`BenchCmd`
//! and its configs); `io send` shares `gen`'s pacing flags.
pub use peregrine_bench::gen::Pace as PaceArgs;
