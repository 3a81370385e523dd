"""One way to plan a graph from Python: `plan(graph, **options) -> plan dict`.

Uses the native module when `import sgc` works (the PyO3 bindings: `sgc.plan(graph_dict,
strategy=..., genetic_iters=..., budget=..., seed=...)` returns an object with `.to_dict()`,
the plan JSON, and `.summary`), else the `sgc` binary (`sgc_trace.sgc.find_sgc()`, `sgc plan
FILE -o OUT`). Either way the answer is the plan file's JSON (`sgc plan -o`: `graph` with its
`fingerprint`, `steps`, `summary`, ...). Everything in `sgc_trace` that plans calls this.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from .errors import ExportError


class PlanError(ExportError):
    """Planning failed (no plan fits the budget, an invalid graph): sgc's own message.

    With the native module, what is raised is also that module's own exception (for one
    budget not met, `sgc.BudgetNotMet`, with `.budget`, `.best_device`, `.best_peak` and
    `.lower_bound`): `except sgc.BudgetNotMet` and `except sgc_trace.PlanError` both catch
    it (`typed`)."""


_TYPED: dict[type, type] = {}


def typed(err: BaseException) -> PlanError:
    """The native module's exception `err` as an exception of its own class and of
    `PlanError` (one class per native class, made once), with its message and attributes."""
    cls = type(err)
    both = _TYPED.get(cls)
    if both is None:
        both = type(cls.__name__, (cls, PlanError), {"__module__": __name__, "__doc__": cls.__doc__})
        _TYPED[cls] = both
    out = both(*err.args)
    for key, value in vars(err).items():
        setattr(out, key, value)
    return out


def _native():
    try:
        import sgc  # noqa: PLC0415
    except ImportError:
        return None
    return sgc if hasattr(sgc, "plan") else None


def plan(
    graph: dict,
    strategy: str = "sublinear",
    budget: int | str | None = None,
    genetic_iters: int = 20,
    seed: int = 0,
    native: bool | None = None,
    budget_of: str = "device",
    offload: bool = True,
    host_link: str | None = None,
    host_memory: int | str | None = None,
) -> dict:
    """The plan of `graph` (a version-1 graph dict) as the JSON dict `sgc plan -o` writes.

    `budget`: bytes (an int) or a size (`"10GiB"`); the plan that recomputes least within
    it. `budget_of`: what it bounds: `"device"` (arena plus persistent bytes), `"peak"` (the
    memory model's) or `"saved"` (bytes kept from the forward for the backward, with
    `strategy="partition"`: what `torch.compile`'s `activation_memory_budget` bounds). `native`: force (True) or avoid (False) the
    native module; by default it is used when importable. `host_link` (`"h100"` or
    `"TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US]"`), `host_memory` (pinned host bytes) and
    `offload` (False: never offload): as `sgc plan --host-link`, `--host-memory` and
    `--no-offload`; with a link and a budget the plan may offload activations to host
    memory. Raises `PlanError` with sgc's message when planning fails.
    """
    mod = _native() if native is not False else None
    if native and mod is None:
        raise PlanError("the native `sgc` module is not importable (pip install the sgc bindings)")
    budget_text = _size_text(budget)
    host = {"offload": offload, "host_link": host_link, "host_memory": _size_text(host_memory)}
    if mod is not None:
        try:
            planned = mod.plan(graph, strategy=strategy, genetic_iters=genetic_iters, budget=budget_text, seed=seed,
                               budget_of=budget_of, **host)
        except getattr(mod, "SgcError", ()) as e:  # noqa: B030
            raise typed(e) from None
        return planned.to_dict()
    return _plan_with_binary(graph, strategy, budget_text, genetic_iters, seed, budget_of, host)


def _size_text(size: int | str | None) -> str | None:
    return None if size is None else (f"{size}" if isinstance(size, int) else str(size))


def _plan_with_binary(graph: dict, strategy: str, budget: str | None, genetic_iters: int, seed: int,
                      budget_of: str = "device", host: dict | None = None) -> dict:
    from .sgc import find_sgc  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="sgc-plan-") as tmp:
        src, out = Path(tmp) / "graph.json", Path(tmp) / "plan.json"
        src.write_text(json.dumps(graph))
        args = [str(find_sgc()), "plan", str(src), "-o", str(out), "-q", "--strategy", strategy,
                "--seed", str(seed)]
        if strategy == "sublinear":
            args += ["--genetic-iters", str(genetic_iters)]
        if budget is not None:
            args += ["--budget", budget, "--budget-of", budget_of]
        host = host or {}
        if not host.get("offload", True):
            args.append("--no-offload")
        else:
            args += [a for flag in ("host_link", "host_memory") if host.get(flag) is not None
                     for a in (f"--{flag.replace('_', '-')}", host[flag])]
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode != 0:
            message = done.stderr.strip().removeprefix("error: ").replace(f"{src}: ", "")
            raise PlanError(f"sgc plan failed: {message}")
        return json.loads(out.read_text())
