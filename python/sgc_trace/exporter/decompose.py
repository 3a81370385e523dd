"""The exported graph holds only what sgc's executor runs: each traced op the CPU backend
cannot run is replaced, in the joint graph, by PyTorch's own decomposition of it.

The executor decides, not a list kept here: the graph is converted, the native module's
coverage check (`sgc.inspect(graph, device="cpu")`, the checks the executor makes before
its first step) names the ops it cannot run, with their attribute values (a `max_pool2d`
with `ceil_mode` is another case than one without), and only those FX nodes are rewritten.
Ops it runs stay as traced, the large fused ones above all (attention, batch norm and
their backwards: they matter for memory and speed).

A node is rewritten by tracing its decomposition (`torch._decomp`'s table, else the op's
CompositeImplicitAutograd kernel, `OpOverload.decompose`) with `make_fx` on the node's
fake input values, and splicing the small graph in its place: the new nodes keep the
node's metadata (module label, phase), so labels and the forward/backward split are as
before; where the step's roles (the loss, an output, a gradient, a mutation) name the
replaced node, they are pointed at the node that now makes its value.
Then every node's fake value is computed again (`FakeTensorProp`), so that which tensors
share storage (views) is read from values made by the new nodes, not the replaced ones.
A decomposition is taken only when each op it produces is one the executor has a kernel
for (`sgc.executor_ops()`), or one whose own decomposition is, a few levels down: one that
ends in `prims` ops would leave the graph larger and no easier to run. The loop runs again until the graph is
covered or a round changes nothing. What is left (a bf16 tensor, a random op without a
kernel) is named at export: a warning and `meta.executor_gaps`, or with
`executor_gaps="raise"` an `ExportError` naming the op, its type and the executor's
reason, at export rather than at run time.

Before the loop, a 0-dim tensor constant the step copies (`lift_fresh_copy` of a
`get_attr`: torch 2.11 traces `mask[a:b] = count` so) becomes `scalar_tensor` of its value
(`_inline_scalar_constants`): the graph holds no constant's values, so the copy would read
nothing; the source op carries the value as an attribute.
"""

from __future__ import annotations

import operator
from typing import Callable

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from ..errors import ExportError

# Rounds of (convert, check, decompose): decompositions nest a few levels at most.
MAX_ROUNDS = 6


def _whole(x, size, stride, storage_offset) -> bool:
    """Whether `(size, stride, storage_offset)` reads all of contiguous `x`'s storage in
    row-major order (strides of length-1 axes do not matter)."""
    expected, contiguous = 1, True
    for n, st in reversed(list(zip(size, stride))):
        if n != 1 and st != expected:
            contiguous = False
        expected *= n
    return (not storage_offset and contiguous and x.is_contiguous() and x.storage_offset() == 0
            and x.numel() == expected)


def _as_strided_as_view(x, size, stride, storage_offset=None):
    """`as_strided` that reads a contiguous tensor's whole storage in row-major order, as
    functionalisation leaves after views of views (ConvNeXt's pooling): `view(x, size)`.
    Any other `as_strided` is refused (it addresses memory no view of the executor reads)."""
    if _whole(x, size, stride, storage_offset):
        return torch.ops.aten.view.default(x, list(size))
    return NotImplemented


def _as_strided_scatter_whole(x, src, size, stride, storage_offset=None):
    """`as_strided_scatter` whose region is all of `x` (the same reading as
    `_as_strided_as_view`): a copy of `src` in `x`'s shape."""
    if _whole(x, size, stride, storage_offset):
        return torch.ops.aten.view.default(torch.ops.aten.clone.default(src), list(x.shape))
    return NotImplemented


def _new_zeros(x, size, dtype=None, layout=None, device=None, pin_memory=None):
    """`new_zeros` as `zeros` of `x`'s dtype and device (PyTorch's decomposition ends in
    `prims.empty_strided`)."""
    return torch.ops.aten.zeros.default(list(size), dtype=dtype or x.dtype, device=device or x.device)


def _over_all_axes(reduction):
    """`sum`/`mean` over every axis as the executor's `.dim` form of `reduction`
    (PyTorch's decompositions end in `prims.sum` and `prims.div`)."""

    def rewrite(x, dtype=None):
        if dtype is not None and dtype != x.dtype:
            return NotImplemented
        return reduction(x, list(range(x.dim())))

    return rewrite


# Rewrites of ops whose PyTorch decompositions end in ops no executor runs (`prims`), into
# equivalent ops it does run, where they apply.
_EXTRA = {
    torch.ops.aten.mean.default: _over_all_axes(torch.ops.aten.mean.dim),
    torch.ops.aten.sum.default: _over_all_axes(torch.ops.aten.sum.dim_IntList),
    torch.ops.aten.new_zeros.default: _new_zeros,
    torch.ops.aten.as_strided.default: _as_strided_as_view,
    torch.ops.aten.as_strided_scatter.default: _as_strided_scatter_whole,
}


def decomposition_of(target) -> Callable | None:
    """PyTorch's decomposition of an ATen overload: its entry in `torch._decomp`'s table,
    else its CompositeImplicitAutograd kernel, else one of this module's rewrites (`_EXTRA`);
    None when it has none."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    if target in _EXTRA:
        return _EXTRA[target]
    from torch._decomp import decomposition_table  # noqa: PLC0415

    fn = decomposition_table.get(target)
    if fn is not None:
        return fn
    if torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "CompositeImplicitAutograd"):
        return target.decompose
    return None


def _thaw(v):
    """FX's immutable argument lists and dicts as plain ones (a decomposition may edit a
    list it is given, as `roll`'s does)."""
    if isinstance(v, list):
        return [_thaw(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_thaw(x) for x in v)
    if isinstance(v, dict):
        return {k: _thaw(x) for k, x in v.items()}
    return v


def _traced(node: torch.fx.Node, fn: Callable, mode) -> tuple[torch.fx.GraphModule, list[int], list]:
    """`fn` applied to `node`'s arguments, traced by make_fx on their fake values: the
    graph, the positions of the node arguments among the flattened arguments, and those."""
    flat, spec = pytree.tree_flatten((_thaw(node.args), _thaw(node.kwargs)))
    at = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node)]
    values = [flat[i].meta.get("val") for i in at]
    if any(not isinstance(v, torch.Tensor) for v in values):
        raise ExportError(f"op `{node.name}` ({node.target}): an argument without a tensor value")

    def call(*tensors):
        leaves = list(flat)
        for i, t in zip(at, tensors):
            leaves[i] = t
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        out = fn(*args, **kwargs)
        if out is NotImplemented:
            raise ExportError(f"op `{node.name}` ({node.target}): its decomposition does not apply here")
        return out

    with mode:
        sub = make_fx(call, tracing_mode="real")(*values)
    return sub, at, flat


def _splicable(node: torch.fx.Node, sub: torch.fx.GraphModule) -> bool:
    """Whether `sub` can stand in for `node`: ops and placeholders only (no constants), and
    a tuple where the node's users take tuple elements, a single value otherwise."""
    if any(n.op not in ("placeholder", "call_function", "output") for n in sub.graph.nodes):
        return False
    result = next(n for n in sub.graph.nodes if n.op == "output").args[0]
    takes_items = any(u.op == "call_function" and u.target is operator.getitem for u in node.users)
    return isinstance(result, (tuple, list)) if takes_items else isinstance(result, torch.fx.Node)


def _dense_strides(t: torch.Tensor) -> tuple:
    """`t`'s strides on its axes longer than 1 (those of length 1 never decide a view)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n != 1)


def _restrided(g: torch.fx.Graph, out: torch.fx.Node, want: torch.Tensor, meta: dict, mode) -> torch.fx.Node:
    """`out` laid out in memory as `want` (the value of the node it replaces), when the two
    differ: `permute` to `want`'s order of axes by stride, a contiguous `clone`, `permute`
    back. The ops after a replaced node were traced for its value's strides (a `view` of a
    transposed attention output is legal only for the fused kernel's layout), so a
    decomposition that lays its result out otherwise is made to match; `out` as it is when
    it already matches or `want` is not a dense layout one permutation makes."""
    have = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
    if not isinstance(have, torch.Tensor) or not isinstance(want, torch.Tensor) or have.shape != want.shape:
        return out
    if _dense_strides(have) == _dense_strides(want) or want.dim() < 2:
        return out
    order = sorted(range(want.dim()), key=lambda d: -want.stride()[d])
    back = sorted(range(want.dim()), key=order.__getitem__)
    with mode:
        value = have.permute(order).clone(memory_format=torch.contiguous_format).permute(back)
    if _dense_strides(value) != _dense_strides(want):
        return out
    with g.inserting_after(out):
        p = g.call_function(torch.ops.aten.permute.default, (out, order))
    with g.inserting_after(p):
        c = g.call_function(torch.ops.aten.clone.default, (p,), {"memory_format": torch.contiguous_format})
    with g.inserting_after(c):
        b = g.call_function(torch.ops.aten.permute.default, (c, back))
    with mode:
        p.meta = dict(meta, val=have.permute(order))
        c.meta = dict(meta, val=p.meta["val"].clone(memory_format=torch.contiguous_format))
        b.meta = dict(meta, val=c.meta["val"].permute(back))
    return b


def _splice(gm: torch.fx.GraphModule, node: torch.fx.Node, sub: torch.fx.GraphModule, at: list[int], flat: list,
            keep_names: set[str], renamed: dict[str, str], mode) -> None:
    """Replaces `node` by `sub`'s ops (`_splicable`), each result laid out in memory as the
    value it replaces (`_restrided`). A replaced node (or tuple element) named in
    `keep_names` adds `old name -> new node's name` to `renamed` (FX never hands a name out
    twice)."""
    g = gm.graph
    inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    env = {p: flat[i] for p, i in zip(inputs, at)}
    meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
    result = None
    with g.inserting_before(node):
        for n in sub.graph.nodes:
            if n.op == "call_function":
                new = g.call_function(n.target, torch.fx.map_arg(n.args, env.__getitem__),
                                      torch.fx.map_arg(n.kwargs, env.__getitem__))
                new.meta = dict(meta, val=n.meta.get("val"))
                env[n] = new
            elif n.op == "output":
                result = torch.fx.map_arg(n.args[0], env.__getitem__)
    items = [u for u in node.users if u.op == "call_function" and u.target is operator.getitem]
    for u in items:
        out = _restrided(g, result[u.args[1]], u.meta.get("val"), meta, mode)
        u.replace_all_uses_with(out)
        if u.name in keep_names and isinstance(out, torch.fx.Node):
            renamed[u.name] = out.name
        g.erase_node(u)
    if not items:
        result = _restrided(g, result, node.meta.get("val"), meta, mode)
        node.replace_all_uses_with(result)
        if node.name in keep_names:
            renamed[node.name] = result.name
    g.erase_node(node)


def _runs_or_decomposes(sub: torch.fx.GraphModule, known: set[str], mode, depth: int = 4) -> bool:
    """Whether every op of a traced decomposition is one the executor has a kernel for, or
    one whose own decomposition (traced on its values, `depth` levels down) is: a
    decomposition into `prims` ops, or into ops that only decompose further into them,
    would leave the graph larger and no easier to run."""
    for n in sub.graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        if str(n.target) in known or f"aten.{n.target}" in known:
            continue
        fn = decomposition_of(n.target)
        if fn is None or depth == 0:
            return False
        try:
            inner, _, _ = _traced(n, fn, mode)
        except Exception:  # noqa: BLE001 - a decomposition that does not apply to these values
            return False
        if not _runs_or_decomposes(inner, known, mode, depth - 1):
            return False
    return True


def _inline_scalar_constants(gm: torch.fx.GraphModule) -> int:
    """Replaces each `lift_fresh_copy` of a real 0-dim tensor constant by `scalar_tensor`
    of its value, dtype and device (the node's metadata kept); returns how many."""
    from torch._subclasses.fake_tensor import FakeTensor  # noqa: PLC0415

    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.lift_fresh_copy.default:
            continue
        src = node.args[0]
        value = getattr(gm, src.target, None) if isinstance(src, torch.fx.Node) and src.op == "get_attr" else None
        if not isinstance(value, torch.Tensor) or isinstance(value, FakeTensor) or value.dim() != 0:
            continue
        fake = node.meta.get("val")
        device = fake.device if isinstance(fake, torch.Tensor) else value.device
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (value.item(),),
                                         {"dtype": value.dtype, "device": device})
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        if not src.users:
            gm.graph.erase_node(src)
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def decompose_uncovered(convert: Callable[[dict], dict], gm: torch.fx.GraphModule, mode, keep_names: set[str],
                        coverage: Callable[[dict], list[dict]], known: set[str], on_gap: str = "warn",
                        renamed: Callable[[dict[str, str]], None] = lambda _: None,
                        ) -> tuple[dict, dict, dict[str, int], list[dict]]:
    """Converts `gm` (`convert(fx_nodes)` fills op name -> FX node), asks `coverage` for
    the ops the executor cannot run, decomposes their nodes where PyTorch's decomposition
    leads to ops it runs (`known`: its op types), and again, until a round changes nothing.
    Returns the graph, its `fx_nodes`, how many ops of each type were decomposed, and the
    ops left that the executor cannot run; with `on_gap="raise"`, those are an
    `ExportError` instead. `renamed(old -> new)` is told of each FX name in `keep_names`
    whose node was replaced, before the next conversion."""
    decomposed: dict[str, int] = {}
    inlined = _inline_scalar_constants(gm)
    if inlined:
        decomposed["aten.lift_fresh_copy.default"] = inlined
    for _ in range(MAX_ROUNDS):
        fx_nodes: dict = {}
        graph = convert(fx_nodes)
        gaps = coverage(graph)
        by_op = fx_nodes.get("ops", {})
        changed = False
        for gap in gaps:
            node = by_op.get(gap["op"])
            fn = decomposition_of(node.target) if node is not None else None
            if fn is None or node.graph is not gm.graph:
                continue
            try:
                sub, at, flat = _traced(node, fn, mode)
            except ExportError:
                continue  # the rewrite does not apply to these arguments
            if not _splicable(node, sub) or not _runs_or_decomposes(sub, known, mode):
                continue
            names: dict[str, str] = {}
            _splice(gm, node, sub, at, flat, keep_names, names, mode)
            if names:
                renamed(names)
                keep_names = (keep_names - set(names)) | set(names.values())
            decomposed[gap["op_type"]] = decomposed.get(gap["op_type"], 0) + 1
            changed = True
        if not changed:
            if gaps and on_gap == "raise":
                raise _refusal(gaps)
            return graph, fx_nodes, decomposed, gaps
        gm.graph.lint()
        gm.recompile()
        _refresh_values(gm, mode)
    fx_nodes = {}
    graph = convert(fx_nodes)
    gaps = coverage(graph)
    if gaps and on_gap == "raise":
        raise _refusal(gaps)
    return graph, fx_nodes, decomposed, gaps


def _refresh_values(gm: torch.fx.GraphModule, mode) -> None:
    """Every node's fake value computed again from the placeholders': the storage a view
    shares is read from these values, and the nodes after a spliced one still hold values
    made from the node it replaced."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp  # noqa: PLC0415

    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    with mode:
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*values)


def describe_gaps(gaps: list[dict]) -> str:
    """The ops the executor cannot run, in a sentence: how many, their types, the first's reason."""
    first = gaps[0]
    types = sorted({g["op_type"] for g in gaps})
    return (f"sgc's executor cannot run {len(gaps)} op(s) of {len(types)} type(s) ({', '.join(types)}), and no "
            f"decomposition leads to ops it runs: first `{first['op']}` ({first['op_type']}): {first['reason']}")


def _refusal(gaps: list[dict]) -> ExportError:
    return ExportError(f"{describe_gaps(gaps)}. Export with executor=None to plan the graph without running it "
                       f"(sgc plan, the torch.compile backend), or see docs/ops.md for the ops the executor runs")
