"""A plan as a selective activation checkpointing policy, for models run eagerly.

    policy = sgc_trace.policy(budget=0.5)
    policy.apply(model)              # each repeated block checkpointed by its plan
    fully_shard(...)                 # composes with FSDP2 as torchtitan's AC does
    loss_fn(model(x), y).backward()  # the user's loop, no compiler

For a model `torch.compile` cannot capture whole, each block (by default every module of
an `nn.ModuleList` or `nn.Sequential` of repeated blocks: a transformer's layers) runs
under `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` with a selective
checkpointing policy (`create_selective_checkpoint_contexts`) made from sgc's plan of that
block:

1. **Plan the block.** At its first call, the block's forward + backward is traced by
   AOTAutograd on the call's own inputs (fake tensors: nothing is computed) and planned by
   the `torch.compile` backend's partitioner (`torch_compile.py`: the same graph, the same
   budget rule per graph: bytes, or a share of its unplanned activation bytes). The plan
   names the forward values its backward reads before recomputing them: the saved values.
2. **Decide per op.** An op is `MUST_SAVE` when the plan saves at least half of its
   outputs' bytes (SAC caches an op's outputs all or none: a layer norm whose output the
   plan recomputes but whose two statistics it keeps is recomputed whole); every other op
   is `PREFER_RECOMPUTE`, and so is every op that draws random numbers (checkpoint restores
   the RNG state before recomputing, so each draw must run again, in order, to get its
   forward values). The policy sees the block's ops as eager dispatches them, which differ
   from the traced graph's only where AOTAutograd functionalizes (`relu_` is traced as
   `relu`, `_unsafe_view` as `view`) or decomposes (dropout). So the eager sequence is
   recorded once, by running the block on fake tensors under SAC's own dispatch mode (the
   ops the policy will be asked about, nothing computed), and aligned with the traced
   forward by their longest common subsequence of op names (`difflib`); each eager op
   takes its traced op's decision, and unmatched ops recompute. What the alignment covers
   is kept (`Block.coverage`): a block whose saved bytes it does not all cover is refused
   at its first call, naming the ops, before the optimizer steps.
3. **What it holds.** Checkpoint holds the block's inputs and SAC's cache holds the saved
   ops' outputs, until the backward: `Policy.held_bytes()` counts both (distinct storages,
   parameters left out), and `Policy.predicted_bytes()` the plan's saved values with the
   inputs, at SAC's granularity (all the outputs of each op saved). The two agree to a few
   percent (`tests/test_sac.py`). Where checkpoint offers it (torch 2.15), the cache passes
   through the caller's `saved_tensors_hooks` like every other tensor kept for the backward
   (`save_on_cpu` moves it, a counting hook counts it); the tracing of a block at its first
   call runs under hooks of its own, so a caller's hooks see only the real step.

Parameters are never saved (they are resident), and buffers the block updates (BatchNorm
running statistics) are updated once, by the forward: SAC's recomputation replays them
from the saved state of the forward.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from torch import fx, nn
from torch.multiprocessing.reductions import StorageWeakRef

from ..errors import ExportError
from ..native import named_storage_bytes
from .torch_compile import Backend, CompiledGraph, Options, _Partitioner, _Role

@dataclass
class _Traced:
    """One forward op of the traced block: its name as eager dispatches it, and whether the
    plan saves its output (never for a random op: see `_Walker`)."""

    name: str
    save: bool
    nbytes: int  # the saved output's storage bytes (0 unless saved)
    node: str


@dataclass
class Coverage:
    """How the eager ops of a block's first forward met its traced ones: ops matched,
    eager ops without a traced match (recomputed), and saved traced ops no eager op matched
    (with their bytes)."""

    matched: int = 0
    unmatched_eager: list[str] = field(default_factory=list)
    missed_saves: list[str] = field(default_factory=list)
    saved_bytes: int = 0
    missed_bytes: int = 0


class Policy:
    """The plans of a model's blocks as selective checkpointing policies (see the module
    doc). `blocks`: every `Block` made by `wrap` or `apply`."""

    def __init__(self, options: Options):
        self.backend = Backend(options)
        self.blocks: list[Block] = []

    def wrap(self, module: nn.Module, name: str | None = None) -> Block:
        """`module` checkpointed by its plan: a module to put in its place."""
        block = Block(module, self, name or f"block{len(self.blocks)}")
        self.blocks.append(block)
        return block

    def apply(self, model: nn.Module, blocks: list[str] | None = None) -> nn.Module:
        """Wraps `model`'s blocks in place and returns `model`. `blocks`: module paths;
        by default every child of each `nn.ModuleList` / `nn.Sequential` whose children
        are all of one class with parameters (a transformer's layers)."""
        paths = blocks if blocks is not None else default_blocks(model)
        if not paths:
            raise ExportError(f"{type(model).__name__} has no repeated blocks to checkpoint (no nn.ModuleList or "
                              f"nn.Sequential of one class): name them, policy.apply(model, blocks=['layers.0', ...])")
        for path in paths:
            parent_path, _, attr = path.rpartition(".")
            parent = model.get_submodule(parent_path)
            child = parent.get_submodule(attr)
            if isinstance(child, Block):
                raise ExportError(f"`{path}` is already checkpointed by a policy")
            setattr(parent, attr, self.wrap(child, path))
        return model

    @property
    def graphs(self) -> list[CompiledGraph]:
        return self.backend.graphs

    def held_bytes(self) -> int:
        """Bytes the blocks hold for the backward after the last forward: their inputs and
        SAC's cached outputs (distinct storages; parameters and buffers left out)."""
        seen: dict[StorageWeakRef, int] = {}
        persistent: set[StorageWeakRef] = set()
        for b in self.blocks:
            for t in [*b.module.parameters(), *b.module.buffers()]:
                persistent.add(StorageWeakRef(t.untyped_storage()))
            for t in b.held():
                key = StorageWeakRef(t.untyped_storage())
                if key not in persistent:
                    seen[key] = t.untyped_storage().nbytes()
        return sum(seen.values())

    def predicted_bytes(self) -> int:
        """What the plans say the blocks hold after a forward: each block's saved ops'
        outputs and inputs (for the blocks that ran)."""
        return sum(b.predicted_bytes for b in self.blocks if b.calls)


def policy(
    budget: int | str | float | None = None,
    strategy: str = "sublinear",
    genetic_iters: int | None = None,
    seed: int = 0,
    device_profile: str | None = None,
) -> Policy:
    """sgc's plans as selective activation checkpointing policies (see the module doc).
    `budget`: as `backend(budget=)`, per block; the other options as `sgc plan`."""
    return Policy(Options(budget, strategy, genetic_iters, seed, "device", False, None, None, "aot_eager",
                          device_profile))


def default_blocks(model: nn.Module) -> list[str]:
    """Paths of the children of each `nn.ModuleList` or `nn.Sequential` of at least two
    modules of one class that hold parameters: a model's repeated blocks."""
    out = []
    for path, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)) or len(m) < 2:
            continue
        kinds = {type(c) for c in m}
        if len(kinds) == 1 and all(any(True for _ in c.parameters()) for c in m):
            out += [f"{path}.{name}" if path else name for name, _ in m.named_children()]
    # Blocks nested in blocks: the outermost.
    return [p for p in out if not any(p.startswith(q + ".") for q in out if q != p)]


class Block(nn.Module):
    """One block checkpointed by its plan (`Policy.wrap`)."""

    def __init__(self, module: nn.Module, owner: Policy, name: str):
        super().__init__()
        self.module = module
        self._owner = [owner]  # a list: not a submodule
        self.block_name = name
        self._traced: dict[tuple, list[_Traced]] = {}
        self.coverage: Coverage | None = None
        self.predicted_bytes = 0
        self.calls = 0
        self._inputs: list = []
        self._caches: list = []

    def __getattr__(self, name: str):
        """Attributes of the wrapped block (`layer.self_attn`), as checkpoint wrappers do:
        code around a block reads them (nn.TransformerEncoder does)."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._modules["module"], name)

    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self.module(*args, **kwargs)
        call = _Call(args, kwargs)
        if call.key not in self._traced:
            with _own_hooks():
                self._traced[call.key] = self._first(call)
        answers, self.predicted_bytes = self._traced[call.key]
        self._inputs = list(call.tensors)
        self._caches = []
        self.calls = 1
        return torch.utils.checkpoint.checkpoint(
            self.module, *args, use_reentrant=False, preserve_rng_state=True,
            context_fn=functools.partial(self._contexts, answers), **_RESPECT_HOOKS, **kwargs)

    def _first(self, call: _Call) -> tuple[list, int]:
        """At a call of a new signature: the plan, the eager ops and their decisions."""
        traced, held = self._plan(call)
        try:
            eager = _eager_ops(self.module, call)
        except Exception as e:
            raise ExportError(f"policy: running block `{self.block_name}` on fake tensors failed "
                              f"({type(e).__name__}: {e}): checkpoint it whole instead (torch.utils.checkpoint), "
                              f"or compile it (sgc_trace.backend)") from e
        answers, self.coverage = _answers(eager, traced)
        self._check()
        return answers, held

    def held(self) -> list[torch.Tensor]:
        """The tensors this block holds for its backward: its inputs and SAC's cache."""
        out = list(self._inputs)
        for storage in self._caches:
            out += _tensors_in(storage)
        return out

    def _plan(self, call: _Call) -> tuple[list[_Traced], int]:
        """Traces the block on the call's tensors (fake), plans it, and returns its forward
        ops with the plan's decision on each, and the bytes the plan holds for the backward:
        the saved ops' outputs and the inputs."""
        from torch._dynamo.backends.debugging import boxed_nop
        from torch._functorch.aot_autograd import aot_module_simplified

        owner = self._owner[0]
        roles = [_Role("param", n) for n, _ in self.module.named_parameters(remove_duplicate=False)]
        roles += [_Role("state", n) for n, _ in self.module.named_buffers(remove_duplicate=False)]
        roles += [_Role("input", f"input_{i}") for i in range(len(call.tensors))]
        partitioner = _Partitioner(owner.backend, roles, self.block_name)
        captured: list = []

        def capture(joint, joint_inputs, **kwargs):
            fw, bw = partitioner(joint, joint_inputs, **kwargs)
            captured.append((joint, kwargs["num_fwd_outputs"]))
            return fw, bw

        tensors = [a.detach().requires_grad_(a.requires_grad) for a in call.tensors]
        try:
            aot_module_simplified(_Tupled(self.module, call), tensors, fw_compiler=boxed_nop, partition_fn=capture)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(f"policy: tracing block `{self.block_name}` ({type(self.module).__name__}) failed: "
                              f"{type(e).__name__}: {e}") from e
        joint, num_fwd = captured[0]
        compiled = owner.backend.graphs[-1]
        traced = _forward_ops(joint, num_fwd, set(compiled.partition.saved))
        inputs = [f"input_{i}" for i in range(len(call.tensors))]
        held = named_storage_bytes(compiled.graph, inputs) + sum(t.nbytes for t in traced if t.save)
        return traced, held

    def _contexts(self, answers: list):
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        caching, cached = create_selective_checkpoint_contexts(_Walker(answers))
        self._caches.append(caching.storage)
        return caching, cached

    def _check(self) -> None:
        """Refuses a block whose saved values the eager ops do not all meet (5% of their
        bytes at most may be missed)."""
        cov = self.coverage
        if cov.missed_bytes > 0.05 * max(cov.saved_bytes, 1):
            raise ExportError(
                f"policy: block `{self.block_name}` ({type(self.module).__name__}) runs its ops in another order than "
                f"it was traced in: the plan saves {cov.saved_bytes} B, of which {cov.missed_bytes} B "
                f"({', '.join(cov.missed_saves[:4])}) no eager op matched. Checkpoint it whole instead "
                f"(torch.utils.checkpoint), or compile it (sgc_trace.backend)")


def _own_hooks():
    """Saved-tensor hooks of our own, that keep each tensor as it is, around the tracing
    of a block: the fake tensors it saves are not the caller's hooks' business."""
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)


def _respect_hooks() -> dict:
    """`respect_saved_tensors_hooks=True` where checkpoint takes it (torch 2.15): what SAC
    caches then passes through the caller's `saved_tensors_hooks` (`save_on_cpu`, a count),
    as every other tensor kept for the backward does."""
    import inspect

    params = inspect.signature(torch.utils.checkpoint.checkpoint).parameters
    return {"respect_saved_tensors_hooks": True} if "respect_saved_tensors_hooks" in params else {}


_RESPECT_HOOKS = _respect_hooks()


class _Call:
    """One call's arguments: its tensors (positional and keyword, in order), the rest as
    constants, and a key of their shapes and values (a new key is traced and planned)."""

    def __init__(self, args: tuple, kwargs: dict):
        self.args, self.kwargs = args, kwargs
        self.tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]

        def describe(a):
            return (tuple(a.shape), a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor) else repr(a)

        self.key = (tuple(describe(a) for a in args), tuple((k, describe(v)) for k, v in kwargs.items()))

    def rebuild(self, tensors) -> tuple[tuple, dict]:
        """The arguments with `tensors` in place of the call's own, in order."""
        it = iter(tensors)
        args = tuple(next(it) if isinstance(a, torch.Tensor) else a for a in self.args)
        kwargs = {k: next(it) if isinstance(v, torch.Tensor) else v for k, v in self.kwargs.items()}
        return args, kwargs


class _Tupled(nn.Module):
    """The block called on a flat list of tensors, returning a tuple (what
    `aot_module_simplified` traces)."""

    def __init__(self, module: nn.Module, call: _Call):
        super().__init__()
        self.module = module
        self._call = call

    def forward(self, *tensors):
        args, kwargs = self._call.rebuild(tensors)
        out = self.module(*args, **kwargs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class _Walker:
    """The policy function of one checkpointed call: the decision of the `k`-th op the
    forward dispatches is `answers[k]` (see the module doc); the recomputation asks again
    for the same ops in the same order."""

    def __init__(self, answers: list):
        self.answers = answers
        self.asked = 0
        self.replayed = 0

    def __call__(self, ctx, op, *args, **kwargs):
        from torch.utils.checkpoint import CheckpointPolicy

        k = self.replayed if ctx.is_recompute else self.asked
        if ctx.is_recompute:
            self.replayed += 1
        else:
            self.asked += 1
        return self.answers[k] if k < len(self.answers) else CheckpointPolicy.PREFER_RECOMPUTE


def _answers(eager: list[tuple[str, bool]], traced: list[_Traced]) -> tuple[list, Coverage]:
    """Each eager op's decision: its traced op's, by the longest common subsequence of op
    names; random ops and unmatched ones recompute."""
    import difflib

    from torch.utils.checkpoint import CheckpointPolicy

    names = [n for n, _ in eager]
    matcher = difflib.SequenceMatcher(None, names, [t.name for t in traced], autojunk=False)
    match: dict[int, int] = {}
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            match[a + k] = b + k
    answers = []
    for i, (name, random) in enumerate(eager):
        t = traced[match[i]] if i in match else None
        save = t is not None and t.save and not random
        answers.append(CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE)
    hit = set(match.values())
    saves = [(j, t) for j, t in enumerate(traced) if t.save]
    missed = [t for j, t in saves if j not in hit]
    cov = Coverage(len(match), [n for i, (n, _) in enumerate(eager) if i not in match], [t.node for t in missed],
                   sum(t.nbytes for _, t in saves), sum(t.nbytes for t in missed))
    return answers, cov


def _eager_ops(module: nn.Module, call: _Call) -> list[tuple[str, bool]]:
    """The ops SAC's policy is asked about when `module` runs on the call's arguments with
    gradients, in order, as (canonical name, draws random numbers): recorded on fake copies
    of the module's tensors and of the arguments (nothing computed, nothing allocated)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    seen: list[tuple[str, bool]] = []

    def record(ctx, op, *a, **k):
        if not ctx.is_recompute:
            seen.append((_eager_name(op), torch.Tag.nondeterministic_seeded in getattr(op, "tags", ())))
        return CheckpointPolicy.PREFER_RECOMPUTE

    mode = FakeTensorMode(allow_non_fake_inputs=False)
    with mode:
        fakes = {n: mode.from_tensor(t) for n, t in [*module.named_parameters(remove_duplicate=False),
                                                       *module.named_buffers(remove_duplicate=False)]}
        for (n, t) in module.named_parameters(remove_duplicate=False):
            fakes[n] = fakes[n].detach().requires_grad_(t.requires_grad)
        fake_args, fake_kwargs = call.rebuild(
            [mode.from_tensor(a).detach().requires_grad_(a.requires_grad) for a in call.tensors])
    caching, _ = create_selective_checkpoint_contexts(record)
    with mode, torch.enable_grad(), caching:
        torch.func.functional_call(module, fakes, fake_args, fake_kwargs, tie_weights=False, strict=False)
    return seen


def _forward_ops(joint: fx.GraphModule, num_fwd: int, saved: set[str]) -> list[_Traced]:
    """The joint graph's forward ops in order (what the forward outputs depend on; no
    `getitem`s, nor the products that split a dropout), each with the plan's decision: an
    op is saved when the plan saves at least half of its outputs' bytes (SAC caches all of
    an op's outputs or none) and it draws no random numbers (eager redraws those)."""
    import operator

    nodes = list(joint.graph.nodes)
    outputs = list(next(iter(joint.graph.find_nodes(op="output"))).args[0])[:num_fwd]
    forward: set = set()
    todo = [o for o in outputs if isinstance(o, fx.Node)]
    while todo:
        n = todo.pop()
        if n in forward:
            continue
        forward.add(n)
        todo.extend(n.all_input_nodes)
    storage = {}
    for n in nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            storage[n] = StorageWeakRef(val.untyped_storage())
    saved_storages = {storage[n] for n in nodes if n.name in saved and n in storage}
    out = []
    for n in nodes:
        if n.op != "call_function" or n.target is operator.getitem or n not in forward:
            continue
        if n.meta.get("sgc_dropout_product"):
            continue
        made = [n, *(u for u in n.users if u.target is operator.getitem)]
        own = [m for m in made if m in storage and _owns(m, storage)]
        size = {storage[m]: m.meta["val"].untyped_storage().nbytes() for m in own}
        wanted = sum(b for st, b in size.items() if st in saved_storages)
        random = torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())
        # SAC keeps all of an op's outputs or none: keep them when the plan wants at least
        # half of their bytes (not, say, a layer norm's output for its two statistics).
        keep = wanted > 0 and 2 * wanted >= sum(size.values()) and not random
        out.append(_Traced(_traced_name(n), keep, sum(size.values()) if keep else 0, n.name))
    return out


def _owns(node: fx.Node, storage: dict) -> bool:
    """Whether `node` makes its storage (is not a view of an input's)."""
    mine = storage[node]
    return not any(a in storage and storage[a] == mine for a in node.all_input_nodes)


def _eager_name(op) -> str:
    """An op as the policy sees it, named as the traced graph names its functional form."""
    name = op.overloadpacket.__name__ if hasattr(op, "overloadpacket") else str(op)
    return _canonical(name)


def _traced_name(node: fx.Node) -> str:
    target = node.target
    name = target.overloadpacket.__name__ if hasattr(target, "overloadpacket") else str(target)
    return _canonical(name)


_SAME = {"_unsafe_view": "view", "reshape": "view", "alias": "view",
         "_native_batch_norm_legit_functional": "batch_norm", "_native_batch_norm_legit": "batch_norm",
         "native_batch_norm": "batch_norm", "cudnn_batch_norm": "batch_norm", "_batch_norm_with_update": "batch_norm",
         "_native_batch_norm_legit_no_training": "batch_norm"}


def _canonical(name: str) -> str:
    """In-place and out-of-place forms alike (`relu_` is `relu`), batch norms alike."""
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return _SAME.get(name, name)


def _tensors_in(value) -> list[torch.Tensor]:
    """Tensors held in SAC's cache (dicts and lists of wrappers with `.val`, or tensors)."""
    out = []
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
        elif isinstance(v, (list, tuple)):
            todo.extend(v)
        elif hasattr(v, "val"):
            todo.append(v.val)
    return out
