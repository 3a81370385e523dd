"""The corpus on sgc's Rust executor, planned vs unplanned, beside PyTorch eager (the GPU check).

    python bench/corpus_exec.py --sgc target/gpu-carry/sgc --out corpus.md [--device cuda]
        [--graphs graphs/real] [--only resnet50,gpt2] [--small] [--steps 5] [--warmup 2]

For every graph of the corpus (`graphs/real/NAME.json.gz`; `--small`: the CPU-sized exports
of `tests/fixtures/real_small`, for a dry run of the script):

1. `sgc profile GRAPH --device D`: the unplanned step on the device, each op's measured
   time (median of `--steps` steps after `--warmup`) written as `time_us`;
2. `sgc run TIMED --device D --strategy sublinear --compare --json`: the sublinear plan of
   the timed graph (lowest peak) against the unplanned schedule, both warmed up, then
   alternated: median step times (CUDA events on CUDA), the median of the paired steps'
   ratio, the ratio the plan predicts from the measured times, whether the two loss curves
   are bitwise equal, and the bytes each allocated;
3. offload (issue 38's GPU must-hold): `sgc plan TIMED --budget B --host-link h100` at
   the device bytes B of the lowest-peak recompute plan of step 2's kind, then `sgc run
   TIMED --plan P --compare`: the measured planned / unplanned step beside the plan's own
   prediction (its three-stream replay, `summary.offload.step_us`, over the unplanned
   step), and bitwise equality; empty when the planner offloads nothing there;
4. PyTorch eager on the same model and batch (`sgc_trace.tools.corpus` builds it as it was
   exported, random weights): `loss_fn(model(x), y).backward()` with `.grad` unset before
   each step (the exported step computes gradients, no optimizer), CUDA events, median of
   `--steps` steps after `--warmup`. PyTorch's defaults: cuDNN may pick TF32 convolutions
   and non-deterministic algorithms; sgc computes in f32.

One markdown table, one row per graph; a graph sgc cannot run keeps its row with the
error. Exit status 0 when every graph ran and every pair of curves is bitwise equal.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sgc_trace.tools.corpus import BY_NAME, CORPUS  # noqa: E402
from sgc_trace.exporter.trace import TrainStep  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def sgc(binary: str, args: list[str], timeout: float) -> str:
    """stdout of one sgc command; its first error line as the exception's message."""
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"sgc {args[0]} timed out after {timeout:.0f} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"sgc {args[0]} exited {done.returncode}")
    return done.stdout


def sgc_side(a, graph: Path, tmp: Path) -> dict:
    """Profile, then planned vs unplanned on the timed graph."""
    timed = tmp / f"{graph.name.split('.')[0]}.timed.json.gz"
    steps = ["--steps", str(a.steps), "--warmup", str(a.warmup)]
    sgc(a.sgc, ["profile", str(graph), "--device", a.device, *steps, "-o", str(timed)], a.timeout)
    out = sgc(a.sgc, ["run", str(timed), "--device", a.device, "--strategy", "sublinear", "--compare",
                      "--json", *steps], a.timeout)
    planned, unplanned = json.loads(out)
    return {
        "planned_ms": 1e3 * statistics.median(planned["timing"]["times"]["seconds"]),
        "unplanned_ms": 1e3 * statistics.median(unplanned["timing"]["times"]["seconds"]),
        "ratio": planned["time_ratio"],
        "predicted": planned["predicted_time_ratio"],
        # sgc writes each f32 loss in its shortest exact form: equal text is equal bits.
        "bitwise": planned["losses"] == unplanned["losses"],
        "memory": planned["report"]["allocator"]["peak_bytes"] / max(unplanned["report"]["allocator"]["peak_bytes"], 1),
        "promised": planned["report"]["allocator"]["peak_bytes"] == planned["report"]["planned_bytes"],
        "recompute": planned["report"]["recompute_steps"],
        "clock": planned["timing"]["clock"],
        "offload": offload_side(a, timed, tmp),
    }


def offload_side(a, timed: Path, tmp: Path) -> dict | None:
    """The offload plan at the lowest recompute plan's device bytes, run against unplanned:
    measured and predicted ratios, bitwise equality; None when it offloads nothing."""
    stem = timed.name.split(".")[0]
    low, off = tmp / f"{stem}.low.json", tmp / f"{stem}.offload.json"
    sgc(a.sgc, ["plan", str(timed), "--strategy", "sublinear", "-o", str(low)], a.timeout)
    lowest = json.loads(low.read_text())
    budget = lowest["arena"]["size"] + lowest["summary"]["persistent_bytes"]
    sgc(a.sgc, ["plan", str(timed), "--strategy", "sublinear", "--budget", str(budget), "--host-link",
                a.host_link, "-o", str(off)], a.timeout)
    plan = json.loads(off.read_text())
    summary = plan["summary"].get("offload")
    if not plan.get("offloads") or summary is None:
        return None
    steps = ["--steps", str(a.steps), "--warmup", str(a.warmup)]
    out = sgc(a.sgc, ["run", str(timed), "--plan", str(off), "--device", a.device, "--compare", "--json", *steps],
              a.timeout)
    planned, unplanned = json.loads(out)
    return {
        "ratio": planned["time_ratio"],
        "predicted": summary["step_us"] / plan["summary"]["step_cost"],
        "bitwise": planned["losses"] == unplanned["losses"],
        "offloads": len(plan["offloads"]),
    }


def eager_ms(name: str, small: bool, device: torch.device, warmup: int, steps: int) -> tuple[float, int]:
    """PyTorch eager's median step and the batch size, as the corpus exported the model."""
    spec = BY_NAME[name].make(small)
    torch.manual_seed(0)
    step = TrainStep(spec.factory(), spec.loss, spec.num_model_inputs, spec.raw_output).to(device).train()
    gen = torch.Generator().manual_seed(0)
    batch = [s.real(gen).to(device) for s in spec.inputs]
    times = []
    for i in range(warmup + steps):
        for p in step.parameters():
            p.grad = None
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(*batch)[0].backward()
            end.record()
            end.synchronize()
            t = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            step(*batch)[0].backward()
            t = (time.perf_counter() - t0) * 1e3
        if i >= warmup:
            times.append(t)
    del step, batch
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return statistics.median(times), spec.inputs[0].shape[0]


def graph_meta(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        g = json.load(f)
    return {"batch": g.get("meta", {}).get("batch_size"), "ops": len(g["ops"])}


def row(a, name: str, path: Path, tmp: Path) -> tuple[str, bool]:
    meta = graph_meta(path)
    note, ok = [], True
    start = time.perf_counter()
    try:
        s = sgc_side(a, path, tmp)
    except RuntimeError as e:
        s, ok = None, False
        note.append(f"sgc: {e}".replace("|", "\\|"))
    sgc_s = time.perf_counter() - start
    try:
        eager, batch = eager_ms(name, a.small, torch.device(a.device), a.warmup, a.steps)
        if batch != meta["batch"]:
            note.append(f"eager batch {batch} but the export's is {meta['batch']}")
    except Exception as e:  # noqa: BLE001 (a model that fails to build keeps its row)
        eager = None
        note.append(f"eager: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    o = s and s["offload"]
    if s is not None:
        ok = ok and s["bitwise"] and s["promised"] and (o is None or o["bitwise"])
        if not s["promised"]:
            note.append("allocated != plan promised")
        if o is not None and not o["bitwise"]:
            note.append("offload run not bitwise")
    f = lambda v, fmt: "" if v is None else format(v, fmt)  # noqa: E731
    cells = [
        name,
        str(meta["batch"]),
        str(meta["ops"]),
        f(s and s["unplanned_ms"], ".2f"),
        f(s and s["planned_ms"], ".2f"),
        f(s and s["recompute"], "d"),
        f(s and s["ratio"], ".3f"),
        f(s and s["predicted"], ".3f"),
        "" if s is None else ("yes" if s["bitwise"] else "**no**"),
        f(s and s["memory"], ".3f"),
        "" if not o else f"{o['ratio']:.3f} ({o['predicted']:.3f}; {o['offloads']} offloads)",
        f(eager, ".2f"),
        f(s and eager and s["unplanned_ms"] / eager, ".2f"),
        "; ".join(note),
    ]
    print(f"{name}: sgc {sgc_s:.1f} s; " + " | ".join(cells), flush=True)
    return "| " + " | ".join(cells) + " |", ok


HEADER = (
    "| model | batch | ops | sgc unplanned ms | sgc planned ms | recomputed steps | planned / unplanned "
    "| predicted | bitwise equal | memory planned / unplanned | offload: planned / unplanned (predicted) "
    "| eager ms | sgc / eager | note |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sgc", required=True, help="the sgc binary (built with --features cuda for --device cuda)")
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--graphs", default=None, help="folder of NAME.json.gz (default graphs/real, "
                   "tests/fixtures/real_small with --small)")
    p.add_argument("--only", default="", help="comma-separated corpus names")
    p.add_argument("--small", action="store_true", help="the CPU-sized exports (a dry run)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=float, default=300, help="seconds per sgc command")
    p.add_argument("--host-link", default="h100", help="the link offload plans assume (sgc plan --host-link)")
    a = p.parse_args(argv)
    folder = Path(a.graphs) if a.graphs else REPO / ("tests/fixtures/real_small" if a.small else "graphs/real")
    names = [n for n in a.only.split(",") if n] or [e.name for e in CORPUS]
    names = [n for n in names if (folder / f"{n}.json.gz").exists()]
    if not names:
        print(f"error: no corpus graph found in {folder}", file=sys.stderr)
        return 1
    gpu = torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"
    lines = [
        f"Corpus on sgc's executor ({a.device}: {gpu}), {time.strftime('%Y-%m-%d')}; torch "
        f"{torch.__version__.split('+')[0]}; median of {a.steps} steps after {a.warmup} warm-up.",
        "",
        HEADER,
    ]
    all_ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            line, ok = row(a, name, folder / f"{name}.json.gz", Path(tmp))
            lines.append(line)
            all_ok &= ok
    Path(a.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
