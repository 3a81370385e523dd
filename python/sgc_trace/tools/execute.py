"""An exported step run by sgc's own executor (the CPU backend, through `sgc.execute`) on
the weights and inputs PyTorch holds, and compared with PyTorch's step on the same values.

    graph = sgc_trace.export(model, F.cross_entropy, specs)
    result = against_pytorch(model, F.cross_entropy, graph, {"x": x, "target": y})
    assert result.worst < 1e-4, result.worst_tensor

The graph names its inputs after the `InputSpec`s, its parameters and buffers after
`model.named_parameters()` / `named_buffers()`, its outputs `loss` and `{param}.grad`
(`update="none"`); this module relies on those names only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..native import module

# The executor's dtypes on the host and PyTorch's names for them.
_DTYPES = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
           "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}


def _bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def _tensor(raw: bytes, decl: dict) -> torch.Tensor:
    dtype = _DTYPES[decl["dtype"]]
    out = torch.frombuffer(bytearray(raw), dtype=dtype) if raw else torch.empty(0, dtype=dtype)
    return out.reshape(decl["shape"])


def run_on_sgc(graph: dict, model: torch.nn.Module, inputs: dict[str, torch.Tensor], plan=None,
               steps: int = 1) -> dict[str, torch.Tensor]:
    """Every output of `graph` after `steps` steps on sgc's CPU backend, unplanned or under
    `plan` (a `sgc.Plan` or plan file), with `model`'s parameters and buffers and `inputs`
    (name -> tensor) bound by name."""
    sgc = module()
    declared = {t["name"]: t for t in graph["tensors"]}
    values = {name: _bytes(t) for name, t in inputs.items()}
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name in declared:
            values[name] = _bytes(t)
    g = sgc.load(graph)
    raw = sgc.execute(g, values, plan=plan, steps=steps)
    return {name: _tensor(b, declared[name]) for name, b in raw.items()}


@dataclass
class Comparison:
    """sgc's step and PyTorch's float32 step, each against PyTorch's float64 step on the same
    values (the closest to exact we have). For each tensor, the largest absolute difference
    over the float64 tensor's largest magnitude: `errors` (sgc's), `torch_errors`
    (PyTorch's own float32 rounding: how sensitive this tensor is to rounding at all; a
    gradient that is zero analytically, e.g. the bias of a convolution followed by batch
    norm, has a relative error near 1 in both). `tolerance` is what a tensor is held to:
    `max(floor, slack * torch_error)`."""

    errors: dict[str, float] = field(default_factory=dict)
    torch_errors: dict[str, float] = field(default_factory=dict)
    floor: float = 1e-4
    slack: float = 10.0

    def tolerance(self, name: str) -> float:
        return _tolerance(self.floor, self.slack, self.torch_errors.get(name, 0.0))

    @property
    def failed(self) -> list[str]:
        """The tensors whose error is above their tolerance."""
        return [k for k, e in self.errors.items() if not e <= self.tolerance(k)]

    @property
    def worst_tensor(self) -> str | None:
        return max(self.errors, key=lambda k: self.errors[k] / self.tolerance(k)) if self.errors else None


def _tolerance(floor: float, slack: float, torch_error: float) -> float:
    """What one tensor is held to: `floor`, or `slack` times PyTorch's own float32 error
    against float64 where that is larger."""
    return max(floor, slack * torch_error)


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (the absolute difference when `want` is all zeros)."""
    got, want = got.detach().double(), want.detach().double()
    diff = (got - want).abs().max().item() if want.numel() else 0.0
    scale = want.abs().max().item() if want.numel() else 0.0
    return diff / scale if scale > 0 else diff


def _pytorch_step(model: torch.nn.Module, loss_fn, inputs: list, n: int,
                  autocast: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    from ..exporter.trace import prediction  # noqa: PLC0415

    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        loss = loss_fn(prediction(model(*inputs[:n])), *inputs[n:])
    loss.backward()
    out = {"loss": loss.detach()}
    out.update({f"{k}.grad": p.grad for k, p in model.named_parameters() if p.grad is not None})
    return out


def _is_double(model: torch.nn.Module) -> bool:
    """Whether `model` holds float64 parameters (a graph traced from it is float64)."""
    return any(p.dtype == torch.float64 for p in model.parameters())


def _batch_reversed(args: list) -> list:
    """`args` with every tensor of the first one's leading size flipped along that axis."""
    n = args[0].shape[0] if args and args[0].dim() else None
    return [a.flip(0) if isinstance(a, torch.Tensor) and a.dim() and a.shape[0] == n else a for a in args]


def against_pytorch(model: torch.nn.Module, loss_fn, graph: dict, inputs: dict[str, torch.Tensor],
                    num_model_inputs: int = 1, plan=None, floor: float = 1e-4,
                    slack: float = 10.0, got: dict[str, torch.Tensor] | None = None,
                    autocast: torch.dtype | None = None) -> Comparison:
    """One step of `graph` on sgc's CPU backend against `loss_fn(model(*inputs[:n]), *rest)`
    (the model's output reduced as the exporter reduces it: its `logits`, else its first tensor)
    and its backward in PyTorch, in float32 and in float64, on the same values: the loss and
    every parameter's gradient. `model`'s weights and buffers are left as they were (the
    steps run on copies); sgc's outputs are compared by name. `got`: sgc's outputs of this
    step when the caller already ran it (`run_on_sgc`), else it is run here. `autocast`: the
    dtype a mixed-precision graph was traced under; PyTorch's own step (whose error sets
    each tensor's tolerance) then runs under `torch.autocast("cpu", autocast)`, the
    float64 one without it.

    A float64 model (`model.double()`) gives a graph that sgc runs in float64. PyTorch's own
    rounding is then its float64 step's: measured as the difference between its step and its
    step on the batch in reverse order (`inputs` flipped along their first axis), which is
    the same step mathematically (a loss averaged over the batch) rounded along other paths.
    That is what sets the tolerance of a gradient that is zero analytically (the bias of a
    batch norm feeding another through a 1x1 convolution): rounding noise of about 1e-17 in
    both steps, whose difference is as large as the noise itself."""
    import copy  # noqa: PLC0415
    import gc  # noqa: PLC0415

    if got is None:
        got = run_on_sgc(graph, model, inputs, plan=plan)
    args = list(inputs.values())
    if _is_double(model):
        f32 = _pytorch_step(copy.deepcopy(model), loss_fn, _batch_reversed(args), num_model_inputs)
    else:
        f32 = _pytorch_step(copy.deepcopy(model), loss_fn, args, num_model_inputs, autocast)
    gc.collect()  # the f32 copy's parameters go before the float64 copy is made
    wide = [a.double() if a.is_floating_point() else a for a in args]
    f64 = _pytorch_step(copy.deepcopy(model).double(), loss_fn, wide, num_model_inputs)
    result = Comparison(floor=floor, slack=slack)
    for name, want in f64.items():
        if name in got:
            result.errors[name] = relative_error(got[name], want)
            result.torch_errors[name] = relative_error(f32[name], want)
    return result


@dataclass
class OpReplay:
    """Every ATen op of a step replayed by PyTorch on the values sgc's executor gave its
    inputs, in float32 and in float64 (a float64 graph: in float64, each output held to
    `floor` of the larger of its own and its inputs' magnitudes); each floating output of
    sgc against the float64
    replay (largest absolute difference over the float64 output's largest magnitude), held
    to `max(floor, slack * PyTorch's float32 error)` as in `Comparison`; each bool output
    (a mask from `eq`, `ne`) against the float32 replay exactly (its error: the share of
    elements that differ, held to 0). Where a step as a
    whole is compared, a ReLU input within rounding of zero takes another branch and moves a
    gradient by far more than any kernel's error; op by op, each kernel is judged on the same
    inputs as PyTorch's.

    `per_type`: op type -> (ops replayed, worst error over tolerance, op and output of the
    worst); `failed`: (op, output, error, tolerance) above tolerance; `skipped`: op -> why it
    was not replayed (sgc's own ops, a schema the graph's attributes do not fill)."""

    per_type: dict[str, tuple[int, float, str]] = field(default_factory=dict)
    failed: list[tuple[str, str, float, float]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def replayed(self) -> int:
        return sum(n for n, _, _ in self.per_type.values())


def _aten_call(op: dict, values: list[torch.Tensor], wide: bool):
    """PyTorch's ATen overload of `op`, called with its tensor inputs in schema order and its
    attributes by name (float64 when `wide`)."""
    _, name, overload = op["op"].split(".")
    fn = getattr(getattr(torch.ops.aten, name), overload)
    attrs = op.get("attrs") or {}

    def cast(v):
        if isinstance(v, torch.Tensor) and v.is_floating_point() and wide:
            return v.double()
        if isinstance(v, str) and v.startswith("torch."):
            dtype = getattr(torch, v[len("torch."):])
            return torch.float64 if wide and dtype == torch.float32 else dtype
        return v

    if name == "native_batch_norm_backward":  # running stats absent: the inputs skip them
        grad, x, weight, mean, rstd = values
        args = dict(grad_out=grad, input=x, weight=weight, running_mean=None, running_var=None, save_mean=mean,
                    save_invstd=rstd)
    else:
        args, rest = {}, iter(values)
        for a in fn._schema.arguments:
            kind = str(a.type)
            if a.name in attrs:
                continue
            if kind == "List[Tensor]":
                args[a.name] = list(rest)
            elif kind in ("Tensor", "Optional[Tensor]") and not a.kwarg_only:
                nxt = next(rest, None)
                if nxt is not None:
                    args[a.name] = nxt
    args.update({k: v for k, v in attrs.items() if k in {a.name for a in fn._schema.arguments}})
    args = {k: [cast(x) for x in v] if isinstance(v, list) else cast(v) for k, v in args.items()}
    out = fn(**args)
    return [t for t in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(t, torch.Tensor)]


# Ops whose outputs hold no defined values: nothing to compare.
_UNDEFINED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"}


def replay_ops(graph: dict, model: torch.nn.Module, inputs: dict[str, torch.Tensor], floor: float = 1e-5,
               slack: float = 10.0) -> OpReplay:
    """Runs `graph` once on sgc's CPU backend with every activation kept (declared an
    output), then replays each ATen op in PyTorch on those values: see `OpReplay`."""
    declared = {t["name"]: t for t in graph["tensors"]}
    keep = [t["name"] for t in graph["tensors"] if t.get("kind", "activation") == "activation"]
    wide_graph = dict(graph, outputs=list(dict.fromkeys(list(graph["outputs"]) + keep)))
    got = run_on_sgc(wide_graph, model, inputs)
    known = dict(inputs)
    known.update({k: v.detach() for k, v in list(model.named_parameters()) + list(model.named_buffers())})
    result = OpReplay()
    worst: dict[str, tuple[int, float, str]] = {}
    for op in graph["ops"]:
        if not op["op"].startswith("aten."):
            result.skipped[op["name"]] = f"{op['op']}: sgc's own op, not PyTorch's"
            continue
        if op["op"].split(".")[1] in _UNDEFINED:
            result.skipped[op["name"]] = f"{op['op']}: its values are undefined (uninitialised memory)"
            continue
        values = [got.get(t, known.get(t)) for t in op["inputs"]]
        if any(v is None for v in values):
            result.skipped[op["name"]] = "an input is neither kept nor bound"
            continue
        try:
            f64 = _aten_call(op, values, wide=True)
            f32 = _aten_call(op, values, wide=False)
        except Exception as e:  # noqa: BLE001 - a schema the attributes do not fill: named, not fatal
            result.skipped[op["name"]] = f"{op['op']}: not callable from the graph's attributes ({type(e).__name__})"
            continue
        n, w, at = worst.get(op["op"], (0, 0.0, ""))
        for name, want, ref32 in zip(op["outputs"], f64, f32):
            if name not in got:
                continue
            if declared[name]["dtype"] == "bool" and ref32.dtype == torch.bool:
                err = (got[name] != ref32).double().mean().item() if ref32.numel() else 0.0
                if err > 0:
                    result.failed.append((op["name"], name, err, 0.0))
                    w, at = float("inf"), f"{op['name']} -> {name}"
                continue
            if not want.is_floating_point() or declared[name]["dtype"] not in ("f32", "f64"):
                continue
            if declared[name]["dtype"] == "f64":
                # Both sides float64: the difference over the larger of the output's and the
                # inputs' magnitudes (an output that is zero analytically, a batch norm's bias
                # gradient summing to 0, is noise of the inputs' scale in both).
                scale = max([want.abs().max().item() if want.numel() else 0.0] +
                            [v.abs().max().item() for v in values
                             if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()])
                diff = (got[name].double() - want).abs().max().item() if want.numel() else 0.0
                err, tol = (diff / scale if scale > 0 else diff), floor
            else:
                err = relative_error(got[name], want)
                tol = _tolerance(floor, slack, relative_error(ref32, want))
            if err > tol:
                result.failed.append((op["name"], name, err, tol))
            if err / tol > w:
                w, at = err / tol, f"{op['name']} -> {name}"
        worst[op["op"]] = (n + 1, w, at)
    result.per_type = worst
    return result
