target/release/peregrine bench cni --rounds 3 --out docs/results   # 2026-11-26 19:20-19:23 UTC
