"""Offload applied in PyTorch (`sgc_trace.apply.offload`): a plan's offloaded values go to a host
pool after their copy step and come back before their reader. On the CPU the step is
bitwise the same plan without offloads (loss and every gradient); a skipped copy, a fetch
from the wrong bytes or a pool layout ignored would show. The CUDA path (streams, events,
one pinned pool) runs here against a recorder of its calls, and a fake CUDA trace gets its
nodes without reaching the CUDA runtime.

Until the planner's search chooses offloads, `choose_offloads` picks some on a plan's
steps (each value's use before a gap of steps and its first reader after it) and
`sgc.plan_schedule` makes the plan of those steps with them."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest
import torch

import sgc_trace
from sgc_trace.apply import trace, input_specs
from sgc_trace.errors import ExportError
from sgc_trace.tools.measure import compare, fresh
from sgc_trace.apply.offload import CudaCalls, HostPool
from test_compile import _case, _run
from test_devices import _fake_batch, _fake_cuda, no_cuda_runtime  # noqa: F401 (a fixture)

sgc = pytest.importorskip("sgc")


def _roots(graph: dict) -> list[int]:
    """Each tensor's storage root (index)."""
    index = {t["name"]: i for i, t in enumerate(graph["tensors"])}

    def root(i: int) -> int:
        while "alias_of" in graph["tensors"][i]:
            i = index[graph["tensors"][i]["alias_of"]]
        return i

    return [root(i) for i in range(len(graph["tensors"]))]


def choose_offloads(graph: dict, steps: list[dict], count: int, min_gap: int = 4) -> list[dict]:
    """Up to `count` offloads on a schedule: for an activation's storage, two consecutive
    steps touching it, u < v with v - u >= `min_gap`, v reading it: copy after u, free
    after u + 1, fetch after v - 2, needed at v. The widest gaps first."""
    roots = _roots(graph)
    tensors = graph["tensors"]
    ops = graph["ops"]
    index = {t["name"]: i for i, t in enumerate(tensors)}
    last: dict[int, int] = {}
    found = []
    for k, s in enumerate(steps):
        op = ops[s["op"]]
        reads = {roots[index[t]] for t in op["inputs"]}
        writes = {roots[index[t]] for t in op["outputs"]}
        for r in reads | writes:
            u = last.get(r)
            if u is not None and r not in writes and k - u >= min_gap and tensors[r].get("kind", "activation") == "activation":
                found.append((-(k - u), k, r, u))
            last[r] = k
    found.sort()
    chosen, taken = [], set()
    for _, v, r, u in found:
        if r not in taken and len(chosen) < count:
            taken.add(r)
            chosen.append({"root": r, "copy_after": u, "free_after": u + 1, "fetch_after": v - 2, "needed_at": v})
    return chosen


def offload_plans(graph: dict, base: dict, count: int) -> tuple[dict, dict]:
    """`base`'s schedule planned without offloads and with `count` chosen ones (h100 link)."""
    ops = [s["op"] for s in base["steps"]]
    offloads = choose_offloads(graph, base["steps"], count)
    assert len(offloads) == count, f"only {len(offloads)} offloads found"
    without = sgc.plan_schedule(graph, ops).to_dict()
    with_ = sgc.plan_schedule(graph, ops, offloads, host_link="h100").to_dict()
    return without, with_


@dataclass
class Case:
    without: sgc_trace.PlannedStep  # the plan's schedule, no offloads
    offl: sgc_trace.PlannedStep  # the same schedule with offloads
    batch: tuple
    traced: tuple

    def again(self, plan: dict) -> sgc_trace.PlannedStep:
        """`plan` applied to a fresh copy of the model, without tracing again."""
        return sgc_trace.compile(fresh(self.offl.model), self.offl.loss_fn, self.batch, plan=plan, traced=self.traced)


def _compiled(name: str, strategy: str = "none", count: int = 3) -> Case:
    """The case traced once; its plan applied without and with `count` offloads."""
    model, loss_fn, batch = _case(name)
    traced = trace(fresh(model), loss_fn, input_specs(batch, 1))
    base = sgc_trace.compile(fresh(model), loss_fn, batch, strategy=strategy, genetic_iters=2, traced=traced).plan
    without, with_ = offload_plans(traced[0], base, count)
    steps = [sgc_trace.compile(fresh(model), loss_fn, batch, plan=p, traced=traced) for p in (without, with_)]
    return Case(*steps, batch, traced)


def _same(a, b, batch) -> tuple[bool, str]:
    """Two steps of each: loss and every gradient bitwise equal."""
    for seed in (0, 1):
        la, lb = _run(a, batch, seed), _run(b, batch, seed)
        if not torch.equal(la, lb):
            return False, f"loss {la} != {lb}"
        same, diff = compare(a.model, b.model, exact=True)
        if not same:
            return False, f"gradients differ by up to {diff}"
    return True, ""


def _targets(gm: torch.fx.GraphModule) -> list[str]:
    return [getattr(n.target, "__name__", "") for n in gm.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("name,strategy", [("mlp", "none"), ("cnn", "sublinear"), ("transformer", "none")])
def test_offloaded_step_is_bitwise_the_plan_without(name, strategy):
    c = _compiled(name, strategy)
    part = c.offl.partition
    assert len(part.offloaded) == 3
    assert part.host_pool.cuda is None  # CPU: plain copies, no streams
    # Each offload's four nodes; forward values read in the backward leave the forward as tokens.
    nodes = _targets(part.forward) + _targets(part.backward)
    for kind in ("to_host", "release", "fetch", "ready"):
        assert nodes.count(kind) == 3, (kind, nodes)
    assert "to_host" in _targets(part.forward) and "ready" in _targets(part.backward)
    same, why = _same(c.without, c.offl, c.batch)
    assert same, f"{name}: {why}"
    # What the forward hands the backward on the device is less by the offloaded values.
    assert c.offl.saved_bytes < c.without.saved_bytes
    assert part.host_pool._pool.numel() == c.offl.plan["host"]["size"]


def test_a_skipped_copy_a_wrong_slot_or_an_ignored_layout_shows(monkeypatch):
    c = _compiled("mlp")
    slots = c.offl.partition.host_pool.slots
    assert len({s.nbytes for s in slots}) == 1  # same-sized values: a wrong slot fits, and must still show
    expected = _run(c.without, c.batch)

    def differs(step) -> bool:
        return not (torch.equal(_run(step, c.batch), expected) and compare(step.model, c.without.model, exact=True)[0])

    assert not differs(c.again(c.offl.plan))
    with monkeypatch.context() as m:
        m.setattr(HostPool, "to_host", lambda self, i, x: i)
        assert differs(c.again(c.offl.plan))
    fetch = HostPool.fetch

    def wrong_slot(self, i, token):
        j = (i + 1) % len(self.slots)
        fetch(self, j, token)
        self._back[i] = self._back.pop(j)
        return i

    with monkeypatch.context() as m:
        m.setattr(HostPool, "fetch", wrong_slot)
        assert differs(c.again(c.offl.plan))
    # One host offset for all: a later copy overwrites bytes still held.
    assert differs(c.again(dict(c.offl.plan, host={**c.offl.plan["host"], "offsets": [0] * len(slots)})))


class Recorder(CudaCalls):
    """CUDA's calls, recorded, on CPU tensors: streams and events that only log."""

    def __init__(self):
        self.log: list[tuple] = []
        self.made = {"stream": 0, "event": 0}

    def pinned(self, nbytes):
        self.log.append(("pinned", nbytes))
        return torch.empty(nbytes, dtype=torch.uint8)

    def _new(self, what: str):
        name = f"{what}{self.made[what]}"
        self.made[what] += 1
        return _Logged(self.log, name)

    def stream(self, device):
        return self._new("stream")

    def event(self):
        return self._new("event")

    def current(self, device):
        return _Logged(self.log, "compute")

    def on(self, stream):
        self.log.append(("on", stream.name))
        return contextlib.nullcontext()


class _Logged:
    """A stream or event: every method call is logged as (name, method, *argument names)."""

    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def __getattr__(self, method):
        return lambda *args: self.log.append((self.name, method, *(getattr(a, "name", a) for a in args)))


class Hostile(CudaCalls):
    """A fake CUDA on CPU tensors that is hostile about ordering, as the Rust executor's
    emulated device is: the compute stream runs each operation when it is issued; a copy
    issued on a side stream runs only when something waits for it (an event it precedes, or
    `wait_stream` on its stream), as late as CUDA allows; pinned and freshly allocated
    bytes are poison (0xff: NaN as floats). A missing wait leaves a copy undone, and the
    step reads poison or stale bytes instead of passing by luck."""

    def __init__(self):
        self.compute = _FakeStream(self, "compute")
        self.side: _FakeStream | None = None
        self.ran = 0  # side-stream copies run

    def pinned(self, nbytes):
        return torch.full((nbytes,), 255, dtype=torch.uint8)

    def empty(self, nbytes, device):
        return torch.full((nbytes,), 255, dtype=torch.uint8)

    def stream(self, device):
        return _FakeStream(self, "side")

    def event(self):
        return _FakeEvent()

    def current(self, device):
        return self.compute

    @contextlib.contextmanager
    def on(self, stream):
        self.side, before = stream, self.side
        try:
            yield
        finally:
            self.side = before

    def copy(self, dst, src):
        if self.side is None or self.side is self.compute:
            dst.copy_(src)
        else:
            self.side.queue.append(lambda: dst.copy_(src))


class _FakeStream:
    def __init__(self, fake: Hostile, name: str):
        self.fake, self.name, self.queue, self.done = fake, name, [], 0

    def run_until(self, n: int) -> None:
        """Runs this stream's copies up to the `n`-th issued."""
        while self.done < n:
            self.queue[self.done]()
            self.queue[self.done] = None
            self.done += 1
            self.fake.ran += 1

    def wait_stream(self, other: "_FakeStream") -> None:
        other.run_until(len(other.queue))

    def wait_event(self, event: "_FakeEvent") -> None:
        event.stream.run_until(event.at)


class _FakeEvent:
    def record(self, stream: _FakeStream) -> None:
        self.stream, self.at = stream, len(stream.queue)


def test_a_hostile_fake_cuda_runs_the_offloads_bitwise_and_each_missing_wait_shows(monkeypatch):
    """The CUDA path of the host pool (side streams, events, late copies) on the CPU, with
    copies run as late as their events allow: bitwise the plan without offloads; without
    the compute stream's wait in `release` (the copy to host) or in `ready` (the copy
    back), the step differs."""
    c = _compiled("mlp")

    def hostile_step(plan):
        step = c.again(plan)
        step.partition.host_pool.cuda = Hostile()
        return step

    step = hostile_step(c.offl.plan)
    same, why = _same(c.without, step, c.batch)
    assert same, why
    n = len(c.offl.partition.offloaded)
    assert step.partition.host_pool.cuda.ran == 2 * 2 * n  # both copies of each offload, in each of two steps
    expected = _run(c.without, c.batch)
    for method, without_wait in (
        ("release", lambda self, i, token, x: None),
        ("ready", lambda self, i, token: self._back.pop(i)),
    ):
        with monkeypatch.context() as m:
            m.setattr(HostPool, method, without_wait)
            step = hostile_step(c.offl.plan)
            ok = torch.equal(_run(step, c.batch), expected) and compare(step.model, c.without.model, exact=True)[0]
            assert not ok, f"{method} without its wait gave the same step"


def test_the_cuda_path_uses_side_streams_events_and_one_pinned_pool():
    c = _compiled("mlp")
    rec = Recorder()
    c.offl.partition.host_pool.cuda = rec
    same, why = _same(c.without, c.offl, c.batch)  # two steps, each called twice
    assert same, why
    n = len(c.offl.partition.offloaded)
    assert [e for e in rec.log if e[0] == "pinned"] == [("pinned", c.offl.plan["host"]["size"])]  # once
    assert rec.made == {"stream": 2, "event": 2 * n}  # made once, reused by every later step
    calls = [e for e in rec.log if e[0] != "pinned"]
    records = [k for k, e in enumerate(calls) if e[1] == "record"]
    assert len(records) == 2 * 2 * n  # two copies per offload, two steps
    on = {}
    for k in records:
        event, _, stream = calls[k]
        # A copy on its stream: after the compute stream's work so far, then recorded.
        assert calls[k - 1] == ("on", stream), calls[k - 2:k + 1]
        j = k - 2
        while calls[j][:2] == (stream, "wait_event"):  # a copy into host bytes an earlier fetch read
            j -= 1
        assert calls[j] == (stream, "wait_stream", "compute"), calls[j:k + 1]
        on.setdefault(event, stream)
        # ... and the compute stream waits for it later, once.
        waits = [j for j, e in enumerate(calls) if e == ("compute", "wait_event", event) and j > k]
        assert waits, (event, calls)
    assert sorted(on.values()) == ["stream0"] * n + ["stream1"] * n  # to host on one, back on the other


def test_a_fake_cuda_step_gets_the_cuda_offload_nodes(no_cuda_runtime):  # noqa: F811
    model, loss_fn, batch = _case("mlp")
    fake = _fake_cuda(model)
    fbatch = _fake_batch(batch)
    traced = trace(fake, loss_fn, input_specs(fbatch, 1))
    base = sgc_trace.compile(fake, loss_fn, fbatch, strategy="none", traced=traced).plan
    _, with_ = offload_plans(traced[0], base, 2)
    step = sgc_trace.compile(fake, loss_fn, fbatch, plan=with_, traced=traced)
    pool = step.partition.host_pool
    assert pool.device.type == "cuda" and type(pool.cuda) is CudaCalls
    assert pool._pool is None  # pinned when the step first runs, not when it is compiled
    assert _targets(step.partition.forward).count("to_host") == 2
    assert _targets(step.partition.backward).count("ready") == 2


def test_compile_asks_the_planner_for_offload_and_refuses_what_it_cannot_run():
    model, loss_fn, batch = _case("mlp")
    traced = trace(fresh(model), loss_fn, input_specs(batch, 1))
    budget = int(0.9 * sgc_trace.compile(fresh(model), loss_fn, batch, strategy="none",
                                         traced=traced).plan["summary"]["planned_peak"])
    on = sgc_trace.compile(fresh(model), loss_fn, batch, budget=budget, genetic_iters=2, traced=traced,
                           host_link="44,40,5", host_memory="1MiB")
    assert on.plan["options"]["host_link"] == {"to_host_gbps": 44.0, "to_device_gbps": 40.0, "latency_us": 5.0}
    assert on.plan["options"]["host_memory"] == 1 << 20
    off = sgc_trace.compile(fresh(model), loss_fn, batch, budget=budget, genetic_iters=2, traced=traced,
                            host_link="h100", offload=False)
    assert "host_link" not in off.plan["options"] and "offloads" not in off.plan
    again = sgc_trace.apply.planner.plan(traced[0], budget=budget, genetic_iters=2, host_link="44,40,5",
                                         host_memory="1MiB")
    assert again["options"] == on.plan["options"]
    c = _compiled("mlp", count=1)
    with pytest.raises(ExportError, match="offload=False, but the plan given offloads 1 tensors"):
        sgc_trace.compile(fresh(model), loss_fn, batch, plan=c.offl.plan, traced=c.traced, offload=False)
    with pytest.raises(ExportError, match="backend='inductor' cannot run"):
        sgc_trace.compile(fresh(model), loss_fn, batch, plan=c.offl.plan, traced=c.traced, backend="inductor")


def test_plan_schedule_refuses_bad_offloads_by_name():
    c = _compiled("mlp", count=1)
    graph = c.traced[0]
    ops = [s["op"] for s in c.offl.plan["steps"]]
    bad = dict(c.offl.plan["offloads"][0])
    bad["needed_at"] = bad["fetch_after"]
    name = graph["tensors"][bad["root"]]["name"]
    with pytest.raises(sgc.PlanError, match=f"{name}.*needed_at"):
        sgc.plan_schedule(graph, ops, [bad], host_link="h100")
    with pytest.raises(ValueError, match="a plan with offloads needs a host link"):
        sgc.plan_schedule(graph, ops, c.offl.plan["offloads"])
    with pytest.raises(ValueError, match=f"step op {len(graph['ops'])} is not an op of the graph"):
        sgc.plan_schedule(graph, [len(graph["ops"])])
