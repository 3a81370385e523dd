"""sgc: plan gradient checkpointing and static memory sharing for a training graph.

The native module built from `crates/sgc-py`: the same planner, verifier and reports as
the `sgc` command line, with its defaults. Sizes take ints (bytes) or strings such as
"10GiB" or "1.5GB"; graphs take an `sgc.Graph`, a path (plain or `.json.gz`), JSON text
or a dict in the graph format.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence, Union

__version__: str

_Size = Union[int, str]
_Source = Union[str, "os.PathLike[str]", dict]
_GraphLike = Union["Graph", str, "os.PathLike[str]", dict]
_PlanLike = Union["Plan", str, "os.PathLike[str]", dict]

class SgcError(Exception):
    """Base class of every error sgc raises."""

class GraphError(SgcError):
    """A graph could not be read or is not valid: the message names the file, the JSON
    line and column, or the op or tensor at fault."""

class PlanError(SgcError):
    """No plan could be made, read or accepted."""

class BudgetNotMet(PlanError):
    """No plan fits the budget (or it is below a lower bound: the per-op one, or the
    least-peak one, below which no plan that keeps or recomputes fits)."""

    budget: int
    best_device: int | None
    best_peak: int | None
    lower_bound: int
    """The best lower bound sgc proved, in the budget's terms."""

class GraphMismatch(PlanError):
    """A plan was made for another graph (its fingerprint differs)."""

class PlanRejected(PlanError):
    """The verifier refuses the plan."""

    violations: list[str]

class ExecutionError(SgcError):
    """A graph could not be run: a value of the wrong size, an op the backend lacks, a
    kernel that refused its operands."""

class Graph:
    """A validated training-step graph (format `sgc-graph`, version 1)."""

    @property
    def name(self) -> str | None: ...
    @property
    def num_ops(self) -> int: ...
    @property
    def num_tensors(self) -> int: ...
    @property
    def fingerprint(self) -> str:
        """What a plan's `graph.fingerprint` holds (FNV-1a 64 of the canonical text)."""
    @property
    def path(self) -> str | None:
        """The file it was read from, as given (None for JSON text or a dict)."""
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self) -> str: ...

class Plan:
    """A verified checkpointing plan (format `sgc-plan`) for one graph."""

    def to_dict(self) -> dict[str, Any]:
        """Exactly the JSON object `sgc plan -o plan.json` writes."""
    def to_json(self) -> str: ...
    def save(self, path: str | os.PathLike[str]) -> None: ...
    @property
    def summary(self) -> dict[str, Any]:
        """unplanned_peak, planned_peak, lower_bound, persistent_bytes, step_cost,
        recompute_cost, recompute_share, cost_source, steps, recompute_steps,
        recomputed_ops, max_op_runs, checkpoints, strategy, arena_bytes, device_bytes
        (arena + persistent; None without an arena), saved_bytes (kept from the forward
        for the backward), step_peak (the most bytes the step allocates at once beyond
        parameters, state and its inputs) and per_rank (one rank's terms with world_size,
        shard or optimizer; else None)."""
    @property
    def steps(self) -> list[tuple[str, bool]]:
        """(op name, recompute) per step of the schedule."""
    @property
    def fingerprint(self) -> str: ...
    def report(self) -> str:
        """The report `sgc plan` prints."""

def load(source: _Source) -> Graph: ...
def plan(
    graph: _GraphLike,
    strategy: str = "sublinear",
    genetic_iters: int = 20,
    budget: _Size | None = None,
    seed: int = 0,
    workers: int | None = None,
    arena: bool = True,
    align: _Size | None = None,
    goal: str | None = None,
    lb_memory: _Size | None = None,
    thresh_tries: int = 10,
    pool_size: int = 20,
    eviction_threshold: _Size | None = None,
    evictee_min_size: _Size | None = None,
    sqrt_sampling: bool = False,
    device_profile: str | None = None,
    budget_of: str = "device",
    arena_effort: str = "plan",
    host_link: str | None = None,
    host_memory: _Size | None = None,
    offload: bool = True,
    world_size: int = 1,
    shard: str = "none",
    optimizer: str = "none",
    time_limit_s: int | None = None,
) -> Plan:
    """Plans and verifies, as `sgc plan` does with the same options (GIL released); sizes
    left None are `defaults()`' (align 256 B, evictee_min_size 1 MiB); budget may also be a
    share of the unplanned figure that budget_of names, as a string: "70%".
    strategy: none, chen-sqrt, sublinear, dtr, partition, optimal (needs a budget and a
    module built with the `optimal` feature; the wheel is not) or rotor (needs a budget and a
    chain; `strategies()` lists them); goal: lowest-peak or balanced;
    budget_of: device (arena + persistent), peak (the memory model's, as MegEngine's) or
    saved (bytes kept from the forward for the backward, as torch.compile's
    activation_memory_budget; strategy partition);
    arena_effort: plan, default, thorough or fast;
    device_profile: v100, t4, a100, l4, h100, rtx4090 or F32/HALF/GBPS;
    host_link: h100, a100 or TO_HOST_GBPS,TO_DEVICE_GBPS[,LATENCY_US] (default: the device
    profile's), with a budget and sublinear or partition: the plan may offload activations
    to host memory (host_memory: the most pinned host bytes; offload=False: never, as
    `sgc plan --no-offload`);
    world_size, shard (none or fsdp2) and optimizer (none, sgd, momentum or adam): plan
    one rank's graph, as `sgc plan --world-size --shard --optimizer` (summary["per_rank"]
    has its terms); time_limit_s: strategy optimal, the seconds it may take, its starts and
    the solver together (None: 60), as `sgc plan --time-limit`."""

def plan_schedule(
    graph: _GraphLike,
    steps: Sequence[int],
    offloads: Sequence[dict] | None = None,
    host_link: str | None = None,
    device_profile: str | None = None,
    arena: bool = True,
    align: _Size | None = None,
) -> Plan:
    """The verified plan of an explicit schedule (op indices in order; an op run again is a
    recomputation) with storages offloaded to host memory and back (`offloads`: entries
    of a plan file's `offloads`: root, copy_after, free_after, fetch_after, needed_at);
    offloads need a host_link, and ops with time_us or a device_profile."""

def verify(graph: _GraphLike, plan: _PlanLike) -> dict[str, Any]:
    """`sgc plan --check`: peak_bytes, peak_step, persistent_bytes, arena_bytes,
    device_bytes, steps, summary_reproduced; raises PlanRejected."""

def load_plan(source: _PlanLike, graph: _GraphLike) -> Plan:
    """Reads and checks a plan; raises GraphMismatch for a plan made for another graph."""

def execute(
    graph: _GraphLike,
    values: Mapping[str, bytes],
    plan: _PlanLike | None = None,
    steps: int = 1,
    seed: int | None = None,
    read: Sequence[str] | None = None,
) -> dict[str, bytes]:
    """Runs `steps` training steps on the CPU backend (unplanned, or under a verified
    `plan`) with `values` (name -> little-endian bytes of the declared dtype and shape) bound
    to the inputs and persistent tensors (`seed`: seeded values for the ones left out);
    returns name -> bytes of every graph output and of each name in `read`. Raises
    ValueError for a value of the wrong size, ExecutionError when the step cannot run."""

def inspect(
    graph: _GraphLike,
    top: int = 10,
    align: _Size | None = None,
    device_profile: str | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """What `sgc inspect --json` reports; with `device` ("cpu" or "cuda"), `coverage`:
    the ops that backend cannot run (`sgc inspect --device`)."""

def fit(
    graph: _GraphLike,
    memory: _Size,
    reserve: _Size | None = None,
    strategy: str | Sequence[str] | None = None,
    genetic_iters: int = 20,
    thresh_tries: int = 10,
    seed: int = 0,
    align: _Size | None = None,
    arena_effort: str = "fast",
    workers: int | None = None,
    device_profile: str | None = None,
    max_recompute: float | None = 1 / 3,
    world_size: int = 1,
    shard: str = "none",
    optimizer: str = "none",
    alloc_effort: str | None = None,
) -> dict[str, Any]:
    """What `sgc fit --json` reports: the largest batch that fits, per strategy (None: none,
    chen-sqrt and sublinear), whose plan recomputes at most `max_recompute` of a step
    (None: no limit); with world_size, shard
    and optimizer, one rank's batch (`per_rank` holds the rank's terms). Raises
    BudgetNotMet (budget: memory - reserve, lower_bound: the persistent bytes) when the
    persistent bytes alone exceed memory - reserve. arena_effort takes plan's values (fast,
    plan, default, thorough; fit's default is fast); alloc_effort is its old name
    (deprecated: a DeprecationWarning)."""

def defaults() -> dict[str, Any]:
    """The command line's defaults a Python caller leaves out: strategy, genetic_iters,
    seed, thresh_tries, pool_size, evictee_min_size, align, max_recompute, and
    device_profile (the profile exported graphs are costed on)."""

def strategies() -> list[dict[str, Any]]:
    """The strategies `plan(strategy=...)` takes, in order: name, about, reads (the keywords
    of `plan` each reads beyond the common ones), needs_budget, budget_of (the budget kinds
    it plans for), can_offload. The command line's `--strategy` help comes from the same
    registry."""

def device_profiles() -> dict[str, dict[str, Any]]:
    """The named device profiles, in order: name -> {name, f32_tflops, half_tflops,
    bandwidth_gbps}."""

def device_profile(text: str) -> dict[str, Any]:
    """A named profile (any case) or custom rates F32/HALF/GBPS as that dict (custom ones
    are named by their rates); ValueError with the accepted forms."""

def roofline(graph: _GraphLike, device_profile: str) -> tuple[list[float], dict[str, Any]]:
    """Every op's roofline time on the profile, microseconds, in op order (its own time_us
    ignored), and the `meta.time_us_source` object for it."""

def executor_ops() -> dict[str, bool]:
    """The op types the executor has kernels for -> whether the CUDA backend runs it too."""

def dtype_sizes() -> dict[str, int]:
    """Bytes per element of each dtype of the graph format."""

def figures(graph: _GraphLike, plan: _PlanLike) -> dict[str, Any]:
    """A plan's figures in the terms PyTorch measures (the plan verified first): step_peak,
    saved_bytes, persistent_bytes, device_bytes and planned_peak."""

def storage_bytes(graph: _GraphLike, names: Sequence[str], persistent: bool = False) -> int:
    """Bytes of the named tensors' storages, each once (a view counts its base);
    persistent storages only when `persistent`."""

def storage_sizes(graph: _GraphLike, names: Sequence[str]) -> list[int]:
    """Bytes of each named tensor's storage, in order."""
