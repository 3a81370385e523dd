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
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import fx, nn

from ..exporter.api import export
from ..errors import ExportError
from ..native import figures, named_storage_bytes
from .partitioner import Boundary, Partition, partition
from .planner import plan as plan_graph
from ..exporter.trace import InputSpec, JointTrace, LossFn, TrainStep

BACKENDS = ("aot_eager", "inductor")


class PlanMismatch(ExportError):
    """A plan made for another graph than the one traced."""


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
                   mark_batch=mark_batch, name=name or type(model).__name__, autocast=autocast, executor=None,
                   _traced=traced)
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


def partition_step(trace: JointTrace, graph: dict, fx_nodes: dict, plan: dict) -> tuple[Partition, list, list]:
    """Applies `plan` to the step's joint graph (`partitioner.partition`): the forward takes
    every placeholder and returns the buffers' new values and the loss before the saved
    values; the backward takes the saved values and returns the gradients. Also returns
    the buffer paths the forward's first outputs update and the parameter path of each
    gradient."""
    sig = trace.signature
    nodes = list(trace.graph_module.graph.nodes)
    by_name = {n.name: n for n in nodes}
    mutated = list(sig.buffers_to_mutate.items())
    grads = list(sig.backward_signature.gradients_to_parameters.items())
    boundary = Boundary(
        fw_inputs=[n for n in nodes if n.op == "placeholder"],
        fw_outputs=[*(by_name[k] for k, _ in mutated), by_name[sig.user_outputs[0]]],
        bw_inputs=[],
        bw_outputs=[by_name[g] for g, _ in grads],
    )
    part = partition(trace.graph_module, graph, fx_nodes, plan, boundary, _device_of(trace))
    return part, [trace.strip(v) for _, v in mutated], [trace.strip(p) for _, p in grads]


def refuse_distributed(model: nn.Module) -> None:
    """`sgc_trace.compile` runs its own step and writes `.grad` itself, so the hooks through
    which DDP all-reduces and FSDP2 all-gathers and reduce-scatters never run: a model wrapped
    by either (or holding DTensor parameters) is refused, pointing to the backend, which runs
    inside autograd where those hooks fire."""
    from torch.nn.parallel import DistributedDataParallel

    what = None
    if isinstance(model, DistributedDataParallel):
        what = "DistributedDataParallel"
    else:
        for name, m in model.named_modules():
            if type(m).__name__.startswith("FSDP") or any(c.__name__ == "FSDPModule" for c in type(m).__mro__):
                what = f"FSDP (`{name or type(model).__name__}` is sharded by fully_shard)"
                break
        if what is None:
            for name, p in model.named_parameters():
                if type(p).__name__ == "DTensor" or type(getattr(p, "data", None)).__name__ == "DTensor":
                    what = f"a DTensor parameter (`{name}`)"
                    break
    if what is not None:
        raise ExportError(
            f"sgc_trace.compile cannot train a model under {what}: it runs its own step, which the gradient "
            f"hooks of distributed training never see, so the ranks would not synchronise. Keep your loop and "
            f"compile the model with the backend instead: torch.compile(model, backend=sgc_trace.backend(...), "
            f"dynamic=False) (docs/pytorch.md)")


def _device_of(trace: JointTrace) -> torch.device:
    return torch.device(trace.inputs[0].device or "cpu") if trace.inputs else torch.device("cpu")


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
    mutated_buffers: list[str] = field(default_factory=list)  # buffer paths the forward's first outputs update
    grad_params: list[str] = field(default_factory=list)  # parameter path of each gradient the backward returns
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
        outs = list(self._run_fw(args))
        k = len(self.mutated_buffers)
        for fqn, value in zip(self.mutated_buffers, outs[:k]):
            self.model.get_buffer(fqn).copy_(value)
        loss = outs[k]
        saved = outs[k + 1:]
        outs.clear()
        # The loss is returned to the caller: held whether or not the backward reads it.
        self.saved_bytes = distinct_bytes(saved, exclude=self._persistent() | {loss.untyped_storage().data_ptr()})
        grads = self._run_bw(saved)
        for fqn, g in zip(self.grad_params, grads):
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
    _views_as_reshapes(plain)
    # Wrapped as dynamo wraps a graph of flat inputs (`flatten_graph_inputs`): AOTAutograd
    # then returns its boxed entry point, which clears the argument list.
    compiled = compile_fx(GmWrapper(plain, lambda args: args), list(example))
    if not getattr(compiled, "_boxed_call", False):
        raise ExportError("internal: inductor's compiled module is not boxed: use backend='aot_eager'")
    return compiled


def _views_as_reshapes(gm: fx.GraphModule) -> None:
    """Every `view` (and `_unsafe_view`) of the module as `reshape`. compile_fx traces the
    module again under inductor's decompositions, which may give a value another layout
    than the first trace did (a decomposed `mul` of a transposed tensor comes out
    contiguous); a `view` recorded for the first layout then fails ("Cannot view a tensor
    with shape ... and strides ..."). The modules are functional, so `reshape`, which is
    that view wherever the layout allows it and a copy elsewhere, computes the same values."""
    views = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in views:
            node.target = torch.ops.aten.reshape.default
    gm.recompile()


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
    genetic_iters: int | None = None,
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
    refuse_distributed(model)
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
    part, mutated, grad_params = partition_step(joint, graph, fx_nodes, plan)
    return PlannedStep(model, loss_fn, graph, plan, part, joint, mutated, grad_params, num_model_inputs, raw_output,
                       backend)


def predicted_peak(graph: dict, plan: dict) -> dict:
    """sgc's prediction in the terms PyTorch measures (`native.figures`): `step`, the most
    bytes the step allocates at once over what was allocated before it (parameters,
    buffers and the batch, which the caller holds); `planned_peak`, sgc's own (persistent
    bytes and the live batch included)."""
    f = figures(graph, plan)
    return {"step": f["step_peak"], "planned_peak": f["planned_peak"]}


def tensor_bytes(graph: dict, names, persistent: bool = False) -> int:
    """Bytes of the named tensors' storages (views count their base once); persistent
    storages (parameters, state) only when `persistent` (`native.named_storage_bytes`)."""
    return named_storage_bytes(graph, names, persistent)
