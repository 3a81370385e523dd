"""sgc plans applied in PyTorch (`sgc_trace.compile`): the planned step computes the same
loss, gradients and buffers as the unplanned one, bit for bit; it saves less for backward;
its measured peak is sgc's prediction; a plan for another graph is refused."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sgc_trace
from sgc_trace.apply import PlanMismatch, predicted_peak, tensor_bytes
from sgc_trace.tools.cli import lm_cross_entropy
from sgc_trace.errors import ExportError
from sgc_trace.tools.measure import compare, eager_step, fresh, peak_bytes
from sgc_trace.apply.planner import plan as plan_graph
from models import CNN


class MLP(nn.Module):
    def __init__(self, width=32, depth=6):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


class TinyTransformer(nn.Module):
    def __init__(self, vocab=50, dim=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


class TinyLSTM(nn.Module):
    def __init__(self, vocab=50, dim=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h, _ = self.lstm(self.drop(self.embed(tokens)))
        return self.head(h)


def _tokens(batch, seq, vocab=50):
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch, seq), generator=g))


def _case(name):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        return MLP(), F.cross_entropy, (torch.randn(512, 32, generator=g), torch.randint(0, 10, (512,), generator=g))
    if name == "cnn":
        return CNN(), F.cross_entropy, (torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g))
    if name == "transformer":
        return TinyTransformer(), lm_cross_entropy, _tokens(8, 32)
    return TinyLSTM(), lm_cross_entropy, _tokens(16, 8)


CASES = ["mlp", "cnn", "transformer", "lstm"]


def _run(step, batch, seed=0):
    torch.manual_seed(seed)  # the same dropout draws in every step
    return step(*batch)


def _snapshot(model: nn.Module) -> nn.Module:
    """A copy with the gradients (deepcopy leaves a Parameter's .grad behind)."""
    twin = copy.deepcopy(model)
    for p, q in zip(model.parameters(), twin.parameters()):
        q.grad = None if p.grad is None else p.grad.clone()
    return twin


@dataclass
class Planned:
    name: str
    un: sgc_trace.PlannedStep  # sgc's `none` plan applied
    pl: sgc_trace.PlannedStep  # the sublinear plan applied
    batch: tuple
    first: dict  # after one step of each: losses and models (eager, unplanned, planned)


@pytest.fixture(scope="module", params=CASES)
def planned(request):
    model, loss_fn, batch = _case(request.param)
    un = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    pl = sgc_trace.compile(fresh(model), loss_fn, batch, genetic_iters=5)
    ref = fresh(model)
    first = {"eager": (_run(eager_step(ref, loss_fn), batch), _snapshot(ref))}
    for label, step in (("unplanned", un), ("planned", pl)):
        first[label] = (_run(step, batch), _snapshot(step.model))
    return Planned(request.param, un, pl, batch, first)


def test_the_plan_recomputes_and_saves_less(planned):
    un, pl = planned.un, planned.pl
    assert pl.partition.recomputed_ops, f"{planned.name}: the plan recomputes nothing, the test would test nothing"
    assert not un.partition.recomputed_ops
    assert pl.saved_bytes < un.saved_bytes
    # What the step measures is what the plan keeps (activations and the batch; the loss,
    # returned to the caller, is held either way).
    for step in (pl, un):
        kept = [t for t in step.partition.saved_tensors if t not in step.graph["outputs"]]
        assert step.saved_bytes == tensor_bytes(step.graph, kept)


@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_a_saved_budget_bounds_what_the_step_keeps(name):
    # torch.compile's question (`activation_memory_budget`), asked of sgc: the plan that
    # recomputes least among those keeping at most this many bytes for the backward.
    model, loss_fn, batch = _case(name)
    un = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    ref = _run(un, batch)
    last = None
    # Below what any plan keeps (the batch, dropout's masks): sgc's refusal says how low it goes.
    with pytest.raises(sgc_trace.apply.planner.PlanError, match="the least kept is"):
        sgc_trace.compile(fresh(model), loss_fn, batch, strategy="partition", budget=1, budget_of="saved")
    for share in (0.5, 0.7, 0.9):
        budget = int(un.saved_bytes * share)
        pl = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="partition", budget=budget, budget_of="saved")
        assert pl.plan["options"]["budget_of"] == "saved"
        assert torch.equal(_run(pl, batch), ref)
        assert pl.saved_bytes <= budget, (share, pl.saved_bytes, budget)
        same, diff = compare(pl.model, un.model, exact=True)
        assert same, f"{name} at {share}: gradients differ by up to {diff}"
        cost = pl.plan["summary"]["recompute_cost"]
        assert last is None or cost <= last, (share, cost, last)
        last = cost
        if share == 0.5:
            assert pl.partition.recomputed_ops, f"{name}: half the bytes and nothing recomputed?"


def test_loss_gradients_and_buffers_are_bitwise_the_unplanned_ones(planned):
    (a, ma), (b, mb) = planned.first["unplanned"], planned.first["planned"]
    assert torch.equal(a, b)
    same, diff = compare(ma, mb, exact=True)
    assert same, f"{planned.name}: gradients differ by up to {diff}"
    # A second step: gradients accumulate, buffers update, as in eager.
    assert torch.equal(_run(planned.un, planned.batch, seed=1), _run(planned.pl, planned.batch, seed=1))
    same, diff = compare(planned.un.model, planned.pl.model, exact=True)
    assert same, f"{planned.name}, second step: gradients differ by up to {diff}"


def test_planned_step_matches_eager(planned):
    (expected, ref), (got, m) = planned.first["eager"], planned.first["planned"]
    # Eager LSTM runs one fused kernel; the traced step runs its decomposition (cells of
    # matmuls and pointwise ops): the same values up to rounding, not bitwise.
    exact = planned.name != "lstm"
    assert torch.equal(got, expected) if exact else torch.allclose(got, expected)
    same, diff = compare(m, ref, exact=exact)
    assert same, f"{planned.name}: {diff}"


def test_measured_peak_is_the_prediction():
    model, loss_fn, batch = _case("mlp")
    for strategy in ("none", "sublinear"):
        step = sgc_trace.compile(fresh(model), loss_fn, batch, strategy=strategy, genetic_iters=5)
        _run(step, batch)  # the first call allocates the gradients; measure a later one as a user sees it
        for p in step.model.parameters():
            p.grad = None
        _, peak = peak_bytes(_run, step, batch)
        predicted = predicted_peak(step.graph, step.plan)["step"]
        assert abs(peak.bytes - predicted) <= 0.1 * predicted, (strategy, peak, predicted)


def test_peak_measurement_on_a_known_sequence():
    def allocate():
        a = torch.empty(1000, dtype=torch.uint8)
        b = torch.empty(3000, dtype=torch.uint8)
        del a
        c = torch.empty(500, dtype=torch.uint8)
        return b, c

    _, peak = peak_bytes(allocate)
    assert peak.bytes == 4000


def test_same_plan_twice_gives_the_same_step():
    model, loss_fn, batch = _case("cnn")
    first = sgc_trace.compile(fresh(model), loss_fn, batch, genetic_iters=5)
    again = sgc_trace.compile(fresh(model), loss_fn, batch, plan=json.loads(json.dumps(first.plan)))
    assert first.partition.forward.code == again.partition.forward.code
    assert first.partition.backward.code == again.partition.backward.code
    assert torch.equal(_run(first, batch), _run(again, batch))
    assert compare(first.model, again.model)[0]


def test_a_plan_for_another_graph_is_refused():
    model, loss_fn, batch = _case("cnn")
    other = sgc_trace.compile(fresh(model), loss_fn, (batch[0][:4], batch[1][:4]), genetic_iters=0)
    with pytest.raises(PlanMismatch, match="the plan was made for another graph"):
        sgc_trace.compile(fresh(model), loss_fn, batch, plan=other.plan)
    mlp, mlp_loss, mlp_batch = _case("mlp")
    with pytest.raises(PlanMismatch, match="ops, the traced graph has"):
        sgc_trace.compile(mlp, mlp_loss, mlp_batch, plan=other.plan)


def test_an_untraceable_model_names_its_line():
    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            if self.fc(x).sum() > 0:  # needs tensor values
                return self.fc(x)
            return x

    with pytest.raises(ExportError, match=r"test_compile\.py:\d+"):
        sgc_trace.compile(DataDependent(), F.mse_loss, (torch.randn(2, 4), torch.randn(2, 4)))


def test_planner_budget_and_the_command_line_agree(tmp_path):
    """`planner.plan` (the native module) and `sgc plan` (the binary) make the same plan."""
    from sgc_bin import run_sgc

    model, loss_fn, batch = _case("mlp")
    step = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    budget = step.plan["summary"]["unplanned_peak"] * 2
    plan = plan_graph(step.graph, budget=budget)
    assert plan["summary"]["recompute_steps"] == 0  # room for everything: nothing recomputed
    graph, out = tmp_path / "g.json", tmp_path / "p.json"
    graph.write_text(json.dumps(step.graph))
    run_sgc("plan", str(graph), "-q", "--budget", str(budget), "-o", str(out))
    cli = json.loads(out.read_text())
    assert {k: v for k, v in cli.items() if k != "graph"} == {k: v for k, v in plan.items() if k != "graph"}
    with pytest.raises(sgc_trace.PlanError, match="budget 1000 B is below"):
        plan_graph(step.graph, budget=1000)
    with pytest.raises(sgc_trace.PlanError, match="genetic_iters=-5"):
        plan_graph(step.graph, genetic_iters=-5)


def test_inductor_backend_is_close():
    model, loss_fn, batch = _case("mlp")
    un = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    ind = sgc_trace.compile(fresh(model), loss_fn, batch, genetic_iters=5, backend="inductor")
    assert ind.partition.recomputed_ops
    assert torch.allclose(_run(un, batch), _run(ind, batch))
    assert compare(un.model, ind.model, exact=False)[0]


MODEL_FILE = """
import torch
from torch import nn

def build(width=16):
    return nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 4))
"""


@pytest.mark.parametrize("command", ["export", "plan", "report", "legacy"])
def test_cli_subcommands(tmp_path, capsys, command):
    from sgc_trace.tools.cli import main

    model = tmp_path / "model.py"
    model.write_text(MODEL_FILE)
    common = [f"{model}:build", "--arg", "width=16", "--input", "x:64,8", "--target", "y:64:i64:4"]
    if command in ("export", "legacy"):
        out = tmp_path / "m.json"
        argv = (["export"] if command == "export" else []) + common + ["-o", str(out)]
        assert main(argv) == 0
        assert json.loads(out.read_text())["format"] == "sgc-graph"
    elif command == "plan":
        out = tmp_path / "m.plan.json"
        assert main(["plan", *common, "--budget", "1GiB", "-o", str(out)]) == 0
        assert json.loads(out.read_text())["format"] == "sgc-plan"
        assert "| planned |" in capsys.readouterr().out
    else:
        assert main(["report", *common]) == 0
        text = capsys.readouterr().out
        assert "| unplanned |" in text and "| planned |" in text


class _DropoutMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.drop = nn.Dropout(0.3)
        self.b = nn.Linear(64, 10)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


def test_pytorch_with_its_random_draws_kept_gives_its_unplanned_gradients():
    """The vs-torch bench judges sgc against PyTorch's `activation_memory_budget` answer with
    every random op tagged must-save where PyTorch's own answer draws dropout again in the
    backward: that answer must be PyTorch's unplanned step, gradient for gradient."""
    from sgc_trace.tools.measure import torch_compiled_step, torch_grads

    torch.manual_seed(0)
    model = _DropoutMLP().train()
    g = torch.Generator().manual_seed(1)
    batch = (torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g))
    ref_loss, ref = torch_grads(model, F.cross_entropy, batch, 1.0)
    # (At budget 0.0 PyTorch recomputes everything, must-save tags included.)
    loss, grads = torch_grads(model, F.cross_entropy, batch, 0.1, keep_random=True)
    assert torch.equal(loss, ref_loss)
    assert ref.keys() == grads.keys()
    for k in ref:
        assert torch.equal(grads[k], ref[k]), k
    torch._dynamo.reset()
    step = torch_compiled_step(fresh(model), F.cross_entropy, 0.1, keep_random=True)
    step.run(*batch)
    assert step.recomputed_random == []
    assert step.recomputed, "at 0.1 PyTorch recomputes something"



def test_a_budget_not_met_is_the_native_modules_typed_error():
    sgc = pytest.importorskip("sgc")
    model, loss_fn, batch = _case("cnn")
    un = sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none")
    low = un.plan["summary"]["lower_bound"]

    def refusal(budget):
        with pytest.raises(sgc.BudgetNotMet) as caught:
            sgc_trace.compile(fresh(model), loss_fn, batch, budget=budget)
        e = caught.value
        assert isinstance(e, sgc_trace.PlanError) and isinstance(e, sgc.SgcError)
        # Python's argument names, not the command line's options.
        assert "--" not in str(e), str(e)
        return e

    # Below the per-op bound, and between it and the kept-outputs bound (the least-peak
    # bound, or more where the gradients done so far raise it): refused before any
    # plan is made, each bound as lower_bound.
    e = refusal(1000)
    assert (e.budget, e.lower_bound, e.best_device) == (1000, low, None)
    e = refusal(low + 1)
    floor = e.lower_bound
    assert e.budget == low + 1 and floor > low and e.best_device is None
    # At that bound the planner searches and reports how low it got.
    e = refusal(floor)
    assert (e.budget, e.lower_bound) == (floor, floor)
    assert e.best_device is not None and e.best_device > floor
