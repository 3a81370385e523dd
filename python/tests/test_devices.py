"""Devices, torch versions and mixed precision: tracing follows the model's device (CUDA
without a GPU: fake tensors and `engine.python_grad`), a mix of devices is one clear error,
unused parameters are found on every supported torch, and `torch.autocast` steps trace,
plan and apply."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import sgc_trace
import sgc_trace.exporter.build
from sgc_trace.exporter import engine
from sgc_trace.exporter.api import export
from sgc_trace.apply import input_specs, predicted_peak
from sgc_trace.tools.corpus import BY_NAME, CORPUS
from sgc_trace.errors import ExportError
from sgc_trace.tools.measure import compare, eager_step, fresh, peak_bytes
from test_compile import CNN, MLP, TinyTransformer, _case, _run


@pytest.fixture
def no_cuda_runtime(monkeypatch):
    """Any use of the CUDA runtime (a real CUDA tensor, `torch.cuda` initialisation) fails."""

    def refuse(*args, **kwargs):
        raise AssertionError("the trace reached the CUDA runtime")

    monkeypatch.setattr(torch.cuda, "_lazy_init", refuse)
    yield
    assert not torch.cuda.is_initialized()


def _fake_cuda(model: nn.Module) -> nn.Module:
    """`model` with fake CUDA parameters and buffers (as a user's `model.cuda()` is traced)."""
    return sgc_trace.exporter.build.prepare(model, FakeTensorMode(allow_non_fake_inputs=True), "cuda")


def _fake_batch(batch) -> list[torch.Tensor]:
    mode = FakeTensorMode()
    with mode:
        return [torch.empty(t.shape, dtype=t.dtype, device="cuda") for t in batch]


# -- torch versions: parameters the loss does not use --------------------------------


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_unused_parameters_are_found_on_this_torch():
    batch = (torch.randn(4, 8), torch.randint(0, 4, (4,)))
    graph = export(WithUnused(), F.cross_entropy, input_specs(batch, 1))
    assert graph["meta"]["params_without_grad"] == ["unused.weight", "unused.bias"]
    grads = {o for o in graph["outputs"] if o.endswith(".grad")}
    assert grads == {"a.weight.grad", "a.bias.grad", "b.weight.grad", "b.bias.grad"}
    step = sgc_trace.compile(WithUnused(), F.cross_entropy, batch, strategy="none")
    _run(step, batch)
    assert step.model.unused.weight.grad is None and step.model.a.weight.grad is not None


# -- the Python engine is the C++ engine's schedule -----------------------------------


def _both_engines(model_or_factory, loss, specs, **kw):
    a = export(model_or_factory, loss, specs, mark_batch=False, **kw)
    original = torch.autograd.grad
    torch.autograd.grad = engine.python_grad
    try:
        b = export(model_or_factory, loss, specs, mark_batch=False, **kw)
    finally:
        torch.autograd.grad = original
    return a, b


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer", "lstm"])
def test_python_engine_traces_the_cpp_engines_graph(name):
    model, loss_fn, batch = _case(name)
    a, b = _both_engines(model, loss_fn, input_specs(batch, 1))
    assert a == b


@pytest.mark.parametrize("name", [e.name for e in CORPUS])
def test_python_engine_traces_the_cpp_engines_graph_on_the_corpus(name):
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    spec = BY_NAME[name].make(True)
    a, b = _both_engines(spec.factory, spec.loss, spec.inputs, num_model_inputs=spec.num_model_inputs,
                         raw_output=spec.raw_output)
    assert [o["op"] for o in a["ops"]] == [o["op"] for o in b["ops"]]
    assert a == b


# -- CUDA without a GPU --------------------------------------------------------------


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_a_cuda_trace_needs_no_gpu_and_carries_cuda(name, no_cuda_runtime):
    model, loss_fn, batch = _case(name)
    specs = input_specs(batch, 1)
    cpu = export(model, loss_fn, specs)
    cuda = export(model, loss_fn, [dataclasses.replace(s, device=None) for s in specs], device="cuda")
    assert cuda["meta"]["device"] == "cuda" and "device" not in cpu["meta"]
    # Same step, same graph (ops, shapes, batch axes) whatever the device, here.
    assert [o["op"] for o in cuda["ops"]] == [o["op"] for o in cpu["ops"]]
    assert cuda["tensors"] == cpu["tensors"]


def _devices_of(gm: torch.fx.GraphModule) -> set[str]:
    """Devices of every value and every `device=` argument in an FX module."""
    found = set()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, (tuple, list)) else [val]:
            if isinstance(v, torch.Tensor):
                found.add(v.device.type)
        dev = node.kwargs.get("device")
        if dev is not None:
            found.add(torch.device(dev).type)
    return found


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_compile_on_fake_cuda_partitions_on_cuda(name, no_cuda_runtime):
    model, loss_fn, batch = _case(name)
    step = sgc_trace.compile(_fake_cuda(model), loss_fn, _fake_batch(batch), genetic_iters=2)
    assert step.graph["meta"]["device"] == "cuda"
    assert step.partition.recomputed_ops
    for gm in (step.partition.forward, step.partition.backward):
        assert _devices_of(gm) == {"cuda"}, gm.code
    # The step refuses a batch on another device, naming both.
    with pytest.raises(ExportError, match="is on cpu, the step was traced for cuda"):
        step(*batch)


def test_gpt2_cuda_trace_reaches_no_cuda_runtime(no_cuda_runtime):
    transformers = pytest.importorskip("transformers")
    spec = BY_NAME["gpt2"].make(True)
    graph = export(lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2)), spec.loss,
                   spec.inputs, device="cuda")
    assert graph["meta"]["device"] == "cuda"


def test_a_batch_on_another_device_is_one_error():
    model, loss_fn, batch = _case("mlp")
    with pytest.raises(ExportError, match=r"input `input_0` is on cuda(:0)? but the model is on cpu"):
        sgc_trace.compile(fresh(model), loss_fn, _fake_batch(batch))


def test_a_model_on_two_devices_is_one_error():
    model = MLP()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    model.head = sgc_trace.exporter.build.prepare(model.head, mode, "cuda")
    with pytest.raises(ExportError, match=r"the model is on two devices: parameter `layers.0.weight` on cpu, "
                                          r"parameter `head.weight` on cuda"):
        export(model, F.cross_entropy, [sgc_trace.InputSpec("x", (4, 32)),
                                        sgc_trace.InputSpec("y", (4,), torch.int64, high=10)])


def test_converting_a_module_copies_no_weight():
    model = MLP()
    before = {id(p): p.data_ptr() for p in model.parameters()}
    twin = sgc_trace.exporter.build.prepare(model, FakeTensorMode(), "cuda")
    assert all(p.device.type == "cuda" for p in twin.parameters())
    assert {id(p): p.data_ptr() for p in model.parameters()} == before  # the caller's module untouched
    assert all(p.device.type == "cpu" for p in model.parameters())


# -- mixed precision ------------------------------------------------------------------


def _no_dropout(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0
    return model


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer"])
def test_bf16_autocast_traces_plans_and_applies(name):
    model, loss_fn, batch = _case(name)
    model = _no_dropout(model)
    un = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none", autocast=torch.bfloat16)
    pl = sgc_trace.compile(fresh(model), loss_fn, batch, genetic_iters=3, autocast=torch.bfloat16)
    assert pl.graph["meta"]["autocast"] == "bf16"
    assert any(t["dtype"] == "bf16" for t in pl.graph["tensors"] if t.get("kind", "activation") == "activation")
    assert pl.partition.recomputed_ops
    ref = fresh(model)
    torch.manual_seed(0)
    expected = eager_step(ref, loss_fn, autocast=torch.bfloat16)(*batch)
    # The same casts as eager autocast, so the same bits; planned = unplanned bitwise.
    got = _run(un, batch)
    assert torch.equal(got, expected)
    assert compare(un.model, ref, exact=True)[0]
    assert torch.equal(_run(pl, batch), got)
    assert compare(pl.model, un.model, exact=True)[0]
    # Calling it under the autocast it was traced with is the same step.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _run(pl, batch)


def test_bf16_with_dropout_is_close_to_eager():
    # CPU eager dropout multiplies by a bf16-rounded 1/(1-p) (`at::dropout`'s noise tensor);
    # the traced step computes `native_dropout`'s fused form, as torch.compile and CUDA eager do.
    model, loss_fn, batch = _case("transformer")
    step = sgc_trace.compile(fresh(model), loss_fn, batch, genetic_iters=3, autocast=torch.bfloat16)
    ref = fresh(model)
    torch.manual_seed(0)
    expected = eager_step(ref, loss_fn, autocast=torch.bfloat16)(*batch)
    got = _run(step, batch)
    assert abs(got.item() - expected.item()) <= 2e-3 * abs(expected.item())


def test_bf16_plan_sizes_and_measured_peak():
    model, loss_fn, batch = _case("mlp")
    f32 = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    bf16 = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none", autocast=torch.bfloat16)
    # Activations of the linear layers are bf16: the step's prediction is smaller.
    assert predicted_peak(bf16.graph, bf16.plan)["step"] < predicted_peak(f32.graph, f32.plan)["step"]
    for strategy in ("none", "sublinear"):
        step = sgc_trace.compile(fresh(model), loss_fn, batch, strategy=strategy, genetic_iters=3,
                                 autocast=torch.bfloat16)
        _run(step, batch)
        for p in step.model.parameters():
            p.grad = None
        _, peak = peak_bytes(_run, step, batch)
        predicted = predicted_peak(step.graph, step.plan)["step"]
        # The CPU's bf16 matrix products (oneDNN) allocate scratch that sgc's model, which
        # counts operands, leaves out: the prediction lies between the peak without the peak
        # op's scratch and the peak with it (fp32: equal, `test_measured_peak_is_the_prediction`).
        assert peak.bytes - peak.workspace <= predicted <= peak.bytes, (strategy, peak, predicted)


def test_a_step_called_under_another_autocast_is_refused():
    model, loss_fn, batch = _case("mlp")
    step = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(ExportError, match="traced without autocast"):
        step(*batch)


def test_compile_inside_autocast_traces_with_it():
    model, loss_fn, batch = _case("cnn")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        step = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    assert step.graph["meta"]["autocast"] == "bf16"


# -- the training loop example ---------------------------------------------------------


def test_the_training_loop_example_trains_and_handles_the_last_batch(capsys):
    import train

    assert train.main(["--device", "cpu", "--epochs", "3", "--samples", "40", "--batch", "16"]) == 0
    out = capsys.readouterr().out
    assert "planned a step for batch (16, 64)" in out and "planned a step for batch (8, 64)" in out
    losses = [float(line.split("mean loss ")[1].split()[0]) for line in out.splitlines() if "mean loss" in line]
    assert len(losses) == 3 and losses[-1] < losses[0], out


# -- the GPU check's table, dry run ------------------------------------------------------


def test_the_gpu_table_runs_on_the_cpu(tmp_path):
    """`bench/gpu_table.py` (the GPU check's table) at small sizes on the CPU, on GPT-2 (the
    model the first dry run failed on; CI runs all three models with `--check` once): every
    row is measured and nothing fails, sgc's aot_eager steps equal eager's gradients, and
    every sgc row is within 2x of torch.compile's own difference from eager."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import gpu_table

    out = tmp_path / "gpu.md"
    assert gpu_table.main(["--device", "cpu", "--small", "--only", "gpt2", "--warmup", "0", "--repeat", "1",
                           "--genetic-iters", "1", "--check", "--out", str(out)]) == 0
    text = out.read_text()
    assert "failed" not in text and "**over" not in text, text
    rows = [line for line in text.splitlines() if line.startswith("| gpt2 |")]
    labels = [r.split("|")[2].strip() for r in rows]
    for want in ("eager", "torch.compile (inductor)", "sgc backend (aot_eager)", "sgc backend (inductor)",
                 "sgc none (aot_eager)", "sgc none (inductor)", "sgc sublinear", "torch.compile 1.0",
                 "torch.compile 0.5", "sgc partition at torch 0.5's saved bytes", "torch.compile 0.2"):
        assert want in labels, labels
    diff = {r.split("|")[2].strip(): r.split("|")[7].strip() for r in rows}
    assert diff["sgc none (aot_eager)"] == diff["sgc sublinear"] == diff["sgc backend (aot_eager)"] == "0.0e+00"
    strict = [line for line in text.splitlines() if line.startswith("| small transformer") or line.startswith("| ResNet")]
    assert len(strict) == 2 and all(r.count("0.0e+00") == 3 for r in strict), strict


def test_a_cuda_bf16_trace_without_a_gpu_has_its_casts(no_cuda_runtime):
    # torch.autocast("cuda") turns itself off where CUDA is unavailable; the trace must not.
    model, loss_fn, batch = _case("mlp")
    graph = export(model, loss_fn, [dataclasses.replace(s, device=None) for s in input_specs(batch, 1)],
                   device="cuda", autocast=torch.bfloat16)
    assert graph["meta"]["device"] == "cuda" and graph["meta"]["autocast"] == "bf16"
    assert any(t["dtype"] == "bf16" for t in graph["tensors"])
    assert any(o["op"] == "aten._to_copy.default" for o in graph["ops"])
    step = sgc_trace.compile(_fake_cuda(model), loss_fn, _fake_batch(batch), genetic_iters=2, autocast=torch.bfloat16)
    for gm in (step.partition.forward, step.partition.backward):
        assert _devices_of(gm) == {"cuda"}
