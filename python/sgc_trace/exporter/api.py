"""The one-call API: build fake, trace the joint graph, convert, cost, save."""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import math
import time
import warnings
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from .build import build, prepare
from .convert import DTYPES, UPDATES, to_graph
from .decompose import decompose_uncovered, describe_gaps
from ..native import DeviceProfile, defaults, parse_profile, with_times
from ..native import module as native_module
from ..errors import ExportError, explain
from .trace import InputSpec, LossFn, trace_joint


def export(
    model: nn.Module | Callable[[], nn.Module],
    loss_fn: LossFn,
    inputs: Sequence[InputSpec],
    num_model_inputs: int = 1,
    name: str | None = None,
    update: str = "none",
    lr: float = 0.01,
    meta: dict | None = None,
    device_profile: str | DeviceProfile | None = None,
    raw_output: bool = False,
    mark_batch: bool = True,
    device: str | None = None,
    autocast: torch.dtype | None = None,
    timings: dict | None = None,
    executor: str | None = "cpu",
    executor_gaps: str = "warn",
    _traced: list | None = None,
) -> dict:
    """Traces one training step and returns its version-1 graph as a JSON-ready dict.

    `model` is either a module or a zero-argument factory; a factory is called inside a
    FakeTensorMode so the weights are never allocated (use this for large models), and
    called again for real (random weights, CPU) when its constructor needs tensor data.
    The first `num_model_inputs` of `inputs` go to the model, the rest to `loss_fn` after
    the model's output: `loss = loss_fn(model(*inputs[:n]), *inputs[n:])`. A model output
    that is not a tensor (`ModelOutput`, dict, tuple) is reduced to its `logits` or first
    tensor unless `raw_output` is true.
    `update`: `"none"` (gradients are graph outputs) or `"sgd"` (one in-place update op
    per parameter; the loss is the only output).
    `device_profile`: the device whose roofline gives each op's `time_us` (`a100`, ...,
    or `F32/HALF/GBPS` rates; `native.with_times`; None: `sgc.defaults()`'s).
    `mark_batch`: trace the step a second time with every input's batch axis one larger
    and write `batch_dim` on each tensor whose shape changes on exactly one axis, so that
    tools can rescale the graph even where the batch enters through a constant (the
    zero initial state of an LSTM, a class token expanded to the batch).

    `device`: where the step runs (`"cuda"`, `"cpu"`). By default the device of the model's
    parameters and buffers (a factory builds on the CPU); given, a factory builds its
    module on it and a module's tensors are traced as if moved there (fake tensors: no GPU
    is needed to trace for one). Every input follows the model unless its `InputSpec`
    names a device; a model on two devices, or an input on another than the model's, is
    an `ExportError` naming both.
    `autocast`: a dtype (`torch.bfloat16`, `torch.float16`) to trace the step under
    `torch.autocast(device, dtype)`, as a mixed-precision training step runs: the casts
    become ops of the graph and the tensors they make have that dtype's size. A step
    traced inside an active `torch.autocast` uses its dtype.

    `executor`: the backend the graph is meant to run on (`"cpu"`, `"cuda"`): each op it
    cannot run is replaced by PyTorch's decomposition where that leads to ops it runs
    (`decompose.py`; `meta.decomposed` counts them per op type). `executor_gaps`: what to
    do about ops left that it cannot run: `"warn"` (a warning naming them, and
    `meta.executor_gaps`, their count; the graph still plans) or `"raise"` (an
    `ExportError` naming the first). `executor=None`: the graph as traced, for planning
    only (`sgc_trace.compile` and the `torch.compile` backend, where PyTorch runs the ops).

    `timings`: a dict that receives the seconds of each phase: `build` (the fake model),
    `trace` (AOTAutograd's joint graph), `convert` (to the sgc graph, costs included) and
    `mark_batch` (the second trace, whole).

    Every failure raises one `ExportError` whose message says what failed and where.
    `_traced` (internal, `sgc_trace.compile`): a list that receives the `JointTrace` and
    the map from op and tensor names back to its FX nodes.
    """
    profile = parse_profile(device_profile or defaults()["device_profile"])
    if update not in UPDATES:
        raise ExportError(f"unknown update `{update}`: expected one of {', '.join(UPDATES)}")
    if executor not in (None, "cpu", "cuda"):
        raise ExportError(f"executor={executor!r}: expected \"cpu\", \"cuda\" or None")
    if executor_gaps not in ("warn", "raise"):
        raise ExportError(f"executor_gaps={executor_gaps!r}: expected \"warn\" or \"raise\"")
    args = (loss_fn, num_model_inputs, name, update, lr, meta, profile, raw_output, device, autocast,
            (executor, executor_gaps))
    clock = _Clock(timings)
    graph = _export_once(model, inputs, *args, traced=_traced, clock=clock)
    if mark_batch and any(spec.batch_dim is not None for spec in inputs):
        with clock("mark_batch"):
            _mark_batch_dims(graph, _export_once(model, _grown(inputs), *args))
    return graph


class _Clock:
    """`with clock("phase"):` adds the block's seconds to `timings["phase"]` (when given)."""

    def __init__(self, timings: dict | None):
        self.timings = timings

    @contextlib.contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.timings is not None:
                self.timings[phase] = self.timings.get(phase, 0.0) + time.perf_counter() - start


def _export_once(model, inputs, loss_fn, num_model_inputs, name, update, lr, meta, profile, raw_output,
                 device=None, autocast=None, executor=None, traced: list | None = None,
                 clock: _Clock | None = None) -> dict:
    clock = clock or _Clock(None)
    # Factory calls in forward (torch.arange for positions) make real constants while
    # AOTAutograd collects metadata; let fake ops read them.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with _failures("preparing the model"), clock("build"):
        if isinstance(model, nn.Module):
            module, built = prepare(model, mode, device), "given"
        else:
            module, built = build(model, mode, device)
        module.train()
        where = model_device(module)
        inputs = on_device(inputs, where)
    with _failures("tracing the training step"), clock("trace"):
        trace = trace_joint(module, loss_fn, inputs, num_model_inputs, mode, raw_output, autocast)
    extra = {"model": type(module).__name__, "built": built, **(meta or {})}
    if where.type != "cpu":  # absent: the CPU (graphs traced before devices were recorded)
        extra["device"] = where.type
    if trace.autocast is not None:
        extra["autocast"] = DTYPES[trace.autocast]
    fx_nodes: dict | None = {} if traced is not None else None
    with _failures("converting the traced graph"), clock("convert"):
        joint = trace.joint()

        def convert(nodes: dict | None) -> dict:
            return to_graph(joint, name=name, update=update, lr=lr, meta=extra, profile=profile, fx_nodes=nodes)

        backend, on_gap = executor if executor is not None else (None, "warn")
        if backend is None:
            graph = convert(fx_nodes)
        else:
            known = set(native_module().executor_ops())
            graph, nodes, decomposed, gaps = decompose_uncovered(
                convert, joint.graph_module, mode, _named(joint), lambda g: _gaps(g, backend), known, on_gap,
                renamed=lambda names: _rename_roles(joint, names))
            if decomposed:
                graph.setdefault("meta", {})["decomposed"] = decomposed
            if gaps:
                graph.setdefault("meta", {})["executor_gaps"] = len(gaps)
                warnings.warn(f"{describe_gaps(gaps)}; the graph plans, and `sgc run` refuses it before the first step",
                              stacklevel=3)
            if fx_nodes is not None:
                fx_nodes.update(nodes)
            if update == "none" and _sum_tied_gradients(graph, module):
                with_times(graph, profile)  # the sums' time_us (every op's, as before)
    if traced is not None:
        traced.extend([trace, fx_nodes])
    return graph


def _sum_tied_gradients(graph: dict, module: nn.Module) -> int:
    """One gradient output per parameter, as `named_parameters()` lists them: a parameter
    registered under several names (a language model's head tied to its embedding) gets
    one gradient per name from AOTAutograd, each only that use's part; they are renamed
    `<name>.grad.part` and summed by `add` ops right after the last of them into
    `<first name>.grad`, the gradient PyTorch accumulates in `.grad`. Only for graphs the
    executor runs (`sgc_trace.compile` hands the parts to PyTorch, which sums them).
    Returns how many `add` ops it made."""
    groups: dict[int, list[str]] = {}
    for fqn, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(fqn)
    outputs = graph["outputs"]
    tensors = {t["name"]: t for t in graph["tensors"]}
    made = 0
    for names in groups.values():
        parts = [f"{n}.grad" for n in names if f"{n}.grad" in outputs]
        if len(parts) < 2:
            continue
        renamed = {old: _fresh(f"{old}.part", tensors) for old in parts}
        for old, new in renamed.items():
            tensors[new] = tensors.pop(old)
            tensors[new]["name"] = new
        for t in graph["tensors"]:
            if t.get("alias_of") in renamed:
                t["alias_of"] = renamed[t["alias_of"]]
        for op in graph["ops"]:
            op["inputs"] = [renamed.get(t, t) for t in op["inputs"]]
            op["outputs"] = [renamed.get(t, t) for t in op["outputs"]]
        last = max(i for i, op in enumerate(graph["ops"]) if set(op["outputs"]) & set(renamed.values()))
        total = parts[0]
        decl = tensors[renamed[total]]
        sums, acc = [], renamed[parts[0]]
        for k, part in enumerate(parts[1:]):
            out = total if k == len(parts) - 2 else _fresh(f"{total}.sum{k}", tensors)
            tensors[out] = {"name": out, "dtype": decl["dtype"], "shape": list(decl["shape"])}
            graph["tensors"].append(tensors[out])
            sums.append({"name": f"{names[0]}:grad_sum{k}", "op": "aten.add.Tensor", "inputs": [acc, renamed[part]],
                         "outputs": [out], "phase": "backward", "flops": math.prod(decl["shape"])})
            acc = out
        graph["ops"][last + 1:last + 1] = sums
        made += len(sums)
        keep = [o for o in outputs if o not in parts or o == total]
        graph["outputs"] = [total if o == total else o for o in keep]
        outputs = graph["outputs"]
    return made


def _fresh(want: str, taken: dict) -> str:
    """`want`, or `want_<k>` for the first `k` that no tensor of `taken` is named."""
    name, k = want, 1
    while name in taken:
        name, k = f"{want}_{k}", k + 1
    return name


def _named(joint) -> set[str]:
    """FX names the joint's roles refer to: a decomposed node hands its name on."""
    names = set(joint.placeholders) | {o for o, _ in joint.outputs} | {g for g, _ in joint.grads}
    names |= set(joint.mutations)
    if joint.loss is not None:
        names.add(joint.loss)
    return names


def _rename_roles(joint, names: dict[str, str]) -> None:
    """Points the joint's roles at the nodes that replaced the ones they named."""
    joint.outputs = [(names.get(o, o), t) for o, t in joint.outputs]
    joint.grads = [(names.get(g, g), t) for g, t in joint.grads]
    joint.mutations = {names.get(k, k): v for k, v in joint.mutations.items()}
    if joint.loss is not None:
        joint.loss = names.get(joint.loss, joint.loss)


def _gaps(graph: dict, executor: str) -> list[dict]:
    """The ops of `graph` that the executor's `executor` backend cannot run (sgc inspect --device)."""
    sgc = native_module()
    return sgc.inspect(sgc.load(graph), top=0, device=executor)["coverage"]["missing"]


def model_device(module: nn.Module) -> torch.device:
    """The one device of the module's parameters and buffers (the CPU for a module with
    none); an `ExportError` naming two of them when they differ."""
    seen: dict[torch.device, str] = {}
    for kind, items in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, t in items:
            seen.setdefault(t.device, f"{kind} `{name}`")
    if len(seen) > 1:
        (d1, w1), (d2, w2) = list(seen.items())[:2]
        raise ExportError(
            f"the model is on two devices: {w1} on {d1}, {w2} on {d2}. Move it to one "
            f"(`model.to('{d2.type}')`) before tracing")
    return next(iter(seen), torch.device("cpu"))


def on_device(inputs: Sequence[InputSpec], device: torch.device) -> list[InputSpec]:
    """The inputs with the model's `device` where they name none; an `ExportError` naming
    both devices for one that names another."""
    out = []
    for spec in inputs:
        if spec.device is None:
            spec = dataclasses.replace(spec, device=str(device))
        elif not _same_device(torch.device(spec.device), device):
            raise ExportError(
                f"input `{spec.name}` is on {spec.device} but the model is on {device}: move the batch to "
                f"the model's device (`x.to('{device}')`) or the model to the batch's")
        out.append(spec)
    return out


def _same_device(a: torch.device, b: torch.device) -> bool:
    """`cuda` and `cuda:0` name one device when the current CUDA device is 0 (fakes made with
    `device="cuda"` carry index 0)."""
    return a.type == b.type and (a.index or 0) == (b.index or 0)


def _grown(inputs: Sequence[InputSpec]) -> list[InputSpec]:
    """The inputs with their batch axis one larger."""
    out = []
    for spec in inputs:
        shape = list(spec.shape)
        if spec.batch_dim is not None:
            shape[spec.batch_dim] += 1
        out.append(dataclasses.replace(spec, shape=tuple(shape)))
    return out


def _mark_batch_dims(graph: dict, grown: dict) -> None:
    """`batch_dim` on every tensor of `graph` whose shape in `grown` differs on one axis."""
    shapes = {t["name"]: t["shape"] for t in grown["tensors"]}
    for t in graph["tensors"]:
        other = shapes.get(t["name"])
        if other is None or len(other) != len(t["shape"]) or "batch_dim" in t:
            continue
        diff = [i for i, (a, b) in enumerate(zip(t["shape"], other)) if a != b]
        if len(diff) == 1:
            t["batch_dim"] = diff[0]


class _failures:
    """Turns any exception but `ExportError` into one, explained (`errors.explain`)."""

    def __init__(self, stage: str):
        self.stage = stage

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is None or isinstance(e, ExportError) or not isinstance(e, Exception):
            return False
        raise ExportError(explain(self.stage, e)) from e


def dumps(graph: dict) -> str:
    """A graph as compact JSON text (one tensor or op per line, so diffs stay readable)."""
    lines = ["{"]
    head = {k: v for k, v in graph.items() if k not in ("tensors", "ops")}
    for key in ("format", "version", "name"):
        if key in head:
            lines.append(f"  {json.dumps(key)}: {json.dumps(head.pop(key))},")
    for key in ("tensors", "ops"):
        rows = ",\n".join("    " + json.dumps(item, separators=(", ", ": ")) for item in graph[key])
        lines.append(f'  "{key}": [\n{rows}\n  ],')
    rest = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    lines.append(",\n".join(rest))
    lines.append("}")
    return "\n".join(lines) + "\n"


def save(graph: dict, path: str | Path) -> None:
    """Writes a graph as JSON; gzip when the path ends in `.gz`, with a fixed header (no
    file name, mtime 0) so that the same graph always gives the same bytes."""
    path = Path(path)
    text = dumps(graph).encode()
    if path.suffix == ".gz":
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
            f.write(text)
        path.write_bytes(buf.getvalue())
    else:
        path.write_bytes(text)


def load(path: str | Path) -> dict:
    """Reads a graph written by `save` (plain or `.gz`)."""
    path = Path(path)
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return json.loads(data)


def summary(graph: dict) -> dict:
    """Counts for reports: ops per phase, tensors per kind, views, parameters, FLOPs, time."""
    phases: dict[str, int] = {}
    for op in graph["ops"]:
        phases[op.get("phase", "none")] = phases.get(op.get("phase", "none"), 0) + 1
    kinds: dict[str, int] = {}
    for t in graph["tensors"]:
        kinds[t.get("kind", "activation")] = kinds.get(t.get("kind", "activation"), 0) + 1
    params = [t for t in graph["tensors"] if t.get("kind") == "param"]
    return {
        "ops": len(graph["ops"]),
        "ops_per_phase": phases,
        "tensors": len(graph["tensors"]),
        "tensors_per_kind": kinds,
        "views": sum(1 for t in graph["tensors"] if "alias_of" in t),
        "param_count": sum(math.prod(t["shape"]) for t in params),
        "flops": sum(op.get("flops", 0) for op in graph["ops"]),
        "time_us": sum(op.get("time_us", 0) for op in graph["ops"]),
        "not_recomputable": sum(1 for op in graph["ops"] if op.get("recomputable", True) is False),
    }
