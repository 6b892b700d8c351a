./target/release/peregrine bench router --rounds 2 --trial 1s --xdp-forward /work/peers/xdp-tools/xdp-forward/xdp-forward --name bench-router-hooks --out docs/results
