#!/usr/bin/env bash
# The flake hunt (issue 28, docs/RELIABILITY.md): runs tests one at a time,
# each RUNS times in a row (default 20), every run bounded (10 minutes), and
# tallies passes per test. A test that fails once in 20 is a flake: it
# would fail the README's test command now and then.
#
#   bash scripts/flakehunt.sh [RUNS] [FILTER...]
#
# FILTER: test binaries as `crate:binary` (peregrine-lab:lab,
# peregrine-stack:veth), or `crate:binary:test` for one test; none: every
# test of the workspace (hours: the whole suite takes ~30 minutes once).
# Writes target/flakehunt.tsv (binary, test, passed, runs, seconds) and
# prints it; the first lines of each failure go to target/flakehunt/.
# Exit status 1 when any test failed any run.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-20}
shift || true
LOCK=/tmp/peregrine-build.lock
out=target/flakehunt
mkdir -p "$out"
rm -f "$out"/*.log

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

failed=0
printf 'binary\ttest\tpassed\truns\tseconds\n' > target/flakehunt.tsv
while IFS=$'\t' read -r crate bin exe; do
    # A binary's tests run from its crate's directory, as cargo runs them.
    for t in $(cd "crates/$crate" && "$exe" --list --format terse 2>/dev/null | sed -n 's/: test$//p'); do
        wanted "$crate" "$bin" "$t" || continue
        pass=0
        start=$(date +%s)
        for i in $(seq 1 "$RUNS"); do
            log="$out/$crate-$bin-$t-$i.log"
            if (cd "crates/$crate" && CI=${CI:-true} timeout -s KILL 600 "$exe" --exact "$t" --test-threads=1) > "$log" 2>&1; then
                pass=$((pass + 1))
                rm -f "$log"
            else
                failed=1
                echo "  $crate:$bin:$t run $i failed: $(grep -m1 -A3 'panicked at' "$log" | tr '\n' ' ' | cut -c1-300)" >&2
            fi
        done
        secs=$(( $(date +%s) - start ))
        printf '%s:%s\t%s\t%d\t%d\t%d\n' "$crate" "$bin" "$t" "$pass" "$RUNS" "$secs" | tee -a target/flakehunt.tsv
    done
done < "$out/binaries.tsv"
echo "written: target/flakehunt.tsv"
exit "$failed"
