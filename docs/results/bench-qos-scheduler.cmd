./target/release/peregrine bench qos --part scheduler --rounds 3 --name bench-qos-scheduler --out docs/results
