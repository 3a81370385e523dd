"""The committed fixture `tests/fixtures/torch_values_tiny_resnet.json`: a small
ResNet-style CNN (7x7 stem, BatchNorm, max pooling, two residual stages, global average
pooling, a linear head, cross-entropy) traced by `sgc_trace`, with the inputs, weights
and state it was run on and what PyTorch computed in float32: the loss and the gradient of
every parameter. The Rust test `tests/torch_values.rs` runs the graph on sgc's CPU backend
with the same values and compares.

Regenerate: python3 python/tests/values_fixture.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import resnet_cnn  # noqa: E402

from sgc_trace import export  # noqa: E402

PATH = HERE.parents[1] / "tests" / "fixtures" / "torch_values_tiny_resnet.json"
BATCH, IMAGE, CLASSES = 4, 16, 10


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        self.layers = resnet_cnn.build(widths=(8, 16), blocks=1, classes=CLASSES).layers
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x):
        h = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def _values(t: torch.Tensor) -> dict:
    flat = t.detach().reshape(-1)
    data = [int(v) for v in flat.tolist()] if not t.dtype.is_floating_point else flat.tolist()
    return {"shape": list(t.shape), "data": data}


def make_fixture() -> dict:
    torch.manual_seed(0)
    model = Tiny().train()
    image = torch.randn(BATCH, 3, IMAGE, IMAGE)
    label = torch.randint(0, CLASSES, (BATCH,))
    graph = export(model, F.cross_entropy, resnet_cnn.inputs(BATCH, image=IMAGE, classes=CLASSES),
                   name="torch_values_tiny_resnet", mark_batch=False)
    values = {"image": _values(image), "label": _values(label)}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        values[name] = _values(t)
    loss = F.cross_entropy(model(image), label)
    loss.backward()
    expected = {"loss": _values(loss)}
    for name, p in model.named_parameters():
        expected[f"{name}.grad"] = _values(p.grad)
    return {"torch_version": torch.__version__.split("+")[0], "graph": graph, "values": values, "expected": expected}


if __name__ == "__main__":
    PATH.write_text(json.dumps(make_fixture()) + "\n")
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes)")
