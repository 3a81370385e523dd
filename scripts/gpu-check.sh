#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, its preinstalled torch (with torchvision and
# transformers) and no internet, from a checkout that carries target/gpu-carry
# (scripts/gpu-prepare.sh). Writes into $OUT (default target/gpu-check):
#   rust-cuda.log   the CUDA tests of sgc-exec (cuda_ops, cuda_kernels, corpus_cuda, and the cuda:: tests of tiny, dtr, offload, dtypes)
#   rust-emulated.log  the same binaries with SGC_CUDA=emulate (the emulated device), to compare
#   trace.md        tracing time per phase, CPU and CUDA fakes (python/bench/trace_time.py)
#   trace-profile.txt  where each trace spends its time (cProfile)
#   gpu-table.md    eager, sgc and torch.compile steps on the GPU (python/bench/gpu_table.py)
#   corpus-cuda.md  the 12 corpus graphs on the Rust executor (sgc profile, then sgc run --compare:
#                   planned vs unplanned, bitwise equality, measured and predicted time ratio;
#                   and the offload plan at the lowest recompute plan's bytes, measured beside
#                   its three-stream prediction)
#                   beside PyTorch eager on the same models and batches (python/bench/corpus_exec.py)
#   check.log       everything printed, with each part's exit status
# About 8 minutes on an H100 before the corpus part (at most 9 more). `--dry-run`: the same script on the CPU at small sizes (no GPU
# needed; the Rust CUDA tests then skip), to check it before spending GPU time.
# A lease is 15 minutes and one call at most 10, so the parts can be split over calls:
# PARTS=rust,corpus (default rust,emulated,trace,table,corpus) runs those alone, in that order;
# TABLE_ONLY=gpt2 and TRACE_ONLY=gpt2 pass --only to the table and the trace timing.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${OUT:-$repo/target/gpu-check}
mkdir -p "$out"
exec > >(tee "$out/check.log") 2>&1
dry=0
[ "${1:-}" = "--dry-run" ] && dry=1
carry=$repo/target/gpu-carry
status=0
parts=,${PARTS:-rust,emulated,trace,table,corpus},
part() {  # part KEY NAME COMMAND...: runs one part (when KEY is in PARTS), records its status, goes on
  local key=$1 name=$2; shift 2
  case $parts in *",$key,"*) ;; *) echo "== $name: not in PARTS"; return 0 ;; esac
  local start=$SECONDS
  echo "== $name"
  "$@"
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  [ $rc -eq 0 ] || status=1
}
if [ ! -d "$carry" ]; then
  echo "error: $carry is missing: run scripts/gpu-prepare.sh here first and carry it" >&2
  exit 1
fi
python=${PYTHON:-python3}
echo "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no GPU')"
"$python" -c 'import torch, torchvision, transformers; print("torch", torch.__version__, "torchvision", torchvision.__version__, "transformers", transformers.__version__, "cuda available:", torch.cuda.is_available())'
# The wheel carried (no internet: no dependencies; torch is the machine's).
site=$(mktemp -d)
"$python" -m pip install --quiet --no-index --no-deps --target "$site" "$carry"/sgc-*.whl || exit 1
export PYTHONPATH="$site:$repo/python"
export PYTHONUNBUFFERED=1
# The test binaries read files by the absolute paths of the machine that built them.
built=$(grep -aoE '/[A-Za-z0-9_./+-]*/crates/sgc-exec' "$carry/tests/tiny" 2>/dev/null | head -1)
built_root=${built%/crates/sgc-exec}
if [ -n "$built_root" ] && [ "$built_root" != "$repo" ] && [ ! -e "$built_root" ]; then
  mkdir -p "$(dirname "$built_root")" && ln -s "$repo" "$built_root"
fi
# NVRTC and ptxas of the machine's CUDA toolkit, for the kernel compile test.
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -z "${SGC_NVRTC:-}" ] && [ -e "$cuda/lib64/libnvrtc.so" ] && export SGC_NVRTC=$cuda/lib64/libnvrtc.so
[ -z "${SGC_PTXAS:-}" ] && [ -x "$cuda/bin/ptxas" ] && export SGC_PTXAS=$cuda/bin/ptxas
rust_tests() {  # every carried CUDA test binary; the log in rust-cuda.log, the results here
  local rc=0 require=$1
  {
    for t in "$carry"/tests/*; do
      echo "-- $(basename "$t")"
      # tiny, dtr and offload run every test on every device: only their cuda:: tests here.
      local only=
      case $(basename "$t") in tiny|dtr|offload|dtypes) only=cuda:: ;; esac
      SGC_REQUIRE_CUDA_TOOLS=$require "$t" --test-threads 1 $only || rc=1
    done
  } > "$out/${OUT_LOG:-rust-cuda.log}" 2>&1
  grep -E "^-- |test result|^skipped" "$out/${OUT_LOG:-rust-cuda.log}"
  # On a GPU machine a test skipped for want of a device tested nothing (the one that needs
  # no driver skips because a device is present: that skip is expected).
  if [ "$require" = 1 ] && grep "^skipped" "$out/${OUT_LOG:-rust-cuda.log}" | grep -qv "a CUDA device is present"; then
    echo "error: CUDA tests were skipped on a machine with a GPU (see above)"
    rc=1
  fi
  return $rc
}
emulated_tests() {
  SGC_CUDA=emulate OUT_LOG=rust-emulated.log rust_tests 0
}
if [ $dry = 1 ]; then
  part rust "rust cuda tests (dry run: they skip without a GPU)" rust_tests 0
  part trace "trace time" timeout 600 "$python" python/bench/trace_time.py --only ${TRACE_ONLY:-gpt2} --devices cuda \
    --out "$out/trace.md" --profile "$out/trace-profile.txt"
  part table "gpu table" timeout 1200 "$python" python/bench/gpu_table.py --device cpu --small --only "${TABLE_ONLY:-}" --warmup 1 --repeat 2 \
    --genetic-iters 2 --out "$out/gpu-table.md"
  part corpus "corpus on the executor" timeout 300 "$python" python/bench/corpus_exec.py --sgc "$carry/sgc" --device cpu \
    --small --only "${CORPUS_ONLY:-resnet18}" --steps 2 --warmup 1 --out "$out/corpus-cuda.md"
else
  part rust "rust cuda tests" rust_tests 1
  # The same binaries on the emulated device (the kernels compiled for the host, linked in):
  # a test that passes on one and fails on the other is a bug in one of them.
  part emulated "rust cuda tests, emulated" emulated_tests
  part trace "trace time" timeout 300 "$python" python/bench/trace_time.py --check 60 --only "${TRACE_ONLY:-}" --out "$out/trace.md" \
    --profile "$out/trace-profile.txt"
  part table "gpu table" timeout 420 "$python" python/bench/gpu_table.py --device cuda --only "${TABLE_ONLY:-}" --out "$out/gpu-table.md"
  # CORPUS_ONLY=resnet50,gpt2 runs some of the twelve; --timeout bounds each sgc command.
  part corpus "corpus on cuda" timeout 540 "$python" python/bench/corpus_exec.py --sgc "$carry/sgc" --device cuda \
    --only "${CORPUS_ONLY:-}" --timeout 120 --out "$out/corpus-cuda.md"
fi
echo "== gpu check: $([ $status = 0 ] && echo all parts passed || echo some part failed); outputs in $out"
exit $status
