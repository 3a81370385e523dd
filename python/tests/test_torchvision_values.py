"""torchvision models run by sgc's executor against PyTorch on the same weights and inputs:
the fixed CI subset of `python/bench/torchvision_sweep.py` (`just torchvision` runs all 80).

Per model (batch 2, small images, dropout off): the loss and every gradient against
PyTorch's float64 step (within 1e-4 of each tensor's largest magnitude, or 10x PyTorch's own
float32 error where a tensor is that sensitive to rounding); every ATen op replayed by
PyTorch on the values sgc gave its inputs; a sublinear plan's step bitwise equal to the
unplanned one. alexnet: `_adaptive_avg_pool2d` whose windows repeat rows (2x2 -> 6x6) and
dropout; mobilenet_v2: ReLU6 (`hardtanh`) and depthwise convolutions; resnet18: the
corpus's staples. About 90 s on 2 cores with the small Swin modules.
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


class _Pad(torch.nn.Module):
    """`F.pad` with pads of both signs and a value (`constant_pad_nd`; its backward is the
    pad negated: a crop where it padded, zeros where it cropped)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4 * 6 * 9, 10)

    def forward(self, x):
        return self.head(F.pad(self.conv(x), (1, 2, -1, 1), value=0.5).flatten(1))


class _Roll(torch.nn.Module):
    """`torch.roll` over two axes with shifts of both signs, and of the flattened tensor
    (its backward: the opposite roll)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        h = self.conv(x)
        return self.head((torch.roll(h, shifts=(-2, 3), dims=(2, -1)) * torch.roll(h, 7)).flatten(1))


class _StridedSlices(torch.nn.Module):
    """Swin's patch merging: the four pixels of each 2x2 block by strided slices (views with a
    step), concatenated; their backward is `slice_backward`, decomposed at export into
    `zeros` and `slice_scatter`. Plus a step that does not divide the axis (`::4` of 6)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(16 * 3 * 3 + 4 * 6 * 2, 10)

    def forward(self, x):
        h = self.conv(x)
        blocks = [h[:, :, i::2, j::2] for i in (0, 1) for j in (0, 1)]
        return self.head(torch.cat([torch.cat(blocks, 1).flatten(1), h[..., 1::4].flatten(1)], 1))


class _ShiftedWindows(torch.nn.Module):
    """Swin's shifted-window attention on a 6x6 map in 3x3 windows, shifted by 1
    (torchvision's `shifted_window_attention`): the map rolled, the attention mask built from
    window ids written into slices of zeros (`slice_scatter`), compared window by window
    (`ne`, `eq`, bool masks) into `masked_fill` (`where`), added to the logits."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4 * 36, 10)

    def forward(self, x):
        h = self.conv(x)
        (b, c, size, _), ws, shift = h.shape, 3, 1
        mask, count = h.new_zeros((size, size)), 0
        for rows in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            for cols in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
                mask[rows, cols] = count
                count += 1
        n = (size // ws) ** 2
        mask = mask.view(size // ws, ws, size // ws, ws).permute(0, 2, 1, 3).reshape(n, ws * ws)
        mask = mask.unsqueeze(1) - mask.unsqueeze(2)
        mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        t = torch.roll(h, shifts=(-shift, -shift), dims=(2, 3))
        t = t.view(b, c, size // ws, ws, size // ws, ws).permute(0, 2, 4, 3, 5, 1).reshape(b * n, ws * ws, c)
        attn = (t @ t.transpose(1, 2)).view(b, n, ws * ws, ws * ws) + mask.unsqueeze(0)
        out = attn.softmax(-1).view(b * n, ws * ws, ws * ws) @ t
        return self.head(out.reshape(b, -1))


SMALL = {
    # googlenet's and squeezenet's pooling: a last window that hangs past the input.
    # 6x6 pooled by 3 with stride 2: 3x3 windows where floor mode has 2x2; padded, 4x4.
    "max_pool_ceil_mode": lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.MaxPool2d(3, 2, ceil_mode=True),
                                                      torch.nn.Flatten(), torch.nn.Linear(4 * 3 * 3, 10)),
    "max_pool_ceil_mode_padded": lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3),
                                                             torch.nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
                                                             torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 10)),
    "sum_over_axes_0_2_3": _LayerScale,
    "constant_pad_both_signs": _Pad,
    "roll_two_axes_and_flat": _Roll,
    "strided_slices": _StridedSlices,
    "shifted_window_mask": _ShiftedWindows,
}

# Op types a small module's graph must hold (what it is there to test).
HOLDS = {
    "constant_pad_both_signs": {"aten.constant_pad_nd.default"},
    "roll_two_axes_and_flat": {"aten.roll.default"},
    "strided_slices": {"aten.slice.Tensor", "aten.slice_scatter.default"},
    "shifted_window_mask": {"aten.roll.default", "aten.slice_scatter.default", "aten.eq.Scalar", "aten.ne.Scalar",
                            "aten.where.self"},
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sgc_runs_the_small_module_as_pytorch_does(name):
    torch.manual_seed(0)
    model = SMALL[name]()
    graph = export(model, F.cross_entropy, [InputSpec("x", (2, 3, 8, 8)), InputSpec("y", (2,), torch.int64, high=10)],
                   name=name, mark_batch=False)
    assert HOLDS.get(name, set()) <= {o["op"] for o in graph["ops"]}
    assert not graph["meta"].get("executor_gaps")
    inputs = {"x": torch.randn(2, 3, 8, 8), "y": torch.randint(0, 10, (2,))}
    step = against_pytorch(model, F.cross_entropy, graph, inputs)
    assert not step.failed, [(k, step.errors[k], step.tolerance(k)) for k in step.failed]
    ops = replay_ops(graph, model, inputs)
    assert not ops.failed, ops.failed[:5]
    assert all(op in ops.per_type for op in HOLDS.get(name, ())), ops.skipped
