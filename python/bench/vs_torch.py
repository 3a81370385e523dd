"""sgc plans applied in PyTorch, beside sgc's prediction and beside PyTorch's own answer.

    python bench/vs_torch.py --out ../target/vs_torch.md [--only resnet18,lstm] [--skip-torch]

Per model, at a small batch (CPU runs of seconds):

* **Plan vs prediction**: the unplanned step (sgc's `none` plan applied) and the planned
  step (sublinear, lowest peak), measured (`sgc_trace.tools.measure`: bytes saved for backward,
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
import copy
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sgc_trace.apply import compile as sgc_compile  # noqa: E402
from sgc_trace.apply import input_specs, trace  # noqa: E402
from sgc_trace.tools.cli import lm_cross_entropy  # noqa: E402
from sgc_trace.tools.measure import best_seconds, fresh, peak_bytes, torch_compiled_step, torch_grads  # noqa: E402
from sgc_trace.apply.planner import PlanError, plan  # noqa: E402
from sgc_trace.tools.report import markdown, measure_plans, mib  # noqa: E402

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

    from sgc_trace.tools.zoo import LSTMLanguageModel

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
        "lstm": ("sgc_trace.tools.zoo LSTM LM (2 x 1500), batch 16, 64 tokens", LSTMLanguageModel,
                 _tokens(16, 64, 10000), lm_cross_entropy),
    }


def build(factory):
    torch.manual_seed(0)
    return factory().train()


def least_saved(graph) -> int:
    """The fewest bytes any partition plan of `graph` keeps for the backward (sgc's refusal
    of a zero budget states it)."""
    try:
        plan(graph, strategy="partition", budget=0, budget_of="saved")
    except PlanError as e:
        found = re.search(r"the least kept is (\d+) B", str(e))
        if found:
            return int(found.group(1))
        raise
    return 0


class SgcAt:
    """sgc's partition plans at PyTorch's measured saved bytes: `--strategy partition
    --budget-of saved` at that figure, with recomputation priced as PyTorch prices it (each
    op's FLOPs as its `time_us`, so both minimise the same figure; the roofline estimate,
    scaled far down, breaks ties between "free" elementwise ops), applied and measured; when the measured bytes exceed
    the target (PyTorch's runtime keeps a storage sgc's graph counts differently), planned
    again with the budget lowered by the excess (twice at most)."""

    def __init__(self, model, loss_fn, batch, repeat):
        self.model, self.loss_fn, self.batch, self.repeat = model, loss_fn, batch, repeat
        graph, joint, fx_nodes = trace(model, loss_fn, input_specs(batch, 1))
        # PyTorch's pricing: an op costs its FLOPs (0 for ops without a formula); ties
        # (elementwise ops, all "free") are broken by the exporter's roofline time at 10
        # FLOPs per microsecond, thousands of times below any matmul's price but above the
        # planner's cost resolution (2^-40 of a step).
        graph = copy.deepcopy(graph)
        for op in graph["ops"]:
            op["time_us"] = float(op.get("flops", 0)) + 10.0 * float(op.get("time_us", 0.0))
        self.traced = (graph, joint, fx_nodes)
        self.graph = graph
        self.flops = [op.get("flops", 0) for op in self.graph["ops"]]
        self.least = least_saved(self.graph)
        self.none = plan(self.graph, strategy="none")
        self.base = sgc_compile(fresh(model), loss_fn, batch, plan=self.none, traced=self.traced)
        self.base_time = best_seconds(self.base, *batch, repeat=repeat)
        self.measured: dict[str, dict] = {}

    def _apply(self, p) -> dict:
        key = p["summary"].get("recompute_cost"), len(p["steps"]), tuple(s["op"] for s in p["steps"] if s["recompute"])
        if key not in self.measured:
            step = sgc_compile(fresh(self.model), self.loss_fn, self.batch, plan=p, traced=self.traced)
            t = best_seconds(step, *self.batch, repeat=self.repeat) - self.base_time
            _, peak = peak_bytes(step, *self.batch)
            self.measured[key] = {"time": t, "saved": step.saved_bytes, "peak": peak.bytes,
                                  "flops": sum(self.flops[s["op"]] for s in p["steps"] if s["recompute"])}
        return self.measured[key]

    def at(self, target: int) -> tuple[dict, bool]:
        """The measured plan at `target` saved bytes; whether it is within it."""
        budget = max(target, self.least)
        m = None
        for _ in range(3):
            m = self._apply(plan(self.graph, strategy="partition", budget=budget, budget_of="saved"))
            if m["saved"] <= target or budget <= self.least:
                break
            budget = max(self.least, budget - (m["saved"] - target))
        return m, m["saved"] <= target


def compare_torch(name, what, factory, batch, loss_fn, repeat: int) -> list[str]:
    model = build(factory)
    torch._dynamo.reset()
    base = torch_compiled_step(fresh(model), loss_fn, 1.0)
    base_time = best_seconds(base.run, *batch, repeat=repeat)
    sgc = SgcAt(model, loss_fn, batch, repeat)
    graph = sgc.graph
    total_flops = sum(op.get("flops", 0) for op in graph["ops"] if op.get("phase") == "forward")
    rows = []
    points = []  # (torch flops, sgc flops, sgc within torch's bytes, torch's grads right) per budget
    fixed = []  # the same with PyTorch's random draws kept where its own answer redraws them
    reference = None  # loss and gradients at budget 1.0, computed when first needed

    def share(f):
        return f"{f / 1e9:.3f} ({f / max(total_flops, 1):.1%})"

    def answer(b, keep_random):
        """PyTorch's plan at budget `b` (with `keep_random`, its random draws saved), sgc's at
        the bytes it saves; the row, the point and whether its backward draws again."""
        nonlocal reference
        torch._dynamo.reset()
        ts = torch_compiled_step(fresh(model), loss_fn, b, keep_random=keep_random)
        t_time = best_seconds(ts.run, *batch, repeat=repeat) - base_time
        _, t_peak = peak_bytes(ts.run, *batch)
        m, fits = sgc.at(ts.saved_bytes)
        mark = "" if fits else " (more: sgc's least)"
        # A plan that draws a random op's numbers again in the backward (dropout with a new
        # mask) may give other gradients than the step it replaces: checked bit for bit
        # against PyTorch's own budget-1.0 step, same seed, where it does.
        right = "yes"
        if ts.recomputed_random:
            if reference is None:
                reference = torch_grads(model, loss_fn, batch, 1.0)
            loss, grads = torch_grads(model, loss_fn, batch, b, keep_random=keep_random)
            diff = max((grads[k] - g).abs().max().item() for k, g in reference[1].items())
            same = torch.equal(loss, reference[0]) and diff == 0.0
            right = "yes" if same else f"**no** ({len(ts.recomputed_random)} random ops redrawn; max diff {diff:.1e})"
        label = f"{b:.1f}" + (" (random kept)" if keep_random else "")
        row = (f"| {name} | {label} | {mib(ts.saved_bytes)} | {share(ts.recompute_flops)} | {t_time * 1e3:+.0f} "
               f"| {mib(t_peak.bytes)} | {right} | {mib(m['saved'])}{mark} | {share(m['flops'])} "
               f"| {m['time'] * 1e3:+.0f} | {mib(m['peak'])} |")
        return row, (ts.recompute_flops, m["flops"], fits, right == "yes"), right != "yes"

    for b in BUDGETS:
        row, point, wrong = answer(b, False)
        rows.append(row)
        points.append(point)
        if wrong:
            # PyTorch's answer with its random draws kept (tagged must-save), the one that
            # gives its unplanned step's gradients: sgc is judged against that one here.
            row, point, _ = answer(b, True)
            rows.append(row)
        fixed.append(point)
    torch._dynamo.reset()
    _, base_peak = peak_bytes(base.run, *batch)
    _, sgc_base_peak = peak_bytes(sgc.base, *batch)
    rows.append(f"| {name} | 1.0 | {mib(base.saved_bytes)} | {share(base.recompute_flops)} | {base_time * 1e3:.0f} ms "
                f"| {mib(base_peak.bytes)} | (the reference) | {mib(sgc.base.saved_bytes)} (`none`) | 0 "
                f"| {sgc.base_time * 1e3:.0f} ms | {mib(sgc_base_peak.bytes)} |")
    return rows, verdict(name, points, fixed)


def verdict(name, points, fixed) -> str:
    """One line per model: at how many budgets sgc recomputes at most PyTorch's FLOPs within
    PyTorch's bytes, and whether each side's recompute falls as the budget grows; where
    PyTorch's own answer draws random numbers again (other gradients), also against its
    answer with those draws kept."""
    def monotone(xs):
        return all(b <= a for a, b in zip(xs, xs[1:]))

    def at_most(ps):
        return sum(1 for t, s, fits, _ in ps if fits and s <= t)
    line = (f"- {name}: sgc at or below PyTorch's recompute FLOPs within its saved bytes at {at_most(points)} of "
            f"{len(points)} budgets (largest excess {max(s - t for t, s, _, _ in points) / 1e9:+.3f} GFLOPs)")
    wrong = sum(1 for p in points if not p[3])
    if wrong:
        line += (f"; PyTorch's gradients differ from its own unplanned step at {wrong} budgets (random ops drawn "
                 f"again in the backward); against its answers with the random draws kept there, sgc is at or "
                 f"below at {at_most(fixed)} of {len(fixed)} (largest excess "
                 f"{max(s - t for t, s, _, _ in fixed) / 1e9:+.3f} GFLOPs)")
    return (line + f"; recompute non-increasing with the budget: PyTorch "
            f"{'yes' if monotone([p[0] for p in points]) else 'NO'}, "
            f"sgc {'yes' if monotone([p[1] for p in points]) else 'NO'}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--skip-torch", action="store_true", help="only the plan-vs-prediction table")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--device", default="cpu",
                   help="cpu (this table); cuda: the GPU table at training sizes (bench/gpu_table.py, which "
                        "takes the remaining options)")
    a, rest = p.parse_known_args(argv)
    if a.device != "cpu":
        import gpu_table

        return gpu_table.main(["--device", a.device, "--out", a.out, *(["--only", a.only] if a.only else []), *rest])
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    table = models()
    names = [n for n in table if not a.only or n in a.only.split(",")]
    start = time.time()
    summary = [
        "| model | shapes | unplanned: measured peak / predicted | planned: measured / predicted | planned / unplanned "
        "measured (predicted) | saved for backward planned / unplanned (MiB) | peak op, its scratch (MiB) "
        "| recompute share | loss, grads bitwise = unplanned | = eager |",
        "|---|---|---:|---:|---:|---:|---|---:|---|---|",
    ]
    details, vs, verdicts = [], [], []
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
            rows, line = compare_torch(name, what, factory, batch, loss_fn, a.repeat)
            vs += rows
            verdicts.append(line)
            print("\n".join(vs[-10:]), f"({time.time() - t0:.0f} s)", flush=True)
            _write(a, start, summary, vs, details, verdicts)
    print(f"wrote {a.out}")
    return 0


def _write(a, start, summary, vs, details, verdicts=()) -> None:
    out = ["Generated by `just vs-torch` (`python/bench/vs_torch.py`) on this machine's CPU "
           f"(torch {torch.__version__.split('+')[0]}, {time.time() - start:.0f} s).", "",
           "**Plans applied, measured beside sgc's prediction** (peak: bytes allocated during the step over "
           "parameters, buffers and batch; `python -m sgc_trace report` prints one row in detail):", "",
           *summary, ""]
    if vs:
        out += ["**Against PyTorch's `activation_memory_budget`** (saved: MiB held from forward to backward; "
                "recompute: GFLOPs of recomputed forward ops and their share of the forward's FLOPs; time: "
                "CPU ms per step (this process, both threads) over the step that recomputes nothing, least of "
                f"{a.repeat}; torch grads right: loss and every gradient bit for bit those of PyTorch's own "
                "budget-1.0 step from the same seed, checked where its backward recomputes a random op such as "
                "dropout (which draws a new mask unless the RNG state is replayed; sgc keeps every random op's "
                "draw and recomputes only what reads it, and its plans match the unplanned step bit for bit, "
                "table above); a row marked (random kept) is PyTorch's answer at the same budget with every random "
                "op tagged must-save in its joint graph, run where its own answer draws again; sgc: `--strategy "
                "partition --budget-of saved` at PyTorch's measured saved bytes, "
                "ops priced by their FLOPs as PyTorch prices them, ties broken by sgc's roofline estimate):", "",
                "| model | budget | torch saved (MiB) | torch recompute GFLOPs | torch time (ms) | torch peak (MiB) "
                "| torch grads right | sgc saved (MiB) | sgc recompute GFLOPs | sgc time (ms) | sgc peak (MiB) |",
                "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|", *vs, "", *verdicts, ""]
    Path(a.out).write_text("\n".join(out))
    Path(a.out).with_suffix(".details.md").write_text("\n".join(details))


if __name__ == "__main__":
    sys.exit(main())
