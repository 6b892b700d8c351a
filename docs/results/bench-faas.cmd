./target/release/peregrine bench faas --out docs/results
