#!/usr/bin/env bash
# Runs every coverage-guided fuzz target (fuzz/, cargo-fuzz on libFuzzer,
# nightly toolchain) for SECONDS each (default 30) from its seed corpus;
# fails on the first crash (the input is left in fuzz/artifacts/<target>/).
# Builds under the machine's build lock; the runs themselves take one core
# each, one after the other, at the lowest priority (nice 19). The runs use
# the binaries just built, not `cargo fuzz run`, whose own build would run
# outside the lock (and rebuild whatever changed in the tree since).
# Prints per target: executions, exec/s, and the final coverage line
# (cov: edges, ft: features, corp: corpus size).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_EACH=${1:-30}
TARGETS=(wire_frames stack_rx invoker_reply toml_configs wasm_admission agent_inputs cni_input)
LOCK=/tmp/peregrine-build.lock

# The product builds on stable; fuzzing needs a nightly (the image carries
# one; elsewhere rustup installs it).
if ! cargo +nightly --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    flock "$LOCK" cargo install cargo-fuzz --locked
fi
# No sanitizer: the product is safe Rust but for its syscall and UMEM
# code, which these targets do not reach; debug assertions stay on.
BUILD=(--sanitizer none)
# The instrumented build (wasmtime in four targets) needs a few GB; a full
# disk makes the linker die of SIGBUS, so say it plainly first.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt $((4 * 1024 * 1024)) ]; then
    echo "fuzz: only $((free_kb / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'); the fuzz build needs 4 GiB" >&2
    exit 1
fi
flock "$LOCK" cargo +nightly fuzz build "${BUILD[@]}"
BIN=target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${TARGETS[@]}"; do
    echo "== $t: ${SECONDS_EACH}s"
    # A private copy of the seeds: new inputs found do not grow the
    # committed corpus (cargo fuzz cmin can fold them in by hand).
    rm -rf "${work:?}"/*
    mkdir "$work/corpus"
    cp corpus/"$t"/* "$work/corpus/"
    mkdir -p "artifacts/$t"
    status=0
    nice -n 19 "$BIN/$t" -artifact_prefix="artifacts/$t/" \
        -max_total_time="$SECONDS_EACH" -print_final_stats=1 "$work/corpus" >"$work/log" 2>&1 || status=$?
    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::average_exec_per_sec|Done )' "$work/log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$work/log" >&2
        echo "fuzz target $t failed (exit $status); reproducer in fuzz/artifacts/$t/" >&2
        exit 1
    fi
done
echo "every fuzz target ran ${SECONDS_EACH}s without a crash"
