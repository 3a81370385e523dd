#!/usr/bin/env bash
# Installs the CUDA compilers that the kernel-compile test (crates/sgc-exec/tests/cuda_kernels.rs)
# uses without a GPU: NVRTC (libnvrtc.so.12, wheel nvidia-cuda-nvrtc-cu12) and ptxas (wheel
# nvidia-cuda-nvcc-cu12), both from PyPI, pinned to CUDA 12.6: the version cudarc's bindings are
# built for (feature `cuda-12060` in Cargo.toml), so the kernels CI compiles are compiled by
# the NVRTC the backend loads. Idempotent: a second run installs nothing.
# Prints where the tools are, as the test finds them.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
CUDA_PIN=12.6.85
PKGS=("nvidia-cuda-nvrtc-cu12==$CUDA_PIN" "nvidia-cuda-nvcc-cu12==$CUDA_PIN")

where() {
  "$PYTHON" - <<'PY'
import os, importlib
for mod, rel in (("nvidia.cuda_nvrtc", "lib/libnvrtc.so.12"), ("nvidia.cuda_nvcc", "bin/ptxas")):
    m = importlib.import_module(mod)
    base = os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0]
    path = os.path.join(base, rel)
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing")
    print(path)
PY
}

pinned() {
  "$PYTHON" -m pip show nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 2>/dev/null | grep -c "^Version: $CUDA_PIN\$"
}

if ! where >/dev/null 2>&1 || [ "$(pinned)" != 2 ]; then
  "$PYTHON" -m pip install --quiet --disable-pip-version-check "${PKGS[@]}"
fi
where
"$PYTHON" -m pip show nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 2>/dev/null | grep -E '^(Name|Version):' | paste - -
