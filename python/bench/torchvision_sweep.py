"""Every torchvision classification model through sgc: export, coverage, and a planned run.

    python bench/torchvision_sweep.py --out ../target/torchvision.md            # all 80
    python bench/torchvision_sweep.py --only resnet18,alexnet --run --out t.md  # and run them

For each model of `torchvision.models.list_models(module=torchvision.models)` (random
weights, nothing downloaded), at batch 2 and 96x96 (224x224 for the models that need it):

1. export the training step with `sgc_trace.export` (cross-entropy over 1000 classes);
2. ask the CPU backend which of its ops it cannot run (`sgc inspect --device cpu`, the
   executor's own pre-run checks): the op types missing and how many ops they are;
3. with `--run`, for a model the CPU backend covers, run one step of its `none`,
   `sublinear` and `dtr` plans (`sgc run --compare`: planned against unplanned, bitwise).

Columns: the model, its input, ops in the traced step, the unplanned and the sublinear
plan's peak (memory model), what the CPU backend lacks, and the run's result. The issue it
measures (the executor runs what PyTorch traces) wants every row to run bitwise and match
PyTorch's own step within 1e-4; the comparison with PyTorch's step is not here yet.
"""

from __future__ import annotations

import argparse
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

# Models that refuse 96x96 inputs (a fixed image size, or too many poolings).
NEEDS_224 = ("vit_", "swin_v2", "maxvit", "inception_v3", "googlenet")


def size_of(name: str) -> int:
    if name == "inception_v3":
        return 299
    return 224 if name.startswith(NEEDS_224) else 96


def sgc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(find_sgc()), *args], capture_output=True, text=True)


def one(name: str, folder: Path, run: bool) -> str:
    import torchvision

    size = size_of(name)
    started = time.perf_counter()
    try:
        graph = export(lambda: torchvision.models.get_model(name, weights=None), F.cross_entropy,
                       [InputSpec("x", (2, 3, size, size)), InputSpec("y", (2,), torch.int64, high=1000)],
                       name=name)
    except Exception as e:
        return f"| {name} | {size}x{size} | | | | export failed: {first_line(e, 160)} | |"
    path = folder / f"{name}.json.gz"
    save(graph, path)
    print(f"{name}: exported in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    sgc_mod = module()
    un = sgc_mod.plan(str(path), strategy="none").summary
    sub = sgc_mod.plan(str(path), genetic_iters=2).summary
    out = sgc("inspect", str(path), "--device", "cpu", "--json")
    coverage = json.loads(out.stdout)["coverage"] if out.returncode == 0 else None
    if coverage is None:
        missing = f"inspect failed: {first_line(RuntimeError(out.stderr), 120)}"
    elif coverage["missing"]:
        kinds = coverage["missing_per_type"]
        missing = ", ".join(f"`{op.removeprefix('aten.')}` x{n}" for op, n in kinds[:6]) + (" ..." if len(kinds) > 6 else "")
    else:
        missing = "none"
    result = ""
    if run and coverage is not None and not coverage["missing"]:
        results = []
        for strategy in ("none", "sublinear", "dtr"):
            r = sgc("run", str(path), "--strategy", strategy, "--compare", "--steps", "1", "--warmup", "1", "--json")
            if r.returncode != 0:
                results.append(f"{strategy}: failed ({first_line(RuntimeError(r.stderr), 80)})")
                continue
            runs = json.loads(r.stdout)
            same = runs[0]["losses"] == runs[1]["losses"]
            results.append(f"{strategy}: {'bitwise' if same else 'differs'}")
        result = "; ".join(results)
    mib = 1 << 20
    return (f"| {name} | {size}x{size} | {len(graph['ops'])} | {un['planned_peak'] / mib:.1f} MiB | "
            f"{sub['planned_peak'] / mib:.1f} MiB | {missing} | {result or ('not run' if run else '')} |")


def main(argv=None) -> int:
    import torchvision

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="comma-separated model names (default: all)")
    p.add_argument("--run", action="store_true", help="also run the covered models' plans on the CPU backend")
    a = p.parse_args(argv)
    names = torchvision.models.list_models(module=torchvision.models)
    if a.only:
        names = [n for n in names if n in a.only.split(",")]
    head = ["| model | input | ops | unplanned peak | sublinear peak | ops the CPU backend lacks | run (planned vs "
            "unplanned) |", "|---|---|---:|---:|---:|---|---|"]
    rows = []
    out = Path(a.out)
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="sgc-torchvision-") as tmp:
        for name in names:
            rows.append(one(name, Path(tmp), a.run))
            print(rows[-1], flush=True)
            out.write_text("\n".join(head + rows) + "\n")
    covered = sum(1 for r in rows if "| none |" in r)
    summary = (f"\n{covered} of {len(rows)} models: every op runs on the CPU backend "
               f"(torch {torch.__version__}, torchvision {torchvision.__version__}; {time.time() - start:.0f} s)\n")
    out.write_text("\n".join(head + rows) + "\n" + summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
