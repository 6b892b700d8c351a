target/release/peregrine bench cni --rounds 3 --out docs/results
