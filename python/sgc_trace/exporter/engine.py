"""The backward pass of a trace for a CUDA device, on a machine without one.

Tracing for CUDA needs no GPU in the forward: FakeTensorMode computes every op on the meta
device and only labels its results `cuda`. The backward is another matter. AOTAutograd
traces it by calling `torch.autograd.grad`, and the C++ autograd engine, on seeing a node
on CUDA, records the current stream of every CUDA device (`GraphTask::stash_current_streams`),
which asks the driver and fails without one ("hasPrimaryContext expects a valid device
index"). PyTorch itself only makes this work by creating a real CUDA tensor first
(`fake_tensor.init_gpu_context`), which needs a GPU.

`python_grad` is `torch.autograd.grad` run by the engine's own rules, in Python, with no
streams: so a CUDA trace (`sgc-trace export --device cuda`, the CPU tests of CUDA tracing)
works on any machine. The rules, from `torch/csrc/autograd/engine.cpp`:

* **What runs.** A node runs when it lies on a path from the outputs to an input's
  gradient edge (`init_to_execute`'s `needed_`); the gradient reaching an input's edge is
  captured there, and the input's own node (`AccumulateGrad` for a leaf) does not run.
* **When.** A node is ready once every needed node with an edge to it has run (its
  dependency count); ready nodes run highest `sequence_nr` first (the ready queue's
  order: later-created nodes first, `AccumulateGrad` before all).
* **Gradients in.** Each node's incoming gradients are summed per input slot
  (`old + new`, as `InputBuffer::accumulate` does for tensor subclasses, which every
  traced tensor is); undefined ones are skipped.
* **Hooks.** A node's pre-hooks cannot be called from Python; observers registered with
  `observe` (the module labeller) are called with each node before it runs instead.
* **Gradients out.** Before a gradient enters the next node it is made to fit that
  node's input metadata (`validate_outputs`): summed to its shape when it broadcasts,
  cast to its dtype, moved to its device.

The replacement is used while tracing for CUDA, on every machine (`grad_without_cuda`), so
that a CUDA trace takes the same path with a GPU as in the CPU tests. `tests/test_devices.py` checks that on CPU fake tensors it
traces the same joint graph as the C++ engine, node for node.
"""

from __future__ import annotations

import contextlib
import heapq
from collections.abc import Sequence

import torch
from torch.autograd.graph import get_gradient_edge


_observers: list = []


@contextlib.contextmanager
def observe(fn):
    """Calls `fn(node)` before each node `python_grad` runs, inside the block."""
    _observers.append(fn)
    try:
        yield
    finally:
        _observers.remove(fn)


def python_grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
                allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """`torch.autograd.grad` (tensor outputs and inputs; no batched gradients)."""
    if is_grads_batched:
        raise NotImplementedError("batched gradients")
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    elif isinstance(grad_outputs, torch.Tensor):
        grad_outputs = (grad_outputs,)
    grads = torch.autograd._make_grads(outputs, tuple(grad_outputs), is_grads_batched=False)
    with torch.set_grad_enabled(create_graph):
        found = _run(outputs, grads, inputs)
    out = []
    for i, (x, g) in enumerate(zip(inputs, found)):
        if g is None and materialize_grads:
            g = torch.zeros_like(x)
        if g is None and not allow_unused:
            raise RuntimeError(f"One of the differentiated Tensors (input {i}) appears to not have been used in the "
                               f"graph. Set allow_unused=True if this is the desired behavior.")
        out.append(g)
    return tuple(out)


def _edge(t: torch.Tensor) -> tuple:
    e = get_gradient_edge(t)
    return e.node, e.output_nr


def _run(outputs: Sequence[torch.Tensor], grads, inputs: Sequence[torch.Tensor]) -> list:
    roots = []
    for out, g in zip(outputs, grads):
        if not out.requires_grad:
            raise RuntimeError("element of the differentiated tensors does not require grad and does not have a grad_fn")
        roots.append((_edge(out), g))
    wanted = [_edge(x) for x in inputs]
    targets = {node for node, _ in wanted}
    needed = _needed([node for (node, _), _ in roots], targets)
    deps: dict = {}
    for node in needed:
        for nxt, _ in node.next_functions:
            if nxt is not None and (nxt in needed or nxt in targets):
                deps[nxt] = deps.get(nxt, 0) + 1
    buffers: dict = {}
    ready: list = []
    order = 0

    def give(node, slot: int, grad) -> None:
        nonlocal order
        if node in needed or node in targets:
            buf = buffers.setdefault(node, [None] * len(node._input_metadata))
            if grad is not None:
                buf[slot] = grad if buf[slot] is None else buf[slot] + grad
        left = deps.get(node, 0) - 1
        deps[node] = left
        if left == 0 and (node in needed or node in targets):
            heapq.heappush(ready, (-_sequence_nr(node), order, node))
            order += 1

    for ((node, slot), g) in roots:
        deps[node] = deps.get(node, 0) + 1  # the graph root's edge
    for ((node, slot), g) in roots:
        give(node, slot, _fit(node, slot, g))
    captured: dict = {}
    while ready:
        _, _, node = heapq.heappop(ready)
        buf = buffers.pop(node, [None] * len(node._input_metadata))
        if node in targets:
            captured[node] = buf
        if node not in needed:
            continue
        for fn in _observers:
            fn(node)
        outs = _call(node, buf)
        for (nxt, slot), g in zip(node.next_functions, outs):
            if nxt is None:
                continue
            give(nxt, slot, _fit(nxt, slot, g))
    return [captured.get(node, [None] * (slot + 1))[slot] for node, slot in wanted]


def _needed(roots: list, targets: set) -> set:
    """Nodes with a path to a target's node (the target's own node included only when it
    leads to another target)."""
    memo: dict = {}
    for root in roots:
        stack = [(root, iter(root.next_functions))]
        memo.setdefault(root, False)
        while stack:
            node, it = stack[-1]
            advanced = False
            for nxt, _ in it:
                if nxt is None:
                    continue
                if nxt in targets:
                    memo[node] = True
                if nxt not in memo:
                    memo[nxt] = False
                    stack.append((nxt, iter(nxt.next_functions)))
                    advanced = True
                    break
                if memo[nxt]:
                    memo[node] = True
            if not advanced:
                stack.pop()
                if stack and memo[node]:
                    memo[stack[-1][0]] = True
    return {n for n, yes in memo.items() if yes}


def _sequence_nr(node) -> int:
    return node._sequence_nr()


def _call(node, buf: list) -> tuple:
    """Runs one node. A C++ node is callable; a custom `autograd.Function`'s node is not, and
    its `apply` gets zeros for missing gradients, as `PyNode::apply` materialises them."""
    if callable(node):
        outs = node(*buf)
    else:
        buf = [g if g is not None else torch.zeros(tuple(m.shape), dtype=m.dtype, device=m.device)
               for g, m in zip(buf, node._input_metadata)]
        outs = node.apply(*buf)
    return outs if isinstance(outs, tuple) else (outs,)


def _fit(node, slot: int, grad):
    """`validate_outputs`: the gradient in the shape, dtype and device of `node`'s input."""
    if grad is None:
        return None
    meta = node._input_metadata[slot]
    shape = tuple(meta.shape)
    if tuple(grad.shape) != shape:
        grad = grad.sum_to_size(shape)
    if grad.dtype != meta.dtype and not (grad.is_complex() or meta.dtype.is_complex):
        grad = grad.to(meta.dtype)
    if grad.device != meta.device:
        grad = grad.to(meta.device)
    return grad


@contextlib.contextmanager
def grad_without_cuda(device: torch.device | str):
    """`torch.autograd.grad` is `python_grad` inside when tracing for a CUDA `device`, GPU
    or not: one path for every CUDA trace, the one the CPU tests run (the C++ engine would
    also run the CUDA nodes on a device thread of its own)."""
    if torch.device(device).type != "cuda":
        yield
        return
    original = torch.autograd.grad
    torch.autograd.grad = python_grad
    try:
        yield
    finally:
        torch.autograd.grad = original
