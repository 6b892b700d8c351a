./target/release/peregrine bench faas --sizes 200 --configs socket:1,mmsg:1,afxdp:1,afxdp-wasm:1 --out docs/results --name bench-faas-wasm
