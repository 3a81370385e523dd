"""One way to plan a graph from Python: `plan(graph, **options) -> plan dict`.

It calls the native module (`sgc.plan`, the planner and verifier of the command line, with
its defaults: an option left `None` is the module's default, `sgc.defaults()`), and
answers the plan file's JSON (`sgc plan -o`: `graph` with its `fingerprint`, `steps`,
`summary`, ...). `plan_object` answers the native `sgc.Plan` itself, whose `summary` adds
the figures the file leaves out (`device_bytes`, `saved_bytes`, `step_peak`). Everything in
`sgc_trace` that plans calls one of the two.
"""

from __future__ import annotations

from ..errors import ExportError
from ..native import module


class PlanError(ExportError):
    """Planning failed (no plan fits the budget, an invalid graph): sgc's own message.

    What is raised is also the native module's own exception (for one budget not met,
    `sgc.BudgetNotMet`, with `.budget`, `.best_device`, `.best_peak` and `.lower_bound`):
    `except sgc.BudgetNotMet` and `except sgc_trace.PlanError` both catch it (`typed`)."""


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


def plan_object(
    graph: dict,
    strategy: str | None = None,
    budget: int | str | None = None,
    genetic_iters: int | None = None,
    seed: int | None = None,
    budget_of: str = "device",
    offload: bool = True,
    host_link: str | None = None,
    host_memory: int | str | None = None,
    **more,
):
    """The native `sgc.Plan` of `graph` (see `plan`). `more`: any other option of
    `sgc.plan` (`world_size`, `shard`, `optimizer`, `device_profile`, ...)."""
    sgc = module()
    given = {"strategy": strategy, "genetic_iters": genetic_iters, "seed": seed, "budget": _size_text(budget),
             "host_memory": _size_text(host_memory), "host_link": host_link, **more}
    options = {k: v for k, v in given.items() if v is not None}
    for name in ("genetic_iters", "seed"):
        value = options.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise PlanError(f"{name}={value!r}: expected an integer of at least 0")
    try:
        return sgc.plan(graph, budget_of=budget_of, offload=offload, **options)
    except sgc.SgcError as e:
        raise typed(e) from None


def plan(
    graph: dict,
    strategy: str | None = None,
    budget: int | str | None = None,
    genetic_iters: int | None = None,
    seed: int | None = None,
    budget_of: str = "device",
    offload: bool = True,
    host_link: str | None = None,
    host_memory: int | str | None = None,
    **more,
) -> dict:
    """The plan of `graph` (a version-1 graph dict) as the JSON dict `sgc plan -o` writes.

    `strategy`, `genetic_iters`, `seed`: as `sgc plan` (None: its defaults). `budget`: bytes
    (an int) or a size (`"10GiB"`); the plan that recomputes least within it. `budget_of`:
    what it bounds: `"device"` (arena plus persistent bytes), `"peak"` (the memory
    model's) or `"saved"` (bytes kept from the forward for the backward, with
    `strategy="partition"`: what `torch.compile`'s `activation_memory_budget` bounds).
    `host_link` (`"h100"` or `"TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US]"`), `host_memory`
    (pinned host bytes) and `offload` (False: never offload): as `sgc plan --host-link`,
    `--host-memory` and `--no-offload`; with a link and a budget the plan may offload
    activations to host memory. Raises `PlanError` with sgc's message when planning fails.
    """
    return plan_object(graph, strategy, budget, genetic_iters, seed, budget_of, offload, host_link, host_memory,
                       **more).to_dict()


def _size_text(size: int | str | None) -> str | None:
    return None if size is None else (f"{size}" if isinstance(size, int) else str(size))
