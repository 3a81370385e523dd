"""PyTorch's own samples (OpInfo's `op_db`) of ops the executor runs, exported one sample
per graph and run on sgc's CPU backend against PyTorch (`sgc_trace.tools.opinfo`): the op's
outputs element by element and every input's gradient through its backward.

CI runs a fixed subset: the first four samples of each OpInfo below in float32 (about 20 s
on 2 cores) and the first three in bfloat16 and in float16 (about 15 s each), the executor
computing those in f32 and rounding as PyTorch's CPU kernels do. `just opinfo` walks all of
`op_db` in the three dtypes and writes the tables of docs/ops.md.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("expecttest")  # torch.testing._internal needs it; requirements-ci pins it

from sgc_trace.tools.opinfo import _finite_error, walk  # noqa: E402

# One OpInfo per kind of kernel: arithmetic with broadcasting and scalars, the math
# functions, activations, reductions over axes, views and shape ops, matrix products,
# convolution, pooling, normalisation, softmax and losses.
CI_OPINFOS = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh",
    "sigmoid", "abs", "reciprocal", "maximum", "minimum", "nn.functional.relu", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.hardtanh", "nn.functional.leaky_relu", "sum", "mean", "transpose",
    "permute", "reshape", "expand", "unsqueeze", "cat", "stack", "mm", "bmm", "addmm", "nn.functional.conv2d",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.pad.constant", "roll",
    "nn.functional.layer_norm", "softmax", "log_softmax", "nn.functional.cross_entropy",
    "nn.functional.embedding",
]


# Samples per OpInfo in each dtype.
SAMPLES = {"float32": 4, "bfloat16": 3, "float16": 3}


@pytest.fixture(scope="module", params=sorted(SAMPLES))
def report(request):
    return walk(CI_OPINFOS, dtype=getattr(torch, request.param), max_samples=SAMPLES[request.param])


def test_every_subset_opinfo_runs_on_the_executor(report):
    ran = set(report.implemented)
    def named(opinfo: str, name: str) -> bool:  # the OpInfo or one of its variants
        return opinfo == name or opinfo.startswith(name + ".")

    unsupported = {r.opinfo for r in report.results if r.reason == "PyTorch does not support the dtype"}
    missing = [n for n in CI_OPINFOS if not any(named(r, n) for r in ran | unsupported)]
    assert not missing, {n: [r.reason for r in report.results if named(r.opinfo, n)][:2] for n in missing}


def test_pytorch_samples_pass_on_the_executor(report):
    failed = [(r.opinfo, r.index, r.reason) for r in report.results if r.status == "failed"]
    assert not failed, failed
    assert report.counts()["passed"] >= 1.5 * len(CI_OPINFOS), report.markdown()


def test_the_comparison_holds_nan_and_infinity_to_their_places():
    want = torch.tensor([1.0, float("nan"), float("inf"), 4.0])
    assert _finite_error(want.clone(), want) == 0.0
    assert _finite_error(torch.tensor([1.0, 2.0, float("inf"), 4.0]), want) == float("inf")
    assert _finite_error(torch.tensor([1.0, float("nan"), 3.0, 4.0]), want) == float("inf")
    assert _finite_error(torch.tensor([1.0, float("nan"), float("inf"), 4.4]), want) == pytest.approx(0.1)
    assert _finite_error(torch.ones(3), torch.ones(4)) == float("inf")
