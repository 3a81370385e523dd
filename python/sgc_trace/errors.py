"""One error type, and one readable message for each way an export fails.

Tracing a real model fails deep inside torch or the model's own code, with tracebacks of
a hundred frames and messages that name internal helpers. `explain` turns such an
exception into one message: what failed (building, tracing, converting), which op and
which module, the innermost frame of the model's own code (outside torch and this
package), and what to try. The CLI prints it and exits non-zero; `SGC_TRACE_DEBUG=1`
shows the original traceback too.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path


class ExportError(Exception):
    """An export failed; the message says what, where and what to try."""


_TORCH_DIR = None


def _skip_frame(filename: str) -> bool:
    """Frames of torch itself, of this package and of the Python standard library."""
    global _TORCH_DIR
    if _TORCH_DIR is None:
        import torch

        _TORCH_DIR = str(Path(torch.__file__).resolve().parent) + os.sep
    if filename.startswith("<"):
        return True
    path = str(Path(filename).resolve())
    here = str(Path(__file__).resolve().parent) + os.sep
    return (
        path.startswith(_TORCH_DIR)
        or path.startswith(here)
        or ("/lib/python3" in path and "site-packages" not in path)
    )


def user_frame(e: BaseException) -> str | None:
    """`file:line in function` of the innermost frame outside torch and sgc_trace, if any."""
    frames = traceback.extract_tb(e.__traceback__)
    for f in reversed(frames):
        if not _skip_frame(f.filename):
            return f"{_short(f.filename)}:{f.lineno} in {f.name}"
    return None


def _short(filename: str) -> str:
    """A path from its `site-packages` folder on (`transformers/masking_utils.py`), else as is."""
    parts = Path(filename).parts
    if "site-packages" in parts:
        return str(Path(*parts[parts.index("site-packages") + 1 :]))
    return filename


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first non-empty line of an exception's message, shortened to `limit` characters."""
    text = str(e).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def explain(stage: str, e: BaseException, module: str | None = None) -> str:
    """One message for an exception raised while `stage` ("tracing the training step", ...)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    where = f" in module `{module}`" if module else ""
    frame = user_frame(e)
    at = f" (at {frame})" if frame else ""
    if isinstance(e, (DataDependentOutputException, DynamicOutputShapeException)):
        return (
            f"{stage} failed{where}: op `{e.func}` needs tensor values (control flow that depends "
            f"on data, `.item()`, `.tolist()`, `nonzero`), which tracing with fake tensors does "
            f"not have{at}. Try: make the branch independent of tensor values (static shapes, no "
            f"data-dependent masks); for `transformers` models pass no attention mask"
        )
    if isinstance(e, UnsupportedOperatorException):
        return (
            f"{stage} failed{where}: op `{e.func}` has no fake (meta) implementation{at}. Try: "
            f"register one with `torch.library.register_fake`, or export a variant of the model "
            f"without this op"
        )
    if isinstance(e, ExportError):
        return str(e)
    return f"{stage} failed{where}: {first_line(e)}{at}"
