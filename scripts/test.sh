#!/usr/bin/env bash
# Every test: unit, BPF_PROG_RUN fixtures, lab and end-to-end tests (root),
# after the workspace checks (format, module cycles, clippy); then 30 s of
# each fuzz target.
# One test thread: lab tests measure rates and must not share the CPUs.
# --no-fail-fast: one failing test binary must not hide the ones after it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Kubernetes v1.34 (the full tier's cluster), the CNI reference plugins,
# cnitool and crictl, from the Go module proxy (cached: ~11 minutes cold).
bash scripts/k8s/build.sh
# The pause and peregrine images (built locally: no registry), after
# setup.sh's release build: the peregrine image holds its binaries.
bash scripts/k8s/images.sh
cargo fmt --all -- --check
python3 scripts/modcycles.py
cargo clippy --release --locked --workspace --all-targets -- -D warnings
# The whole log is long and a CI page shows its ends only: after a failure,
# name every failed test and the first lines of its panic, last.
log=target/test-log.txt
mkdir -p target
status=0
cargo test --release --locked --workspace --no-fail-fast -- --test-threads=1 2>&1 | tee "$log" || status=$?
if [ "$status" -ne 0 ]; then
    echo "=== failure summary (full log: $log) ==="
    grep -E '^test .* FAILED$|^error: test failed' "$log" || true
    grep -A6 'panicked at' "$log" | grep -v -E '^ +[0-9]+: |^ +at ' | head -150 || true
    exit "$status"
fi
# Every coverage-guided fuzz target for 30 s from its seed corpus (nightly,
# cargo-fuzz; the long runs are by hand: docs/RELIABILITY.md).
bash scripts/fuzz.sh 30
