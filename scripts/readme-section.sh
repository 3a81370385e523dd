#!/usr/bin/env bash
# Replaces the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in README.md with
# the contents of FILE (generated tables are never typed by hand).
# Usage: scripts/readme-section.sh NAME FILE
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 NAME FILE" >&2; exit 2; }
python3 - "$1" "$2" <<'PY'
import sys
name, path = sys.argv[1], sys.argv[2]
body = open(path).read().strip() + "\n"
text = open("README.md").read()
begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
if begin not in text or end not in text:
    sys.exit(f"README.md has no {name} markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open("README.md", "w").write(head + begin + body + end + tail)
print(f"README.md: {name} section refreshed")
PY
