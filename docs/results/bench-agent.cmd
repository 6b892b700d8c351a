target/release/peregrine bench agent --out docs/results   # 2026-11-28 02:12-02:13 UTC
