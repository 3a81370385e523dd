"""Training-mode BatchNorm is exported as a recomputable normalisation plus a pure update of
the running statistics, so that only the `copy_` ops write state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sgc_trace import InputSpec, export

NO_STATS = "aten._native_batch_norm_legit.no_stats"
UPDATE = "sgc.batch_norm_update_stats"
torchvision = pytest.importorskip("torchvision")


@pytest.fixture(scope="module")
def resnet():
    inputs = [InputSpec("image", (2, 3, 32, 32)), InputSpec("label", (2,), torch.int64, high=10)]
    return export(lambda: torchvision.models.resnet18(num_classes=10), F.cross_entropy, inputs, update="sgd")


def _tensors(graph):
    return {t["name"]: t for t in graph["tensors"]}


def test_only_the_stats_update_and_state_writers_read_state(resnet):
    tensors = _tensors(resnet)
    for op in resnet["ops"]:
        state = [i for i in op["inputs"] if tensors[i].get("kind") == "state"]
        if not state:
            continue
        if op["op"] == "aten.add.Tensor":  # num_batches_tracked += 1, then copied back
            assert all(s.endswith(".num_batches_tracked") for s in state), op["name"]
        else:
            assert op["op"] in (UPDATE, "aten.copy_.default", "aten.add_.Tensor"), op["name"]


def test_every_batch_norm_is_split_and_recomputable(resnet):
    types = [op["op"] for op in resnet["ops"]]
    assert "aten._native_batch_norm_legit_functional.default" not in types
    norms = [op for op in resnet["ops"] if op["op"] == NO_STATS]
    bn_modules = [m for m in torchvision.models.resnet18().modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(norms) == len(bn_modules) == types.count(UPDATE)
    tensors = _tensors(resnet)
    for op in norms:
        assert op.get("recomputable", True) is True
        assert all(tensors[i].get("kind") != "state" for i in op["inputs"])
        assert len(op["inputs"]) == 3 and tensors[op["inputs"][1]]["kind"] == "param"
        assert len(op["outputs"]) == 3
        assert op["attrs"] == {"training": True, "momentum": 0.1, "eps": 1e-05}
        assert op["time_us"] > 0


def test_stats_update_reads_the_batch_statistics_and_feeds_only_copies(resnet):
    tensors = _tensors(resnet)
    ops = resnet["ops"]
    producer = {o: op for op in ops for o in op["outputs"]}
    readers: dict[str, list[dict]] = {}
    for op in ops:
        for i in op["inputs"]:
            readers.setdefault(i, []).append(op)
    for op in (op for op in ops if op["op"] == UPDATE):
        mean, var, save_mean, save_rstd = op["inputs"]
        assert mean.endswith(".running_mean") and var.endswith(".running_var")
        assert tensors[mean]["kind"] == tensors[var]["kind"] == "state"
        norm = producer[save_mean]
        assert norm["op"] == NO_STATS and norm["outputs"][1:] == [save_mean, save_rstd]
        x = tensors[norm["inputs"][0]]
        assert op["attrs"]["count"] == x["shape"][0] * x["shape"][2] * x["shape"][3]  # N * H * W
        assert tensors[save_mean]["shape"] == [x["shape"][1]]
        assert op["attrs"]["momentum"] == 0.1 and op["attrs"]["eps"] == 1e-05
        assert op.get("recomputable", True) is True and op["phase"] == "forward"
        for new, state in zip(op["outputs"], (mean, var)):
            assert [r["op"] for r in readers[new]] == ["aten.copy_.default"]
            copy = readers[new][0]
            assert copy["inputs"] == [state, new] and copy["recomputable"] is False


def test_batch_norm_backward_reads_the_saved_statistics_not_the_running_ones(resnet):
    tensors = _tensors(resnet)
    backward = [op for op in resnet["ops"] if op["op"] == "aten.native_batch_norm_backward.default"]
    assert backward
    for op in backward:
        assert not any(i.endswith(".updated") or tensors[i].get("kind") == "state" for i in op["inputs"])
        assert op["inputs"][3].endswith(".save_mean") and op["inputs"][4].endswith(".save_rstd")


def test_update_attrs_reproduce_torch_running_statistics():
    """momentum, eps and count are enough to compute BatchNorm's running statistics from
    the batch statistics that the recomputable op saves (what an executor of the op does)."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(5, momentum=0.3, eps=1e-3)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    old_mean, old_var = bn.running_mean.clone(), bn.running_var.clone()
    x = torch.randn(4, 5, 3, 6)
    bn.train()(x)
    _, save_mean, save_rstd = torch.ops.aten._native_batch_norm_legit.no_stats(x, bn.weight, bn.bias, True, 0.3, 1e-3)
    count = 4 * 3 * 6
    var = (1 / save_rstd**2 - 1e-3) * count / (count - 1)
    torch.testing.assert_close((1 - 0.3) * old_mean + 0.3 * save_mean, bn.running_mean)
    torch.testing.assert_close((1 - 0.3) * old_var + 0.3 * var, bn.running_var, rtol=1e-4, atol=1e-5)


def test_batch_norm_without_running_stats_has_no_update():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, track_running_stats=False),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))
    graph = export(model, F.cross_entropy, [InputSpec("x", (2, 3, 8, 8)), InputSpec("y", (2,), torch.int64)])
    types = [op["op"] for op in graph["ops"]]
    assert UPDATE not in types and "aten.copy_.default" not in types
    assert not any(t.get("kind") == "state" for t in graph["tensors"])
