#!/usr/bin/env bash
# Every test: unit, BPF_PROG_RUN fixtures, lab and end-to-end tests (root).
# One test thread: lab tests measure rates and must not share the CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo test --release --locked --workspace -- --test-threads=1
