#!/usr/bin/env bash
# CI entry for the PyTorch exporter: runs the pytest suite when torch is importable and
# says so plainly when it is not (a missing torch is a skip, never a failure).
set -uo pipefail
cd "$(dirname "$0")"
if ! python3 -c "import torch" >/dev/null 2>&1; then
  echo "SKIP: torch is not installed; the PyTorch exporter tests did not run (pip install torch to run them)"
  exit 0
fi
if ! python3 -c "import pytest" >/dev/null 2>&1; then
  echo "error: torch is installed but pytest is not (pip install pytest)" >&2
  exit 1
fi
python3 -m pytest -ra tests "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests in python/tests" >&2
  exit 1
fi
exit "$rc"
