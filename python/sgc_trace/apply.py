"""Plans back into PyTorch: `compile(model, loss_fn, example_batch, budget=...)`.

The method, in four steps:

1. **Trace** the training step with the exporter (`api.export`): AOTAutograd's joint
   forward + backward FX graph (`aot_export_module(trace_joint=True)` under FakeTensorMode)
   and its sgc graph, plus the map from every sgc op and tensor name back to its FX node
   (`convert.to_graph(fx_nodes=...)`). The plan is applied to *this* joint graph, so the
   names need no guessing.
2. **Plan** it (`planner.plan`: the native `sgc` module or the `sgc` binary).
3. **Partition** the joint graph by the plan's schedule, as AOTAutograd's partitioners do
   (`torch._functorch.partitioners`): the plan's steps up to its first backward op form
   the forward module; the rest, recomputations included and in the plan's order, form the
   backward module. A forward value the backward module reads before recomputing it (or
   without ever recomputing it) is a *saved value*: an output of the forward module and a
   placeholder of the backward one. Everything else the backward needs it recomputes, at
   the step the plan recomputes it, which is right before its first use: the order of
   sgc's schedule, not the joint graph's (where every recomputation would sit at the start
   of the backward and be live at once; `min_cut_rematerialization_partition` reorders
   for the same reason, `reordering_to_mimic_autograd_engine`). Random ops are never
   recomputed (the exporter marks them `recomputable: false`), so dropout masks are saved;
   a dropout's output is a product of its input and mask (`trace.split_dropout`), which
   the plan may recompute.
4. **Run** the two modules: both FX modules use the boxed calling convention (the argument
   list is cleared on entry) and FX frees every value after its last use, so the forward
   holds only the saved values when it returns and the backward frees each one after its
   last reader. `backend="inductor"` compiles each module with `torch.compile` instead
   (same saved values; inductor fuses and may reorder inside each module).
5. **Offload** what the plan offloads (`plan["offloads"]`): each offload adds four nodes at
   its steps, in whichever module runs the step (`offload.HostPool`: copy to host after
   `copy_after`, drop the device value after `free_after`, copy back after `fetch_after`,
   wait for it at `needed_at`, where every FX value over that storage is rebuilt over the
   fetched bytes). They pass tokens: a forward value offloaded until the backward leaves
   the forward as a token, not as a saved tensor. Steps are mapped to FX nodes as for the
   schedule, so a copy starts exactly where the plan's step ends.

The step is `loss = step(*batch)`: loss and `.grad` (accumulated, like `.backward()`) and
the BatchNorm running statistics updated, as `loss_fn(model(x), y).backward()` does.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import fx, nn
from torch.multiprocessing.reductions import StorageWeakRef

from .api import export
from .errors import ExportError
from .offload import HostPool, rebuild, storage_bytes
from .planner import plan as plan_graph
from .trace import InputSpec, JointTrace, LossFn, TrainStep

BACKENDS = ("aot_eager", "inductor")


class PlanMismatch(ExportError):
    """A plan made for another graph than the one traced."""


@dataclass
class Partition:
    """The plan applied to the joint graph: the two FX modules and what passes between."""

    forward: fx.GraphModule  # joint placeholders -> [buffer updates..., loss, saved...]
    backward: fx.GraphModule  # saved -> gradients (in `grad_params` order)
    saved: list[str]  # FX names of the saved values (offloads' tokens included), in forward-output order
    saved_tensors: list[str]  # the saved device values as sgc tensor names
    recomputed_ops: list[str]  # sgc op names the backward runs again, in order
    mutated_buffers: list[str]  # buffer fqns the forward's first outputs update
    grad_params: list[str]  # parameter fqns of the backward's outputs
    offloaded: list[str] = field(default_factory=list)  # sgc tensors copied to host and back, plan order
    host_pool: HostPool | None = None  # their host pool and copy streams (`offload.HostPool`)


def input_specs(example_batch: Sequence[torch.Tensor], num_model_inputs: int) -> list[InputSpec]:
    """InputSpecs (`input_0`, ..., `target_0`, ...) with the shapes and dtypes of a real batch."""
    specs = []
    for i, t in enumerate(example_batch):
        if not isinstance(t, torch.Tensor):
            raise ExportError(f"batch element {i} is a {type(t).__name__}, not a tensor")
        name = f"input_{i}" if i < num_model_inputs else f"target_{i - num_model_inputs}"
        specs.append(InputSpec(name, tuple(t.shape), t.dtype, batch_dim=0 if t.dim() else None, device=str(t.device)))
    return specs


def trace(model: nn.Module, loss_fn: LossFn, specs: Sequence[InputSpec], num_model_inputs: int = 1,
          raw_output: bool = False, mark_batch: bool = True, name: str | None = None,
          autocast: torch.dtype | None = None) -> tuple[dict, JointTrace, dict]:
    """The exporter's graph of the step, its joint trace and the names -> FX nodes map."""
    traced: list = []
    graph = export(model, loss_fn, specs, num_model_inputs=num_model_inputs, raw_output=raw_output,
                   mark_batch=mark_batch, name=name or type(model).__name__, autocast=autocast, _traced=traced)
    return graph, traced[0], traced[1]


def check_plan(graph: dict, plan: dict, fingerprint: str | None = None) -> None:
    """Refuses (`PlanMismatch`) a plan made for another graph: op or tensor count, name or
    fingerprint (when the traced graph's is known) differ."""
    g = plan.get("graph", {})
    what = []
    if g.get("ops") != len(graph["ops"]):
        what.append(f"{g.get('ops')} ops, the traced graph has {len(graph['ops'])}")
    if g.get("tensors") not in (None, len(graph["tensors"])):
        what.append(f"{g.get('tensors')} tensors, the traced graph has {len(graph['tensors'])}")
    if fingerprint is not None and g.get("fingerprint") != fingerprint:
        what.append(f"fingerprint {g.get('fingerprint')}, the traced graph's is {fingerprint}")
    if what:
        raise PlanMismatch(
            f"the plan was made for another graph (`{g.get('name')}`): it has {'; '.join(what)}. "
            f"Plan the traced graph itself (sgc_trace.compile without plan=, or `sgc-trace plan`)"
        )


def saved_tensor_names(graph: dict, plan: dict) -> list[str]:
    """sgc tensor names the plan keeps from its forward stretch for the backward (static,
    from the plan alone): read after the first backward op before any recomputation."""
    ops = graph["ops"]
    kind = {t["name"]: t.get("kind", "activation") for t in graph["tensors"]}
    fw, bw = _split_steps(ops, plan["steps"])
    made_in_bw: set[str] = set()
    saved: list[str] = []
    for s in bw:
        op = ops[s["op"]]
        for t in op["inputs"]:
            if t not in made_in_bw and t not in saved and kind[t] in ("activation", "input"):
                saved.append(t)
        made_in_bw.update(op["outputs"])
    return saved


def _split_steps(ops: list[dict], steps: list[dict]) -> tuple[list[dict], list[dict]]:
    """Forward stretch (up to the first backward op, plus forward ops run once after it) and
    backward stretch (everything else, recomputations included), each in plan order."""
    first = next((i for i, s in enumerate(steps) if not s["recompute"] and ops[s["op"]].get("phase") == "backward"),
                 len(steps))
    fw, bw = [], []
    for i, s in enumerate(steps):
        forward_once = not s["recompute"] and ops[s["op"]].get("phase") != "backward"
        (fw if i < first or forward_once else bw).append(s)
    return fw, bw


def partition(trace: JointTrace, graph: dict, fx_nodes: dict, plan: dict) -> Partition:
    """Applies `plan` (for `graph`, the sgc graph of `trace`) to the joint FX graph."""
    gm = trace.graph_module
    sig = trace.signature
    joint = list(gm.graph.nodes)
    by_name = {n.name: n for n in joint}
    placeholders = [n for n in joint if n.op == "placeholder"]
    op_node: dict[str, fx.Node] = fx_nodes["ops"]
    ops = graph["ops"]
    offl = _Offloads(graph, plan, fx_nodes, joint, _device_of(trace)) if plan.get("offloads") else None
    fw_items, bw_items = _items(graph, plan, offl)

    def node_of(step) -> fx.Node | None:
        op = ops[step["op"]]
        if step["recompute"] and op["op"] == "sgc.batch_norm_update_stats":
            return None  # the statistics are written once, by the forward
        return op_node.get(op["name"])

    mutated = {k: v for k, v in sig.buffers_to_mutate.items()}
    loss = by_name[sig.user_outputs[0]]
    grads = list(sig.backward_signature.gradients_to_parameters.items())

    # Forward module: every joint placeholder, the forward steps.
    fwd = fx.Graph()
    env: dict = {}
    for p in placeholders:
        env[p] = fwd.node_copy(p)
    recomputed: list[str] = []
    for kind, s in fw_items:
        if kind != "step":
            offl.emit(fwd, env, kind, s)
            continue
        node = node_of(s)
        if node is None or (node in env and not s["recompute"]):
            continue
        _emit(fwd, env, node)
    # Backward module: which forward values it reads first (saved), then the steps.
    saved = _saved_values(bw_items, node_of, offl, [by_name[g] for g, _ in grads])
    bwd = fx.Graph()
    benv: dict = {}
    for n in saved:
        ph = bwd.placeholder(n.name)
        ph.meta = dict(getattr(n, "meta", {}))
        benv[n] = ph
    for kind, s in bw_items:
        if kind != "step":
            offl.emit(bwd, benv, kind, s)
            continue
        node = node_of(s)
        if node is None or (node in benv and not s["recompute"] and benv[node].op != "placeholder"):
            continue
        if s["recompute"]:
            recomputed.append(ops[s["op"]]["name"])
        _emit(bwd, benv, node)
    bwd.output(tuple(benv[by_name[g]] for g, _ in grads))
    missing = [n.name for n in [*(by_name[k] for k in mutated), loss, *saved] if n not in env]
    if missing:
        raise ExportError(f"internal: the plan's forward steps do not make {', '.join(missing[:5])}")
    fwd.output(tuple(env[n] for n in [*(by_name[k] for k in mutated), loss, *saved]))
    for g in (fwd, bwd):
        g.set_codegen(fx.graph._BoxedCodeGen())
        g.lint()
    tensor_of = {n: t for t, n in fx_nodes["tensors"].items()}
    return Partition(
        forward=fx.GraphModule(gm, fwd, "sgc_forward"),
        backward=fx.GraphModule(gm, bwd, "sgc_backward"),
        saved=[n.name for n in saved],
        saved_tensors=[tensor_of.get(n, n.name) for n in saved if isinstance(n, fx.Node)],
        recomputed_ops=recomputed,
        mutated_buffers=[_strip(trace, v) for v in mutated.values()],
        grad_params=[_strip(trace, p) for _, p in grads],
        offloaded=[o.tensor for o in offl.pool.slots] if offl else [],
        host_pool=offl.pool if offl else None,
    )


def _device_of(trace: JointTrace) -> torch.device:
    return torch.device(trace.inputs[0].device or "cpu") if trace.inputs else torch.device("cpu")


@dataclass(frozen=True)
class _Token:
    """What an offload's node passes on: its copy to host (`host`) or back (`back`) started."""

    kind: str
    index: int

    @property
    def name(self) -> str:
        return f"sgc_offload_{self.index}_{self.kind}"


class _Offloads:
    """A plan's offloads in the joint graph: each one's storage (its root's FX value and
    every FX value sharing that storage) and its four nodes (`offload.HostPool`)."""

    def __init__(self, graph: dict, plan: dict, fx_nodes: dict, joint: list[fx.Node], device: torch.device):
        self.pool = HostPool(graph, plan, device)
        self.roots: list[fx.Node] = []
        self.views: list[list[fx.Node]] = []
        storage = {n: StorageWeakRef(n.meta["val"].untyped_storage()) for n in joint
                   if isinstance(n.meta.get("val"), torch.Tensor)}
        for slot in self.pool.slots:
            root = fx_nodes["tensors"].get(slot.tensor)
            if root is None or root not in storage:
                raise ExportError(f"offload {slot.index}: tensor `{slot.tensor}` has no PyTorch value to copy "
                                  f"(plan without offload: offload=False)")
            nbytes = root.meta["val"].untyped_storage().nbytes()
            if nbytes != slot.nbytes:
                raise ExportError(f"offload {slot.index}: the storage of `{slot.tensor}` has {nbytes} bytes in "
                                  f"PyTorch, {slot.nbytes} in the graph (plan without offload: offload=False)")
            self.roots.append(root)
            self.views.append([n for n in joint if n in storage and storage[n] == storage[root]])

    def reads(self, kind: str, i: int) -> list:
        return {"to_host": [self.roots[i]], "release": [_Token("host", i), self.roots[i]],
                "fetch": [_Token("host", i)], "ready": [_Token("back", i)]}[kind]

    def makes(self, kind: str, i: int) -> list:
        return {"to_host": [_Token("host", i)], "release": [], "fetch": [_Token("back", i)],
                "ready": self.views[i]}[kind]

    def emit(self, g: fx.Graph, env: dict, kind: str, i: int) -> None:
        """The node of `kind` for offload `i`; after `ready`, the storage's values read the
        fetched bytes."""
        args = tuple(env[a] for a in self.reads(kind, i))
        node = g.call_function(getattr(self.pool, kind), (i, *args))
        if kind in ("to_host", "fetch"):
            env[self.makes(kind, i)[0]] = node
        elif kind == "ready":
            for view in self.views[i]:
                v = view.meta["val"]
                env[view] = g.call_function(rebuild, (node, v.dtype, tuple(v.shape), tuple(v.stride()),
                                                      v.storage_offset()))


def _items(graph: dict, plan: dict, offl: _Offloads | None) -> tuple[list, list]:
    """The forward's and the backward's work in run order: `("step", step)` for the plan's
    steps and, around them, `(kind, offload index)` for the offloads' nodes: `ready` before
    step `needed_at`; after a step, `fetch` (after `fetch_after`), `to_host` (after
    `copy_after`), `release` (after `free_after`), so a fetch is under way before a copy
    into the same host bytes starts."""
    steps = plan["steps"]
    fw_steps, _ = _split_steps(graph["ops"], steps)
    in_fw = {id(s) for s in fw_steps}
    offloads = plan.get("offloads", [])
    before: dict[int, list] = {}
    after: dict[int, list] = {}
    for i, o in enumerate(offloads):
        before.setdefault(o["needed_at"], []).append(("ready", i))
    for kind, key in (("fetch", "fetch_after"), ("to_host", "copy_after"), ("release", "free_after")):
        for i, o in enumerate(offloads):
            after.setdefault(o[key], []).append((kind, i))
    fw: list = []
    bw: list = []
    for k, s in enumerate(steps):
        items = fw if id(s) in in_fw else bw
        items += [*before.get(k, []), ("step", s), *after.get(k, [])]
    if offl is not None:
        _check_order(fw, bw, offl)
    return fw, bw


def _check_order(fw: list, bw: list, offl: _Offloads) -> None:
    """Each offload's nodes run in order (the forward module runs first): a plan whose
    forward ops run after its first backward op could put them out of order."""
    at = {item: (0, n) for n, item in enumerate(fw) if item[0] != "step"}
    at.update({item: (1, n) for n, item in enumerate(bw) if item[0] != "step"})
    for slot in offl.pool.slots:
        order = [at[(kind, slot.index)] for kind in ("to_host", "release", "fetch", "ready")]
        if order != sorted(order):
            raise ExportError(f"offload {slot.index} of `{slot.tensor}`: the forward and backward modules would run "
                              f"its copies out of order (plan without offload: offload=False)")


def _saved_values(bw_items: list, node_of: Callable, offl: _Offloads | None, outputs: list[fx.Node]) -> list:
    """What the backward reads before (or without) making it itself, in order: joint nodes
    and offload tokens."""
    made: set = set()
    saved: list = []
    seen: set = set()

    def read(a) -> None:
        if a not in made and a not in seen and getattr(a, "op", None) != "get_attr":
            seen.add(a)
            saved.append(a)

    for kind, s in bw_items:
        if kind != "step":
            for a in offl.reads(kind, s):
                read(a)
            made.update(offl.makes(kind, s))
            continue
        node = node_of(s)
        if node is None:
            continue
        for a in node.all_input_nodes:
            read(a)
        made.add(node)
        made.update(u for u in node.users if u.target is operator.getitem)
    for o in outputs:
        read(o)
    return saved


def _strip(trace: JointTrace, fqn: str) -> str:
    return fqn[len(trace.prefix):] if fqn.startswith(trace.prefix) else fqn


def _emit(g: fx.Graph, env: dict, node: fx.Node) -> None:
    """Copies `node` (and the `getitem`s of its tuple) into `g`; later reads see the copy.
    Constants (`get_attr`: a tensor made while tracing) are copied where first read."""

    def value(a: fx.Node) -> fx.Node:
        if a not in env and a.op == "get_attr":
            env[a] = g.node_copy(a)
        return env[a]

    env[node] = g.node_copy(node, value)
    for u in node.users:
        if u.op == "call_function" and u.target is operator.getitem:
            env[u] = g.node_copy(u, value)


@dataclass
class PlannedStep:
    """`loss = step(*batch)`: one training step that keeps for backward what the plan keeps
    and recomputes what it discards. Attributes: `graph` (the sgc graph), `plan` (its plan
    JSON, `plan["summary"]` the prediction), `partition`, `backend`."""

    model: nn.Module
    loss_fn: LossFn
    graph: dict
    plan: dict
    partition: Partition
    trace: JointTrace
    num_model_inputs: int = 1
    raw_output: bool = False
    backend: str = "aot_eager"
    _run_fw: Callable | None = field(default=None, repr=False)
    _run_bw: Callable | None = field(default=None, repr=False)
    saved_bytes: int | None = None  # measured on the last call: distinct storages of the saved values

    def __post_init__(self):
        self._step = TrainStep(self.model, self.loss_fn, self.num_model_inputs, self.raw_output)
        self._shapes = [(tuple(s.shape), s.dtype) for s in self.trace.inputs]
        self._device = _device_of(self.trace)
        sig = self.trace.signature
        self._order = []
        user = {ph: i for i, ph in enumerate(sig.user_inputs)}
        for n in self.trace.graph_module.graph.nodes:
            if n.op != "placeholder":
                continue
            if n.name in sig.inputs_to_parameters:
                self._order.append(("param", sig.inputs_to_parameters[n.name]))
            elif n.name in sig.inputs_to_buffers:
                self._order.append(("buffer", sig.inputs_to_buffers[n.name]))
            else:
                self._order.append(("input", user[n.name]))
        if self.backend == "inductor":
            if self.partition.offloaded:
                raise ExportError(f"the plan offloads {len(self.partition.offloaded)} tensors to host memory, which "
                                  f"backend='inductor' cannot run: use backend='aot_eager', or offload=False")
            self._run_fw = _inductor(self.partition.forward)
            self._run_bw = _inductor(self.partition.backward)
        else:
            self._run_fw, self._run_bw = self.partition.forward, self.partition.backward

    def __call__(self, *batch: torch.Tensor) -> torch.Tensor:
        self._check(batch)
        with torch.no_grad(), torch.autocast(self._device.type, enabled=False):
            return self._run(batch)

    def _check(self, batch) -> None:
        """The batch is what the step was traced for: shapes, dtypes, device, autocast."""
        got = [(tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else type(t).__name__ for t in batch]
        if got != self._shapes:
            raise ExportError(
                f"the step was traced for inputs {self._shapes}, got {got}: a batch of other shapes needs its own "
                f"step (sgc_trace.compile again with it; a smaller last batch: drop it, e.g. "
                f"DataLoader(drop_last=True), or compile a step for its shape)")
        for i, t in enumerate(batch):
            if t.device.type != self._device.type or (t.device.index or 0) != (self._device.index or 0):
                raise ExportError(f"batch element {i} is on {t.device}, the step was traced for {self._device}: "
                                  f"move it there (`.to('{self._device}')`)")
        traced = self.trace.autocast
        if torch.is_autocast_enabled(self._device.type):
            active = torch.get_autocast_dtype(self._device.type)
            if active != traced:
                was = f"under autocast {traced}" if traced is not None else "without autocast"
                raise ExportError(
                    f"the step is called under torch.autocast({self._device.type!r}, dtype={active}) but was traced "
                    f"{was}: its casts are fixed when it is traced; compile it inside the same autocast "
                    f"(or with autocast={active})")

    def _run(self, batch) -> torch.Tensor:
        step = self._step
        args = []
        for kind, key in self._order:
            if kind == "param":
                args.append(step.get_parameter(key).detach())
            elif kind == "buffer":
                args.append(step.get_buffer(key))
            else:
                # Traced for contiguous inputs (its views assume their strides): a slice of
                # a larger tensor is copied once, as its reader would have to.
                args.append(batch[key].contiguous())
        part = self.partition
        outs = list(self._run_fw(args))
        k = len(part.mutated_buffers)
        for fqn, value in zip(part.mutated_buffers, outs[:k]):
            self.model.get_buffer(fqn).copy_(value)
        loss = outs[k]
        saved = outs[k + 1:]
        outs.clear()
        # The loss is returned to the caller: held whether or not the backward reads it.
        self.saved_bytes = distinct_bytes(saved, exclude=self._persistent() | {loss.untyped_storage().data_ptr()})
        grads = self._run_bw(saved)
        for fqn, g in zip(part.grad_params, grads):
            p = self.model.get_parameter(fqn)
            if p.grad is None:
                p.grad = g
            else:  # in place, as autograd accumulates (a tied parameter: one gradient per use)
                p.grad.add_(g)
        return loss.detach()

    def _persistent(self) -> set:
        return {t.untyped_storage().data_ptr() for t in [*self.model.parameters(), *self.model.buffers()]}


def _inductor(gm: fx.GraphModule) -> Callable:
    """`gm` compiled by inductor on its first call, with that call's tensors as examples
    (their real strides: the traced fake values of a module's inputs need not have them),
    and called boxed: it takes the argument list, clears it and frees each input after its
    last use, so a backward holds a saved value no longer than the aot_eager module does (a
    plain `torch.compile` of the module keeps its arguments alive for the whole call)."""
    compiled: list = []

    def run(args: list):
        if not compiled:
            compiled.append(_compile_boxed(gm, args))
        return compiled[0](args)

    return run


def _compile_boxed(gm: fx.GraphModule, example: list) -> Callable:
    from torch._dynamo.utils import GmWrapper
    from torch._inductor.compile_fx import compile_fx

    graph = copy.deepcopy(gm.graph)
    graph.set_codegen(fx.graph.CodeGen())  # compile_fx takes positional arguments
    plain = fx.GraphModule(gm, graph, gm.__class__.__name__)
    # Wrapped as dynamo wraps a graph of flat inputs (`flatten_graph_inputs`): AOTAutograd
    # then returns its boxed entry point, which clears the argument list.
    compiled = compile_fx(GmWrapper(plain, lambda args: args), list(example))
    if not getattr(compiled, "_boxed_call", False):
        raise ExportError("internal: inductor's compiled module is not boxed: use backend='aot_eager'")
    return compiled


def distinct_bytes(tensors, exclude: set = frozenset()) -> int:
    """Bytes of the distinct storages of `tensors` (views counted once), less `exclude`d ones."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            if s.data_ptr() not in exclude:
                seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def compile(
    model: nn.Module,
    loss_fn: LossFn,
    example_batch: Sequence[torch.Tensor],
    budget: int | str | None = None,
    strategy: str = "sublinear",
    genetic_iters: int = 20,
    seed: int = 0,
    backend: str = "aot_eager",
    num_model_inputs: int = 1,
    raw_output: bool = False,
    plan: dict | None = None,
    traced: tuple | None = None,
    budget_of: str = "device",
    autocast: torch.dtype | None = None,
    offload: bool = True,
    host_link: str | None = None,
    host_memory: int | str | None = None,
) -> PlannedStep:
    """A training step for `model` that follows an sgc plan: `loss = step(*batch)`.

    `example_batch`: real tensors, the model's `num_model_inputs` inputs then the loss's
    targets (`loss_fn(model(*inputs), *targets)`); the step accepts batches of these shapes.
    `budget`, `strategy`, `genetic_iters`, `seed`: as `sgc plan` (`budget` in bytes or
    `"10GiB"`: the device bytes the plan must fit). `budget_of="saved"` with
    `strategy="partition"`: the budget bounds the bytes kept from the forward for the
    backward instead (what `torch.compile`'s `activation_memory_budget` bounds), and the
    plan recomputing least within it is applied. `plan`: a plan dict to apply instead
    of planning (refused, `PlanMismatch`, when it was made for another graph).
    `backend`: `aot_eager` (the FX modules as they are; bitwise the unplanned step) or
    `inductor`. A model the exporter cannot trace raises its `ExportError` (the op, the
    module and the model's line). `traced`: `trace(...)`'s answer for this model and batch,
    to apply several plans without tracing again (the partition reads only the FX graph).
    Devices: the step runs where the model's parameters are; every batch tensor must be
    there too (an `ExportError` names both devices otherwise). `autocast`: a dtype
    (`torch.bfloat16`) to trace the step under `torch.autocast` (compiling inside an active
    `torch.autocast` does the same with its dtype): the casts are ops of the traced graph,
    the plan sizes each tensor in its own dtype, and the step runs them as traced.
    `host_link` (`"h100"`, `"a100"` or `"TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US]"`, as
    `sgc plan --host-link`) with a `budget`: the plan may also offload activations to host
    memory (`host_memory`: the most pinned host bytes, default unbounded); the step copies
    them there and back on side streams (`offload.HostPool`: one pinned pool per step).
    `offload=False` keeps or recomputes every activation (`sgc plan --no-offload`); so does
    `backend="inductor"`, which cannot run the copies.
    """
    if backend not in BACKENDS:
        raise ExportError(f"unknown backend `{backend}`: expected one of {', '.join(BACKENDS)}")
    specs = input_specs(example_batch, num_model_inputs)
    graph, joint, fx_nodes = traced or trace(model, loss_fn, specs, num_model_inputs, raw_output, autocast=autocast)
    if plan is None:
        plan = plan_graph(graph, strategy=strategy, budget=budget, genetic_iters=genetic_iters, seed=seed,
                          budget_of=budget_of, offload=offload and backend != "inductor", host_link=host_link,
                          host_memory=host_memory)
        check_plan(graph, plan)
    else:
        check_plan(graph, plan, plan_graph(graph, strategy="none")["graph"]["fingerprint"])
        if plan.get("offloads") and not offload:
            raise ExportError(f"offload=False, but the plan given offloads {len(plan['offloads'])} tensors: "
                              f"plan again with offload=False (`sgc plan --no-offload`)")
    part = partition(joint, graph, fx_nodes, plan)
    return PlannedStep(model, loss_fn, graph, plan, part, joint, num_model_inputs, raw_output, backend)


def predicted_peak(graph: dict, plan: dict) -> dict:
    """sgc's prediction in the terms PyTorch measures: the most bytes allocated during the
    step over what was allocated before it (parameters, buffers and the batch, which the
    caller holds), from the plan's storage lifetimes. `step` is that figure for the plan;
    `planned_peak` is sgc's own (persistent bytes and the live batch included)."""
    tensors = graph["tensors"]
    inputs = {i for i, t in enumerate(tensors) if t.get("kind") == "input"}
    live: dict[int, int] = {}
    for lt in plan["lifetimes"]:
        if lt["root"] in inputs:
            continue
        for s in range(lt["first_step"], lt["last_step"] + 1):
            live[s] = live.get(s, 0) + lt["bytes"]
    return {"step": max(live.values(), default=0), "planned_peak": plan["summary"]["planned_peak"]}


def tensor_bytes(graph: dict, names, persistent: bool = False) -> int:
    """Bytes of the named tensors' storages (views count their base once); persistent
    storages (parameters, state) only when `persistent`."""
    by = {t["name"]: t for t in graph["tensors"]}
    roots = set()
    for n in names:
        while "alias_of" in by[n]:
            n = by[n]["alias_of"]
        if persistent or by[n].get("kind") not in ("param", "state", "const"):
            roots.add(n)
    return sum(storage_bytes(by[r]) for r in roots)
