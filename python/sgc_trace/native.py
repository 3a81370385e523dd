"""The native module `sgc`, the one implementation of what sgc's Rust code knows.

`sgc_trace` asks it for everything that has a home in the Rust crates, so that Python and
the command line never disagree: device profiles and the roofline cost of each op
(`sgc_ir::cost`), dtype sizes, a plan's figures in PyTorch's terms (`sgc.figures`:
its step peak and saved bytes), storage sizes, and the defaults of `sgc plan`
(`sgc.defaults()`). Planning itself goes through `apply.planner`. The module ships in the
same wheel as `sgc_trace` (`pip install ./python`); without it nothing here works, and
the error says how to build it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .errors import ExportError


@lru_cache(maxsize=1)
def module():
    """The native module `sgc`; an `ExportError` saying how to build it when it is missing."""
    try:
        import sgc  # noqa: PLC0415
    except ImportError as e:
        raise ExportError(f"the native module `sgc` is not importable ({e}): install the package with its "
                          f"bindings (`pip install ./python` from the repository, a Rust toolchain needed)") from None
    if not hasattr(sgc, "roofline"):
        raise ExportError(f"the native module `sgc` at {getattr(sgc, '__file__', '?')} is older than this sgc_trace: "
                          f"reinstall it (`pip install ./python`)")
    return sgc


@dataclass(frozen=True)
class DeviceProfile:
    """A device's dense peak rates, as the native module reads them: TFLOP/s in f32 and in
    f16/bf16, and GB/s of memory bandwidth. `name`: the profile's name, or its rates
    (`19.5/312/2039`) for custom ones."""

    name: str
    f32_tflops: float
    half_tflops: float
    bandwidth_gbps: float


def defaults() -> dict:
    """The command line's defaults (`sgc.defaults()`): strategy, genetic_iters, seed, ...,
    and `device_profile`, the profile exported graphs are costed on."""
    return dict(module().defaults())


def profiles() -> dict[str, DeviceProfile]:
    """The named device profiles, in order."""
    return {name: DeviceProfile(**p) for name, p in module().device_profiles().items()}


def parse_profile(text: str | DeviceProfile) -> DeviceProfile:
    """A named profile (`a100`, any case) or custom rates `F32/HALF/GBPS`; an `ExportError`
    with the forms accepted otherwise."""
    if isinstance(text, DeviceProfile):
        return text
    try:
        return DeviceProfile(**module().device_profile(str(text).strip()))
    except ValueError as e:
        raise ExportError(str(e)) from None


def with_times(graph: dict, profile: DeviceProfile) -> dict:
    """Sets every op's `time_us` (right after `flops`) to its roofline estimate on `profile`
    (`sgc.roofline`, the formula of `crates/sgc-ir/src/cost.rs`) and records the method in
    `meta.time_us_source`."""
    times, source = module().roofline(_without_times(graph), _profile_text(profile))
    ops = []
    for op, t in zip(graph["ops"], times):
        out = {}
        for key, value in op.items():
            if key == "time_us":
                continue
            out[key] = value
            if key == "flops":
                out["time_us"] = t
        out.setdefault("time_us", t)
        ops.append(out)
    graph["ops"] = ops
    graph.setdefault("meta", {})["time_us_source"] = source
    return graph


def _without_times(graph: dict) -> dict:
    """The graph as the native module reads it (`time_us` plays no part in the estimate)."""
    return {**graph, "format": graph.get("format", "sgc-graph"), "version": graph.get("version", 1),
            "outputs": graph.get("outputs", [])}


def _profile_text(profile: DeviceProfile) -> str:
    """A profile as the native parser reads it: its name, or its rates."""
    if profile.name in profiles():
        return profile.name
    return f"{profile.f32_tflops!r}/{profile.half_tflops!r}/{profile.bandwidth_gbps!r}"


@lru_cache(maxsize=1)
def dtype_sizes() -> dict[str, int]:
    """Bytes per element of each dtype of the graph format."""
    return dict(module().dtype_sizes())


def figures(graph: dict, plan: dict) -> dict:
    """A plan's figures in the terms PyTorch measures (`sgc.figures`): `step_peak`,
    `saved_bytes`, `persistent_bytes`, `device_bytes`, `planned_peak`."""
    return dict(module().figures(graph, plan))


def named_storage_bytes(graph: dict, names, persistent: bool = False) -> int:
    """Bytes of the named tensors' storages (a view counts its base, each storage once);
    persistent storages only when `persistent` (`sgc.storage_bytes`)."""
    return int(module().storage_bytes(graph, list(names), persistent))


def storage_sizes(graph: dict, names) -> list[int]:
    """Bytes of each named tensor's storage (its base's, for a view), in order
    (`sgc.storage_sizes`)."""
    return [int(b) for b in module().storage_sizes(graph, list(names))]
