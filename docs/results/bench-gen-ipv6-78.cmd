./target/release/peregrine bench gen --duration 3 --ipv6 --size 78 --name bench-gen-ipv6-78 --out docs/results
