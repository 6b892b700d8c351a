target/release/peregrine bench cni --rounds 3 --tc-attach cls --name bench-cni-cls --out docs/results   # 2026-11-28 02:13-02:17 UTC
