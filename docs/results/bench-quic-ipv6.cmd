target/release/peregrine bench quic --ipv6 --ablations none --repeats 2 --no-perf --out docs/results --name bench-quic-ipv6
