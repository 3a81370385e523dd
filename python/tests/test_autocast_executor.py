"""Mixed-precision steps run by sgc's executor: a model traced under `torch.autocast` (bf16
and f16) exported for the CPU backend (`executor="cpu"`, gaps refused), run on sgc, and
compared with PyTorch's own autocast step on the same weights and inputs.

The executor holds f16 and bf16 tensors and computes each kernel in f32 on exactly widened
operands, rounding once to the output's dtype, as PyTorch's CPU kernels do; autocast's casts
are `_to_copy` ops of the graph. Each tensor (the loss, every gradient) is held against
PyTorch's float64 step to `max(1e-4, 10x PyTorch's own autocast error)`: sgc rounds where
PyTorch rounds, so its error is of the same size, not of float32's. A sublinear and a DTR
plan give bitwise the unplanned step. About 20 s on 2 cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from torchvision_sweep import same_bits  # noqa: E402

from sgc_trace import InputSpec, export  # noqa: E402
from sgc_trace.native import module  # noqa: E402
from sgc_trace.tools.execute import against_pytorch, run_on_sgc  # noqa: E402


class _Cnn(nn.Module):
    """Convolutions (bf16 under autocast), batch norm (f32), max and adaptive pooling."""

    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                               nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.f(x)


class _Lm(nn.Module):
    """An embedding, one transformer encoder layer (attention, layer norms), a head."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 50)

    def forward(self, x):
        return self.head(self.layer(self.embed(x))).flatten(0, 1)


def _mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))


CASES = {
    "mlp": (_mlp, [InputSpec("x", (4, 8)), InputSpec("target", (4,), torch.int64, high=4)],
            lambda: {"x": torch.randn(4, 8), "target": torch.randint(0, 4, (4,))}),
    "cnn": (_Cnn, [InputSpec("x", (2, 3, 16, 16)), InputSpec("target", (2,), torch.int64, high=10)],
            lambda: {"x": torch.randn(2, 3, 16, 16), "target": torch.randint(0, 10, (2,))}),
    "lm": (_Lm, [InputSpec("x", (2, 8), torch.int64, high=50), InputSpec("target", (16,), torch.int64, high=50)],
           lambda: {"x": torch.randint(0, 50, (2, 8)), "target": torch.randint(0, 50, (16,))}),
}
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_an_autocast_step_runs_on_sgc_as_pytorch_runs_it(name, dtype):
    build, specs, values = CASES[name]
    torch.manual_seed(0)
    model, inputs = build(), values()
    graph = export(model, F.cross_entropy, specs, autocast=DTYPES[dtype], executor_gaps="raise", mark_batch=False)
    halves = [t["name"] for t in graph["tensors"] if t["dtype"] == dtype]
    assert halves and any(o["op"] == "aten._to_copy.default" for o in graph["ops"]), "not a mixed-precision graph"
    unplanned = run_on_sgc(graph, model, inputs)
    step = against_pytorch(model, F.cross_entropy, graph, inputs, got=unplanned, autocast=DTYPES[dtype])
    assert len(step.errors) > 2 and not step.failed, [(k, step.errors[k], step.tolerance(k)) for k in step.failed]
    sgc = module()
    for strategy in ("sublinear", "dtr"):
        plan = sgc.plan(sgc.load(graph), strategy=strategy, genetic_iters=1)
        planned = run_on_sgc(graph, model, inputs, plan=plan)
        assert all(same_bits(planned[k], unplanned[k]) for k in unplanned), strategy


def test_both_backends_cover_a_half_precision_graph():
    """Both backends hold f16 and bf16 (each computes in f32 on widened copies) and cast:
    the coverage of a bf16 autocast step is empty on both (the CUDA kernels are checked on
    the emulated device: crates/sgc-exec/tests/dtypes.rs)."""
    build, specs, _ = CASES["mlp"]
    graph = export(build(), F.cross_entropy, specs, autocast=torch.bfloat16, executor_gaps="raise", mark_batch=False)
    sgc = module()
    g = sgc.load(graph)
    for device in ("cpu", "cuda"):
        assert sgc.inspect(g, device=device)["coverage"]["missing"] == [], device
