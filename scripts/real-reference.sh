#!/usr/bin/env bash
# Refreshes benches/real_reference.json: MegEngine's sublinear search, re-implemented in
# ../shared/tools/megengine_ref.py (pure Python), on every graph of the real corpus, with
# 0 and 20 genetic generations. The reference reads plain JSON, so the gzipped graphs are
# unpacked into a temporary folder first. Slow: minutes per large graph.
# Usage: scripts/real-reference.sh [GRAPH.json.gz ...]   (default: graphs/real/*.json.gz)
set -euo pipefail
cd "$(dirname "$0")/.."
ref=../shared/tools/megengine_ref.py
[ -f "$ref" ] || { echo "error: $ref is missing (../shared must be beside the repository)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(graphs/real/*.json.gz)
plain=()
for f in "${files[@]}"; do
  out="$tmp/$(basename "${f%.gz}")"
  gzip -dc "$f" > "$out"
  plain+=("$out")
done
python3 "$ref" --ga 0,20 --cap "${REF_CAP:-900}" --out "$tmp/results.json" "${plain[@]}"
python3 - "$tmp/results.json" benches/real_reference.json "${files[@]}" <<'PY'
import json, os, sys
results, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
by_base = {os.path.basename(f)[: -len(".gz")]: f for f in files}
records = json.load(open(results))
for r in records:
    r["source"] = by_base.get(os.path.basename(r["source"]), r["source"])
old = json.load(open(out)) if os.path.exists(out) else []
fresh = {(r["graph"], r["genetic_nr_iter"]) for r in records}
merged = [r for r in old if (r["graph"], r["genetic_nr_iter"]) not in fresh] + records
merged.sort(key=lambda r: (r["graph"], r["genetic_nr_iter"]))
json.dump(merged, open(out, "w"), indent=1)
print(f"wrote {len(merged)} records to {out}")
PY
