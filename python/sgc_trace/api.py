"""The one-call API: build fake, trace the joint graph, convert, save."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, Sequence

from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from .convert import to_graph
from .trace import InputSpec, LossFn, build_fake, trace_joint


def export(
    model: nn.Module | Callable[[], nn.Module],
    loss_fn: LossFn,
    inputs: Sequence[InputSpec],
    num_model_inputs: int = 1,
    name: str | None = None,
    update: str = "none",
    lr: float = 0.01,
    meta: dict | None = None,
) -> dict:
    """Traces one training step and returns its version-1 graph as a JSON-ready dict.

    `model` is either a module or a zero-argument factory; a factory is called inside a
    FakeTensorMode so the weights are never allocated (use this for large models). The
    first `num_model_inputs` of `inputs` go to the model, the rest to `loss_fn` after the
    model's output: `loss = loss_fn(model(*inputs[:n]), *inputs[n:])`.
    `update`: `"none"` (gradients are graph outputs) or `"sgd"` (one in-place update op
    per parameter; the loss is the only output).
    """
    # Factory calls in forward (torch.arange for positions) make real constants while
    # AOTAutograd collects metadata; let fake ops read them.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    if not isinstance(model, nn.Module):
        model = build_fake(model, mode)
    model.train()
    trace = trace_joint(model, loss_fn, inputs, num_model_inputs, mode)
    extra = {"model": type(model).__name__, **(meta or {})}
    return to_graph(trace, name=name, update=update, lr=lr, meta=extra)


def save(graph: dict, path: str | Path) -> None:
    """Writes a graph as compact JSON (one tensor or op per line, so diffs stay readable)."""
    lines = ["{"]
    head = {k: v for k, v in graph.items() if k not in ("tensors", "ops")}
    for key in ("format", "version", "name"):
        if key in head:
            lines.append(f"  {json.dumps(key)}: {json.dumps(head.pop(key))},")
    for key in ("tensors", "ops"):
        rows = ",\n".join("    " + json.dumps(item, separators=(", ", ": ")) for item in graph[key])
        lines.append(f'  "{key}": [\n{rows}\n  ],')
    rest = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    lines.append(",\n".join(rest))
    lines.append("}")
    Path(path).write_text("\n".join(lines) + "\n")


def summary(graph: dict) -> dict:
    """Counts for reports: ops per phase, tensors per kind, views, parameters, FLOPs."""
    phases: dict[str, int] = {}
    for op in graph["ops"]:
        phases[op.get("phase", "none")] = phases.get(op.get("phase", "none"), 0) + 1
    kinds: dict[str, int] = {}
    for t in graph["tensors"]:
        kinds[t.get("kind", "activation")] = kinds.get(t.get("kind", "activation"), 0) + 1
    params = [t for t in graph["tensors"] if t.get("kind") == "param"]
    return {
        "ops": len(graph["ops"]),
        "ops_per_phase": phases,
        "tensors": len(graph["tensors"]),
        "tensors_per_kind": kinds,
        "views": sum(1 for t in graph["tensors"] if "alias_of" in t),
        "param_count": sum(math.prod(t["shape"]) for t in params),
        "flops": sum(op.get("flops", 0) for op in graph["ops"]),
    }
