"""Only ops that draw random numbers or write state are `recomputable: false`."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gpt
from sgc_trace import InputSpec, export
from sgc_trace.exporter.convert import _recomputable
from sgc_trace.exporter.trace import split_dropout

aten = torch.ops.aten
SDPA_CPU = "aten._scaled_dot_product_flash_attention_for_cpu.default"
RANDOM = {"aten.native_dropout.default", "aten.bernoulli.p", "aten.bernoulli.default", "aten.rand_like.default",
          "aten.randn_like.default", "aten.rand.default", "aten.randn.default"}
WRITERS = {"aten.copy_.default", "aten.add_.Tensor"}


def _by_type(graph, op_type):
    return [op for op in graph["ops"] if op["op"] == op_type]


def test_attention_without_dropout_is_recomputable():
    graph = export(lambda: gpt.build(dropout=0.0), gpt.loss, gpt.inputs(2))
    attention = _by_type(graph, SDPA_CPU)
    assert len(attention) == 2  # one per block; the CPU fused kernel, tagged nondeterministic_seeded
    assert all(op["attrs"]["dropout_p"] == 0.0 and op.get("recomputable", True) for op in attention)
    assert all(op.get("recomputable", True) for op in _by_type(graph, SDPA_CPU.replace(".default", "_backward.default")))
    assert all(op.get("recomputable", True) for op in graph["ops"])  # nothing random, nothing written


def test_dropout_is_not_recomputable():
    graph = export(lambda: gpt.build(dropout=0.1), gpt.loss, gpt.inputs(2))
    dropout = _by_type(graph, "aten.native_dropout.default")
    # embedding, 2 x (attention weights inside SDPA's math path, MLP output)
    assert len(dropout) == 5 and all(op["recomputable"] is False for op in dropout)
    assert {op["op"] for op in graph["ops"] if op.get("recomputable") is False} == {"aten.native_dropout.default"}
    # Its backward only scales by the saved mask: recomputable.
    assert all(op.get("recomputable", True) for op in _by_type(graph, "aten.native_dropout_backward.default"))


def test_dropout_output_is_a_recomputable_product_of_the_mask():
    """The random op's float output is read by nothing: its readers read `x * mask * scale`,
    two recomputable multiplies, so a plan can keep the 1-byte mask and recompute the rest."""
    graph = export(lambda: gpt.build(dropout=0.1), gpt.loss, gpt.inputs(2))
    read = {t for op in graph["ops"] for t in op["inputs"]}
    tensors = {t["name"]: t for t in graph["tensors"]}
    by_input = {}
    for op in graph["ops"]:
        for t in op["inputs"]:
            by_input.setdefault(t, []).append(op)
    for op in _by_type(graph, "aten.native_dropout.default"):
        out, mask = op["outputs"]
        assert out not in read and out not in graph["outputs"]
        (masked,) = [o for o in by_input[mask] if o["op"] == "aten.mul.Tensor"]
        assert masked["inputs"] == [op["inputs"][0], mask] and masked.get("recomputable", True)
        (scaled,) = by_input[masked["outputs"][0]]
        assert scaled["op"] == "aten.mul.Tensor" and scaled.get("recomputable", True)
        assert scaled["attrs"]["other"] == pytest.approx(1 / (1 - op["attrs"]["p"]))
        # Each owns its bytes: none is a view of the dropout's unread output.
        for name in [out, mask, *masked["outputs"], *scaled["outputs"]]:
            assert "alias_of" not in tensors[name], name


def test_split_dropout_is_bitwise_the_fused_op():
    x = torch.randn(64, 33)
    torch.manual_seed(3)
    out, mask = aten.native_dropout(x, 0.3, True)
    gm = torch.fx.symbolic_trace(_Dropout())
    assert split_dropout(gm) == 1
    torch.manual_seed(3)
    got, got_mask = gm(x)
    assert torch.equal(got.view(torch.int32), out.view(torch.int32)) and torch.equal(got_mask, mask)


class _Dropout(nn.Module):
    def forward(self, x):
        out, mask = aten.native_dropout.default(x, 0.3, True)
        return out, mask


def _node(target, *args, **kwargs) -> torch.fx.Node:
    g = torch.fx.Graph()
    q = g.placeholder("q")
    return g.call_function(target, (q, q, q, *args), kwargs)


@pytest.mark.parametrize(
    "target,args,kwargs,expected",
    [
        (aten._scaled_dot_product_flash_attention_for_cpu.default, (), {}, True),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, (0.0, True), {}, True),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, (0.1,), {}, False),
        (aten._scaled_dot_product_flash_attention_for_cpu.default, (), {"dropout_p": 0.2}, False),
        (aten._scaled_dot_product_efficient_attention.default, (None, True, 0.0), {}, True),
        (aten._scaled_dot_product_efficient_attention.default, (None, True, 0.5), {}, False),
        (aten.scaled_dot_product_attention.default, (None, 0.0), {}, True),
        (aten.scaled_dot_product_attention.default, (None, 0.3), {}, False),
    ],
)
def test_sdpa_overloads_depend_on_dropout_p(target, args, kwargs, expected):
    assert torch.Tag.nondeterministic_seeded in target.tags
    assert _recomputable(_node(target, *args, **kwargs)) is expected


def test_random_draws_and_writes_are_not_recomputable():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    assert not _recomputable(g.call_function(aten.rand_like.default, (x,)))
    assert not _recomputable(g.call_function(aten.bernoulli.p, (x, 0.5)))
    assert not _recomputable(g.call_function(aten.native_dropout.default, (x, 0.1, True)))
    assert not _recomputable(g.call_function(aten.add_.Tensor, (x, x)))
    assert _recomputable(g.call_function(aten.add.Tensor, (x, x)))
    assert _recomputable(g.call_function(operator.add, (x, x)))


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        h = h + 0.1 * torch.randn_like(h)
        return h * torch.bernoulli(torch.sigmoid(h)).detach()


def test_traced_random_ops_are_the_only_non_recomputable_ones():
    graph = export(Noisy, F.mse_loss, [InputSpec("x", (3, 4)), InputSpec("y", (3, 4))], update="sgd")
    fixed = {op["op"] for op in graph["ops"] if op.get("recomputable") is False}
    assert {"aten.randn_like.default", "aten.bernoulli.default", "aten.add_.Tensor"} <= fixed
    assert fixed <= RANDOM | WRITERS
    for op in graph["ops"]:
        if op["op"] in RANDOM:
            assert op["recomputable"] is False
