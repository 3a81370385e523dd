"""Module names for the nodes of a traced joint graph.

AOTAutograd traces a module through a functional wrapper, so its FX nodes carry no
module path. This labeller recovers it from the tracer itself, exactly:

* Forward: global module pre/post hooks mark the boundaries of each module's call. At
  every boundary, the FX nodes created since the previous boundary are labelled with the
  module on top of the call stack at that time.
* Backward: when a module's forward returns, the autograd nodes (`grad_fn`) created
  inside it are claimed for it (innermost modules first, so a leaf module claims its own
  ops), and each gets a pre-hook. The autograd engine runs one `grad_fn` at a time while
  the joint graph is traced, so the FX nodes created between two such hooks belong to
  the module of the first.

`aot_export_module` traces the joint graph once (the graph labelled here), then traces it
again to seed the loss gradient with ones; that second pass keeps the order and the aten
ops of the first (a `detach` becomes an `alias`) and adds `ones_like`. `transfer` copies
the labels across by walking both node lists in step.

Labels only name ops; nothing here changes what is traced.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import get_proxy_mode
from torch.utils._pytree import tree_flatten

from . import engine

META_KEY = "sgc_module"


class ModuleLabeller:
    """Context manager that labels FX nodes with `node.meta["sgc_module"]`."""

    def __init__(self, root: nn.Module):
        # The root is "" and labels nothing: its own ops (functional calls in its
        # forward) stay unlabelled, in forward and in backward.
        self._names = {id(m): name for name, m in root.named_modules()}
        self._stack: list[str] = []
        self._label: str | None = None
        self._graph = None
        self._last = None
        self._claimed: set[int] = set()
        # Per open module call: the newest autograd sequence number among its inputs.
        # Autograd nodes at or below it were made before the call and are not its own.
        self._floors: list[int] = []
        self._handles: list = []
        # Claimed autograd node -> its module, for `engine.python_grad` (which cannot call
        # the nodes' pre-hooks and tells its observers instead).
        self._owner: dict = {}
        self._observing = None

    def __enter__(self) -> "ModuleLabeller":
        reg = nn.modules.module
        self._handles = [
            reg.register_module_forward_pre_hook(self._pre),
            reg.register_module_forward_hook(self._post),
        ]
        self._observing = engine.observe(self._before_node)
        self._observing.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._flush()
        for h in self._handles:
            h.remove()
        self._observing.__exit__(None, None, None)
        self._owner.clear()

    # -- boundaries ---------------------------------------------------------------

    def _flush(self) -> None:
        """Labels the nodes created since the last boundary with the current label."""
        mode = get_proxy_mode()
        graph = mode.tracer.graph if mode is not None else self._graph
        if graph is None:
            return
        if graph is not self._graph:
            self._graph, self._last = graph, None
        node = self._last.next if self._last is not None else next(iter(graph.nodes), None)
        root = graph._root
        while node is not None and node is not root:
            if self._label is not None:
                node.meta.setdefault(META_KEY, self._label)
            self._last = node
            node = node.next

    def _set_label(self, label: str | None) -> None:
        self._flush()
        self._label = label or None

    def _pre(self, module: nn.Module, args) -> None:
        name = self._names.get(id(module))
        if name is None:
            return
        self._stack.append(name)
        self._floors.append(_newest_grad_fn(args))
        self._set_label(name)

    def _post(self, module: nn.Module, args, output) -> None:
        name = self._names.get(id(module))
        if name is None or not self._stack or self._stack[-1] != name:
            return
        self._claim_grad_fns(name, output, self._floors.pop())
        self._stack.pop()
        self._set_label(self._stack[-1] if self._stack else None)

    def current(self) -> str | None:
        """The module being traced now: the innermost open call in forward, else the module
        whose backward ran last (for error messages)."""
        return self._stack[-1] if self._stack else self._label

    def transfer(self, graph: torch.fx.Graph) -> int:
        """Copies labels onto the final graph's nodes; returns how many were labelled."""
        if self._graph is None:
            return 0
        src = [n for n in self._graph.nodes if n.op == "call_function"]
        j, done = 0, 0
        for node in graph.nodes:
            if node.op != "call_function" or j >= len(src):
                continue
            if _op_key(node) == _op_key(src[j]):
                label = src[j].meta.get(META_KEY)
                if label is not None:
                    node.meta[META_KEY] = label
                    done += 1
                j += 1
        return done

    # -- backward -----------------------------------------------------------------

    def _claim_grad_fns(self, name: str, output, floor: int) -> None:
        """Claims the autograd nodes made during the call that no inner module took."""
        if get_proxy_mode() is None:
            return
        leaves, _ = tree_flatten(output)
        todo = [t.grad_fn for t in leaves if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen: set[int] = set()
        while todo:
            fn = todo.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            if type(fn).__name__ == "AccumulateGrad" or fn._sequence_nr() <= floor:
                continue
            if id(fn) not in self._claimed:  # inner modules claimed theirs already
                self._claimed.add(id(fn))
                fn.register_prehook(self._backward_hook(name))
                self._owner[fn] = name
            todo.extend(f for f, _ in fn.next_functions)

    def _before_node(self, node) -> None:
        name = self._owner.get(node)
        if name is not None:
            self._set_label(name)

    def _backward_hook(self, name: str):
        def hook(grad_outputs):
            self._set_label(name)
            return None

        return hook


def _newest_grad_fn(args) -> int:
    leaves, _ = tree_flatten(args)
    seqs = [
        t.grad_fn._sequence_nr()
        for t in leaves
        if isinstance(t, torch.Tensor) and t.grad_fn is not None
    ]
    return max(seqs, default=-1)


def _op_key(node: torch.fx.Node) -> str:
    key = str(node.target)
    return "aten.alias.default" if key == "aten.detach.default" else key
