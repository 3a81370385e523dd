#!/usr/bin/env bash
# Builds, on this machine, what the GPU check (scripts/gpu-check.sh) carries to a GPU machine
# that has no Rust toolchain and no internet: target/gpu-carry/ holds the release `sgc` built
# with --features cuda, the test binaries of sgc-exec that hold CUDA tests (stripped), and the
# abi3 wheel of the Python package. Then, with the device tool: carry target/gpu-carry and run
# `bash scripts/gpu-check.sh` (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
carry=target/gpu-carry
rm -rf "$carry"
mkdir -p "$carry/tests"
cargo build --release --features cuda --bin sgc
cp target/release/sgc "$carry/sgc"
# The CUDA integration tests of sgc-exec, built as they run in CI (debug assertions on,
# optimised: --release keeps them fast on the device).
cargo test --release --features cuda -p sgc-exec --no-run --message-format=json \
  --test cuda_ops --test tiny --test dtr --test cuda_kernels --test offload --test corpus_cuda \
  --test dtypes 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["kind"] == ["test"]:
        print(msg["target"]["name"], msg["executable"])
' | while read -r name exe; do cp "$exe" "$carry/tests/$name"; done
strip "$carry/sgc" "$carry"/tests/*
venv=$(bash scripts/python-venv.sh)
(cd python && "$venv/bin/maturin" build --release --quiet -o "../$carry")
echo "$carry: $(du -sh "$carry" | cut -f1) ($(ls "$carry" "$carry/tests" | tr '\n' ' '))"
