"""A plan applied to a joint forward + backward FX graph: the two FX modules it runs as.

One partitioner serves both ways a plan reaches PyTorch: `sgc_trace.compile` (the whole
step traced by `aot_export_module`) and the `torch.compile` backend (`torch_compile.py`:
AOTAutograd's joint graph, where `min_cut_rematerialization_partition` would run). The
two differ only at the edges, which `Boundary` names: what the forward module takes and
returns before the saved values, and what the backward takes after them and returns.

The method:

1. **Split the schedule.** The plan's steps up to its first backward op, and forward ops
   run once after it, form the forward module; the rest, recomputations included and in
   the plan's order, form the backward module.
2. **Saved values.** A forward value the backward reads before recomputing it (or without
   ever recomputing it) is an output of the forward module and a placeholder of the
   backward one. Everything else the backward needs it recomputes, at the step the plan
   recomputes it, right before its first use: the order of sgc's schedule, not the joint
   graph's (where every recomputation would sit at the start of the backward and be live at
   once; `min_cut_rematerialization_partition` reorders for the same reason,
   `reordering_to_mimic_autograd_engine`). Random ops are never recomputed (the exporter
   marks them `recomputable: false`), so dropout masks are saved; a dropout's output is a
   product of its input and mask (`trace.split_dropout`), which the plan may recompute.
3. **Offloads** (`plan["offloads"]`): each adds four nodes at its steps, in whichever module
   runs the step (`offload.HostPool`: copy to host after `copy_after`, drop the device value
   after `free_after`, copy back after `fetch_after`, wait for it at `needed_at`, where
   every FX value over that storage is rebuilt over the fetched bytes). Within a module
   they pass tokens (the copy's index), so no node can move ahead of the one it follows; a
   token is never saved: the pool holds the copy between the two modules, and the backward
   names the offload by its index.

Both FX modules free every value after its last use; called boxed (the argument list
cleared on entry), the backward holds a saved value only until its last reader, as the
plan's memory model has it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import fx
from torch.multiprocessing.reductions import StorageWeakRef

from ..errors import ExportError
from .offload import HostPool, rebuild


@dataclass
class Boundary:
    """Where the two modules meet their callers. `fw_inputs`: the forward module's
    placeholders, in order (joint placeholders). `fw_outputs`: what the forward returns
    before the saved values (FX nodes of the joint graph, or constants). `bw_inputs`: the
    backward's placeholders after the saved values (joint placeholders: the tangents).
    `bw_outputs`: what the backward returns (FX nodes, or None)."""

    fw_inputs: list[fx.Node]
    fw_outputs: list
    bw_inputs: list[fx.Node]
    bw_outputs: list


@dataclass
class Partition:
    """The plan applied to the joint graph: the two FX modules and what passes between."""

    forward: fx.GraphModule  # fw_inputs -> [fw_outputs..., saved...]
    backward: fx.GraphModule  # [saved..., bw_inputs...] -> bw_outputs
    saved: list[str]  # FX names of the saved values, in forward-output order
    saved_tensors: list[str]  # the saved values as sgc tensor names
    recomputed_ops: list[str]  # sgc op names the backward runs again, in order
    offloaded: list[str] = field(default_factory=list)  # sgc tensors copied to host and back, plan order
    host_pool: HostPool | None = None  # their host pool and copy streams (`offload.HostPool`)


def partition(gm: fx.GraphModule, graph: dict, fx_nodes: dict, plan: dict, boundary: Boundary,
              device: torch.device, boxed: bool = True, order_saved: Callable | None = None) -> Partition:
    """Applies `plan` (for `graph`, the sgc graph of the joint graph `gm`) to `gm`.

    `boxed`: both modules take their arguments as one list and clear it (the step's own
    calling convention); else positional, as AOTAutograd's compilers expect.
    `order_saved`: reorders the saved values (AOTAutograd's convention puts some last)."""
    joint = list(gm.graph.nodes)
    ops = graph["ops"]
    op_node: dict[str, fx.Node] = fx_nodes["ops"]
    offl = _Offloads(graph, plan, fx_nodes, joint, device) if plan.get("offloads") else None
    fw_items, bw_items = _items(graph, plan, offl)

    def node_of(step) -> fx.Node | None:
        op = ops[step["op"]]
        if step["recompute"] and op["op"] == "sgc.batch_norm_update_stats":
            return None  # the statistics are written once, by the forward
        return op_node.get(op["name"])

    fwd = fx.Graph()
    env: dict = {}
    for p in boundary.fw_inputs:
        env[p] = fwd.node_copy(p)
    for kind, s in fw_items:
        if kind != "step":
            offl.emit(fwd, env, kind, s)
            continue
        node = node_of(s)
        if node is None or (node in env and not s["recompute"]):
            continue
        _emit(fwd, env, node)
    bw_out_nodes = [n for n in boundary.bw_outputs if isinstance(n, fx.Node)]
    saved = _saved_values(bw_items, node_of, offl, bw_out_nodes, set(boundary.bw_inputs))
    if order_saved is not None:
        saved = order_saved(saved)
    bwd = fx.Graph()
    benv: dict = {}
    for n in [*saved, *boundary.bw_inputs]:
        benv[n] = bwd.node_copy(n) if n.op == "placeholder" else _placeholder_like(bwd, n)
    recomputed: list[str] = []
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
    missing = [n.name for n in [*_nodes(boundary.fw_outputs), *saved] if n not in env]
    missing += [n.name for n in bw_out_nodes if n not in benv]
    if missing:
        raise ExportError(f"internal: the plan's steps do not make {', '.join(missing[:5])}")
    fwd.output(tuple(_lookup(env, n) for n in [*boundary.fw_outputs, *saved]))
    bwd.output(tuple(_lookup(benv, n) for n in boundary.bw_outputs))
    for g in (fwd, bwd):
        if boxed:
            g.set_codegen(fx.graph._BoxedCodeGen())
        g.lint()
    for node in bwd.nodes:
        if node.op in ("call_function", "get_attr"):
            node.meta["autograd_backward"] = True
    tensor_of = {n: t for t, n in fx_nodes["tensors"].items()}
    return Partition(
        forward=fx.GraphModule(gm, fwd, "sgc_forward"),
        backward=fx.GraphModule(gm, bwd, "sgc_backward"),
        saved=[n.name for n in saved],
        saved_tensors=[tensor_of.get(n, n.name) for n in saved],
        recomputed_ops=recomputed,
        offloaded=[o.tensor for o in offl.pool.slots] if offl else [],
        host_pool=offl.pool if offl else None,
    )


def _nodes(items: list) -> list[fx.Node]:
    return [n for n in items if isinstance(n, fx.Node)]


def _lookup(env: dict, item):
    return env[item] if isinstance(item, fx.Node) else item


def _placeholder_like(g: fx.Graph, n: fx.Node) -> fx.Node:
    ph = g.placeholder(n.name)
    ph.meta = dict(getattr(n, "meta", {}))
    return ph


def saved_tensor_names(graph: dict, plan: dict) -> list[str]:
    """sgc tensor names the plan keeps from its forward stretch for the backward (static,
    from the plan alone): read after the first backward op before any recomputation."""
    ops = graph["ops"]
    kind = {t["name"]: t.get("kind", "activation") for t in graph["tensors"]}
    fw, bw = split_steps(ops, plan["steps"])
    made_in_bw: set[str] = set()
    saved: list[str] = []
    for s in bw:
        op = ops[s["op"]]
        for t in op["inputs"]:
            if t not in made_in_bw and t not in saved and kind[t] in ("activation", "input"):
                saved.append(t)
        made_in_bw.update(op["outputs"])
    return saved


def split_steps(ops: list[dict], steps: list[dict]) -> tuple[list[dict], list[dict]]:
    """Forward stretch (up to the first backward op, plus forward ops run once after it) and
    backward stretch (everything else, recomputations included), each in plan order."""
    first = next((i for i, s in enumerate(steps) if not s["recompute"] and ops[s["op"]].get("phase") == "backward"),
                 len(steps))
    fw, bw = [], []
    for i, s in enumerate(steps):
        forward_once = not s["recompute"] and ops[s["op"]].get("phase") != "backward"
        (fw if i < first or forward_once else bw).append(s)
    return fw, bw


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
        """What the node reads: joint values and tokens (`_Token`)."""
        return {"to_host": [self.roots[i]], "release": [_Token("host", i), self.roots[i]],
                "fetch": [_Token("host", i)], "ready": [_Token("back", i)]}[kind]

    def makes(self, kind: str, i: int) -> list:
        return {"to_host": [_Token("host", i)], "release": [], "fetch": [_Token("back", i)],
                "ready": self.views[i]}[kind]

    def emit(self, g: fx.Graph, env: dict, kind: str, i: int) -> None:
        """The node of `kind` for offload `i`; after `ready`, the storage's values read the
        fetched bytes. A token made in the other module is the offload's index."""
        args = tuple(env.get(a, a.index) if isinstance(a, _Token) else env[a] for a in self.reads(kind, i))
        node = g.call_function(getattr(self.pool, kind), (i, *args))
        if kind in ("to_host", "fetch"):
            env[self.makes(kind, i)[0]] = node
        elif kind == "ready":
            for view in self.views[i]:
                v = view.meta["val"]
                env[view] = g.call_function(rebuild, (node, v.dtype, tuple(v.shape), tuple(v.stride()),
                                                      v.storage_offset()))


@dataclass(frozen=True)
class _Token:
    """What an offload's node passes on: its copy to host (`host`) or back (`back`) started."""

    kind: str
    index: int


def _items(graph: dict, plan: dict, offl: _Offloads | None) -> tuple[list, list]:
    """The forward's and the backward's work in run order: `("step", step)` for the plan's
    steps and, around them, `(kind, offload index)` for the offloads' nodes: `ready` before
    step `needed_at`; after a step, `fetch` (after `fetch_after`), `to_host` (after
    `copy_after`), `release` (after `free_after`), so a fetch is under way before a copy
    into the same host bytes starts."""
    steps = plan["steps"]
    fw_steps, _ = split_steps(graph["ops"], steps)
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


def _saved_values(bw_items: list, node_of: Callable, offl: _Offloads | None, outputs: list[fx.Node],
                  given: set) -> list[fx.Node]:
    """What the backward reads before (or without) making it itself, in order, less what
    it is `given` (the tangents) and offload tokens."""
    made: set = set(given)
    saved: list = []
    seen: set = set()

    def read(a) -> None:
        if isinstance(a, _Token):
            return
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
