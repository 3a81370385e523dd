"""Export: a PyTorch training step traced into an sgc graph.

`build` makes the model fake (no weights allocated), `trace` runs AOTAutograd for its
joint forward + backward graph (`engine` traces the backward of a CUDA step without a
GPU, `modules` labels each node with its module), `convert` maps a joint graph to the
format, and `api` is the one call that does all of it (`export`, `save`, `load`)."""

from .api import export, load, save, summary
from .trace import InputSpec

__all__ = ["export", "load", "save", "summary", "InputSpec"]
