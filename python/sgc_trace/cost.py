"""Roofline op times: `time_us` for every op of a graph, from its FLOPs and the bytes it moves.

The traced graph gives FLOPs only to ops with a formula in torch's flop counter (matrix
products, convolutions, attention); elementwise ops, normalisations, softmax and copies
get 0, so by FLOPs alone recomputing them looks free. On a real device they take as long
as moving their bytes. The roofline estimate charges each op the longer of the two:

    logical(t)   = t["bytes"] if present, else product(shape) * size_of(dtype)
                   (every tensor, views included: a view's own logical size)
    bytes_moved  = 0 for a view op (at least one output, every output `alias_of` a base);
                   else the sum of logical() over the op's distinct input names plus the
                   sum over its outputs (exact integers)
    peak         = the profile's half-precision rate if the op's first output (with no
                   outputs, its first input) is f16 or bf16, else its f32 rate
    time_us      = max(flops / (TFLOP/s * 1e12), bytes_moved / (GB/s * 1e9)) * 1e6

evaluated in exactly this order in IEEE doubles, so that sgc's Rust implementation of the
same formula (`sgc-ir` `cost.rs`) computes the same value to the bit; an op with neither
inputs nor outputs takes 0. Rates are dense peaks (no sparsity); GB = 1e9 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from .errors import ExportError

SIZE_OF = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1}
HALF = ("f16", "bf16")

METHOD = "roofline"


@dataclass(frozen=True)
class DeviceProfile:
    """A device's dense peak rates: TFLOP/s in f32 and in f16/bf16, and GB/s of memory bandwidth."""

    name: str
    f32_tflops: float
    half_tflops: float
    bandwidth_gbps: float

    def peak_flops_per_s(self, half: bool) -> float:
        return (self.half_tflops if half else self.f32_tflops) * 1e12

    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbps * 1e9

    def time_us_source(self) -> dict:
        """The `meta.time_us_source` object that records where the graph's `time_us` came from."""
        return {
            "method": METHOD,
            "device_profile": self.name,
            "f32_tflops": self.f32_tflops,
            "half_tflops": self.half_tflops,
            "bandwidth_gbps": self.bandwidth_gbps,
        }


PROFILES = {
    p.name: p
    for p in (
        DeviceProfile("v100", 15.7, 125.0, 900.0),
        DeviceProfile("t4", 8.1, 65.0, 320.0),
        DeviceProfile("a100", 19.5, 312.0, 2039.0),
        DeviceProfile("l4", 30.3, 121.0, 300.0),
        DeviceProfile("h100", 67.0, 989.0, 3350.0),
        DeviceProfile("rtx4090", 82.6, 165.2, 1008.0),
    )
}
DEFAULT_PROFILE = "a100"
CUSTOM_SYNTAX = "F32/HALF/GBPS (TFLOP/s f32, TFLOP/s f16/bf16, GB/s), e.g. 19.5/312/2039"


def parse_profile(text: str | DeviceProfile) -> DeviceProfile:
    """A named profile (`a100`, any case) or custom rates `F32/HALF/GBPS` (`19.5/312/2039`).

    Custom profiles are named by their rates as sgc writes them (`19.5/312/2039`)."""
    if isinstance(text, DeviceProfile):
        return text
    given = str(text).strip()
    named = PROFILES.get(given.lower())
    if named is not None:
        return named
    choices = f"one of {', '.join(PROFILES)}, or custom rates {CUSTOM_SYNTAX}"
    if "/" not in given:
        raise ExportError(f"unknown device profile `{given}`: use {choices}")
    parts = [p.strip() for p in given.split("/")]
    if len(parts) != 3:
        raise ExportError(f"device profile `{given}`: {len(parts)} numbers where 3 are needed; use {choices}")
    rates = []
    for what, part in zip(("the f32 rate", "the half-precision rate", "the bandwidth"), parts):
        try:
            x = float(part)
        except ValueError:
            raise ExportError(f"device profile `{given}`: `{part}` is not a number; use {choices}") from None
        if not (math.isfinite(x) and x > 0):
            raise ExportError(f"device profile `{given}`: {what} is {x}, not a finite number > 0")
        rates.append(x)
    name = "/".join(_rust_display(x) for x in rates)
    return DeviceProfile(name, *rates)


def _rust_display(x: float) -> str:
    """`x` as Rust's `Display` for f64 writes it: shortest round-trip digits, no exponent, no `.0`."""
    text = format(Decimal(repr(x)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def logical_bytes(tensor: dict) -> int:
    """A tensor's `bytes` field if present, else product(shape) * size_of(dtype)."""
    if "bytes" in tensor:
        return int(tensor["bytes"])
    return math.prod(tensor["shape"]) * SIZE_OF[tensor["dtype"]]


def bytes_moved(op: dict, tensors: dict[str, dict]) -> int:
    """0 for a view op; else the logical bytes of the op's distinct inputs plus its outputs."""
    outputs = op["outputs"]
    if outputs and all("alias_of" in tensors[o] for o in outputs):
        return 0
    return sum(logical_bytes(tensors[t]) for t in dict.fromkeys(op["inputs"])) + sum(
        logical_bytes(tensors[t]) for t in outputs
    )


def op_time_us(op: dict, tensors: dict[str, dict], profile: DeviceProfile) -> float:
    """The roofline estimate of one op, microseconds (see the module doc for the formula)."""
    first = op["outputs"][0] if op["outputs"] else (op["inputs"][0] if op["inputs"] else None)
    if first is None:
        return 0.0
    half = tensors[first]["dtype"] in HALF
    compute_s = op.get("flops", 0) / profile.peak_flops_per_s(half)
    memory_s = bytes_moved(op, tensors) / profile.bandwidth_bytes_per_s()
    return max(compute_s, memory_s) * 1e6


def with_times(graph: dict, profile: DeviceProfile) -> dict:
    """Sets `time_us` (right after `flops`) on every op and records the method in `meta`."""
    tensors = {t["name"]: t for t in graph["tensors"]}
    ops = []
    for op in graph["ops"]:
        t = op_time_us(op, tensors, profile)
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
    graph.setdefault("meta", {})["time_us_source"] = profile.time_us_source()
    return graph
