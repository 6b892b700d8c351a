./target/release/peregrine bench router --scenario tcp --rounds 5 --name bench-router-tcp --out <dir>   # 2026-11-24 06:08-06:15 UTC, tc ports with bpf_redirect_peer into gen and sink
