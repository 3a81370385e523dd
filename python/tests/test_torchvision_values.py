"""torchvision models run by sgc's executor against PyTorch on the same weights and inputs:
the fixed CI subset of `python/bench/torchvision_sweep.py` (`just torchvision` runs all 80).

Per model (batch 2, small images, dropout off): the loss and every gradient against
PyTorch's float64 step (within 1e-4 of each tensor's largest magnitude, or 10x PyTorch's own
float32 error where a tensor is that sensitive to rounding); every ATen op replayed by
PyTorch on the values sgc gave its inputs; a sublinear plan's step bitwise equal to the
unplanned one. alexnet: `_adaptive_avg_pool2d` whose windows repeat rows (2x2 -> 6x6) and
dropout; mobilenet_v2: ReLU6 (`hardtanh`) and depthwise convolutions; resnet18: the
corpus's staples. About 40 s on 2 cores.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

torchvision = pytest.importorskip("torchvision")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from torchvision_sweep import same_bits, without_randomness  # noqa: E402

from sgc_trace import InputSpec, export  # noqa: E402
from sgc_trace.native import module  # noqa: E402
from sgc_trace.tools.execute import against_pytorch, replay_ops, run_on_sgc  # noqa: E402

CASES = {"alexnet": 64, "mobilenet_v2": 64, "resnet18": 64}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sgc_runs_the_torchvision_model_as_pytorch_does(name):
    size = CASES[name]
    torch.manual_seed(0)
    model = without_randomness(torchvision.models.get_model(name, weights=None, num_classes=10))
    graph = export(model, F.cross_entropy, [InputSpec("x", (2, 3, size, size)),
                                            InputSpec("y", (2,), torch.int64, high=10)], name=name, mark_batch=False)
    inputs = {"x": torch.randn(2, 3, size, size), "y": torch.randint(0, 10, (2,))}
    unplanned = run_on_sgc(graph, model, inputs)
    step = against_pytorch(model, F.cross_entropy, graph, inputs, got=unplanned)
    assert not step.failed, [(k, step.errors[k], step.tolerance(k)) for k in step.failed]
    ops = replay_ops(graph, model, inputs)
    assert not ops.failed, ops.failed[:5]
    assert ops.replayed > 0.9 * sum(1 for o in graph["ops"] if o["op"].startswith("aten.")), ops.skipped
    plan = module().plan(module().load(graph), strategy="sublinear", genetic_iters=1)
    planned = run_on_sgc(graph, model, inputs, plan=plan)
    assert all(same_bits(planned[k], unplanned[k]) for k in unplanned)


def test_a_tensor_of_the_wrong_size_is_refused_by_name():
    sgc = module()
    graph = {"format": "sgc-graph", "version": 1,
             "tensors": [{"name": "x", "dtype": "f32", "shape": [4], "kind": "input"},
                         {"name": "y", "dtype": "f32", "shape": [4]}],
             "ops": [{"name": "relu", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]}
    with pytest.raises(ValueError, match=r'values\["x"\]: 8 bytes, but the graph declares f32 \[4\] \(16 bytes\)'):
        sgc.execute(sgc.load(graph), {"x": bytes(8)})
    with pytest.raises(sgc.ExecutionError, match="x"):
        sgc.execute(sgc.load(graph), {})
    out = sgc.execute(sgc.load(graph), {"x": torch.tensor([-1.0, 2.0, -3.0, 4.0]).numpy().tobytes()})
    assert torch.frombuffer(bytearray(out["y"]), dtype=torch.float32).tolist() == [0.0, 2.0, 0.0, 4.0]


class _LayerScale(torch.nn.Module):
    """A per-channel scale (ConvNeXt's layer scale): its gradient sums over axes 0, 2 and 3."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.gamma = torch.nn.Parameter(torch.randn(1, 4, 1, 1))
        self.head = torch.nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        return self.head((self.conv(x) * self.gamma).flatten(1))


SMALL = {
    # googlenet's and squeezenet's pooling: a last window that hangs past the input.
    # 6x6 pooled by 3 with stride 2: 3x3 windows where floor mode has 2x2; padded, 4x4.
    "max_pool_ceil_mode": lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.MaxPool2d(3, 2, ceil_mode=True),
                                                      torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 10)),
    "max_pool_ceil_mode_padded": lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3),
                                                             torch.nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
                                                             torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 10)),
    "sum_over_axes_0_2_3": _LayerScale,
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sgc_runs_the_small_module_as_pytorch_does(name):
    torch.manual_seed(0)
    model = SMALL[name]()
    graph = export(model, F.cross_entropy, [InputSpec("x", (2, 3, 8, 8)), InputSpec("y", (2,), torch.int64, high=10)],
                   name=name, mark_batch=False)
    inputs = {"x": torch.randn(2, 3, 8, 8), "y": torch.randint(0, 10, (2,))}
    step = against_pytorch(model, F.cross_entropy, graph, inputs)
    assert not step.failed, [(k, step.errors[k], step.tolerance(k)) for k in step.failed]
    assert not replay_ops(graph, model, inputs).failed
