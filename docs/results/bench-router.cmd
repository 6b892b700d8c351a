./target/release/peregrine bench router --out docs/results
