#!/usr/bin/env bash
# Every test: unit, BPF_PROG_RUN fixtures, lab and end-to-end tests (root),
# after the workspace checks (format, module cycles, clippy).
# One test thread: lab tests measure rates and must not share the CPUs.
# --no-fail-fast: one failing test binary must not hide the ones after it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
python3 scripts/modcycles.py
cargo clippy --release --locked --workspace --all-targets -- -D warnings
cargo test --release --locked --workspace --no-fail-fast -- --test-threads=1
