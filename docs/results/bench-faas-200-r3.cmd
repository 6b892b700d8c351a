target/release/peregrine bench faas --sizes 200 --configs mmsg:1,afxdp:1,afxdp-wasm:1 --out docs/results --name bench-faas-200-r3
