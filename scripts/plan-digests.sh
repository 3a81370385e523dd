#!/usr/bin/env bash
# Plans every shipped graph (the zoo, graphs/real, the Checkmate inputs) with each strategy and
# prints one line per plan: its SHA-256, the graph and the strategy. A refactoring that must not
# change plans compares two runs: `diff before.txt after.txt` prints nothing when every plan file
# is byte-identical.
# Usage: scripts/plan-digests.sh [SGC_BIN] > digests.txt   (default: target/release/sgc)
set -euo pipefail
cd "$(dirname "$0")/.."
sgc=${1:-target/release/sgc}
[ -x "$sgc" ] || { echo "no sgc binary at $sgc: cargo build --release" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for graph in graphs/*.json graphs/real/*.json.gz benches/data/checkmate/*.json; do
    for strategy in sublinear chen-sqrt partition dtr; do
        plan="$out/plan.json"
        if "$sgc" plan "$graph" --strategy "$strategy" -q --workers 2 -o "$plan" >/dev/null 2>"$out/err"; then
            echo "$(sha256sum <"$plan" | cut -c1-16) $graph $strategy"
        else
            echo "error: $(head -c 120 "$out/err" | tr '\n' ' ') $graph $strategy"
        fi
    done
done
