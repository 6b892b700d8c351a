target/release/peregrine bench quic --out docs/results
