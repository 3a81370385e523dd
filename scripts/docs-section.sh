#!/usr/bin/env bash
# Replaces the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in FILE (a page of
# docs/ or README.md) with a line naming COMMAND and the commit it ran at, then the contents
# of SOURCE: generated tables are never typed by hand, and each says what made it.
# Usage: scripts/docs-section.sh FILE NAME SOURCE COMMAND
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 4 ] || { echo "usage: $0 FILE NAME SOURCE COMMAND" >&2; exit 2; }
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- crates src benches python Cargo.lock || commit="$commit plus uncommitted changes"
python3 - "$1" "$2" "$3" "$4" "$commit" <<'PY'
import sys
file, name, source, command, commit = sys.argv[1:]
body = f"Made by `{command}` at commit {commit}.\n\n" + open(source).read().strip() + "\n"
text = open(file).read()
begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"
if begin not in text or end not in text:
    sys.exit(f"{file} has no {name} markers")
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(file, "w").write(head + begin + body + end + tail)
print(f"{file}: {name} section refreshed")
PY
