./target/release/peregrine bench qos --part scale --rounds 3 --name bench-qos-scale --out docs/results
