"""sgc as a `torch.compile` backend (`sgc_trace.backend`): the user's own loop, planned.

Single process, on the CPU: `loss.backward()` through the backend gives, bit for bit, the
gradients, the loss and the buffers of `sgc_trace.compile` on every model of the Python
tests (the same partitioner on the same plan); the optimizer, gradient accumulation,
`zero_grad` and `GradScaler` work as usual; graph breaks give several graphs, each planned
to the budget rule; inductor runs the planned modules; offloads run through it; and what
the backend cannot plan is refused by name before the first step. The distributed cases
(DDP, FSDP2) are `test_distributed.py`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import sgc_trace
from sgc_trace.errors import ExportError
from sgc_trace.tools.measure import fresh
from test_compile import CASES, _case


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles from scratch, and RNNs are traced (dynamo breaks the graph at
    `nn.LSTM` unless told otherwise)."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):
        yield
    torch._dynamo.reset()


def _backend_step(model, loss_fn, batch, backend, seed=0):
    compiled = torch.compile(model, backend=backend, dynamic=False)
    torch.manual_seed(seed)
    loss = loss_fn(compiled(batch[0]), *batch[1:])
    loss.backward()
    return loss.detach()


def _same(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad), f"{name}: largest difference {(p.grad - q.grad).abs().max():.3e}"
    for (name, x), y in zip(a.named_buffers(), b.buffers()):
        assert torch.equal(x, y), name


@pytest.mark.parametrize("name", CASES)
def test_backward_through_the_backend_is_sgc_trace_compile_bit_for_bit(name):
    model, loss_fn, batch = _case(name)
    step = sgc_trace.compile(fresh(model), loss_fn, batch, genetic_iters=5)
    torch.manual_seed(0)
    ref_loss = step(*batch)
    be = sgc_trace.backend(genetic_iters=5)
    mine = fresh(model)
    loss = _backend_step(mine, loss_fn, batch, be)
    assert torch.equal(loss, ref_loss)
    _same(step.model, mine)
    assert len(be.graphs) == 1
    g = be.graphs[0]
    assert g.partition.recomputed_ops, f"{name}: the plan recomputes nothing, the test would test nothing"
    # The caller's part: the forward's output stays until the backward starts.
    tangent = next(op for op in g.graph["ops"] if op["op"] == "sgc.tangent")
    assert tangent["phase"] == "backward" and tangent["inputs"] and tangent["outputs"]


def test_the_users_loop_trains_as_eager_does():
    """SGD with momentum, gradient accumulation over two micro-batches and `zero_grad`,
    three steps: the parameters after them are eager's, bit for bit (no dropout)."""
    model, loss_fn, batch = _case("cnn")
    eager, mine = fresh(model), fresh(model)
    compiled = torch.compile(mine, backend=sgc_trace.backend(genetic_iters=3), dynamic=False)
    for net, fn in ((eager, eager), (mine, compiled)):
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
        for step in range(3):
            opt.zero_grad()
            for half in (slice(0, 4), slice(4, 8)):
                loss = loss_fn(fn(batch[0][half]), batch[1][half]) / 2
                loss.backward()
            opt.step()
    for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
        assert torch.equal(p, q), name
    for x, y in zip(eager.buffers(), mine.buffers()):
        assert torch.equal(x, y)


def test_grad_scaler_and_autocast_run_through_the_backend():
    """bf16 autocast is traced into the graph (its casts are ops: the plan sizes each tensor
    in its own dtype), and GradScaler's scaled loss backpropagates through the planned step
    as through eager's."""
    model, loss_fn, batch = _case("mlp")
    eager, mine = fresh(model), fresh(model)
    be = sgc_trace.backend(genetic_iters=2)
    compiled = torch.compile(mine, backend=be, dynamic=False)
    for net, fn in ((eager, eager), (mine, compiled)):
        scaler = torch.amp.GradScaler("cpu", init_scale=256.0)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(fn(batch[0]), batch[1])
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    dtypes = {t["dtype"] for t in be.graphs[0].graph["tensors"]}
    assert "bf16" in dtypes
    for (name, p), q in zip(eager.named_parameters(), mine.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-2, atol=1e-3, msg=name)


class _Broken(nn.Module):
    """Two halves with a graph break between them."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(*[nn.Linear(64, 64) for _ in range(10)])
        self.b = nn.Sequential(*[nn.Linear(64, 64) for _ in range(10)])

    def forward(self, x):
        for layer in self.a:
            x = torch.tanh(layer(x))
        torch._dynamo.graph_break()
        for layer in self.b:
            x = torch.tanh(layer(x))
        return x.sum(1)


def test_a_graph_break_gives_two_graphs_each_planned_to_the_share():
    torch.manual_seed(0)
    model = _Broken()
    x = torch.randn(1024, 64)
    be = sgc_trace.backend(budget=0.8, genetic_iters=3)
    compiled = torch.compile(fresh(model), backend=be, dynamic=False)
    compiled(x).sum().backward()
    assert len(be.graphs) == 2
    for g in be.graphs:
        unplanned = sgc_trace.plan(g.graph, strategy="none")
        persistent = unplanned["summary"]["persistent_bytes"]
        device = unplanned["arena"]["size"] + persistent
        assert g.budget == persistent + int(0.8 * (device - persistent))
        assert g.plan["arena"]["size"] + persistent <= g.budget
        assert g.partition.recomputed_ops
    # Bit for bit the eager gradients: planning changes no number.
    ref = fresh(model)
    ref(x).sum().backward()
    _same(ref, compiled._orig_mod)


def test_a_byte_budget_bounds_each_graph():
    torch.manual_seed(0)
    model = _Broken()
    x = torch.randn(1024, 64)
    lowest = sgc_trace.backend()
    torch.compile(fresh(model), backend=lowest, dynamic=False)(x).sum().backward()
    budget = max(g.plan["arena"]["size"] + g.plan["summary"]["persistent_bytes"] for g in lowest.graphs) + 4096
    torch._dynamo.reset()
    be = sgc_trace.backend(budget=budget)
    torch.compile(fresh(model), backend=be, dynamic=False)(x).sum().backward()
    assert len(be.graphs) == 2
    for g in be.graphs:
        assert g.budget == budget
        assert g.plan["arena"]["size"] + g.plan["summary"]["persistent_bytes"] <= budget


def test_inductor_runs_the_planned_modules_and_is_as_close_as_torch_compile():
    model, loss_fn, batch = _case("cnn")
    ref = fresh(model)
    loss_fn(ref(batch[0]), batch[1]).backward()
    theirs = fresh(model)
    _backend_step(theirs, loss_fn, batch, "inductor")
    torch._dynamo.reset()
    be = sgc_trace.backend(genetic_iters=3, compiler="inductor")
    mine = fresh(model)
    _backend_step(mine, loss_fn, batch, be)
    assert be.graphs and be.graphs[0].partition.recomputed_ops

    def worst(m):
        return max(((p.grad - q.grad).abs().max() / p.grad.abs().max().clamp_min(1e-30)).item()
                   for p, q in zip(ref.parameters(), m.parameters()))

    assert worst(mine) <= 2 * worst(theirs) + 1e-6, (worst(mine), worst(theirs))


def test_offloads_run_through_the_backend_bit_for_bit():
    model, loss_fn, batch = _case("mlp")
    un = sgc_trace.backend(strategy="none")
    ref = fresh(model)
    _backend_step(ref, loss_fn, batch, un)
    peak = un.graphs[0].plan["summary"]["planned_peak"]
    torch._dynamo.reset()
    be = sgc_trace.backend(budget=int(0.8 * peak), genetic_iters=2, host_link="4400,4400,0", budget_of="peak")
    mine = fresh(model)
    _backend_step(mine, loss_fn, batch, be)
    assert be.graphs[0].plan.get("offloads"), "the plan offloads nothing: the test would test nothing"
    assert be.graphs[0].partition.offloaded
    _same(ref, mine)


def test_what_the_backend_cannot_plan_is_refused_by_name():
    model, loss_fn, batch = _case("mlp")
    with pytest.raises(Exception, match=r"dynamic=False"):
        compiled = torch.compile(fresh(model), backend=sgc_trace.backend(), dynamic=True)
        loss_fn(compiled(batch[0]), batch[1]).backward()
    with pytest.raises(ExportError, match=r"share of the unplanned activation bytes is a number in \(0, 1\]"):
        sgc_trace.backend(budget=1.5)
    with pytest.raises(ExportError, match="unknown compiler `eager`"):
        sgc_trace.backend(compiler="eager")
    with pytest.raises(ExportError, match="offloads need compiler='aot_eager'"):
        sgc_trace.backend(compiler="inductor", host_link="h100")
    with pytest.raises(ExportError, match="unknown device profile"):
        sgc_trace.backend(device_profile="b200")


@pytest.mark.parametrize("strategy", ["none", "chen-sqrt", "sublinear", "dtr", "partition"])
def test_every_strategy_plans_through_the_backend(strategy):
    """Each strategy's plan runs through the backend and changes no number."""
    model, loss_fn, batch = _case("cnn")
    ref = fresh(model)
    loss_fn(ref(batch[0]), batch[1]).backward()
    be = sgc_trace.backend(strategy=strategy, genetic_iters=2)
    mine = fresh(model)
    _backend_step(mine, loss_fn, batch, be)
    assert be.graphs and be.graphs[0].plan["options"]["strategy"] == strategy
    _same(ref, mine)


def test_sgc_trace_compile_refuses_distributed_models_and_points_to_the_backend(tmp_path):
    """DDP's all-reduce and FSDP2's collectives run in autograd hooks that sgc_trace.compile's
    own step never calls: refused before the first step, naming the setup."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    model, loss_fn, batch = _case("mlp")
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"file://{tmp_path / 'pg'}")
    try:
        with pytest.raises(ExportError, match=r"under DistributedDataParallel.*backend=sgc_trace\.backend"):
            sgc_trace.compile(DistributedDataParallel(fresh(model)), loss_fn, batch)
        from torch.distributed.fsdp import fully_shard

        sharded = fresh(model)
        for layer in sharded.layers:
            fully_shard(layer)
        fully_shard(sharded)
        with pytest.raises(ExportError, match=r"under FSDP .*fully_shard.*backend=sgc_trace\.backend"):
            sgc_trace.compile(sharded, loss_fn, batch)
    finally:
        dist.destroy_process_group()


def _real_cases():
    """Real models of the Python tests: transformers' GPT-2 and BERT (its tied bias), a
    torchvision ViT, the example ResNet with BatchNorm; batches of their sizes."""
    import resnet_cnn
    from test_real_models import _tiny_bert, _tiny_gpt2, _tiny_vit, _tokens

    from sgc_trace.tools.cli import lm_cross_entropy

    g = torch.Generator().manual_seed(3)
    image = (torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g))
    tokens = tuple(s.real(g) for s in _tokens())
    cnn = tuple(s.real(g) for s in resnet_cnn.inputs(4))
    return {"gpt2": (_tiny_gpt2, lm_cross_entropy, tokens), "bert": (_tiny_bert, lm_cross_entropy, tokens),
            "vit": (_tiny_vit, torch.nn.functional.cross_entropy, image),
            "resnet_cnn": (resnet_cnn.build, resnet_cnn.loss, cnn)}


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit", "resnet_cnn"])
def test_real_models_through_the_backend_are_sgc_trace_compile_bit_for_bit(name):
    from sgc_trace.exporter.trace import prediction

    factory, loss_fn, batch = _real_cases()[name]
    torch.manual_seed(0)
    model = factory().train()
    # chen-sqrt recomputes on every graph (the lowest-peak plan of the tiny ViT recomputes nothing)
    step = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="chen-sqrt")
    torch.manual_seed(0)
    ref_loss = step(*batch)
    be = sgc_trace.backend(strategy="chen-sqrt")
    mine = fresh(model)
    compiled = torch.compile(mine, backend=be, dynamic=False)
    torch.manual_seed(0)
    loss = loss_fn(prediction(compiled(batch[0])), *batch[1:])
    loss.backward()
    assert torch.equal(loss.detach(), ref_loss)
    _same(step.model, mine)
    assert be.graphs and any(g.partition.recomputed_ops for g in be.graphs)
