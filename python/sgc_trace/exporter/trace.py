"""Tracing a training step: module + loss + input shapes -> AOTAutograd joint graph.

The model's parameters and the inputs are fake tensors of one `FakeTensorMode` (see
`build.py`): they carry shapes, dtypes and storage identity but no data, so a model of
billions of parameters traces in seconds with almost no memory. `aot_export_module`
with `trace_joint=True` then runs autograd symbolically and returns one functional FX
graph holding the forward pass, the loss and the backward pass, plus a signature that
says which placeholders are parameters, buffers and user inputs, which outputs are
gradients and which buffers the step mutates (BatchNorm running statistics).

Around that call, these make real models trace:

* The model's output may be a `transformers` `ModelOutput`, a dict or a tuple; the loss
  gets its `logits` (or its first tensor) unless the caller asks for the raw output.
* AOTAutograd asserts that every parameter receives a gradient. A parameter the forward
  never uses (a registered but unused one, or the second name of a tied one, as BERT's
  `cls.predictions.bias`) does not, so one fake forward and backward pass first finds the
  parameter names that the loss does not reach, and those names are traced as plain
  tensors that need no gradient (sharing the storage of the original, so ties stay ties).
* `transformers` skips its data-dependent attention-mask shortcuts (`padding_mask.all()`)
  when it sees it is being traced, but recognises only bare fake tensors; inside
  AOTAutograd they are wrapped in `FunctionalTensor`s, so the check is widened for the
  duration of the trace.
* The trace follows the device of the inputs (`InputSpec.device`, the model's by default:
  `api.export`). For CUDA nothing reaches the CUDA runtime, with or without a GPU: the
  tensors are fakes, tensors made from Python data on the device are made on the host and
  copied (`_DataOnHost`), AOTAutograd's second pass over the joint graph runs inside the
  fake mode (its factory ops would otherwise run for real), and the backward is traced by
  `engine.python_grad` (the C++ autograd engine asks the driver for CUDA streams).
* `autocast`: the forward runs under `torch.autocast` and the backward outside it, as the
  recommended eager mixed-precision step does; the casts become ops of the graph.

After tracing, every training-mode `aten.native_dropout` is split (`split_dropout`): the
random op keeps drawing its boolean mask, and its scaled output is computed again from
the input and the mask by two multiplies, which recompute. As one op, the dropout's float
output (4 bytes an element) had to be kept wherever the backward or a recomputation read
it; split, a plan keeps the 1-byte mask and recomputes the product, as PyTorch's
decomposition lets its partitioner do. The values are bit for bit those of the fused op
(`x.mul(mask).mul_(scale)` is how ATen computes it on the CPU).

Failures become one `ExportError` naming the op and the module being traced.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn
from torch._functorch.aot_autograd import aot_export_module
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.overrides import TorchFunctionMode

from .convert import Joint
from .engine import grad_without_cuda
from ..errors import ExportError, explain
from .modules import ModuleLabeller


@dataclass(frozen=True)
class InputSpec:
    """One input of the training step: a data batch or a target.

    `batch_dim` is the batch axis (written to the graph so tools can rescale it); `None`
    for an input without one.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    batch_dim: int | None = 0
    # Integer inputs (class ids, token ids) are drawn below this bound when a real
    # tensor is needed (tests); tracing never reads values.
    high: int = 2
    # The device the step receives this input on; `None`: the model's (see `api.export`).
    device: str | None = None

    def fake(self, mode: FakeTensorMode) -> torch.Tensor:
        """A fake tensor of `mode` with this input's shape, dtype and device. A CUDA fake
        needs no GPU: the mode creates it on the meta device and only labels it CUDA."""
        with mode:
            return torch.empty(self.shape, dtype=self.dtype, device=self.device or "cpu")

    def real(self, generator: torch.Generator | None = None) -> torch.Tensor:
        if self.dtype.is_floating_point:
            t = torch.randn(self.shape, dtype=self.dtype, generator=generator)
        else:
            t = torch.randint(0, self.high, self.shape, dtype=self.dtype, generator=generator)
        return t.to(self.device) if self.device else t


LossFn = Callable[..., torch.Tensor]


def prediction(out) -> torch.Tensor:
    """The tensor a loss compares with targets: the output itself when it is a tensor, else
    its `logits` (a `transformers` `ModelOutput`, a dict), else its first tensor."""
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(out, Mapping):
        if isinstance(out.get("logits"), torch.Tensor):
            return out["logits"]
        items = list(out.values())
    elif isinstance(out, (tuple, list)):
        items = list(out)
    else:
        items = []
    for item in items:
        if isinstance(item, torch.Tensor):
            return item
    raise ExportError(
        f"the model returned a {type(out).__name__} with no tensor to compute the loss on: "
        f"return a tensor (or an output with `logits`), or pass the raw output to a loss "
        f"that takes it (export(..., raw_output=True), `--raw-output`)"
    )


class TrainStep(nn.Module):
    """`loss_fn(model(*model_inputs), *targets)` as one module whose only output is the loss."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, num_model_inputs: int, raw_output: bool = False):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.num_model_inputs = num_model_inputs
        self.raw_output = raw_output

    def forward(self, *args: torch.Tensor):
        out = self.model(*args[: self.num_model_inputs])
        if not self.raw_output:
            out = prediction(out)
        loss = self.loss_fn(out, *args[self.num_model_inputs :])
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            what = f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise ExportError(f"the loss function returned {what}, not a scalar tensor (reduce it, e.g. with .mean())")
        if not loss.requires_grad:
            raise ExportError("the loss does not depend on any parameter that requires a gradient: nothing to train")
        return (loss,)


@dataclass
class JointTrace:
    """What `trace_joint` returns: the FX graph, its signature and the fake inputs."""

    graph_module: torch.fx.GraphModule
    signature: object  # torch._functorch.aot_autograd.GraphSignature
    inputs: Sequence[InputSpec]
    prefix: str  # module-path prefix of the model inside the TrainStep ("model.")
    # Parameter names (without the prefix) traced without a gradient: the loss does not use them.
    without_grad: list[str] = field(default_factory=list)
    # The dtype the step was traced under `torch.autocast` with (None: no autocast).
    autocast: torch.dtype | None = None

    TRACER = "torch._functorch.aot_autograd.aot_export_module(trace_joint=True) under FakeTensorMode"

    def strip(self, fqn: str) -> str:
        """A parameter or buffer path of the `TrainStep` as the model's own (no prefix)."""
        return fqn[len(self.prefix):] if fqn.startswith(self.prefix) else fqn

    def joint(self) -> Joint:
        """The graph's roles, from AOTAutograd's signature: parameters, buffers and inputs;
        the loss, the only output; a gradient per parameter; the buffers the step updates
        (returned as new values)."""
        sig = self.signature
        user = dict(zip(sig.user_inputs, self.inputs))
        roles: dict[str, tuple[str, str, int | None]] = {}
        for node in self.graph_module.graph.nodes:
            if node.op != "placeholder":
                continue
            if node.name in sig.inputs_to_parameters:
                roles[node.name] = ("param", self.strip(sig.inputs_to_parameters[node.name]), None)
            elif node.name in sig.inputs_to_buffers:
                roles[node.name] = ("state", self.strip(sig.inputs_to_buffers[node.name]), None)
            elif node.name in user:
                roles[node.name] = ("input", user[node.name].name, user[node.name].batch_dim)
        mutations = {}
        for mapping in (sig.buffers_to_mutate, sig.parameters_to_mutate):
            for node_name, fqn in mapping.items():
                mutations[node_name] = self.strip(fqn)
        names = {ph: spec.name for ph, spec in user.items()}
        for node_name, ph in getattr(sig, "user_inputs_to_mutate", {}).items():
            mutations[node_name] = names.get(ph, ph)
        grads = [(n, self.strip(fqn)) for n, fqn in sig.backward_signature.gradients_to_parameters.items()]
        batch = next((spec.shape[spec.batch_dim] for spec in self.inputs if spec.batch_dim is not None), None)
        return Joint(self.graph_module, roles, [(sig.user_outputs[0], "loss")], sig.user_outputs[0], grads,
                     mutations, self.TRACER, batch, list(self.without_grad), self.autocast)


def trace_joint(
    model: nn.Module,
    loss_fn: LossFn,
    inputs: Sequence[InputSpec],
    num_model_inputs: int,
    mode: FakeTensorMode,
    raw_output: bool = False,
    autocast: torch.dtype | None = None,
) -> JointTrace:
    """Traces forward + loss + backward of `model` on fake `inputs`.

    Every parameter and buffer of `model` must be a fake tensor of `mode` (`build.build`,
    `build.prepare`), and the model must be in the mode it trains in (`model.train()`).
    `autocast`: trace under `torch.autocast(device, autocast)` (`autocast_dtype`).
    """
    step = TrainStep(model, loss_fn, num_model_inputs, raw_output)
    fake_inputs = tuple(spec.fake(mode) for spec in inputs)
    device = fake_inputs[0].device.type if fake_inputs else "cpu"
    autocast = autocast_dtype(device, autocast)
    prefix = "model."
    with warnings.catch_warnings(), _transformers_sees_tracing(), _autocast(device, autocast), \
            grad_without_cuda(device), _DataOnHost():
        warnings.simplefilter("ignore")
        unused = _params_without_grad(step, fake_inputs, mode)
        labeller = ModuleLabeller(model)
        try:
            # Inside `mode`: `aot_export_module` traces the joint graph a second time
            # (`make_fx` of the first, real mode), where the graph's factory ops (`arange`,
            # `ones`) would otherwise run for real on the model's device.
            with _without_grad(step, unused), labeller, mode:
                gm, sig = aot_export_module(step, fake_inputs, trace_joint=True, output_loss_index=0)
        except Exception as e:
            raise ExportError(explain("tracing the training step", e, labeller.current())) from e
        labeller.transfer(gm.graph)
    split_dropout(gm)
    names = [n[len(prefix) :] if n.startswith(prefix) else n for n in unused]
    return JointTrace(gm, sig, list(inputs), prefix=prefix, without_grad=names, autocast=autocast)


AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def autocast_dtype(device: str, dtype: torch.dtype | None) -> torch.dtype | None:
    """The autocast dtype to trace a step on `device` with: `dtype` when given, else the
    dtype of a `torch.autocast` active for that device around the call, else None."""
    if dtype is None and torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
    if dtype is not None and dtype not in AUTOCAST_DTYPES:
        raise ExportError(f"autocast dtype {dtype} is not one of {', '.join(map(str, AUTOCAST_DTYPES))}")
    return dtype


@contextlib.contextmanager
def _autocast(device: str, dtype: torch.dtype | None):
    """The forward under `torch.autocast(device, dtype)` and the backward without it, as
    the recommended eager step runs (`with autocast: loss = ...` then `loss.backward()`
    outside: AOTAutograd's `backward_pass_autocast="off"`); with no dtype, autocast off
    throughout, whatever context the trace is called in."""
    from torch._functorch import config

    if dtype is None:
        with torch.autocast(device, enabled=False):
            yield
        return
    with _autocast_on(device, dtype), config.patch(backward_pass_autocast="off"):
        yield


@contextlib.contextmanager
def _autocast_on(device: str, dtype: torch.dtype):
    """What `torch.autocast(device, dtype)` does on entry and exit, without its check that
    the device is available: `torch.autocast("cuda")` on a machine without a GPU warns and
    turns itself off, and a CUDA trace made there would silently have no casts."""
    prev = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device), torch.is_autocast_cache_enabled())
    torch.set_autocast_enabled(device, True)
    torch.set_autocast_dtype(device, dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device, prev[0])
        torch.set_autocast_dtype(device, prev[1])
        torch.set_autocast_cache_enabled(prev[2])


class _DataOnHost(TorchFunctionMode):
    """While tracing, tensors made from Python data on an accelerator (`torch.tensor(data,
    device="cuda")`, `as_tensor`, `asarray`, `Tensor.new_tensor`) are made on the CPU and
    moved: the same fake tensor, without the CUDA runtime.

    Those constructors initialise the device before any tensor mode sees the call (a real
    CUDA context on a GPU machine, "Found no NVIDIA driver" without one). `transformers`'
    key/value cache makes its empty tensors this way in every forward
    (`DynamicLayer.lazy_initialization`); dead for the loss, they leave no op in the graph."""

    _FROM_DATA = {torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func in self._FROM_DATA and device is not None and torch.device(device).type != "cpu":
            made = func(*args, **{**kwargs, "device": "cpu"})
            # Not `made.to(device)`: `Tensor.to`'s argument parser initialises the device too,
            # and the tracer computes ops on small constants for real. A fresh tensor and a
            # copy into it are ops of the graph, on fake tensors.
            out = torch.empty(made.shape, dtype=made.dtype, device=device)
            return out.copy_(made)
        return func(*args, **kwargs)


# -- dropout: a random mask and a recomputable product ----------------------------------


def split_dropout(gm: torch.fx.GraphModule) -> int:
    """Rewrites the readers of each training-mode `native_dropout`'s output to read
    `mul(mul(x, mask), scale)` instead (see the module docs); returns how many were split.

    The dropout node stays (it draws the mask, in the same order, so the random stream is
    unchanged); its float output is then read by nothing. The new nodes carry the output's
    metadata (module label; the product its fake value, so views of it stay views)."""
    aten = torch.ops.aten
    g = gm.graph
    order = {n: i for i, n in enumerate(g.nodes)}
    count = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not aten.native_dropout.default:
            continue
        x = node.args[0]
        p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p")
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
        if train is False or not isinstance(p, (int, float)):
            continue
        items = {u.args[1]: u for u in node.users if u.op == "call_function" and u.target is operator.getitem}
        out, mask = items.get(0), items.get(1)
        if out is None or mask is None or not out.users:
            continue
        scale = 0.0 if p == 1 else 1.0 / (1.0 - p)  # as ATen computes it, in double
        with g.inserting_after(max(out, mask, key=order.__getitem__)):
            masked = g.call_function(aten.mul.Tensor, (x, mask))
        with g.inserting_after(masked):
            scaled = g.call_function(aten.mul.Tensor, (masked, scale))
        # The product takes over the output's fake value, whose storage the views made
        # from it share; the dropout's unread output and the unscaled product get fresh ones.
        masked.meta = _fresh_meta(out.meta)
        scaled.meta = out.meta
        out.meta = _fresh_meta(out.meta)
        for product in (masked, scaled):  # eager has no such ops (`apply.sac` skips them)
            product.meta["sgc_dropout_product"] = True
        vals = node.meta.get("val")
        if isinstance(vals, (tuple, list)) and len(vals) == 2:
            # The exporter reads a multi-output op's values from the op's own node.
            node.meta["val"] = (out.meta["val"], vals[1])
        out.replace_all_uses_with(scaled)
        count += 1
    if count:
        g.lint()
        gm.recompile()
    return count


def _fresh_meta(meta: dict) -> dict:
    """`meta` with a fake value of its own storage (the exporter reads storage identity:
    a shared fake value would make the product a view of the dropout's output)."""
    out = dict(meta)
    val = meta.get("val")
    if isinstance(val, torch.Tensor):
        mode = getattr(val, "fake_mode", None)
        with mode if mode is not None else contextlib.nullcontext():
            out["val"] = torch.empty_like(val)
    return out


# -- parameters the loss does not use -------------------------------------------------


def _params_without_grad(step: nn.Module, fake_inputs, mode: FakeTensorMode) -> list[str]:
    """Names (every registration, tied ones included) of the parameters that require a
    gradient but that the loss does not depend on, found by one fake forward and backward
    pass in which each name is its own leaf tensor: `torch.autograd.grad(...,
    allow_unused=True)` answers `None` for a leaf the loss does not reach. (Walking the
    autograd graph to its `AccumulateGrad` nodes' `variable`s instead finds no leaf at all
    on torch 2.11.) A pass that fails here returns [] and fails again, with its own message,
    in the real trace."""
    leaves = {
        name: p.detach().requires_grad_()
        for name, p in step.named_parameters(remove_duplicate=False)
        if p.requires_grad
    }
    if not leaves:
        return []
    try:
        with mode, torch.enable_grad():
            (loss,) = torch.func.functional_call(step, leaves, fake_inputs, tie_weights=False, strict=False)
            grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    except Exception:
        return []
    return [name for name, g in zip(leaves, grads) if g is None]


@contextlib.contextmanager
def _without_grad(step: nn.Module, names: list[str]):
    """Registers each named parameter as a no-grad view of itself while tracing; restores after."""
    saved = []
    for name in names:
        owner_path, _, attr = name.rpartition(".")
        owner = step.get_submodule(owner_path)
        p = owner._parameters[attr]
        saved.append((owner, attr, p))
        owner._parameters[attr] = nn.Parameter(p.detach(), requires_grad=False)
    try:
        yield
    finally:
        for owner, attr, p in reversed(saved):
            owner._parameters[attr] = p


# -- transformers ---------------------------------------------------------------------


@contextlib.contextmanager
def _transformers_sees_tracing():
    """Makes `transformers.utils.import_utils.is_fake_tensor` (behind its `is_tracing`
    checks) true for AOTAutograd's `FunctionalTensor` wrappers too, while tracing.

    Only when `transformers` is already imported (the model uses it); a version without
    that function is left alone, and its data-dependent checks fail with a clear error.
    """
    iu = sys.modules.get("transformers.utils.import_utils")
    original = getattr(iu, "is_fake_tensor", None) if iu is not None else None
    if original is None:
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor
    from torch._subclasses.functional_tensor import FunctionalTensor

    def is_fake_tensor(x) -> bool:
        return isinstance(x, (FakeTensor, FunctionalTensor)) or original(x)

    iu.is_fake_tensor = is_fake_tensor
    try:
        yield
    finally:
        iu.is_fake_tensor = original
