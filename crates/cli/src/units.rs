//! The command line's units: the parsers are `peregrine-units` (shared with
//! config files); here only what needs the CLI's other crates.
pub use peregrine_units::{fraction, micros, ByteSize, DurationArg, RateSetting as RateArg};

/// Clap value parser for frame sizes (bytes with FCS, or imix).
pub fn frame_sizes(s: &str) -> Result<peregrine_testbed::gen::FrameSizes, String> {
    s.parse()
        .map_err(|e: peregrine_bpf::BpfError| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_documented() {
        use peregrine_testbed::gen::FrameSizes;
        assert_eq!(frame_sizes("1500"), Ok(FrameSizes::Fixed(1500)));
        assert_eq!(frame_sizes("IMIX"), Ok(FrameSizes::Imix));
        assert!(frame_sizes("big").unwrap_err().contains("imix"));
    }
}
