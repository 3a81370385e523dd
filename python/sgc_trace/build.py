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

import copy
import warnings
from typing import Callable

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.multiprocessing.reductions import StorageWeakRef

from .errors import ExportError, first_line, user_frame


def build(factory: Callable[[], nn.Module], mode: FakeTensorMode) -> tuple[nn.Module, str]:
    """The module the factory makes, with fake parameters and buffers of `mode`, and how it
    was built: `"fake"`, or `"real: <why fake construction failed>"`."""
    try:
        with mode, warnings.catch_warnings():
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
    return adopt(model, mode), how


def prepare(model: nn.Module, mode: FakeTensorMode) -> nn.Module:
    """A module whose tensors are all fake tensors of `mode`: `model` itself when they
    already are, else a converted deep copy (the caller's module is left as it was)."""
    _check_module(model)
    tensors = list(model.parameters()) + list(model.buffers())
    if all(isinstance(t, FakeTensor) and t.fake_mode is mode for t in tensors):
        return model
    try:
        twin = copy.deepcopy(model)
    except Exception as e:
        raise ExportError(
            f"copying the module to convert its weights to fake tensors failed: {first_line(e)}; "
            f"pass a factory (a function that builds the module) instead of the module"
        ) from e
    return adopt(twin, mode)


def _check_module(model) -> None:
    if not isinstance(model, nn.Module):
        raise ExportError(f"the factory returned a {type(model).__name__}, not a torch.nn.Module")


def adopt(model: nn.Module, mode: FakeTensorMode) -> nn.Module:
    """Replaces, in place, every parameter and buffer of `model` that is not a fake tensor
    of `mode` (a real tensor, or a fake one of another mode) by one that is."""
    done: dict[int, torch.Tensor] = {}  # id of a tensor -> its replacement (ties stay tied)
    storages: dict[StorageWeakRef, torch.Tensor] = {}  # foreign storage -> its fake twin
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or _ours(p, mode):
                continue
            if id(p) not in done:
                done[id(p)] = nn.Parameter(_convert(p.detach(), mode, storages), requires_grad=p.requires_grad)
            module._parameters[name] = done[id(p)]
        for name, b in list(module._buffers.items()):
            if b is None or _ours(b, mode):
                continue
            if id(b) not in done:
                done[id(b)] = _convert(b, mode, storages)
            module._buffers[name] = done[id(b)]
    return model


def _ours(t: torch.Tensor, mode: FakeTensorMode) -> bool:
    return isinstance(t, FakeTensor) and t.fake_mode is mode


def _convert(t: torch.Tensor, mode: FakeTensorMode, storages: dict) -> torch.Tensor:
    if not isinstance(t, FakeTensor):
        # The converter remembers storages, so real tensors sharing one still share it.
        return mode.from_tensor(t, static_shapes=True)
    key = StorageWeakRef(t.untyped_storage())
    base = storages.get(key)
    if base is None:
        with mode:
            base = torch.empty(int(t.untyped_storage().nbytes()), dtype=torch.uint8)
        storages[key] = base
    with mode:
        out = torch.empty(0, dtype=t.dtype)
        out.set_(base.untyped_storage(), t.storage_offset(), t.shape, t.stride())
    return out
