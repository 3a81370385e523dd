"""AOTAutograd joint graph -> sgc graph format, version 1 (`docs/graph-format.md`).

The mapping, node by node:

* Placeholders become tensors: parameters `param`, buffers `state`, user inputs (data and
  targets) `input` with their `batch_dim`. Names are the module paths
  (`layer1.0.conv1.weight`) and the input names.
* Every other FX node that yields tensors becomes one op whose type is the aten overload
  (`aten.convolution.default`). A node that returns a tuple (`native_batch_norm`,
  `convolution_backward`) is one op with one output per tensor element; `getitem` nodes
  only name those elements. Elements that are `None` are dropped.
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
* Random ops (tag `nondeterministic_seeded`, e.g. dropout) and ops that write one of
  their arguments are `recomputable: false`.
* FLOPs come from `torch.utils.flop_counter`'s formula registry, per node; ops without a
  formula (elementwise, views, reductions) get 0.
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

from .modules import META_KEY
from .trace import JointTrace

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


class ExportError(Exception):
    """The traced graph holds something the version-1 format cannot express."""


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
    # Parameter path -> its tensor (tied parameters share one).
    param_of: dict[str, str] = field(default_factory=dict)

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
        return name


def to_graph(
    trace: JointTrace,
    name: str | None = None,
    update: str = "none",
    lr: float = 0.01,
    meta: dict | None = None,
) -> dict:
    """The version-1 graph (a JSON-ready dict) of a traced training step."""
    if update not in UPDATES:
        raise ExportError(f"unknown update `{update}`: expected one of {', '.join(UPDATES)}")
    gm, sig = trace.graph_module, trace.signature
    nodes = list(gm.graph.nodes)
    st = _State()
    renames = _renames(trace)
    param_names = _placeholders(trace, nodes, st)
    mutations = _mutations(trace)
    forward = _forward_set(nodes, sig, mutations)
    fwd_ops, bwd_ops = [], []
    for node in nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        op = _op(node, st, renames, node in forward)
        if op is None:
            continue
        (fwd_ops if node in forward else bwd_ops).append(op)
        for value_node in _mutated_values_of(node, mutations):
            fwd_ops.append(_copy_op(st, mutations[value_node], value_node))
    grads = [_tensor_of(st, n) for n in _grad_nodes(gm, sig)]
    grads = [(g, fqn) for g, fqn in zip(grads, _grad_params(trace)) if g is not None]
    loss = _tensor_of(st, _node_named(nodes, sig.user_outputs[0]))
    ops = fwd_ops + bwd_ops
    if update == "sgd":
        # A tied parameter gets one update per gradient contribution; for SGD their sum
        # is the update with the accumulated gradient.
        ops += [_sgd_op(st, st.param_of[param], grad, lr) for grad, param in grads]
        outputs = [loss]
    else:
        outputs = [loss] + [g for g, _ in grads]
    graph: dict[str, Any] = {"format": "sgc-graph", "version": 1}
    if name:
        graph["name"] = name
    graph["tensors"] = st.tensors
    graph["ops"] = ops
    graph["outputs"] = outputs
    graph["loss"] = loss
    graph["meta"] = _meta(trace, st, param_names, update, lr, meta)
    return graph


# -- placeholders and signature -------------------------------------------------------


def _strip(trace: JointTrace, fqn: str) -> str:
    return fqn[len(trace.prefix) :] if fqn.startswith(trace.prefix) else fqn


def _placeholders(trace: JointTrace, nodes, st: _State) -> list[str]:
    """Declares parameter, buffer and input tensors; returns the parameter names."""
    sig = trace.signature
    user = {ph: spec for ph, spec in zip(sig.user_inputs, trace.inputs)}
    params = []
    for node in nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise ExportError(f"placeholder `{node.name}` is not a tensor (effect tokens are not supported)")
        if node.name in sig.inputs_to_parameters:
            fqn = _strip(trace, sig.inputs_to_parameters[node.name])
            owner = st.storage_owner.get(StorageWeakRef(val.untyped_storage()))
            if owner is not None and st.kind.get(owner) == "param":
                name = owner  # a tied parameter (GPT's head and embedding): one tensor
            else:
                name = st.add_tensor(fqn, val, "param", node.name)
                params.append(name)
            st.param_of[fqn] = name
        elif node.name in sig.inputs_to_buffers:
            name = st.add_tensor(_strip(trace, sig.inputs_to_buffers[node.name]), val, "state", node.name)
        elif node.name in user:
            spec = user[node.name]
            name = st.add_tensor(spec.name, val, "input", node.name)
            if spec.batch_dim is not None:
                st.tensors[-1]["batch_dim"] = spec.batch_dim
        else:
            raise ExportError(f"placeholder `{node.name}` is neither a parameter, a buffer nor an input")
        st.of_node[node] = [name]
    return params


def _renames(trace: JointTrace) -> dict[str, str]:
    """Readable names for the loss and the gradients (FX node name -> wanted name)."""
    sig = trace.signature
    out = {sig.user_outputs[0]: "loss"}
    for node_name, fqn in sig.backward_signature.gradients_to_parameters.items():
        out.setdefault(node_name, _strip(trace, fqn) + ".grad")
    return out


def _mutations(trace: JointTrace) -> dict[str, str]:
    """FX node name of a new value -> name of the persistent tensor or input it overwrites."""
    sig = trace.signature
    out = {}
    for mapping in (sig.buffers_to_mutate, sig.parameters_to_mutate):
        for node_name, fqn in mapping.items():
            out[node_name] = _strip(trace, fqn)
    user = {ph: spec.name for ph, spec in zip(sig.user_inputs, trace.inputs)}
    for node_name, ph in getattr(sig, "user_inputs_to_mutate", {}).items():
        out[node_name] = user.get(ph, ph)
    return out


def _grad_params(trace: JointTrace) -> list[str]:
    return [_strip(trace, f) for f in trace.signature.backward_signature.gradients_to_parameters.values()]


def _grad_nodes(gm, sig) -> list[torch.fx.Node]:
    nodes = {n.name: n for n in gm.graph.nodes}
    return [nodes[n] for n in sig.backward_signature.gradients_to_parameters]


def _node_named(nodes, name: str) -> torch.fx.Node:
    return next(n for n in nodes if n.name == name)


def _tensor_of(st: _State, node: torch.fx.Node) -> str | None:
    names = st.of_node.get(node)
    return names[0] if names else None


def _forward_set(nodes, sig, mutations: dict[str, str]) -> set:
    """Nodes the loss or a mutated buffer's new value depends on."""
    by_name = {n.name: n for n in nodes}
    todo = [by_name[sig.user_outputs[0]]] + [by_name[n] for n in mutations]
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
    outputs = []
    by_fx_name = {}
    for fx_name, val in slots:
        name = st.add_tensor(renames.get(fx_name, fx_name), val, "activation", f"op `{node.name}`")
        outputs.append(name)
        by_fx_name[fx_name] = name
    st.of_node[node] = outputs
    for u in node.users:
        if u.target is operator.getitem and u.name in by_fx_name:
            st.of_node[u] = [by_fx_name[u.name]]
    label = node.meta.get(META_KEY)
    op: dict[str, Any] = {
        "name": st.op_names.take(f"{label}:{node.name}" if label else node.name),
        "op": str(node.target),
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


def _input_tensors(node: torch.fx.Node, st: _State) -> list[str]:
    names: list[str] = []
    for arg in tree_flatten((node.args, node.kwargs))[0]:
        if isinstance(arg, torch.fx.Node):
            names.extend(st.of_node.get(arg, []))
    return names


def _recomputable(node: torch.fx.Node) -> bool:
    target = node.target
    if torch.Tag.nondeterministic_seeded in getattr(target, "tags", ()):
        return False
    schema = getattr(target, "_schema", None)
    if schema is None:
        return True
    return not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


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
    return out


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


def _copy_op(st: _State, target: str, value_node: str) -> dict:
    value = next(names[0] for n, names in st.of_node.items() if n.name == value_node)
    if st.kind.get(target) is None:
        raise ExportError(f"mutation of `{target}`, which is not a declared tensor")
    return {
        "name": st.op_names.take(f"{target}:copy_"),
        "op": "aten.copy_.default",
        "inputs": [target, value],
        "outputs": [],
        "phase": "forward",
        "flops": 0,
        "recomputable": False,
    }


def _sgd_op(st: _State, param: str, grad: str, lr: float) -> dict:
    numel = math.prod(next(t["shape"] for t in st.tensors if t["name"] == param))
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


def _meta(trace: JointTrace, st: _State, params: list[str], update: str, lr: float, extra) -> dict:
    shapes = {t["name"]: t["shape"] for t in st.tensors}
    batch = next(
        (spec.shape[spec.batch_dim] for spec in trace.inputs if spec.batch_dim is not None), None
    )
    meta = {
        "source": "pytorch",
        "tracer": "torch._functorch.aot_autograd.aot_export_module(trace_joint=True) under FakeTensorMode",
        "torch_version": torch.__version__.split("+")[0],
        "batch_size": batch,
        "param_count": sum(math.prod(shapes[p]) for p in params),
        "update": update if update == "none" else {"kind": "sgd", "lr": lr},
        "flops_source": "torch.utils.flop_counter registry (0 for ops without a formula)",
    }
    meta.update(extra or {})
    return meta
