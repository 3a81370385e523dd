"""sgc from PyTorch: plans applied to your own training loop, and training steps exported
as sgc graphs.

    model = torch.compile(model, backend=sgc_trace.backend(budget=0.5), dynamic=False)
    loss = loss_fn(model(x), y); loss.backward(); optimizer.step()     # as before

The package splits by job:

* `sgc_trace.exporter`: a training step traced (AOTAutograd under FakeTensorMode: no
  weights allocated) and converted to the graph format (`export`, `save`, `load`);
* `sgc_trace.apply`: plans run by PyTorch: the `torch.compile` backend (`backend`), the
  whole-step convenience on the same partitioner (`compile`), and the plan as a selective
  activation checkpointing policy for eager models (`policy`);
* `sgc_trace.tools`: the `sgc-trace` command line, the real-model corpus, and
  measurements against PyTorch.

Everything sgc's Rust code knows (planning, costs, device profiles, sizes, peaks) comes
from the native module `sgc` (`sgc_trace.native`).
"""

from .version import __version__  # noqa: E402,F401

from .exporter.api import export, save, summary  # noqa: E402
from .native import DeviceProfile, parse_profile, profiles  # noqa: E402
from .errors import ExportError  # noqa: E402
from .exporter.trace import InputSpec  # noqa: E402
from .apply.torch_compile import backend  # noqa: E402
from .apply.sac import policy  # noqa: E402
from .apply.step import PlanMismatch, PlannedStep, compile  # noqa: E402
from .apply.planner import PlanError, plan  # noqa: E402

__all__ = ["backend", "policy", "compile", "plan", "PlannedStep", "PlanMismatch", "PlanError", "export", "save", "summary",
           "InputSpec", "ExportError", "DeviceProfile", "profiles", "parse_profile"]
