#!/usr/bin/env bash
# Prints the path of a virtualenv holding a requirements file (default
# python/requirements-ci.txt, the pinned newest torch; python/requirements-ci-oldest.txt holds the
# oldest torch pyproject.toml declares), creating it first when needed. It is cached between runs on the same machine under
# ${XDG_CACHE_HOME:-$HOME/.cache}/sgc/venv-<hash of the requirements file>, so a changed pin
# gets a fresh one; a half-built one (interrupted install) is rebuilt. Concurrent runs wait on
# a lock. Progress goes to stderr, the path alone to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
req=${1:-python/requirements-ci.txt}
hash=$(sha256sum "$req" | cut -c1-16)
root="${XDG_CACHE_HOME:-$HOME/.cache}/sgc"
venv="$root/venv-$hash"
mkdir -p "$root"
exec 9>"$venv.lock"
flock 9
if [ ! -f "$venv/.complete" ]; then
  echo "creating $venv from $req (torch from PyPI: a few GB, a few minutes)" >&2
  rm -rf "$venv"
  start=$(date +%s)
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
  "$venv/bin/python" -m pip install --quiet -r "$req" >&2
  cp "$req" "$venv/.complete"
  echo "installed in $(( $(date +%s) - start )) s" >&2
else
  echo "using cached $venv" >&2
fi
echo "$venv"
