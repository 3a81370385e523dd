"""A ResNet-style CNN (basic residual blocks with BatchNorm), exported, inspected, planned.

    python examples/resnet_cnn.py --batch 32 -o resnet_cnn.json
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from _example import run_example

from sgc_trace import InputSpec


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64), blocks=2, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(*[BasicBlock(cin if j == 0 else w, w, 2 if (i > 0 and j == 0) else 1) for j in range(blocks)]))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        h = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def build(widths=(16, 32, 64), blocks: int = 2, classes: int = 10) -> nn.Module:
    return ResNet(tuple(widths), blocks, classes)


def inputs(batch: int, image: int = 32, classes: int = 10) -> list[InputSpec]:
    return [
        InputSpec("image", (batch, 3, image, image)),
        InputSpec("label", (batch,), torch.int64, high=classes),
    ]


loss = F.cross_entropy

if __name__ == "__main__":
    run_example("resnet_cnn", build, inputs, loss, default_batch=32)
