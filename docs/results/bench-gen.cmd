./target/release/peregrine bench gen --duration 5 --out docs/results
