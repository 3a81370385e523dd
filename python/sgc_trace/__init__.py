"""sgc-trace: export a PyTorch training step as an sgc graph (format version 1).

    from sgc_trace import InputSpec, export
    graph = export(lambda: MyModel(), torch.nn.functional.cross_entropy,
                   [InputSpec("x", (8, 3, 224, 224)), InputSpec("target", (8,), torch.long, high=1000)])
    sgc_trace.save(graph, "model.json")

The model is built inside a FakeTensorMode, so its weights take no memory; see
`build.py` for building, `trace.py` for the tracing (`engine.py` for the backward of a CUDA
trace), `convert.py` for how the joint graph maps to the format, `cost.py` for the roofline
`time_us` and `apply.py` for plans applied back to the training step (`compile`).
"""

__version__ = "0.2.0"

from .api import export, save, summary  # noqa: E402
from .cost import PROFILES, DeviceProfile, parse_profile  # noqa: E402
from .errors import ExportError  # noqa: E402
from .trace import InputSpec  # noqa: E402
from .apply import PlanMismatch, PlannedStep, compile  # noqa: E402
from .planner import PlanError, plan  # noqa: E402

__all__ = ["compile", "plan", "PlannedStep", "PlanMismatch", "PlanError", "export", "save", "summary", "InputSpec", "ExportError", "DeviceProfile", "PROFILES", "parse_profile"]
