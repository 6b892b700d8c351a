target/release/peregrine bench quic --size 2GiB --ablations none --repeats 1 --no-perf --out docs/results --name bench-quic-2gib
