"""`python -m sgc_trace report MODEL`: a plan applied in PyTorch, measured beside sgc's prediction.

For one model and batch: the unplanned step (sgc's `none` plan applied: every forward value
the backward reads is saved) and the planned step, each measured (bytes saved for backward,
the step's peak: `measure.py`) beside sgc's prediction (`apply.predicted_peak`, the same
quantity: bytes allocated during the step over the parameters, buffers and batch), and
checked against the eager step `loss_fn(model(x), y).backward()` (loss, gradients and
buffers, bitwise with `aot_eager`, allclose with `inductor`).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..apply.step import compile as compile_step, predicted_peak, tensor_bytes
from .measure import compare, eager_step, fresh, peak_bytes
from ..exporter.trace import LossFn


def measure_plans(model: nn.Module, loss_fn: LossFn, batch: Sequence[torch.Tensor], num_model_inputs: int = 1,
                  budget=None, strategy: str = "sublinear", genetic_iters: int | None = None, seed: int = 0,
                  backend: str = "aot_eager", raw_output: bool = False, budget_of: str = "device",
                  autocast: torch.dtype | None = None) -> dict:
    """Rows `eager`, `unplanned`, `planned` of the report, as dicts; and the plan. With
    `autocast`, every step is traced and the eager one run under `torch.autocast`."""
    ref = fresh(model)
    torch.manual_seed(seed)  # the same random draws (dropout) in every step
    ref_loss, ref_peak = peak_bytes(eager_step(ref, loss_fn, num_model_inputs, raw_output, autocast), *batch)
    rows = [{"step": "eager", "measured_peak": ref_peak.bytes, "loss": ref_loss.item()}]
    steps, models = {}, {}
    for label, kw in (("unplanned", {"strategy": "none"}),
                      ("planned", {"strategy": strategy, "budget": budget, "genetic_iters": genetic_iters,
                                   "seed": seed, "budget_of": budget_of})):
        m = fresh(model)
        step = compile_step(m, loss_fn, batch, backend=backend, num_model_inputs=num_model_inputs,
                            raw_output=raw_output, autocast=autocast, **kw)
        torch.manual_seed(seed)
        loss, peak = peak_bytes(step, *batch)
        exact = backend == "aot_eager"
        same, worst = compare(m, ref, exact=exact)
        loss_same = torch.equal(loss, ref_loss) if exact else torch.allclose(loss, ref_loss)
        if label == "unplanned":
            un_model, un_loss = m, loss
        same_un, worst_un = compare(m, un_model, exact=exact)
        same_un = same_un and (torch.equal(loss, un_loss) if exact else torch.allclose(loss, un_loss))
        pred = predicted_peak(step.graph, step.plan)
        rows.append({
            "step": label,
            "saved_bytes": step.saved_bytes,
            "predicted_saved_bytes": tensor_bytes(step.graph, [t for t in step.partition.saved_tensors
                                                               if t not in step.graph["outputs"]]),
            "measured_peak": peak.bytes,
            "peak_op": peak.op,
            "workspace": peak.workspace,
            "predicted_peak": pred["step"],
            "sgc_peak": pred["planned_peak"],
            "recomputed_ops": len(step.partition.recomputed_ops),
            "recompute_share": step.plan["summary"]["recompute_share"],
            "equal": same and loss_same,
            "max_abs_diff": worst,
            "equal_unplanned": same_un,
            "max_abs_diff_unplanned": worst_un,
            "loss": loss.item(),
        })
        steps[label] = step
    return {"rows": rows, "plan": steps["planned"].plan, "graph": steps["planned"].graph, "backend": backend}


def _yes(ok: bool, diff: float) -> str:
    return "yes" if ok else f"no (max diff {diff:.3g})"


def mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def markdown(result: dict) -> str:
    rows = {r["step"]: r for r in result["rows"]}
    un, pl = rows["unplanned"], rows["planned"]
    eq = "bitwise" if result["backend"] == "aot_eager" else "allclose"
    out = [
        f"| step | saved for backward (MiB) | predicted saved (MiB) | measured peak (MiB) | sgc predicted peak (MiB) "
        f"| measured / predicted | at op | its scratch (MiB) | (measured - scratch) / predicted "
        f"| recomputed ops | loss, grads {eq} = unplanned | = eager |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---|",
        f"| eager | | | {mib(rows['eager']['measured_peak'])} | | | | | | | | |",
    ]
    for r in (un, pl):
        out.append(f"| {r['step']} | {mib(r['saved_bytes'])} | {mib(r['predicted_saved_bytes'])} "
                   f"| {mib(r['measured_peak'])} | {mib(r['predicted_peak'])} "
                   f"| {r['measured_peak'] / max(r['predicted_peak'], 1):.3f} | `{r['peak_op']}` | {mib(r['workspace'])} "
                   f"| {(r['measured_peak'] - r['workspace']) / max(r['predicted_peak'], 1):.3f} | {r['recomputed_ops']} "
                   f"| {_yes(r['equal_unplanned'], r['max_abs_diff_unplanned'])} "
                   f"| {_yes(r['equal'], r['max_abs_diff'])} |")
    out.append("")
    out.append(f"planned / unplanned: measured {pl['measured_peak'] / max(un['measured_peak'], 1):.3f}, "
               f"predicted {pl['predicted_peak'] / max(un['predicted_peak'], 1):.3f}; saved bytes "
               f"{pl['saved_bytes'] / max(un['saved_bytes'], 1):.3f}; sgc's planned peak (persistent bytes and "
               f"batch included) {mib(pl['sgc_peak'])} MiB, recompute share {pl['recompute_share']:.1%}")
    return "\n".join(out)
