"""Getting the model as fake tensors of one FakeTensorMode, however it was built.

The cheap way is to call the factory inside the tracing mode: every parameter is then a
fake tensor from the start and no weight is ever allocated. Three things break it on real
models, and each has a fallback here:

* Constructors that read tensor data (`trunc_normal_`, `.tolist()`, `.item()`) fail under
  FakeTensorMode, which has no data. `build` then calls the factory again, for real (random
  weights, on the CPU), and converts the result.
* Constructors that deep-copy a fake submodule (`nn.TransformerEncoder` clones its layer)
  copy the fake tensors' mode with them, so the copies belong to another FakeTensorMode and
  tracing refuses to mix them. `adopt` re-creates such tensors in the tracing mode.
* A module passed in with real weights is copied and converted the same way.

`adopt` keeps tied parameters tied (one tensor object stays one) and views views (tensors
on one storage stay on one storage), so the exported graph counts each storage once.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from typing import Callable

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef

from ..errors import ExportError, first_line, user_frame


def build(factory: Callable[[], nn.Module], mode: FakeTensorMode,
          device: str | None = None) -> tuple[nn.Module, str]:
    """The module the factory makes, with fake parameters and buffers of `mode`, and how it
    was built: `"fake"`, or `"real: <why fake construction failed>"`. With `device`
    (`"cuda"`), the factory runs under `torch.device(device)`, so its tensors are fakes on
    that device (no GPU needed); built for real, they are converted to it."""
    try:
        with mode, _on(device), warnings.catch_warnings():
            # deep copies of fake tensors (cloned submodules) ask for a data pointer
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
            model = factory()
        how = "fake"
    except Exception as fake_error:  # retried for real below; reported if that fails too
        why = first_line(fake_error, 160)
        frame = user_frame(fake_error)
        if frame:
            why += f" at {frame}"
        try:
            model = factory()
        except Exception as e:
            at = user_frame(e)
            real = first_line(e, 160) + (f" at {at}" if at else "")
            fake = "" if real == why else f"; under FakeTensorMode it had failed with {why}"
            raise ExportError(
                f"building the model failed: {real}{fake}. Check the factory and its arguments: "
                f"it must build the module on the CPU without downloading weights"
            ) from e
        how = f"real: {why}"
    _check_module(model)
    return adopt(model, mode, device), how


def _on(device: str | None):
    return torch.device(device) if device is not None else contextlib.nullcontext()


def prepare(model: nn.Module, mode: FakeTensorMode, device: str | None = None) -> nn.Module:
    """A module whose tensors are all fake tensors of `mode` (on `device` when given, else
    on their own device): `model` itself when they already are, else a converted copy.

    The copy never copies a weight: every parameter and buffer is converted to its fake
    twin first and handed to `copy.deepcopy` in its memo, so the rest of the module is
    copied around them. A model that fills the GPU traces without a second copy of its
    weights; the caller's module is left as it was."""
    _check_module(model)
    tensors = list(model.parameters()) + list(model.buffers())
    if all(_ours(t, mode) and (device is None or t.device == torch.device(device)) for t in tensors):
        return model
    memo = _fake_twins(model, mode, device)
    try:
        twin = copy.deepcopy(model, memo)
    except Exception as e:
        raise ExportError(
            f"copying the module to convert its weights to fake tensors failed: {first_line(e)}; "
            f"pass a factory (a function that builds the module) instead of the module"
        ) from e
    return twin


def _fake_twins(model: nn.Module, mode: FakeTensorMode, device: str | None) -> dict[int, torch.Tensor]:
    """`copy.deepcopy` memo: id of each parameter and buffer -> its fake twin (a tied
    tensor, one twin; tensors on one storage, twins on one storage)."""
    memo: dict[int, torch.Tensor] = {}
    storages: dict = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None and id(p) not in memo:
                memo[id(p)] = nn.Parameter(_convert(p.detach(), mode, storages, device), requires_grad=p.requires_grad)
        for b in module._buffers.values():
            if b is not None and id(b) not in memo:
                memo[id(b)] = _convert(b, mode, storages, device)
    return memo


def _check_module(model) -> None:
    if not isinstance(model, nn.Module):
        raise ExportError(f"the factory returned a {type(model).__name__}, not a torch.nn.Module")


def adopt(model: nn.Module, mode: FakeTensorMode, device: str | None = None) -> nn.Module:
    """Replaces, in place, every parameter and buffer of `model` that is not a fake tensor
    of `mode` on `device` (a real tensor, a fake one of another mode or another device) by
    one that is; `device=None` keeps each tensor's own device."""
    done: dict[int, torch.Tensor] = {}  # id of a tensor -> its replacement (ties stay tied)
    storages: dict = {}  # storage -> its fake twin
    target = torch.device(device) if device is not None else None
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or (_ours(p, mode) and target in (None, p.device)):
                continue
            if id(p) not in done:
                done[id(p)] = nn.Parameter(_convert(p.detach(), mode, storages, device), requires_grad=p.requires_grad)
            module._parameters[name] = done[id(p)]
        for name, b in list(module._buffers.items()):
            if b is None or (_ours(b, mode) and target in (None, b.device)):
                continue
            if id(b) not in done:
                done[id(b)] = _convert(b, mode, storages, device)
            module._buffers[name] = done[id(b)]
    return model


def _ours(t: torch.Tensor, mode: FakeTensorMode) -> bool:
    return isinstance(t, FakeTensor) and t.fake_mode is mode


def _convert(t: torch.Tensor, mode: FakeTensorMode, storages: dict, device: str | None = None) -> torch.Tensor:
    """A fake tensor of `mode` with `t`'s shape, strides, dtype and offset, on `device` (or
    `t`'s own), on the fake twin of `t`'s storage (one twin per storage, so tensors that
    share a storage still share one). Reads no data: a real CUDA weight is not copied."""
    key = StorageWeakRef(t.untyped_storage())
    base = storages.get(key)
    if base is None:
        with mode:
            base = torch.empty(int(t.untyped_storage().nbytes()), dtype=torch.uint8,
                               device=device if device is not None else t.device)
        storages[key] = base
    with mode:
        out = torch.empty(0, dtype=t.dtype, device=base.device)
        out.set_(base.untyped_storage(), t.storage_offset(), t.shape, t.stride())
    return out
