"""sgc as a `torch.compile` backend: the user's own training loop, each compiled graph planned.

    model = torch.compile(model, backend=sgc_trace.backend(budget=0.5), dynamic=False)
    loss = loss_fn(model(x), y); loss.backward(); optimizer.step()

`torch.compile` captures the model's forward (dynamo), AOTAutograd traces its joint
forward + backward graph, and a partitioner splits that graph into the forward and the
backward modules that autograd runs. This backend is that partitioner: where
`min_cut_rematerialization_partition` sits, it converts the joint graph to an sgc graph
(`convert.to_graph`, with the roles `Joint` names), plans it (`planner.plan`: every
strategy, offload included) and splits it by the plan (`partitioner.partition`, the code
`sgc_trace.compile` uses). The modules then run under `compiler="aot_eager"` (as they are:
bitwise the unplanned step) or `compiler="inductor"` (compiled by inductor, through its
`custom_partitioner_fn` hook, after its own decompositions and joint-graph passes).

Because autograd runs the compiled graph as one `autograd.Function`, everything around it
keeps working: `loss.backward()`, optimizers, `GradScaler`, gradient accumulation,
`zero_grad`, autocast (traced into the graph), and the hooks of `DistributedDataParallel`
(dynamo's DDPOptimizer cuts the graph at the gradient buckets: each piece is planned) and
of FSDP2 (its all-gathers and reduce-scatters run between the compiled blocks).

**The graph.** The joint graph's placeholders are the compiled function's inputs
(`primals`: parameters become `param` tensors, buffers `state`, the rest `input`) and the
gradients of its outputs (`tangents`). The caller holds the forward's outputs until its
own backward hands in their gradients; the graph says so with one op, `sgc.tangent`, first
in the backward: it reads the outputs and makes the tangents, so their bytes count from
the backward's start, not from the step's. The gradients the backward returns are the
graph's outputs.

**The budget with several graphs.** A graph break, or DDP's buckets, give several graphs;
the step holds the saved values of each one while the others run. So:
- `budget` in bytes (an int or `"10GiB"`) bounds each graph's own device bytes (its arena
  and the persistent bytes it reads), as `sgc plan --budget` does for one graph: exact
  for a model compiled whole, a bound per piece otherwise;
- `budget` as a share (a float in (0, 1]) plans each graph to at most that share of its
  unplanned activation bytes: device bytes at most `persistent + share * (unplanned -
  persistent)`. The step then holds at most that share of the sum of the graphs' unplanned
  activation peaks, however many graphs there are (each graph's residency is at most its
  own peak at every moment).
`budget=None`: the strategy's own lowest-peak plan. `backend.graphs` lists every graph
planned, with its plan, budget and partition.

**Refused, before the first step** (an `ExportError` naming what and what to do):
symbolic shapes (compile with `dynamic=False`: sgc plans static graphs; a new batch shape
compiles and plans a new graph), effect tokens and functionalized RNG state in the joint
graph, inputs AOTAutograd rewrote (duplicated or aliased arguments), and offloads under
`compiler="inductor"` (its kernels cannot call the copy nodes; plan with `offload=False`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from ..exporter.convert import Joint, dynamo_path, to_graph
from ..native import defaults, parse_profile
from ..errors import ExportError
from .partitioner import Boundary, Partition, partition
from .planner import plan as plan_graph
from .planner import plan_object
from ..exporter.trace import split_dropout

COMPILERS = ("aot_eager", "inductor")
TRACER = "torch.compile (dynamo) + AOTAutograd joint graph, partitioned by sgc"


@dataclass
class CompiledGraph:
    """One graph the backend planned: its sgc graph, the plan applied, the device bytes
    the plan was held to (None: no budget) and the partition."""

    name: str
    graph: dict
    plan: dict
    budget: int | None
    partition: Partition


@dataclass
class Options:
    """What the backend plans with (see `backend`)."""

    budget: int | str | float | None = None
    strategy: str = "sublinear"
    genetic_iters: int | None = None
    seed: int = 0
    budget_of: str = "device"
    offload: bool = True
    host_link: str | None = None
    host_memory: int | str | None = None
    compiler: str = "aot_eager"
    device_profile: str | None = None


class Backend:
    """A `torch.compile` backend that plans each graph it is given (see the module doc).
    `graphs`: every graph planned so far, in compile order."""

    def __init__(self, options: Options):
        if options.compiler not in COMPILERS:
            raise ExportError(f"unknown compiler `{options.compiler}`: expected one of {', '.join(COMPILERS)}")
        share = options.budget
        if isinstance(share, float) and not 0 < share <= 1:
            raise ExportError(f"budget={share}: a share of the unplanned activation bytes is a number in (0, 1]; "
                              f"give bytes as an int or a size such as '10GiB'")
        if isinstance(share, float) and options.budget_of != "device":
            raise ExportError(f"budget={share} is a share of the device bytes: it takes budget_of='device', "
                              f"not {options.budget_of!r}; give bytes for budget_of={options.budget_of!r}")
        options.device_profile = parse_profile(options.device_profile or defaults()["device_profile"]).name
        if options.compiler == "inductor" and options.offload and (options.host_link or options.host_memory):
            raise ExportError("offloads need compiler='aot_eager': inductor's kernels cannot call the copy nodes; "
                              "drop host_link and host_memory, or compile with compiler='aot_eager'")
        self.options = options
        self.graphs: list[CompiledGraph] = []

    def __call__(self, gm: fx.GraphModule, example_inputs: list) -> Any:
        roles = _input_roles(gm, example_inputs)
        name = f"graph{len(self.graphs)}"
        partitioner = _Partitioner(self, roles, name)
        if self.options.compiler == "aot_eager":
            from torch._dynamo.backends.common import aot_autograd
            from torch._dynamo.backends.debugging import boxed_nop

            return aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop, partition_fn=partitioner,
                                keep_inference_input_mutations=True)(gm, example_inputs)
        from torch._functorch import config as functorch_config
        from torch._inductor import config as inductor_config
        from torch._inductor.compile_fx import compile_fx

        # AOTAutograd's cache would skip the partitioner (and the plan) on a hit.
        with inductor_config.patch(custom_partitioner_fn=_inductor_partitioner(partitioner)), \
                functorch_config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs)

    def record(self, compiled: CompiledGraph) -> None:
        self.graphs.append(compiled)


def backend(
    budget: int | str | float | None = None,
    strategy: str = "sublinear",
    genetic_iters: int | None = None,
    seed: int = 0,
    budget_of: str = "device",
    offload: bool = True,
    host_link: str | None = None,
    host_memory: int | str | None = None,
    compiler: str = "aot_eager",
    device_profile: str | None = None,
) -> Backend:
    """A `torch.compile` backend that plans every graph it compiles with sgc.

    `budget`: bytes (int or `"10GiB"`) each graph's device bytes must fit, or a share in
    (0, 1] of each graph's unplanned activation bytes (the module doc says which bounds
    what with several graphs). `strategy`, `genetic_iters` (None: sgc's default), `seed`,
    `budget_of`, `offload`, `host_link`, `host_memory`: as `sgc plan`. `compiler`:
    `aot_eager` (the planned modules as they are) or `inductor`. `device_profile`: the
    device whose roofline costs each op (`a100`, `h100`, ... or `F32/HALF/GBPS`).
    Compile with `dynamic=False`."""
    return Backend(Options(budget, strategy, genetic_iters, seed, budget_of, offload, host_link, host_memory,
                           compiler, device_profile))


# -- the partitioner -----------------------------------------------------------------------


@dataclass
class _Role:
    kind: str  # param, state, input
    name: str


class _Partitioner:
    """`partition_fn(joint, joint_inputs, *, num_fwd_outputs, ...)`: the joint graph planned
    and split (see the module doc)."""

    def __init__(self, owner: Backend, roles: list[_Role], name: str):
        self.owner = owner
        self.roles = roles
        self.name = name

    def __call__(self, joint: fx.GraphModule, joint_inputs, *, num_fwd_outputs: int, **kwargs):
        opts = self.owner.options
        primals, tangents = _placeholders(joint, len(self.roles))
        static = set(kwargs.get("static_lifetime_input_indices") or [])
        for i, p in enumerate(primals):
            p.meta["is_static_input"] = i in static
        outputs = list(next(iter(joint.graph.find_nodes(op="output"))).args[0])
        fw_out, bw_out = outputs[:num_fwd_outputs], outputs[num_fwd_outputs:]
        if len(bw_out) != len(primals):
            raise ExportError(f"{self.name}: the joint graph returns {len(bw_out)} gradients for {len(primals)} inputs: "
                              f"not a graph sgc can partition; compile this model with another backend")
        split_dropout(joint)
        description = self._joint(joint, primals, tangents, fw_out, bw_out)
        fx_nodes: dict = {}
        graph = to_graph(description, name=self.name, meta={"graph_of": "torch.compile"},
                         profile=parse_profile(opts.device_profile), fx_nodes=fx_nodes)
        budget = self._budget(graph)
        offload = opts.offload and opts.compiler != "inductor"
        planned = plan_graph(graph, strategy=opts.strategy, budget=budget, seed=opts.seed, budget_of=opts.budget_of,
                             offload=offload, host_link=opts.host_link, host_memory=opts.host_memory,
                             genetic_iters=opts.genetic_iters)
        device = _device(primals)
        part = partition(joint, graph, fx_nodes, planned, Boundary(primals, fw_out, tangents, bw_out), device,
                         boxed=False, order_saved=_vc_order)
        self.owner.record(CompiledGraph(self.name, graph, planned, budget, part))
        return part.forward, part.backward

    def _joint(self, joint: fx.GraphModule, primals, tangents, fw_out, bw_out) -> Joint:
        roles: dict[str, tuple[str, str, int | None]] = {}
        taken: set[str] = set()
        for i, (p, role) in enumerate(zip(primals, self.roles)):
            if role.kind == "input" and p.meta.get("is_static_input"):
                role = _Role("state", role.name)
            name = role.name if role.name not in taken else f"{role.name}_{p.name}"
            taken.add(name)
            roles[p.name] = (role.kind, name, None)
        for t in tangents:
            roles[t.name] = ("tangent", t.name, None)
        handed = [(o.name, f"output_{k}") for k, o in enumerate(fw_out)
                  if isinstance(o, fx.Node) and isinstance(o.meta.get("val"), torch.Tensor) and o.op != "placeholder"]
        grads = [(g.name, roles[p.name][1]) for p, g in zip(primals, bw_out) if isinstance(g, fx.Node)]
        return Joint(joint, roles, handed, None, grads, {}, TRACER)

    def _budget(self, graph: dict) -> int | str | None:
        """The budget this graph is planned to: the bytes given, or the share of its
        unplanned activation bytes (see the module doc)."""
        opts = self.owner.options
        if not isinstance(opts.budget, float):
            return opts.budget
        unplanned = plan_object(graph, strategy="none").summary
        persistent = unplanned["persistent_bytes"]
        return persistent + int(opts.budget * (unplanned["device_bytes"] - persistent))


def _placeholders(joint: fx.GraphModule, expected: int) -> tuple[list[fx.Node], list[fx.Node]]:
    """The joint graph's primals and tangents; anything else is refused."""
    primals, tangents = [], []
    for n in joint.graph.find_nodes(op="placeholder"):
        target = str(n.target)
        if target.startswith("primals"):
            primals.append(n)
        elif target.startswith("tangents"):
            tangents.append(n)
        else:
            raise ExportError(
                f"the joint graph has an input `{target}` (effect tokens or functionalized RNG state): sgc plans graphs "
                f"of tensors only; turn off torch._functorch.config.functionalize_rng_ops, or compile this model "
                f"with another backend")
    for n in [*primals, *tangents]:
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise ExportError(f"the compiled graph takes `{n.name}`, a {type(val).__name__}, not a tensor: sgc plans "
                              f"static shapes; compile with torch.compile(..., dynamic=False)")
        if any(not isinstance(d, int) for d in val.shape):
            raise ExportError(f"the compiled graph's input `{n.name}` has symbolic shape {tuple(val.shape)}: sgc plans "
                              f"static shapes; compile with torch.compile(..., dynamic=False) (each new shape then "
                              f"compiles, and is planned, on its own)")
    if len(primals) != expected:
        raise ExportError(
            f"AOTAutograd rewrote the compiled function's {expected} inputs into {len(primals)} (duplicated or "
            f"aliased inputs, tensor subclasses): sgc cannot tell parameters from inputs there; pass each tensor once")
    return primals, tangents


def _input_roles(gm: fx.GraphModule, example_inputs: list) -> list[_Role]:
    """Each input of dynamo's graph: a parameter, a buffer or a plain input, with a
    readable name from its source (`layers.0.weight`, `x`)."""
    roles = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ExportError(f"dynamo's graph has {len(placeholders)} inputs and {len(example_inputs)} examples")
    for n, x in zip(placeholders, example_inputs):
        if not isinstance(x, torch.Tensor):
            raise ExportError(f"the compiled graph takes `{n.name}`, a {type(x).__name__}, not a tensor: sgc plans "
                              f"static shapes; compile with torch.compile(..., dynamic=False)")
        source = _source_name(n)
        name = dynamo_path(source) if source else n.name
        if isinstance(x, nn.Parameter):
            kind = "param"
        elif source and "_buffers" in source:
            kind = "state"
        else:
            kind = "input"  # a buffer by another source: `state` once AOTAutograd calls it static
        roles.append(_Role(kind, name or n.name))
    return roles


def _source_name(n: fx.Node) -> str | None:
    arg = n.meta.get("grapharg")
    source = getattr(arg, "source", None)
    if source is None:
        return None
    name = source.name
    return name() if callable(name) else name


def _device(primals: list[fx.Node]) -> torch.device:
    for p in primals:
        return p.meta["val"].device
    return torch.device("cpu")


def _vc_order(saved: list[fx.Node]) -> list[fx.Node]:
    """AOTAutograd's order of saved values: those saved without a version-counter check
    (`saved_tensor_with_no_vc_check`) last, the rest in order."""
    return sorted(saved, key=lambda n: bool(n.meta.get("saved_tensor_with_no_vc_check", False)))


def _inductor_partitioner(partitioner: _Partitioner):
    """`partitioner` as inductor's `custom_partitioner_fn`: an instance of its
    `CustomPartitionerFn`, whose `uuid` (this file and the options) keys inductor's caches
    and which pickles as that key (inductor pickles its config for the key too)."""
    global _InductorPartitioner
    if _InductorPartitioner is None:
        from torch._inductor.custom_graph_pass import CustomPartitionerFn, get_hash_for_files

        class SgcInductorPartitioner(CustomPartitionerFn):
            def __init__(self, partitioner: _Partitioner):
                self.partitioner = partitioner

            def __call__(self, gm, joint_inputs, **kwargs):
                kwargs.pop("compiler", None)
                return self.partitioner(gm, joint_inputs, **kwargs)

            def uuid(self):
                options = repr(dataclasses.asdict(self.partitioner.owner.options)).encode()
                return get_hash_for_files((__file__,)) + hashlib.sha256(options).digest()

            def __reduce__(self):
                return (bytes, (self.uuid(),))

        _InductorPartitioner = SgcInductorPartitioner
    return _InductorPartitioner(partitioner)


_InductorPartitioner = None


__all__ = ["backend", "Backend", "CompiledGraph", "COMPILERS"]
