#!/usr/bin/env bash
# The flake hunt (issue 28, docs/RELIABILITY.md): runs tests one at a time,
# each RUNS times in a row (default 20), every run bounded (10 minutes), and
# tallies passes per test. A test that fails once in 20 is a flake: it
# would fail the README's test command now and then.
#
#   bash scripts/flakehunt.sh [--resume] [RUNS] [FILTER...]
#
# FILTER: test binaries as `crate:binary` (peregrine-lab:lab,
# peregrine-stack:veth), or `crate:binary:test` for one test; none: every
# test of the workspace (hours: the whole suite takes ~30 minutes once).
#
# Every run is appended to target/flakehunt-runs.tsv (commit, binary, test,
# run, passed 0/1, seconds, date). With --resume a test runs only the runs
# that file lacks for it (a hunt of the whole suite spans several sittings;
# a killed hunt loses at most the run it was in). Without --resume the
# file starts afresh.
#
# Each run holds the machine's build lock (/tmp/peregrine-build.lock), so a
# hunt may go on beside builds and other locked work without sharing the
# CPUs with them; while /tmp/peregrine-hunt.pause exists it waits before
# the next run (touch it before a CI run or a benchmark), and it stops
# before the next run when /tmp/peregrine-hunt.stop exists.
#
# Writes target/flakehunt.tsv (binary, test, passed, runs, seconds) for the
# tests of this hunt and prints it; the first lines of each failure go to
# target/flakehunt/. Exit status 1 when any test failed any run.
set -euo pipefail
cd "$(dirname "$0")/.."
RESUME=0
if [ "${1:-}" = "--resume" ]; then
    RESUME=1
    shift
fi
RUNS=${1:-20}
shift || true
LOCK=/tmp/peregrine-build.lock
PAUSE=/tmp/peregrine-hunt.pause
STOP=/tmp/peregrine-hunt.stop
out=target/flakehunt
runs_file=target/flakehunt-runs.tsv
mkdir -p "$out"
rm -f "$out"/*.log "$STOP"
if [ "$RESUME" -eq 0 ] || [ ! -f "$runs_file" ]; then
    printf 'commit\tbinary\ttest\trun\tpassed\tseconds\tdate\n' > "$runs_file"
fi
# The code under test: the commit, and a hash of any uncommitted change to
# tracked files (examples, Cargo.lock and docs included), so that runs of
# one dirty tree never count for another.
commit=$(git rev-parse --short HEAD)
if ! git diff --quiet HEAD; then
    commit="$commit+$(git diff HEAD | sha1sum | cut -c1-8)"
fi

# The test binaries (built once, under the machine's build lock).
flock "$LOCK" cargo test --release --locked --workspace --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, os, sys
root = os.getcwd() + "/crates/"
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        src = m["target"]["src_path"]
        if src.startswith(root):
            print(src[len(root):].split("/")[0], m["target"]["name"], m["executable"], sep="\t")
' | sort -u > "$out/binaries.tsv"

wanted() { # crate binary test
    [ $# -eq 3 ] || return 1
    if [ "${#FILTERS[@]}" -eq 0 ]; then return 0; fi
    for f in "${FILTERS[@]}"; do
        IFS=: read -r fc fb ft <<< "$f"
        if [ "peregrine-$1" = "$fc" ] || [ "$1" = "$fc" ]; then
            if [ "$2" = "$fb" ] && { [ -z "$ft" ] || [ "$3" = "$ft" ]; }; then return 0; fi
        fi
    done
    return 1
}
FILTERS=("$@")

# Runs of this commit recorded for binary $1, test $2: "runs passed
# seconds" (runs of another commit tested other code: they do not count).
recorded() {
    awk -F'\t' -v c="$commit" -v b="$1" -v t="$2" '$1 == c && $2 == b && $3 == t { n++; p += $5; s += $6 } END { print n + 0, p + 0, s + 0 }' "$runs_file"
}

failed=0
printf 'binary\ttest\tpassed\truns\tseconds\n' > target/flakehunt.tsv
while IFS=$'\t' read -r crate bin exe; do
    # A binary's tests run from its crate's directory, as cargo runs them.
    for t in $(cd "crates/$crate" && "$exe" --list --format terse 2>/dev/null | sed -n 's/: test$//p'); do
        wanted "$crate" "$bin" "$t" || continue
        read -r have _ _ <<< "$(recorded "$crate:$bin" "$t")"
        for i in $(seq $((have + 1)) "$RUNS"); do
            while [ -e "$PAUSE" ] && [ ! -e "$STOP" ]; do sleep 10; done
            if [ -e "$STOP" ]; then
                echo "stopped ($STOP); resume with --resume" >&2
                exit "$failed"
            fi
            log="$out/$crate-$bin-$t-$i.log"
            start=$(date +%s)
            if (cd "crates/$crate" && CI=${CI:-true} flock "$LOCK" timeout -s KILL 600 "$exe" --exact "$t" --test-threads=1) > "$log" 2>&1; then
                pass=1
                rm -f "$log"
            else
                pass=0
                failed=1
                echo "  $crate:$bin:$t run $i failed: $(grep -m1 -A3 'panicked at' "$log" | tr '\n' ' ' | cut -c1-300)" >&2
            fi
            printf '%s\t%s:%s\t%s\t%d\t%d\t%d\t%s\n' "$commit" "$crate" "$bin" "$t" "$i" "$pass" \
                $(( $(date +%s) - start )) "$(date -u +%FT%TZ)" >> "$runs_file"
        done
        read -r n p s <<< "$(recorded "$crate:$bin" "$t")"
        [ "$p" -eq "$n" ] || failed=1
        printf '%s:%s\t%s\t%d\t%d\t%d\n' "$crate" "$bin" "$t" "$p" "$n" "$s" | tee -a target/flakehunt.tsv
    done
done < "$out/binaries.tsv"
echo "written: target/flakehunt.tsv (every run: $runs_file)"
exit "$failed"
