#!/usr/bin/env bash
# CI entry for the PyTorch exporter and the Python bindings: runs the pytest suite (python/tests)
# with the python3 on PATH.
# Without torch it prints a SKIP line and succeeds, unless SGC_REQUIRE_TORCH=1 (CI), where a
# missing torch, torchvision, transformers or pytest is an error, and so are a missing native
# module `sgc` (pip install ./python) and any skipped test.
# Without SGC_REQUIRE_TORCH, tests
# that need torchvision or transformers are skipped (with the reason) when those are missing.
set -uo pipefail
cd "$(dirname "$0")"
missing=()
for module in torch torchvision transformers pytest; do
  python3 -c "import $module" >/dev/null 2>&1 || missing+=("$module")
done
if [ "${SGC_REQUIRE_TORCH:-0}" = 1 ] && [ ${#missing[@]} -gt 0 ]; then
  echo "error: SGC_REQUIRE_TORCH=1 but $(command -v python3) cannot import: ${missing[*]} (pip install -r python/requirements-ci.txt)" >&2
  exit 1
fi
# The native module (tests/test_bindings.py): CI installs it before this script runs.
if [ "${SGC_REQUIRE_TORCH:-0}" = 1 ] && ! python3 -c "import sgc" >/dev/null 2>&1; then
  echo "error: SGC_REQUIRE_TORCH=1 but $(command -v python3) cannot import the native module sgc (pip install ./python)" >&2
  exit 1
fi
if [[ " ${missing[*]} " == *" torch "* ]]; then
  echo "SKIP: torch is not installed; the PyTorch exporter tests did not run (pip install -r python/requirements-ci.txt to run them)"
  exit 0
fi
if [[ " ${missing[*]} " == *" pytest "* ]]; then
  echo "error: torch is installed but pytest is not (pip install pytest)" >&2
  exit 1
fi
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
python3 -m pytest -ra --durations=25 tests "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "python tests: $(( $(date +%s) - start )) s"
# In CI a skipped test tested nothing (a corpus made with another torch, a missing binary).
if [ "${SGC_REQUIRE_TORCH:-0}" = 1 ] && [ "$rc" -eq 0 ] && tail -n 1 "$log" | grep -q " skipped"; then
  echo "error: SGC_REQUIRE_TORCH=1 but tests were skipped (see the SKIPPED lines above)" >&2
  exit 1
fi
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests in python/tests" >&2
  exit 1
fi
exit "$rc"
