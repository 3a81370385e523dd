"""AOTAutograd joint graph -> sgc graph format, version 1 (`docs/graph-format.md`).

The mapping, node by node:

* Placeholders become tensors: parameters `param`, buffers `state`, user inputs (data and
  targets) `input` with their `batch_dim`. Names are the module paths
  (`layer1.0.conv1.weight`) and the input names.
* Every other FX node that yields tensors becomes one op whose type is the aten overload
  (`aten.convolution.default`; `aten.detach.default`, which older torch writes where newer
  writes `aten.alias.default`, is written as the latter). A node that returns a tuple
  (`native_batch_norm`, `convolution_backward`) is one op with one output per tensor
  element; `getitem` nodes only name those elements. Elements that are `None` are dropped.
* Storage identity decides views: each tensor's fake value has an untyped storage; the
  first tensor seen with a storage owns it, every later tensor on that storage is written
  as `alias_of` that owner, so a view (`view`, `t`, `expand`, `alias`, `slice`, ...) adds
  no bytes and keeps its base alive. A storage larger than its owner's elements (an
  owner with gaps or an offset) is written with `bytes`.
* Phase: the forward set is every node that the loss or a mutated buffer's new value
  depends on (the forward graph of AOTAutograd's partition); the rest is backward. Ops
  are written forward first, then backward, each in traced order; this is a valid
  execution order because the forward set is closed under dependencies.
* Buffer mutations (BatchNorm running statistics) come out of the functional graph as
  new values; each becomes an `aten.copy_.default` op reading the buffer and the value,
  with no outputs and `recomputable: false` (it writes persistent state), placed right
  after the op that makes the value.
* Training-mode BatchNorm (`_native_batch_norm_legit_functional`, which reads the running
  statistics and returns their new values) is split in two so that it can be recomputed:
  `aten._native_batch_norm_legit.no_stats` reads `[x, weight, bias]` and writes
  `[out, save_mean, save_rstd]` (its output depends on the batch alone), and
  `sgc.batch_norm_update_stats` reads `[running_mean, running_var, save_mean, save_rstd]`
  and writes the new running statistics (a pure function, attrs `momentum`, `eps` and
  `count` = elements per channel for the unbiased variance), which the `copy_` ops then
  write into the `state` tensors. `native_batch_norm_backward` in training mode does not
  read the running statistics it is passed, so they are left out of its inputs.
* Random ops (tag `nondeterministic_seeded`: dropout, `rand*`, `bernoulli`), ops that
  write one of their arguments and collectives (`_c10d_functional`: every rank must run
  the same ones in the same order) are `recomputable: false`. A training-mode dropout reaches
  this module split (`trace.split_dropout`): the random op draws the mask, and two
  recomputable multiplies make its output from the input and the mask. Scaled-dot-product attention
  overloads carry the tag for their optional dropout; with `dropout_p == 0` they draw
  nothing and stay recomputable.
* FLOPs come from `torch.utils.flop_counter`'s formula registry, per node; ops without a
  formula (elementwise, views, reductions) get 0. `time_us` is the roofline estimate on a
  device profile (`native.with_times`: sgc-ir's `cost.rs`), for every op.
* Tangents (a `torch.compile` graph, `Joint`): the caller computes the loss from the
  forward's outputs and hands in their gradients; one `sgc.tangent` op, first in the
  backward, reads those outputs and makes the tangents (not recomputable: it is not the
  graph's to run), so the outputs live until the backward starts and the tangents from
  then on.
* Outputs: the loss (named `loss`) and the gradients (`<param>.grad`); or, with the SGD
  update, the loss only and one `update` op per parameter that reads the parameter and
  its gradient and writes the parameter in place (no outputs, `recomputable: false`).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode

from ..version import __version__
from ..native import DeviceProfile, with_times
from ..errors import ExportError
from .modules import META_KEY

DTYPES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}

UPDATES = ("none", "sgd")


@dataclass
class _Namer:
    used: set[str] = field(default_factory=set)

    def take(self, want: str) -> str:
        name, i = want, 1
        while name in self.used:
            name, i = f"{want}_{i}", i + 1
        self.used.add(name)
        return name


@dataclass
class _State:
    """Tensors and ops being built, with the maps from FX nodes to tensor names."""

    tensors: list[dict] = field(default_factory=list)
    names: _Namer = field(default_factory=_Namer)
    op_names: _Namer = field(default_factory=_Namer)
    # FX node -> tensor names it stands for (one, or one per tuple element).
    of_node: dict[torch.fx.Node, list[str]] = field(default_factory=dict)
    # Storage -> the first tensor seen on it (the one that owns its bytes).
    storage_owner: dict[StorageWeakRef, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, list[int]] = field(default_factory=dict)
    # Parameter path -> its tensor (tied parameters share one).
    param_of: dict[str, str] = field(default_factory=dict)
    # Op name -> the FX node it stands for (the exporter's own ops, copy_ and SGD, have none).
    op_node: dict[str, torch.fx.Node | None] = field(default_factory=dict)

    def add_tensor(self, want: str, val: torch.Tensor, kind: str, where: str) -> str:
        dtype = DTYPES.get(val.dtype)
        if dtype is None:
            raise ExportError(f"{where}: dtype {val.dtype} has no version-1 equivalent")
        name = self.names.take(want)
        t: dict[str, Any] = {"name": name, "dtype": dtype, "shape": [int(d) for d in val.shape]}
        if kind != "activation":
            t["kind"] = kind
        storage = StorageWeakRef(val.untyped_storage())
        owner = self.storage_owner.get(storage)
        if owner is not None:
            t["alias_of"] = owner
        else:
            self.storage_owner[storage] = name
            nbytes = int(val.untyped_storage().nbytes())
            if nbytes != val.numel() * val.element_size():
                t["bytes"] = nbytes
        self.tensors.append(t)
        self.kind[name] = kind
        self.shapes[name] = t["shape"]
        return name

    def take_op(self, want: str, node: torch.fx.Node | None) -> str:
        name = self.op_names.take(want)
        self.op_node[name] = node
        return name

    def shape_of(self, name: str) -> list[int]:
        return self.shapes[name]


@dataclass
class Joint:
    """A joint forward + backward FX graph and the role of each of its placeholders and
    outputs: what `to_graph` converts and `apply.partitioner` splits. Two tracers make one:
    `aot_export_module` of the whole step (`trace.JointTrace.joint`: the loss is an output
    and seeds the backward itself) and the partitioner hook of `torch.compile`
    (`torch_compile.py`: the forward's outputs go back to the caller and the backward starts from
    their gradients, the tangents).

    `placeholders`: FX name -> (kind, tensor name, batch axis): kind `param`, `state`,
    `input` or `tangent`. `outputs`: FX names of the forward's outputs handed to the
    caller, with the tensor names wanted for them (the loss first when there is one).
    `loss`: FX name of the loss, or None. `grads`: (FX name, name of the tensor it is the
    gradient of) per gradient output. `mutations`: FX name of a new value -> the tensor it
    overwrites (mutations returned as outputs; a `copy_` into a placeholder inside the
    graph is an op of its own)."""

    graph_module: torch.fx.GraphModule
    placeholders: dict[str, tuple[str, str, int | None]]
    outputs: list[tuple[str, str]]
    loss: str | None
    grads: list[tuple[str, str]]
    mutations: dict[str, str]
    tracer: str
    batch_size: int | None = None
    without_grad: list[str] = field(default_factory=list)
    autocast: torch.dtype | None = None


def to_graph(
    joint: Joint,
    name: str | None = None,
    update: str = "none",
    lr: float = 0.01,
    meta: dict | None = None,
    profile: DeviceProfile | None = None,
    fx_nodes: dict | None = None,
) -> dict:
    """The version-1 graph (a JSON-ready dict) of a traced training step; with a device
    `profile`, every op gets its roofline `time_us` (`cost.py`).

    `fx_nodes`, when given, is filled with the way back to the traced graph (what
    `apply.partitioner` applies a plan through): `"ops"`: op name -> FX node (both ops of a
    split BatchNorm name the one node; the caller's `sgc.tangent` op has none), `"tensors"`:
    tensor name -> the FX node holding it (the `getitem` of a tuple element)."""
    if update not in UPDATES:
        raise ExportError(f"unknown update `{update}`: expected one of {', '.join(UPDATES)}")
    if update != "none" and joint.loss is None:
        raise ExportError("an update op needs a step that computes its loss")
    gm = joint.graph_module
    nodes = list(gm.graph.nodes)
    st = _State()
    renames = _renames(joint)
    param_names, tangents = _placeholders(joint, nodes, st)
    in_graph = _in_graph_mutations(nodes, joint)
    copies = {c for cs in in_graph.values() for c in cs}
    forward = _forward_set(nodes, joint, in_graph)
    fwd_ops, bwd_ops = [], []
    for node in nodes:
        if node.op != "call_function" or node.target is operator.getitem or node in copies:
            continue
        if _is_training_batch_norm(node):
            made = _batch_norm_ops(node, st, renames)
        else:
            op = _op(node, st, renames, node in forward)
            made = [op] if op is not None else []
        (fwd_ops if node in forward else bwd_ops).extend(made)
        for value_node in _mutated_values_of(node, joint.mutations):
            fwd_ops.append(_copy_op(st, joint.mutations[value_node], value_node))
        for copy in in_graph.get(node, []):
            fwd_ops.append(_copy_op(st, st.of_node[copy.args[0]][0], node.name, copy))
    by_name = {n.name: n for n in nodes}
    grads = [(_tensor_of(st, by_name[g]), of) for g, of in joint.grads if g in by_name]
    grads = [(g, of) for g, of in grads if g is not None]
    handed = [_tensor_of(st, by_name[o]) for o, _ in joint.outputs]
    if tangents:
        bwd_ops.insert(0, _tangent_op(st, [t for t in handed if t is not None], tangents))
    ops = fwd_ops + bwd_ops
    loss = _tensor_of(st, by_name[joint.loss]) if joint.loss is not None else None
    if update == "sgd":
        # A tied parameter gets one update per gradient contribution; for SGD their sum
        # is the update with the accumulated gradient.
        ops += [_sgd_op(st, st.param_of[param], grad, lr) for grad, param in grads]
        outputs = [loss]
    else:
        outputs = ([loss] if loss is not None else []) + [g for g, _ in grads]
    ops, tensors = _tidy(ops, st.tensors, set(outputs), loss)
    graph: dict[str, Any] = {"format": "sgc-graph", "version": 1}
    if name:
        graph["name"] = name
    graph["tensors"] = tensors
    graph["ops"] = ops
    graph["outputs"] = outputs
    if loss is not None:
        graph["loss"] = loss
    graph["meta"] = _meta(joint, st, param_names, update, lr, meta)
    if fx_nodes is not None:
        kept = {op["name"] for op in ops}
        fx_nodes["ops"] = {k: n for k, n in st.op_node.items() if k in kept and n is not None}
        fx_nodes["tensors"] = {
            t: n
            for n, names in st.of_node.items()
            for t in names
            if isinstance(n.meta.get("val"), torch.Tensor) or n.target is operator.getitem
        }
    if profile is not None:
        with_times(graph, profile)
    return graph


# -- tidying the op list ---------------------------------------------------------------


def _tidy(
    ops: list[dict], tensors: list[dict], live: set[str], loss: str
) -> tuple[list[dict], list[dict]]:
    """Three rewrites that keep the step's meaning and make its order the one a runtime
    would use (planners read the order as given):

    * Dead ops go: AOTAutograd's joint graph holds `alias` nodes of saved activations that
      nothing reads; a recomputable op none of whose outputs is read or is a graph output
      computes nothing the step needs (repeated until none is left).
    * A view names the op's own input on the same storage as its base (`alias_of`), not
      the storage's first tensor: the same storage, and the base is read where the view
      is made.
    * Backward ops that need no gradient (a `clone` of a saved activation, views of it)
      come right before their first reader instead of at the start of the backward pass,
      where they would hold every saved activation at once. An op that reads the loss
      (the gradient's seed) is never moved, nor is anything that depends on it.
    """
    ops = _drop_dead(ops, live)
    produced = {t for op in ops for t in op["outputs"]}
    tensors = [t for t in tensors if t.get("kind", "activation") != "activation" or t["name"] in produced]
    _rebase_views(ops, tensors)
    return _sink_early_backward(ops, tensors, live, loss), tensors


def _drop_dead(ops: list[dict], live: set[str]) -> list[dict]:
    while True:
        read = set(live)
        for op in ops:
            read.update(op["inputs"])
        kept = [
            op
            for op in ops
            if not op["outputs"] or not op.get("recomputable", True) or set(op["outputs"]) & read
        ]
        if len(kept) == len(ops):
            return ops
        ops = kept


def _rebase_views(ops: list[dict], tensors: list[dict]) -> None:
    by_name = {t["name"]: t for t in tensors}

    def root(name: str) -> str:
        while "alias_of" in by_name[name]:
            name = by_name[name]["alias_of"]
        return name

    for op in ops:
        for out in op["outputs"]:
            t = by_name[out]
            if "alias_of" not in t:
                continue
            base = next((i for i in op["inputs"] if root(i) == root(out)), None)
            if base is not None and base != out:
                t["alias_of"] = base


def _sink_early_backward(
    ops: list[dict], tensors: list[dict], live: set[str], loss: str
) -> list[dict]:
    kind = {t["name"]: t.get("kind", "activation") for t in tensors}
    where = [k for k, op in enumerate(ops) if op.get("phase") == "backward"]
    if not where:
        return ops
    # The backward ops are one stretch (forward first, the update after).
    first, last = where[0], where[-1]
    forward, backward, after = ops[:first], ops[first : last + 1], ops[last + 1 :]
    early = {t for op in forward for t in op["outputs"]}
    read_in_backward = {t for op in backward for t in op["inputs"]}
    sink = []
    for op in backward:
        acts = [t for t in op["inputs"] if kind[t] == "activation"]
        if (
            acts
            and all(t in early for t in acts)
            and loss not in op["inputs"]
            and not set(op["outputs"]) & live
            and any(t in read_in_backward for t in op["outputs"])
        ):
            sink.append(op)
            early.update(op["outputs"])
    moved = {id(op) for op in sink}
    order = [op for op in backward if id(op) not in moved]
    for op in reversed(sink):
        outs = set(op["outputs"])
        at = next((k for k, c in enumerate(order) if outs & set(c["inputs"])), len(order))
        order.insert(at, op)
    return forward + order + after


# -- placeholders and roles -------------------------------------------------------------


def _placeholders(joint: Joint, nodes, st: _State) -> tuple[list[str], list[str]]:
    """Declares parameter, buffer, input and tangent tensors; returns the parameter names
    and the tangents' tensor names (made by the `sgc.tangent` op)."""
    params, tangents = [], []
    for node in nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        role = joint.placeholders.get(node.name)
        if role is None:
            raise ExportError(f"placeholder `{node.name}` is neither a parameter, a buffer, an input nor a tangent")
        if not isinstance(val, torch.Tensor):
            raise ExportError(f"placeholder `{node.name}` ({role[1]}) is not a tensor but a {type(val).__name__}: "
                              f"sgc plans graphs of tensors with static shapes (effect tokens, symbolic sizes and "
                              f"script objects are not supported)")
        kind, want, batch_dim = role
        if kind == "tangent":
            # An activation the `sgc.tangent` op makes; declared now so that it owns its
            # storage before the views of it in the backward are seen.
            tangents.append(st.add_tensor(want, val, "activation", node.name))
            st.of_node[node] = [tangents[-1]]
            continue
        if kind == "param":
            owner = st.storage_owner.get(StorageWeakRef(val.untyped_storage()))
            if owner is not None and st.kind.get(owner) == "param":
                name = owner  # a tied parameter (GPT's head and embedding): one tensor
            else:
                name = st.add_tensor(want, val, "param", node.name)
                params.append(name)
            st.param_of[want] = name
        else:
            name = st.add_tensor(want, val, kind, node.name)
            if batch_dim is not None:
                st.tensors[-1]["batch_dim"] = batch_dim
        st.of_node[node] = [name]
    return params, tangents


def _tangent_op(st: _State, handed: list[str], tangents: list[str]) -> dict:
    """The caller's part of a step compiled without its loss: it holds the forward's
    outputs (`handed`) until the backward starts and hands in their gradients (the
    tangents). Not an op of the traced graph; it places the tangents' bytes at the start
    of the backward instead of the whole step."""
    return {
        "name": st.take_op("sgc.tangent", None),
        "op": TANGENT_OP,
        "inputs": handed,
        "outputs": list(tangents),
        "phase": "backward",
        "flops": 0,
        "recomputable": False,
    }


TANGENT_OP = "sgc.tangent"


def _renames(joint: Joint) -> dict[str, str]:
    """Readable names for the outputs and the gradients (FX node name -> wanted name)."""
    out = dict(joint.outputs)
    for node_name, of in joint.grads:
        out.setdefault(node_name, of + ".grad")
    return out


def _tensor_of(st: _State, node: torch.fx.Node) -> str | None:
    names = st.of_node.get(node)
    return names[0] if names else None


def _in_graph_mutations(nodes, joint: Joint) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """`copy_` nodes that write a placeholder inside the graph (the buffer updates of a
    `torch.compile` trace), by the node whose value they write: each becomes a `copy_` op
    right after that value's op."""
    out: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for node in nodes:
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default \
                and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder":
            if joint.placeholders.get(node.args[0].name, ("",))[0] == "tangent":
                raise ExportError(f"`{node.name}` writes the tangent `{node.args[0].name}`")
            value = node.args[1]
            if not isinstance(value, torch.fx.Node):
                raise ExportError(f"`{node.name}` writes `{node.args[0].name}` with a constant")
            producer = value.args[0] if value.target is operator.getitem else value
            out.setdefault(producer, []).append(node)
    return out


def _forward_set(nodes, joint: Joint, in_graph: dict) -> set:
    """Nodes that the forward's outputs, a mutated buffer's new value or an in-graph
    buffer update depend on."""
    by_name = {n.name: n for n in nodes}
    todo = [by_name[o] for o, _ in joint.outputs] + [by_name[n] for n in joint.mutations]
    todo += [c for copies in in_graph.values() for c in copies]
    seen: set = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(n.all_input_nodes)
    return seen


def _mutated_values_of(node: torch.fx.Node, mutations: dict[str, str]) -> list[str]:
    """Names of the mutation value nodes that this op node produces (itself or via getitem)."""
    out = [node.name] if node.name in mutations else []
    out += [u.name for u in node.users if u.target is operator.getitem and u.name in mutations]
    return out


# -- ops ------------------------------------------------------------------------------


def _output_slots(node: torch.fx.Node) -> list[tuple[str, Any]]:
    """(FX name, fake value) of each tensor an op node yields, getitem names preferred."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return [(node.name, val)]
    if not isinstance(val, (tuple, list)):
        return []
    getitems = {u.args[1]: u for u in node.users if u.target is operator.getitem}
    slots = []
    for i, v in enumerate(val):
        if isinstance(v, torch.Tensor):
            g = getitems.get(i)
            slots.append((g.name if g is not None else f"{node.name}.{i}", v))
    return slots


def _op(node: torch.fx.Node, st: _State, renames: dict[str, str], is_forward: bool) -> dict | None:
    slots = _output_slots(node)
    if not slots:
        return None
    inputs = _input_tensors(node, st)
    outputs = _declare_outputs(node, st, [(renames.get(fx, fx), val) for fx, val in slots], slots)
    op: dict[str, Any] = {
        "name": st.take_op(_op_label(node), node),
        "op": _op_type(node),
        "inputs": inputs,
        "outputs": outputs,
        "phase": "forward" if is_forward else "backward",
        "flops": _flops(node),
    }
    attrs = _attrs(node)
    if attrs:
        op["attrs"] = attrs
    if not _recomputable(node):
        op["recomputable"] = False
    return op


# Op types written under another name: the same op, spelled as the newest torch traces it
# (torch 2.11's joint graph detaches saved values where 2.15's aliases them), so that one
# step gives one graph on every supported torch.
SAME_OP = {"aten.detach.default": "aten.alias.default"}


def _op_type(node: torch.fx.Node) -> str:
    name = str(node.target)
    return SAME_OP.get(name, name)


def _op_label(node: torch.fx.Node) -> str:
    """Module path + FX name (`layer1.0.conv1:convolution`), or the FX name alone."""
    label = module_of(node)
    return f"{label}:{node.name}" if label else node.name


def module_of(node: torch.fx.Node) -> str | None:
    """The module path an FX node was traced in: the exporter's label (`modules.py`), else
    the innermost entry of the `nn_module_stack` that torch.compile records (forward
    nodes; a backward node has its forward node's, `fwd_nn_module_stack`)."""
    label = node.meta.get(META_KEY)
    if label:
        return label
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    return dynamo_path(path) or None


def _declare_outputs(node: torch.fx.Node, st: _State, wanted: list[tuple[str, Any]], slots) -> list[str]:
    """Declares one activation per output slot under the wanted names; maps the node and its
    getitem users to them."""
    outputs = []
    by_fx_name = {}
    for (want, val), (fx_name, _) in zip(wanted, slots):
        name = st.add_tensor(want, val, "activation", f"op `{node.name}`")
        outputs.append(name)
        by_fx_name[fx_name] = name
    st.of_node[node] = outputs
    for u in node.users:
        if u.target is operator.getitem and u.name in by_fx_name:
            st.of_node[u] = [by_fx_name[u.name]]
    return outputs


def _input_tensors(node: torch.fx.Node, st: _State) -> list[str]:
    """The tensors an op reads, in argument order (None arguments have none)."""
    unread = _unread_args(node)
    names: list[str] = []
    args = [a for i, a in enumerate(node.args) if i not in unread]
    for arg in tree_flatten((args, node.kwargs))[0]:
        if isinstance(arg, torch.fx.Node):
            names.extend(st.of_node.get(arg, []))
    return names


def _unread_args(node: torch.fx.Node) -> set[int]:
    """Positions of tensor arguments an op is passed but does not read: the running
    statistics of `native_batch_norm_backward` in training mode (it uses the saved batch
    statistics). Listing them would keep the statistics update's outputs alive until the
    backward pass for nothing."""
    if node.target is torch.ops.aten.native_batch_norm_backward.default and _arg(node, "train") is True:
        names = [a.name for a in node.target._schema.arguments]
        return {names.index("running_mean"), names.index("running_var")}
    return set()


def _arg(node: torch.fx.Node, name: str, default: Any = None) -> Any:
    """The value of a schema argument of an op node: given positionally or by keyword, else
    the schema's default."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return node.kwargs.get(name, default)
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if name in node.kwargs:
                return node.kwargs[name]
            if i < len(node.args):
                return node.args[i]
            return a.default_value if a.has_default_value() else default
    return default


COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_dtensor", "c10d")


def _recomputable(node: torch.fx.Node) -> bool:
    """False for ops that draw random numbers, write one of their arguments, or are
    collectives (ranks must run the same ones in the same order: never again on one).

    Ops tagged `nondeterministic_seeded` draw random numbers, except two kinds that carry
    the tag for an option: scaled-dot-product attention with `dropout_p == 0` (no dropout,
    nothing drawn) and attention backward ops that replay a recorded `philox_seed`.
    """
    target = node.target
    schema = getattr(target, "_schema", None)
    if str(getattr(target, "namespace", "")) in COLLECTIVE_NAMESPACES:
        return False  # a collective runs once on every rank, in the same order
    if torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
        names = {a.name for a in schema.arguments} if schema is not None else set()
        if "philox_seed" in names:
            return True
        if "dropout_p" in names:
            p = _arg(node, "dropout_p", 0.0)
            return isinstance(p, (int, float)) and p == 0
        return False
    if schema is None:
        return True
    return not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def dynamo_path(path: str) -> str:
    """A module path as torch.compile records it (`L['self'].layers[0].attn`, or
    `L['self']._modules['layers']._modules['0']`) as `layers.0.attn`."""
    import re

    parts = re.findall(r"\.(\w+)|\[(?:'([^']*)'|(\d+))\]", path)
    names = [a or b or c for a, b, c in parts]
    names = [n for n in names if n not in ("_modules", "_parameters", "_buffers")]
    if path.startswith(("L['self']", "L[\"self\"]")) and names[:1] == ["self"]:
        names = names[1:]
    return ".".join(names)


# -- BatchNorm ------------------------------------------------------------------------

_BN_FUNCTIONAL = torch.ops.aten._native_batch_norm_legit_functional.default
BN_NO_STATS = "aten._native_batch_norm_legit.no_stats"
BN_UPDATE_STATS = "sgc.batch_norm_update_stats"
# Per channel: var = 1/rstd^2 - eps (3), unbiased = var * count/(count-1) (1), and two
# lerps (1-m)*old + m*new (3 each).
BN_UPDATE_FLOPS_PER_CHANNEL = 10


def _is_training_batch_norm(node: torch.fx.Node) -> bool:
    return node.target is _BN_FUNCTIONAL and _arg(node, "training") is True and len(_output_slots(node)) == 5


def _batch_norm_ops(node: torch.fx.Node, st: _State, renames: dict[str, str]) -> list[dict]:
    """A training-mode BatchNorm as two ops: the normalisation, which depends on the batch
    alone (recomputable), and the update of the running statistics (see the module doc)."""
    slots = _output_slots(node)
    x = node.args[0]
    running = [_arg(node, "running_mean"), _arg(node, "running_var")]
    state = [st.of_node[r][0] for r in running]
    prefix = node.meta.get(META_KEY) or node.name
    wanted = [
        (renames.get(slots[0][0], slots[0][0]), slots[0][1]),
        (f"{prefix}.save_mean", slots[1][1]),
        (f"{prefix}.save_rstd", slots[2][1]),
        (f"{state[0]}.updated", slots[3][1]),
        (f"{state[1]}.updated", slots[4][1]),
    ]
    out, save_mean, save_rstd, new_mean, new_var = _declare_outputs(node, st, wanted, slots)
    inputs = [st.of_node[a][0] for a in (x, _arg(node, "weight"), _arg(node, "bias")) if isinstance(a, torch.fx.Node)]
    momentum, eps = _arg(node, "momentum"), _arg(node, "eps")
    xval = x.meta["val"]
    channels = int(xval.shape[1]) if xval.dim() > 1 else 1
    count = int(xval.numel()) // max(channels, 1)
    norm = {
        "name": st.take_op(f"{prefix}:batch_norm", node),
        "op": BN_NO_STATS,
        "inputs": inputs,
        "outputs": [out, save_mean, save_rstd],
        "phase": "forward",
        "flops": _flops(node),
        "attrs": {"training": True, "momentum": _json_value(momentum), "eps": _json_value(eps)},
    }
    update = {
        "name": st.take_op(f"{prefix}:batch_norm_update_stats", node),
        "op": BN_UPDATE_STATS,
        "inputs": [state[0], state[1], save_mean, save_rstd],
        "outputs": [new_mean, new_var],
        "phase": "forward",
        "flops": BN_UPDATE_FLOPS_PER_CHANNEL * channels,
        "attrs": {"momentum": _json_value(momentum), "eps": _json_value(eps), "count": count},
    }
    return [norm, update]


_FLOP_REGISTRY = FlopCounterMode().flop_registry


def _flops(node: torch.fx.Node) -> int:
    target = node.target
    formula = _FLOP_REGISTRY.get(target) or _FLOP_REGISTRY.get(getattr(target, "overloadpacket", None))
    if formula is None:
        return 0
    args, kwargs = tree_map(
        lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a, (node.args, node.kwargs)
    )
    try:
        return int(formula(*args, **kwargs, out_val=node.meta.get("val")))
    except Exception as e:  # a formula that cannot read these arguments is a bug to report
        raise ExportError(f"op `{node.name}` ({target}): FLOP formula failed: {e}") from e


def _attrs(node: torch.fx.Node) -> dict:
    """Non-tensor arguments by schema name (stride, padding, dim, ...), JSON-ready."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {}
    out = {}
    values = dict(zip((a.name for a in schema.arguments), node.args))
    values.update(node.kwargs)
    for key, v in values.items():
        j = _json_value(v)
        if j is not _SKIP:
            out[key] = j
        elif _optional_tensors(v):
            # `index`'s `[None, ids]` (x[:, ids]): the tensors are inputs, in order; where
            # the list holds them is an attribute ("tensor" or null per entry).
            out[key] = ["tensor" if isinstance(x, torch.fx.Node) else None for x in v]
    return out


def _optional_tensors(v) -> bool:
    """A list of tensors with absent entries (None): ATen's `Tensor?[]`."""
    return (isinstance(v, (list, tuple)) and any(x is None for x in v)
            and all(x is None or isinstance(x, torch.fx.Node) for x in v))


_SKIP = object()


def _json_value(v):
    if isinstance(v, torch.fx.Node):
        return _SKIP
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, (list, tuple)):
        items = [_json_value(x) for x in v]
        return _SKIP if any(x is _SKIP for x in items) else items
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    return _SKIP


def _copy_op(st: _State, target: str, value_node: str, fx_copy: torch.fx.Node | None = None) -> dict:
    """`copy_` of a new value into a persistent tensor or input: no outputs, never run
    twice. `fx_copy`: the FX node that performs it (a `torch.compile` trace's in-graph
    update), else None (the value is returned and the step copies it)."""
    if fx_copy is not None:
        value_node = fx_copy.args[1].name
    value = next(names[0] for n, names in reversed(st.of_node.items()) if n.name == value_node)
    if st.kind.get(target) is None:
        raise ExportError(f"mutation of `{target}`, which is not a declared tensor")
    return {
        "name": st.take_op(f"{target}:copy_", fx_copy),
        "op": "aten.copy_.default",
        "inputs": [target, value],
        "outputs": [],
        "phase": "forward",
        "flops": 0,
        "recomputable": False,
    }


def _sgd_op(st: _State, param: str, grad: str, lr: float) -> dict:
    numel = math.prod(st.shape_of(param))
    return {
        "name": st.op_names.take(f"{param}:sgd"),
        "op": "aten.add_.Tensor",
        "inputs": [param, grad],
        "outputs": [],
        "phase": "update",
        "flops": 2 * numel,
        "attrs": {"alpha": -lr},
        "recomputable": False,
    }


def _meta(joint: Joint, st: _State, params: list[str], update: str, lr: float, extra) -> dict:
    shapes = {t["name"]: t["shape"] for t in st.tensors}
    meta = {
        "source": "pytorch",
        "exporter": f"sgc_trace {__version__}",
        "tracer": joint.tracer,
        "torch_version": torch.__version__.split("+")[0],
        "batch_size": joint.batch_size,
        "dtype": _param_dtype(st, params),
        "param_count": sum(math.prod(shapes[p]) for p in params),
        "update": update if update == "none" else {"kind": "sgd", "lr": lr},
        "flops_source": "torch.utils.flop_counter registry (0 for ops without a formula)",
    }
    if joint.without_grad:
        meta["params_without_grad"] = list(joint.without_grad)
    meta.update(extra or {})
    return meta


def _param_dtype(st: _State, params: list[str]) -> str | None:
    """The dtype holding most parameter elements (`f32` for a plain fp32 model)."""
    elements: dict[str, int] = {}
    for t in st.tensors:
        if t["name"] in params:
            elements[t["dtype"]] = elements.get(t["dtype"], 0) + math.prod(t["shape"])
    return max(elements, key=lambda d: (elements[d], d)) if elements else None
