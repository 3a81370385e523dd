"""sgc-trace: export a PyTorch training step as an sgc graph (format version 1).

    from sgc_trace import InputSpec, export
    graph = export(lambda: MyModel(), torch.nn.functional.cross_entropy,
                   [InputSpec("x", (8, 3, 224, 224)), InputSpec("target", (8,), torch.long, high=1000)])
    sgc_trace.save(graph, "model.json")

The model is built inside a FakeTensorMode, so its weights take no memory; see
`trace.py` for the tracing and `convert.py` for how the joint graph maps to the format.
"""

from .api import export, save, summary
from .convert import ExportError
from .trace import InputSpec

__all__ = ["export", "save", "summary", "InputSpec", "ExportError"]
