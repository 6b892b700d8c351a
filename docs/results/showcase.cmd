./target/release/peregrine showcase --out docs/results
