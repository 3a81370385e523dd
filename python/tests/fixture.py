"""The committed fixture `tests/fixtures/torch_tiny_resnet.json`: a two-stage ResNet-style
CNN at batch 2 on 8x8 images with the SGD update, small enough to commit.

Regenerate: python3 python/tests/fixture.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "examples"))

import resnet_cnn  # noqa: E402

from sgc_trace import export, save  # noqa: E402

PATH = HERE.parents[1] / "tests" / "fixtures" / "torch_tiny_resnet.json"
CONFIG = {"widths": (4, 8), "blocks": 1, "classes": 4}


def make_fixture() -> dict:
    return export(
        lambda: resnet_cnn.build(**CONFIG),
        resnet_cnn.loss,
        resnet_cnn.inputs(2, image=8, classes=4),
        name="torch_tiny_resnet",
        update="sgd",
    )


if __name__ == "__main__":
    save(make_fixture(), PATH)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes)")
