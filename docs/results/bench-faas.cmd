./target/release/peregrine bench faas --duration 3 --out docs/results
