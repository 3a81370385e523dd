"""sgc plans applied in PyTorch, beside sgc's prediction and beside PyTorch's own answer.

    python bench/vs_torch.py --out ../target/vs_torch.md [--only resnet18,lstm] [--skip-torch]

Per model, at a small batch (CPU runs of seconds):

* **Plan vs prediction**: the unplanned step (sgc's `none` plan applied) and the planned
  step (sublinear, lowest peak), measured (`sgc_trace.measure`: bytes saved for backward,
  peak of the step) beside sgc's prediction, and checked bitwise against the eager step.
* **Against PyTorch**: `torch.compile` (AOTAutograd, eager kernels, default min-cut
  partitioner) at `torch._functorch.config.activation_memory_budget` 0.1 ... 0.9 and 1.0,
  each measured (saved bytes, recomputed forward ops' FLOPs, step time over the 1.0 step).
  Beside each, the sgc plan that recomputes least among those saving at most PyTorch's
  measured bytes, from a sweep of `sgc plan --budget` between the lowest peak and the
  unplanned peak plus the `chen-sqrt` plan (or, when none saves so little, the one saving
  least, marked); its saved bytes and FLOPs are counted from the plan and its time measured
  over the `none` plan's step (the same runtime). FLOPs of both: `torch.utils.flop_counter`'s
  formulas, 0 for elementwise ops (which is how PyTorch prices recomputation: it sees them
  as free), so the measured time is the fairer column.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sgc_trace.apply import compile as sgc_compile  # noqa: E402
from sgc_trace.apply import input_specs, saved_tensor_names, tensor_bytes, trace  # noqa: E402
from sgc_trace.cli import lm_cross_entropy  # noqa: E402
from sgc_trace.measure import best_seconds, fresh, peak_bytes, torch_compiled_step  # noqa: E402
from sgc_trace.planner import PlanError, plan  # noqa: E402
from sgc_trace.report import markdown, measure_plans, mib  # noqa: E402

BUDGETS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def _images(batch, size, classes=1000):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(batch, 3, size, size, generator=g), torch.randint(0, classes, (batch,), generator=g))


def _tokens(batch, seq, vocab):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch, seq), generator=g))


def models():
    """name -> (what, factory, batch, loss). Small shapes: each step takes seconds on a CPU."""
    import torchvision
    import transformers

    from sgc_trace.zoo import LSTMLanguageModel

    return {
        "resnet18": ("torchvision resnet18, batch 32, 64x64", lambda: torchvision.models.resnet18(),
                     _images(32, 64), F.cross_entropy),
        "resnet50": ("torchvision resnet50, batch 16, 64x64", lambda: torchvision.models.resnet50(),
                     _images(16, 64), F.cross_entropy),
        "mobilenet_v3_large": ("torchvision mobilenet_v3_large, batch 32, 64x64",
                               lambda: torchvision.models.mobilenet_v3_large(), _images(32, 64), F.cross_entropy),
        "vit_b_16": ("torchvision vit_b_16 (12 layers), batch 16, 64x64",
                     lambda: torchvision.models.vit_b_16(image_size=64), _images(16, 64), F.cross_entropy),
        "gpt2": ("transformers GPT-2 small config shrunk to 4 layers (768 wide), batch 4, 256 tokens",
                 lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=4)),
                 _tokens(4, 256, 50257), lm_cross_entropy),
        "lstm": ("sgc_trace.zoo LSTM LM (2 x 1500), batch 16, 64 tokens", LSTMLanguageModel,
                 _tokens(16, 64, 10000), lm_cross_entropy),
    }


def build(factory):
    torch.manual_seed(0)
    return factory().train()


def sgc_front(model, loss_fn, batch, points: int = 12) -> tuple[dict, list[dict]]:
    """sgc plans from the `none` plan down to the lowest peak (sublinear under budgets
    between), and `chen-sqrt` (sqrt(n) checkpoints: fewer bytes kept, more recomputed),
    each with its saved bytes and recomputed FLOPs."""
    traced = trace(model, loss_fn, input_specs(batch, 1))
    graph = traced[0]
    flops = [op.get("flops", 0) for op in graph["ops"]]
    plans = [plan(graph, strategy="none"), plan(graph), plan(graph, strategy="chen-sqrt")]
    lo, hi = plans[1]["summary"]["planned_peak"], plans[0]["summary"]["planned_peak"]
    persistent = plans[0]["summary"]["persistent_bytes"]
    arena = plans[1]["arena"]["size"] if plans[1].get("arena") else lo - persistent
    top = plans[0]["arena"]["size"] if plans[0].get("arena") else hi - persistent
    for k in range(1, points):
        budget = persistent + arena + (top - arena) * k // points
        try:
            plans.append(plan(graph, budget=budget))
        except PlanError:
            continue
    front = []
    for p in plans:
        saved = saved_tensor_names(graph, p)
        front.append({"plan": p, "saved": tensor_bytes(graph, saved),
                      "flops": sum(flops[s["op"]] for s in p["steps"] if s["recompute"])})
    return traced, front


def compare_torch(name, what, factory, batch, loss_fn, repeat: int) -> list[str]:
    model = build(factory)
    torch._dynamo.reset()
    base = torch_compiled_step(fresh(model), loss_fn, 1.0)
    base_time = best_seconds(base.run, *batch, repeat=repeat)
    traced, front = sgc_front(model, loss_fn, batch)
    graph = traced[0]
    sgc_base = sgc_compile(fresh(model), loss_fn, batch, plan=front[0]["plan"], traced=traced)
    sgc_base_time = best_seconds(sgc_base, *batch, repeat=repeat)
    total_flops = sum(op.get("flops", 0) for op in graph["ops"] if op.get("phase") == "forward")
    rows = []
    done: dict[int, dict] = {}

    def share(f):
        return f"{f / 1e9:.3f} ({f / max(total_flops, 1):.1%})"

    for b in BUDGETS:
        torch._dynamo.reset()
        ts = torch_compiled_step(fresh(model), loss_fn, b)
        t_time = best_seconds(ts.run, *batch, repeat=repeat) - base_time
        _, t_peak = peak_bytes(ts.run, *batch)
        fits = [f for f in front if f["saved"] <= ts.saved_bytes]
        best = (min(fits, key=lambda f: (f["flops"], f["plan"]["summary"]["recompute_cost"], f["saved"])) if fits
                else min(front, key=lambda f: (f["saved"], f["flops"])))
        if id(best) not in done:
            step = sgc_compile(fresh(model), loss_fn, batch, plan=best["plan"], traced=traced)
            t = best_seconds(step, *batch, repeat=repeat) - sgc_base_time
            _, peak = peak_bytes(step, *batch)
            done[id(best)] = {"time": t, "saved": step.saved_bytes, "peak": peak.bytes}
        m = done[id(best)]
        mark = "" if fits else " (more: sgc's least)"
        rows.append(f"| {name} | {b:.1f} | {mib(ts.saved_bytes)} | {share(ts.recompute_flops)} | {t_time * 1e3:+.0f} "
                    f"| {mib(t_peak.bytes)} | {mib(m['saved'])}{mark} | {share(best['flops'])} "
                    f"| {m['time'] * 1e3:+.0f} | {mib(m['peak'])} |")
    torch._dynamo.reset()
    _, base_peak = peak_bytes(base.run, *batch)
    _, sgc_base_peak = peak_bytes(sgc_base, *batch)
    rows.append(f"| {name} | 1.0 | {mib(base.saved_bytes)} | {share(base.recompute_flops)} | {base_time * 1e3:.0f} ms "
                f"| {mib(base_peak.bytes)} | {mib(sgc_base.saved_bytes)} (`none`) | 0 | {sgc_base_time * 1e3:.0f} ms "
                f"| {mib(sgc_base_peak.bytes)} |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--skip-torch", action="store_true", help="only the plan-vs-prediction table")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    table = models()
    names = [n for n in table if not a.only or n in a.only.split(",")]
    start = time.time()
    summary = [
        "| model | shapes | unplanned: measured peak / predicted | planned: measured / predicted | planned / unplanned "
        "measured (predicted) | saved for backward planned / unplanned (MiB) | peak op, its scratch (MiB) "
        "| recompute share | loss, grads bitwise = unplanned | = eager |",
        "|---|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    details, vs = [], []
    for name in names:
        what, factory, batch, loss_fn = table[name]
        t0 = time.time()
        r = measure_plans(build(factory), loss_fn, batch)
        rows = {x["step"]: x for x in r["rows"]}
        un, pl = rows["unplanned"], rows["planned"]
        summary.append(
            f"| {name} | {what} | {mib(un['measured_peak'])} / {mib(un['predicted_peak'])} MiB "
            f"({un['measured_peak'] / un['predicted_peak']:.3f}) | {mib(pl['measured_peak'])} / "
            f"{mib(pl['predicted_peak'])} MiB ({pl['measured_peak'] / pl['predicted_peak']:.3f}) | "
            f"{pl['measured_peak'] / un['measured_peak']:.3f} ({pl['predicted_peak'] / un['predicted_peak']:.3f}) | "
            f"{mib(pl['saved_bytes'])} / {mib(un['saved_bytes'])} | `{pl['peak_op']}` {mib(pl['workspace'])} | "
            f"{pl['recompute_share']:.1%} | {'yes' if pl['equal_unplanned'] else 'NO'} | "
            f"{'yes' if un['equal'] and pl['equal'] else 'no (max diff %.2g)' % pl['max_abs_diff']} |")
        details.append(f"### {name}\n\n{what}\n\n{markdown(r)}\n")
        print(summary[-1], f"({time.time() - t0:.0f} s)", flush=True)
        _write(a, start, summary, vs, details)
    if not a.skip_torch:
        for name in names:
            what, factory, batch, loss_fn = table[name]
            t0 = time.time()
            vs += compare_torch(name, what, factory, batch, loss_fn, a.repeat)
            print("\n".join(vs[-10:]), f"({time.time() - t0:.0f} s)", flush=True)
            _write(a, start, summary, vs, details)
    print(f"wrote {a.out}")
    return 0


def _write(a, start, summary, vs, details) -> None:
    out = ["Generated by `just vs-torch` (`python/bench/vs_torch.py`) on this machine's CPU "
           f"(torch {torch.__version__.split('+')[0]}, {time.time() - start:.0f} s).", "",
           "**Plans applied, measured beside sgc's prediction** (peak: bytes allocated during the step over "
           "parameters, buffers and batch; `python -m sgc_trace report` prints one row in detail):", "",
           *summary, ""]
    if vs:
        out += ["**Against PyTorch's `activation_memory_budget`** (saved: MiB held from forward to backward; "
                "recompute: GFLOPs of recomputed forward ops and their share of the forward's FLOPs; time: "
                "CPU ms per step (this process, both threads) over the step that recomputes nothing, least of "
                f"{a.repeat}; sgc: the plan recomputing least among those saving at most PyTorch's bytes):", "",
                "| model | budget | torch saved (MiB) | torch recompute GFLOPs | torch time (ms) | torch peak (MiB) "
                "| sgc saved (MiB) | sgc recompute GFLOPs | sgc time (ms) | sgc peak (MiB) |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *vs, ""]
    Path(a.out).write_text("\n".join(out))
    Path(a.out).with_suffix(".details.md").write_text("\n".join(details))


if __name__ == "__main__":
    sys.exit(main())
