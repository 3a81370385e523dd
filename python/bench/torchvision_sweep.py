"""Every torchvision classification model through sgc: export, coverage, and a planned run.

    python bench/torchvision_sweep.py --out ../target/torchvision.md            # all 80
    python bench/torchvision_sweep.py --only resnet18,alexnet --run --out t.md  # and run them
    python bench/torchvision_sweep.py --dtype float64 --run --out t64.md        # in float64

For each model of `torchvision.models.list_models(module=torchvision.models)` (random
weights, nothing downloaded), at batch 2 and 96x96 (224x224 for the models that need it):

1. export the training step with `sgc_trace.export` (cross-entropy over 1000 classes);
2. ask the CPU and the CUDA backend which of their ops they cannot run (`sgc inspect
   --device cpu|cuda`, the executor's own pre-run checks, which need no GPU): the op types
   missing and how many ops they are;
3. with `--run`, for a model the CPU backend covers, with dropout and stochastic depth
   off (sgc's random numbers are not PyTorch's), on the same weights and inputs:
   - the step against PyTorch's (`sgc_trace.tools.execute.against_pytorch`): the loss and
     every gradient against PyTorch's float64 step, within 1e-4 of the tensor's largest
     magnitude, or within 10x PyTorch's own float32 error where that is larger (a gradient
     that is zero analytically, or one behind a ReLU whose input is within rounding of 0);
   - every ATen op replayed by PyTorch on the values sgc gave its inputs (`replay_ops`),
     each within 1e-5, or 10x PyTorch's own float32 error;
   - the `none`, `sublinear` and `dtr` plans' steps against the unplanned one, bitwise.

With `--dtype float64` the model runs in `.double()`: it is exported in f64, sgc's CPU
backend computes every op in f64, and the step is compared with PyTorch's float64 step,
where rounding (about 1e-16 per op) cannot move a ReLU input across zero as float32's can:
what is left of a difference is the kernels' own. PyTorch's own error is then its float64
rounding (its step on the batch in reverse order against its step), and each replayed op
is held to 1e-5 of the larger of its output's and its inputs' magnitudes.

Columns: the model, its input, ops in the traced step, the unplanned and the sublinear
plan's peak (memory model), what the CPU backend lacks, and the run's results.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sgc_bin import find_sgc  # noqa: E402
from sgc_trace import InputSpec, export, save  # noqa: E402
from sgc_trace.errors import first_line  # noqa: E402
from sgc_trace.native import module  # noqa: E402
from sgc_trace.tools.execute import against_pytorch, replay_ops, run_on_sgc  # noqa: E402

# Loss and every gradient within this share of the tensor's largest magnitude of PyTorch's.
TOLERANCE = 1e-4
# Models with more parameters than this are not replayed op by op (memory).
REPLAY_BELOW = 100_000_000
# Models that refuse 96x96 inputs (a fixed image size, or too many poolings).
NEEDS_224 = ("vit_", "swin_v2", "maxvit", "inception_v3", "googlenet")


def size_of(name: str) -> int:
    if name == "inception_v3":
        return 299
    return 224 if name.startswith(NEEDS_224) else 96


def sgc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(find_sgc()), *args], capture_output=True, text=True)


def without_randomness(model: torch.nn.Module) -> torch.nn.Module:
    """Dropout and stochastic depth off (`p = 0`): sgc's random numbers are not PyTorch's,
    so a step that draws them cannot be compared value for value."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return model


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and (a.numel() == 0 or torch.equal(a.reshape(-1).view(torch.uint8),
                                                                  b.reshape(-1).view(torch.uint8)))


def describe(c, own: str = "f32") -> str:
    """A comparison with PyTorch in a few words: pass or fail, the largest error of the
    tensors held to the floor, and how many were held to PyTorch's own rounding instead
    (`own`: its float32 error, or in a float64 run its float64 rounding, measured on the
    batch in reverse order: `against_pytorch`)."""
    plain = [e for k, e in c.errors.items() if c.tolerance(k) == c.floor]
    loose = len(c.errors) - len(plain)
    held = f", {loose} at {c.slack:g}x PyTorch's {own} error" if loose else ""
    if c.failed:
        k = c.worst_tensor
        return (f"vs PyTorch: {len(c.failed)} of {len(c.errors)} off ({k}: {c.errors[k]:.1e}, "
                f"PyTorch {own} {c.torch_errors[k]:.1e})")
    return f"vs PyTorch: {len(plain)} within {max(plain, default=0):.1e}{held}"


def graph_is_double(graph: dict) -> bool:
    """Whether the step was traced from a float64 model."""
    return any(t["dtype"] == "f64" for t in graph["tensors"] if t.get("kind") == "param")


def run_step(graph: dict, path: Path, model: torch.nn.Module, inputs: dict) -> str:
    """sgc's unplanned step against PyTorch's, then each plan's against the unplanned one."""
    try:
        unplanned = run_on_sgc(graph, model, inputs)
        compared = against_pytorch(model, F.cross_entropy, graph, inputs, floor=TOLERANCE, got=unplanned)
    except Exception as e:
        return f"failed: {first_line(e, 100)}"
    double = graph_is_double(graph)
    results = [describe(compared, "f64" if double else "f32")]
    del compared
    gc.collect()
    params = sum(p.numel() for p in model.parameters())
    if params > REPLAY_BELOW:
        # Every activation kept and each op replayed in float64 as well: more memory than
        # the sweep's machine has for the largest models (vit_l_16 was killed at 22.8 GB).
        results.append(f"ops: not replayed ({params / 1e6:.0f}M parameters)")
        return plans_run(results, graph, path, model, inputs, unplanned)
    try:
        ops = replay_ops(graph, model, inputs)
        if ops.failed:
            op, out, err, tol = max(ops.failed, key=lambda f: f[2] / f[3] if f[3] else float("inf"))
            results.append(f"ops: {len(ops.failed)} outputs off ({op} -> {out}: {err:.1e} > {tol:.1e})")
        else:
            results.append(f"ops: {ops.replayed} replayed, all within")
    except Exception as e:
        results.append(f"ops: replay failed ({first_line(e, 80)})")
    gc.collect()
    return plans_run(results, graph, path, model, inputs, unplanned)


def plans_run(results: list, graph: dict, path: Path, model, inputs: dict, unplanned: dict) -> str:
    """Each plan's step against the unplanned one, bitwise; `results` with those appended."""
    sgc_mod = module()
    for strategy in ("none", "sublinear", "dtr"):
        try:
            plan = sgc_mod.plan(str(path), strategy=strategy, genetic_iters=2)
            got = run_on_sgc(graph, model, inputs, plan=plan)
        except Exception as e:
            results.append(f"{strategy}: failed ({first_line(e, 80)})")
            continue
        same = all(same_bits(got[k], unplanned[k]) for k in unplanned)
        results.append(f"{strategy}: {'bitwise' if same else 'differs'}")
        del got
        gc.collect()
    return "; ".join(results)


def lacks(path: Path, device: str) -> tuple:
    """What `sgc inspect --device DEVICE` says the backend cannot run: its coverage record
    (None when inspect failed) and the op types missing, in a few words."""
    out = sgc("inspect", str(path), "--device", device, "--json")
    coverage = json.loads(out.stdout)["coverage"] if out.returncode == 0 else None
    if coverage is None:
        return None, f"inspect failed: {first_line(RuntimeError(out.stderr), 120)}"
    if not coverage["missing"]:
        return coverage, "none"
    kinds = coverage["missing_per_type"]
    return coverage, ", ".join(f"`{op.removeprefix('aten.')}` x{n}" for op, n in kinds[:6]) + (" ..." if len(kinds) > 6 else "")


def one(name: str, folder: Path, run: bool, dtype: torch.dtype = torch.float32) -> str:
    import torchvision

    size = size_of(name)
    started = time.perf_counter()
    torch.manual_seed(0)
    try:
        model = without_randomness(torchvision.models.get_model(name, weights=None)).to(dtype)
        graph = export(model, F.cross_entropy,
                       [InputSpec("x", (2, 3, size, size), dtype), InputSpec("y", (2,), torch.int64, high=1000)],
                       name=name)
    except Exception as e:
        return f"| {name} | {size}x{size} | | | | export failed: {first_line(e, 160)} | | |"
    path = folder / f"{name}.json.gz"
    save(graph, path)
    print(f"{name}: exported in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    sgc_mod = module()
    un = sgc_mod.plan(str(path), strategy="none").summary
    sub = sgc_mod.plan(str(path), genetic_iters=2).summary
    coverage, missing = lacks(path, "cpu")
    # The CUDA backend does not hold f64: every op of a float64 step would be listed.
    missing_cuda = "does not hold f64" if dtype == torch.float64 else lacks(path, "cuda")[1]
    result = ""
    if run and coverage is not None and not coverage["missing"]:
        inputs = {"x": torch.randn(2, 3, size, size).to(dtype), "y": torch.randint(0, 1000, (2,))}
        result = run_step(graph, path, model, inputs)
    mib = 1 << 20
    return (f"| {name} | {size}x{size} | {len(graph['ops'])} | {un['planned_peak'] / mib:.1f} MiB | "
            f"{sub['planned_peak'] / mib:.1f} MiB | {missing} | {missing_cuda} | {result or ('not run' if run else '')} |")


def main(argv=None) -> int:
    import torchvision

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="comma-separated model names (default: all)")
    p.add_argument("--run", action="store_true", help="also run the covered models' plans on the CPU backend")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="the model's dtype (float64: exported, run and compared in float64)")
    a = p.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    names = torchvision.models.list_models(module=torchvision.models)
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    head = ["| model | input | ops | unplanned peak | sublinear peak | ops the CPU backend lacks | ops the CUDA backend lacks "
            "| run: sgc vs PyTorch, planned vs unplanned |", "|---|---|---:|---:|---:|---|---|---|"]
    rows = []
    out = Path(a.out)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="sgc-torchvision-") as tmp:
        for name in names:
            rows.append(one(name, Path(tmp), a.run, dtype))
            print(rows[-1], flush=True)
            out.write_text("\n".join(head + rows) + "\n")
    cells = [r.split(" | ") for r in rows]
    cpu = sum(1 for c in cells if len(c) > 6 and c[5] == "none")
    cuda = sum(1 for c in cells if len(c) > 6 and c[6] == "none")
    summary = (f"\n{cpu} of {len(rows)} models: every op runs on the CPU backend; {cuda}: on the CUDA backend "
               f"(torch {torch.__version__}, torchvision {torchvision.__version__}, {a.dtype}; "
               f"{time.time() - start:.0f} s)\n")
    out.write_text("\n".join(head + rows) + "\n" + summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
