target/release/peregrine bench agent --out docs/results
