#!/usr/bin/env bash
# Regenerates the peak-memory table of README.md (between the compare markers) from
# `sgc compare` on the zoo and the Checkmate graphs. Run from anywhere: `just readme-table`.
set -euo pipefail
cd "$(dirname "$0")/.."
table=$(cargo run --release --quiet -- compare graphs/*.json benches/data/checkmate/*.json)
python3 - "$table" <<'PY'
import re, sys
table = sys.argv[1].strip() + "\n"
text = open("README.md").read()
begin, end = "<!-- compare:begin -->\n", "<!-- compare:end -->"
if begin not in text or end not in text:
    sys.exit("README.md has no compare markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open("README.md", "w").write(head + begin + table + end + tail)
PY
echo "README.md table refreshed"
