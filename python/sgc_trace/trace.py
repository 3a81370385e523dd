"""Tracing a training step: module + loss + input shapes -> AOTAutograd joint graph.

The model is built (or converted) inside a `FakeTensorMode`: parameters and inputs are
fake tensors that carry shapes, dtypes and storage identity but no data, so a model of
billions of parameters traces in seconds with almost no memory. `aot_export_module`
with `trace_joint=True` then runs autograd symbolically and returns one functional FX
graph holding the forward pass, the loss and the backward pass, plus a signature that
says which placeholders are parameters, buffers and user inputs, which outputs are
gradients and which buffers the step mutates (BatchNorm running statistics).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn
from torch._functorch.aot_autograd import aot_export_module
from torch._subclasses.fake_tensor import FakeTensorMode

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

    def fake(self, mode: FakeTensorMode) -> torch.Tensor:
        with mode:
            return torch.empty(self.shape, dtype=self.dtype)

    def real(self, generator: torch.Generator | None = None) -> torch.Tensor:
        if self.dtype.is_floating_point:
            return torch.randn(self.shape, dtype=self.dtype, generator=generator)
        return torch.randint(0, self.high, self.shape, dtype=self.dtype, generator=generator)


LossFn = Callable[..., torch.Tensor]


class TrainStep(nn.Module):
    """`loss_fn(model(*model_inputs), *targets)` as one module whose only output is the loss."""

    def __init__(self, model: nn.Module, loss_fn: LossFn, num_model_inputs: int):
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn
        self.num_model_inputs = num_model_inputs

    def forward(self, *args: torch.Tensor):
        out = self.model(*args[: self.num_model_inputs])
        return (self.loss_fn(out, *args[self.num_model_inputs :]),)


@dataclass
class JointTrace:
    """What `trace_joint` returns: the FX graph, its signature and the fake inputs."""

    graph_module: torch.fx.GraphModule
    signature: object  # torch._functorch.aot_autograd.GraphSignature
    inputs: Sequence[InputSpec]
    prefix: str  # module-path prefix of the model inside the TrainStep ("model.")


def build_fake(factory: Callable[[], nn.Module], mode: FakeTensorMode) -> nn.Module:
    """Builds a model inside `mode`: its parameters and buffers are fake (no memory)."""
    with mode:
        return factory()


def trace_joint(
    model: nn.Module,
    loss_fn: LossFn,
    inputs: Sequence[InputSpec],
    num_model_inputs: int,
    mode: FakeTensorMode | None = None,
) -> JointTrace:
    """Traces forward + loss + backward of `model` on fake `inputs`.

    `model` should have been built with `build_fake` under `mode` (the cheap way for
    large models); a model with real weights is converted to fake tensors first. The
    model must be in the mode it trains in (`model.train()`).
    """
    mode = mode or FakeTensorMode(allow_non_fake_inputs=True)
    if not _is_fake(model):
        model = _to_fake(model, mode)
    step = TrainStep(model, loss_fn, num_model_inputs)
    fake_inputs = tuple(spec.fake(mode) for spec in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ModuleLabeller(model) as labeller:
            gm, sig = aot_export_module(
                step, fake_inputs, trace_joint=True, output_loss_index=0
            )
        labeller.transfer(gm.graph)
    return JointTrace(gm, sig, list(inputs), prefix="model.")


def _is_fake(model: nn.Module) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    tensors = list(model.parameters()) + list(model.buffers())
    return bool(tensors) and all(isinstance(t, FakeTensor) for t in tensors)


def _to_fake(model: nn.Module, mode: FakeTensorMode) -> nn.Module:
    """A copy of `model` whose parameters and buffers are fake tensors of `mode`."""
    import copy

    fake = copy.deepcopy(model)
    done: dict[int, torch.Tensor] = {}  # keeps tied weights tied
    for module in fake.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if id(p) not in done:
                fp = mode.from_tensor(p.detach())
                done[id(p)] = nn.Parameter(fp, requires_grad=p.requires_grad)
            setattr(module, name, done[id(p)])
        for name, b in list(module.named_buffers(recurse=False)):
            if id(b) not in done:
                done[id(b)] = mode.from_tensor(b)
            module._buffers[name] = done[id(b)]
    return fake
