"""Measuring a training step in PyTorch: its peak memory, the bytes it saves for backward,
its recomputation; and PyTorch's own steps (eager, `torch.compile` with an activation
memory budget) to set beside a plan.

**Peak.** On CUDA, `torch.cuda.max_memory_allocated()` over the step, less what was
allocated before it. On the CPU, `torch.profiler` with `profile_memory=True` records every
allocation and free of the CPU allocator with its size (the raw event tree,
`experimental_event_tree()`: `Allocation` events carry `alloc_size`, negative for a free);
replaying them in time order to a running sum gives the most bytes allocated at once during
the step over what was allocated before it (parameters, buffers and the batch, which the
caller holds). `tests/test_compile.py` checks the method on a known sequence of allocations.

**Saved bytes.** The distinct storages (a view and its base count once, at the storage's
size) of the tensors the forward hands to the backward, parameters and buffers left out
(they are resident anyway): for a planned step, the forward module's saved outputs; for a
`torch.compile`d step, what AOTAutograd's compiled forward passes to `save_for_backward`,
caught with `torch.autograd.graph.saved_tensors_hooks` (its pack hook sees each tensor
saved). Both count exactly the tensors held from the forward to the backward.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..apply.step import distinct_bytes
from ..exporter.convert import _flops
from ..exporter.trace import LossFn, TrainStep


@dataclass
class Peak:
    """A measured peak: `bytes` (allocated at once over what was allocated before the step),
    `op` (the top-level op running then), `workspace` (of those bytes, the ones that op
    allocates and frees itself: scratch buffers outside sgc's memory model, which counts
    an op's inputs and outputs only; 0 on CUDA, where it is not measured)."""

    bytes: int
    op: str = ""
    workspace: int = 0


def peak_bytes(fn: Callable, *args):
    """(fn(*args), its `Peak`)."""
    if torch.cuda.is_available() and any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn(*args)
        torch.cuda.synchronize()
        return out, Peak(torch.cuda.max_memory_allocated() - base)
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    # Kineto, the profiler's tracing library, logs every start and stop and, without a GPU,
    # "gpuGetDeviceCount failed": level 6 is above all of its levels (read at first use).
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn(*args)
    events = []  # (time, size, address, index of the top-level op, its name)
    roots = list(prof.profiler.kineto_results.experimental_event_tree())
    for k, root in enumerate(roots):
        todo = [root]
        while todo:
            e = todo.pop()
            if e.typed[0] == _EventType.Allocation:
                events.append((e.start_time_ns, e.typed[1].alloc_size, e.typed[1].ptr, k, root.name))
            todo.extend(e.children)
    events.sort(key=lambda x: x[0])
    freed_in: dict[tuple[int, int], int] = {}  # (address, allocation index) -> op that freed it
    open_at: dict[int, int] = {}
    for i, (_, size, ptr, k, _) in enumerate(events):
        if size > 0:
            open_at[ptr] = i
        elif ptr in open_at:
            freed_in[(ptr, open_at.pop(ptr))] = k
    live = 0
    best = Peak(0)
    resident: dict[int, tuple[int, int, int]] = {}  # address -> (size, allocation index, op)
    for i, (_, size, ptr, k, name) in enumerate(events):
        live += size
        if size > 0:
            resident[ptr] = (size, i, k)
        else:
            resident.pop(ptr, None)
        if live > best.bytes:
            scratch = sum(s for p, (s, j, op) in resident.items() if op == k and freed_in.get((p, j)) == k)
            best = Peak(live, name, scratch)
    return out, best


def best_seconds(fn: Callable, *args, repeat: int = 5, warmup: int = 1) -> float:
    """The least CPU time of this process (`time.process_time`, all its threads) over
    `repeat` runs after `warmup`: on a machine shared with other work, wall time measures
    the others too."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn(*args)
        times.append(time.process_time() - start)
    return min(times)


def eager_step(model: nn.Module, loss_fn: LossFn, num_model_inputs: int = 1, raw_output: bool = False,
               autocast: torch.dtype | None = None):
    """`loss_fn(model(*inputs), *targets).backward()`, returning the loss (the reference step);
    with `autocast`, the forward under `torch.autocast` and the backward outside it."""
    step = TrainStep(model, loss_fn, num_model_inputs, raw_output)

    def run(*batch):
        device = batch[0].device.type if batch else "cpu"
        with torch.autocast(device, dtype=autocast, enabled=autocast is not None):
            (loss,) = step(*batch)
        loss.backward()
        return loss.detach()

    return run


@dataclass
class TorchStep:
    """A `torch.compile`d step (AOTAutograd, eager kernels, the min-cut partitioner under
    `activation_memory_budget`): `run(*batch)`, and after the first call the saved bytes
    and the forward ops its backward recomputes with their FLOPs."""

    run: Callable
    budget: float
    saved_bytes: int = 0
    recomputed: list | None = None
    recompute_flops: int = 0
    # The recomputed ops that draw random numbers (`nondeterministic_seeded`, e.g. dropout):
    # run again in the backward they draw a new mask unless the RNG state is replayed.
    recomputed_random: list | None = None


def torch_compiled_step(model: nn.Module, loss_fn: LossFn, budget: float, num_model_inputs: int = 1,
                        raw_output: bool = False, keep_random: bool = False) -> TorchStep:
    """PyTorch's own answer at `budget` (`torch._functorch.config.activation_memory_budget`,
    default partitioner `min_cut_rematerialization_partition`, eager kernels). With
    `keep_random`, every op that draws random numbers is tagged `CheckpointPolicy.MUST_SAVE`
    in the joint graph first, so the partitioner saves what it drew instead of drawing again
    in the backward (which it does under a budget, giving other gradients)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch import config as fconfig
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    out = TorchStep(run=None, budget=budget)

    def partition(joint, inputs, **kw):
        if keep_random:
            from torch.utils.checkpoint import CheckpointPolicy

            for node in joint.graph.nodes:
                if node.op == "call_function" and _is_random(node):
                    node.meta["recompute"] = CheckpointPolicy.MUST_SAVE
        fw, bw = min_cut_rematerialization_partition(joint, inputs, **kw)
        fw_names = {n.name for n in fw.graph.nodes if n.op == "call_function"}
        again = [n for n in bw.graph.nodes if n.op == "call_function" and n.name in fw_names]
        out.recomputed = [n.name for n in again]
        out.recompute_flops = sum(_flops(n) for n in again)
        out.recomputed_random = [n.name for n in again if _is_random(n)]
        return fw, bw

    backend = aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g), bw_compiler=lambda g, _: make_boxed_func(g),
                           partition_fn=partition, keep_inference_input_mutations=True)
    step = TrainStep(model, loss_fn, num_model_inputs, raw_output)
    compiled = torch.compile(step, backend=backend, dynamic=False)
    persistent = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}

    def run(*batch):
        saved = []

        def pack(t):
            saved.append(t)
            return t

        with fconfig.patch(activation_memory_budget=budget), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            (loss,) = compiled(*batch)
        out.saved_bytes = distinct_bytes(saved, exclude=persistent)
        del saved
        loss.backward()
        return loss.detach()

    out.run = run
    return out


def grads_of(model: nn.Module) -> dict:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def compare(a: nn.Module, b: nn.Module, exact: bool = True) -> tuple[bool, float]:
    """(gradients and buffers all equal (bitwise, or allclose), largest absolute difference)."""
    ok, worst = True, 0.0
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    pairs = [(pa[n].grad, pb[n].grad) for n in pa] + list(zip(a.buffers(), b.buffers()))
    for x, y in pairs:
        if x is None or y is None:  # a gradient on one side only
            ok = ok and x is None and y is None
            worst = worst if x is None and y is None else float("inf")
            continue
        if x.dtype.is_floating_point:
            worst = max(worst, (x - y).abs().max().item() if x.numel() else 0.0)
        same = torch.equal(x, y) if exact else torch.allclose(x, y, rtol=1e-4, atol=1e-5)
        ok = ok and same
    return ok, worst


def _is_random(node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def torch_grads(model: nn.Module, loss_fn: LossFn, batch, budget: float, seed: int = 1234,
                keep_random: bool = False):
    """Loss and gradients (by parameter name) of one `torch_compiled_step` at `budget` on a
    fresh copy of `model`, the RNG seeded first: two budgets whose plans keep every random
    draw of the forward give the same bits."""
    m = fresh(model)
    torch._dynamo.reset()
    step = torch_compiled_step(m, loss_fn, budget, keep_random=keep_random)
    torch.manual_seed(seed)
    loss = step.run(*batch)
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def fresh(model: nn.Module) -> nn.Module:
    m = copy.deepcopy(model)
    for p in m.parameters():
        p.grad = None
    return m
