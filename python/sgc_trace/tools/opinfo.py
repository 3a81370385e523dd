"""PyTorch's own samples of its ops (OpInfo's `op_db`) run through sgc's executor and
compared with PyTorch: the check that a kernel meets ATen's contract on the attribute
values, shapes and edge cases PyTorch itself tests, not only on the ones our corpus uses.

Each sample becomes a small training step: its floating-point tensors are the parameters
of a module whose forward calls the op and returns `sum_i (out_i * w_i).sum()` (fixed
random weights `w_i`, buffers of the module; plus a zero parameter, so that an op without
a derivative still makes a step to export), exported with `sgc_trace.export`
(`executor="cpu"`, so ops the executor lacks are decomposed, and an op left over is
refused by name) and run once on sgc's CPU backend (`sgc.execute`). Compared against
PyTorch's float64 run of the same module on the same values:

- every floating output of the op, element by element (the graph keeps the tensor the
  loss multiplies by `w_i`);
- the gradient of every parameter: the op's backward as PyTorch's autograd traces it.

A tensor is held to `max(floor, slack * PyTorch's own float32 error)` (the rule of
`sgc_trace.tools.execute`; a float64 sample's too, PyTorch's float32 run of the same values
measuring how sensitive each tensor is), with NaN and infinities required at the same places.

A sample is `passed`, `failed` (a value out of tolerance, or the executor refusing or
failing on a graph it accepted at export: both are sgc's bugs) or `skipped` with the
reason: the op is not run by the executor (export refused it), its output has no floating
dtype, PyTorch's float64 reference is not finite, the step draws random numbers (sgc's
generator is not PyTorch's), the dtype is not the executor's, or the export itself failed. An OpInfo is *implemented* when at least one of its samples exports
with every op run by the executor; the pass rate counts the samples of implemented
OpInfos.

    from sgc_trace.tools.opinfo import walk
    report = walk(["exp", "nn.functional.relu"], max_samples=8)
    print(report.markdown())
"""

from __future__ import annotations

import copy
import warnings
import re
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..errors import ExportError
from ..exporter.api import export
from ..exporter.trace import InputSpec
from .execute import _UNDEFINED, _tolerance, run_on_sgc

# The executor's floating dtypes: what a sample must be to run.
_RUNS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
# The least error a tensor of each dtype is held to (PyTorch's own `assert_close` relative
# tolerances for the half-precision types): one rounding of the result, whatever PyTorch's
# own error on the sample happened to be.
_FLOORS = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3}
# Ops that draw random numbers: sgc's generator is not PyTorch's, so their values differ.
_RANDOM = re.compile(r"dropout|bernoulli|rand|multinomial|normal|uniform|exponential|geometric|cauchy")


def _finite_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| over the finite places of `want` (the absolute
    difference when those are all zero); infinity when NaN or an infinity of `want` is
    not matched exactly by `got`, or the shapes differ."""
    if got.shape != want.shape:
        return float("inf")
    got, want = got.detach().double(), want.detach().double()
    finite = torch.isfinite(want)
    if not torch.equal(torch.isnan(got), torch.isnan(want)):
        return float("inf")
    inf = torch.isinf(want)
    if not torch.equal(got[inf], want[inf]):
        return float("inf")
    if not finite.any():
        return 0.0
    diff = (got[finite] - want[finite]).abs().max().item()
    scale = want[finite].abs().max().item()
    return diff / scale if scale > 0 else diff


class SampleStep(nn.Module):
    """One OpInfo sample as a module: its floating tensors are parameters `p0, p1, ...`
    (trainable when the op has a derivative; `input_only`: only the sample's input, the
    other floating tensors buffers `f0, ...`, for ops that refuse a gradient for them,
    like batch norm's running statistics), its other tensors buffers `i0, ...`; the forward
    calls the op and weighs each floating output by a fixed random buffer `w_k`."""

    def __init__(self, op, sample, differentiable: bool, seed: int = 0, input_only: bool = False):
        super().__init__()
        self.op = op
        leaves, self.spec = tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
        first = len(tree_flatten(sample.input)[0])
        self.slots: list[tuple[str, object]] = []
        # A parameter every step has: the exporter needs one to train, and an op without a
        # derivative (or a sample whose tensors cannot require one) still runs forward.
        self.anchor = nn.Parameter(torch.zeros(()))
        for at, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and (at < first or not input_only):
                name = f"p{sum(1 for k, _ in self.slots if k == 'param')}"
                value = leaf.detach().clone().contiguous()
                self.register_parameter(name, nn.Parameter(value, requires_grad=differentiable))
                self.slots.append(("param", name))
            elif isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
                name = f"f{sum(1 for k, _ in self.slots if k == 'fixed')}"
                self.register_buffer(name, leaf.detach().clone().contiguous())
                self.slots.append(("fixed", name))
            elif isinstance(leaf, torch.Tensor):
                name = f"i{sum(1 for k, _ in self.slots if k == 'buffer')}"
                self.register_buffer(name, leaf.detach().clone().contiguous())
                self.slots.append(("buffer", name))
            else:
                self.slots.append(("value", leaf))
        self.outputs: list[torch.Tensor] = []
        with torch.no_grad():
            outs = self._floating(self._call())
        gen = torch.Generator().manual_seed(seed)
        for k, out in enumerate(outs):
            self.register_buffer(f"w{k}", torch.randn(out.shape, generator=gen, dtype=out.dtype))
        self.num_outputs = len(outs)

    def _call(self):
        leaves = [getattr(self, v) if kind != "value" else v for kind, v in self.slots]
        inp, args, kwargs = tree_unflatten(leaves, self.spec)
        return self.op(inp, *args, **kwargs)

    @staticmethod
    def _floating(out) -> list[torch.Tensor]:
        return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.is_floating_point()]

    def forward(self, x):
        outs = self._floating(self._call())
        self.outputs = [o.detach() for o in outs]
        loss = x.sum() * 0 + self.anchor
        for k, out in enumerate(outs):
            loss = loss + (out * getattr(self, f"w{k}")).sum()
        return loss


@dataclass
class SampleResult:
    opinfo: str
    index: int
    status: str  # "passed", "failed" or "skipped"
    reason: str = ""


@dataclass
class Report:
    """Per OpInfo: its samples' results; `implemented`: the OpInfos with a sample the
    executor ran."""

    dtype: str
    results: list[SampleResult] = field(default_factory=list)

    def of(self, name: str) -> list[SampleResult]:
        return [r for r in self.results if r.opinfo == name]

    @property
    def implemented(self) -> list[str]:
        names = dict.fromkeys(r.opinfo for r in self.results)
        return [n for n in names if any(r.status != "skipped" for r in self.of(n))]

    def counts(self, names: list[str] | None = None) -> dict[str, int]:
        names = self.implemented if names is None else names
        out = {"passed": 0, "failed": 0, "skipped": 0}
        for r in self.results:
            if r.opinfo in names:
                out[r.status] += 1
        return out

    @property
    def pass_rate(self) -> float:
        c = self.counts()
        ran = c["passed"] + c["failed"]
        return c["passed"] / ran if ran else 0.0

    def skip_reasons(self) -> dict[str, int]:
        """Why samples were skipped (op names and messages folded to their kind), with counts."""
        out: dict[str, int] = {}
        for r in self.results:
            if r.status == "skipped":
                out[r.reason] = out.get(r.reason, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def markdown(self) -> str:
        c = self.counts()
        lines = [
            f"OpInfo samples ({self.dtype}) of the {len(self.implemented)} OpInfos the executor runs: "
            f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped; "
            f"pass rate {100 * self.pass_rate:.1f}% of the samples run.",
            "",
            "| OpInfo | passed | failed | skipped | first failure or skip |",
            "|---|---:|---:|---:|---|",
        ]
        for name in self.implemented:
            rs = self.of(name)
            n = {s: sum(1 for r in rs if r.status == s) for s in ("passed", "failed", "skipped")}
            first = next((r for r in rs if r.status == "failed"), None) or next(
                (r for r in rs if r.status == "skipped"), None)
            note = f"{first.status}: {first.reason}" if first else ""
            lines.append(f"| `{name}` | {n['passed']} | {n['failed']} | {n['skipped']} | {note[:160]} |")
        lines += ["", "| why samples were skipped (all OpInfos walked) | samples |", "|---|---:|"]
        lines += [f"| {reason} | {n} |" for reason, n in self.skip_reasons().items()]
        return "\n".join(lines) + "\n"


def _reference(step: SampleStep, x: torch.Tensor, wide: bool, narrow: bool = False) -> dict[str, torch.Tensor]:
    """The op's floating outputs and every parameter's gradient, computed by PyTorch (in
    float64 when `wide`, in float32 when `narrow`, else in the sample's dtype)."""
    m = copy.deepcopy(step)
    if wide:
        m = m.double()
        x = x.double()
    elif narrow:
        m = m.float()
        x = x.float()
    loss = m(x)
    out = {f"out{k}": o for k, o in enumerate(m.outputs)}
    if loss.requires_grad:
        loss.backward()
        out.update({f"{k}.grad": p.grad for k, p in m.named_parameters() if p.grad is not None})
    return out


def _kept_outputs(graph: dict, step: SampleStep) -> dict[str, str]:
    """out{k} -> the graph tensor the loss multiplies by `w{k}` (the op's k-th output)."""
    found = {}
    for op in graph["ops"]:
        if op["op"] != "aten.mul.Tensor" or len(op["inputs"]) != 2:
            continue
        for k in range(step.num_outputs):
            if f"w{k}" in op["inputs"]:
                other = [t for t in op["inputs"] if t != f"w{k}"]
                if other and f"out{k}" not in found:
                    found[f"out{k}"] = other[0]
    return found


def _gap_reason(message: str) -> str:
    """The first op an export refused and why, as the executor said it:
    `not run by the executor: aten.X (why)`."""
    match = re.search(r"first `[^`]*` \(([\w.]+)\): (.*?)(\. Export with|$)", message, re.S)
    if not match:
        return "not run by the executor"
    op, why = match.group(1), match.group(2)
    if "does not implement" in why:
        return f"not run by the executor: {op} (no kernel)"
    why = re.sub(r"^op `[^`]*` \([^)]*\): ", "", why)
    return f"not run by the executor: {op} ({why.strip()[:100]})"


def run_sample(name: str, index: int, op, sample, differentiable: bool, floor: float = 1e-5,
               slack: float = 10.0) -> SampleResult:
    """One sample exported, run on sgc and compared (see the module docs)."""
    def result(status, reason=""):
        return SampleResult(name, index, status, reason)

    x = torch.zeros(1)
    refused = None
    for input_only in (False, True):
        try:
            step = SampleStep(op, sample, differentiable, input_only=input_only)
        except Exception as e:  # noqa: BLE001 - PyTorch refusing its own sample on a copy: not ours
            return result("skipped", f"the sample does not run as a module ({type(e).__name__})")
        if step.num_outputs == 0:
            return result("skipped", "no floating-point output")
        try:
            f64 = _reference(step, x, wide=True)
            break
        except Exception as e:  # noqa: BLE001 - e.g. running statistics that must not require grad
            refused = e
    else:
        return result("skipped", f"PyTorch refuses the sample's tensors as parameters ({type(refused).__name__})")
    if not all(torch.isfinite(v).all() for k, v in f64.items() if k.endswith(".grad")):
        return result("skipped", "PyTorch's float64 gradient is not finite")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = export(step, lambda loss: loss, [InputSpec("x", (1,), batch_dim=None)], name=name,
                           mark_batch=False, executor="cpu", executor_gaps="raise")
    except ExportError as e:
        text = str(e)
        if "cannot run" in text or "does not implement" in text:
            return result("skipped", _gap_reason(text))
        return result("skipped", f"export failed: {text.splitlines()[0][:120]}")
    drawn = sorted({o["op"] for o in graph["ops"] if _RANDOM.search(o["op"])})
    if drawn:
        return result("skipped", f"draws random numbers ({', '.join(drawn)}): not PyTorch's draws")
    kept = _kept_outputs(graph, step)
    wide_graph = dict(graph, outputs=list(dict.fromkeys(list(graph["outputs"]) + list(kept.values()))))
    try:
        got = run_on_sgc(wide_graph, step, {"x": x})
    except Exception as e:  # noqa: BLE001 - the executor failing on a graph it accepted is a failure
        return result("failed", f"sgc: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    # PyTorch's own error, which sets each tensor's tolerance: in the sample's dtype, or for
    # a float64 sample in float32 (its float64 run is the reference itself), so a gradient
    # that is zero analytically, rounding noise on both sides, is held to that noise.
    double = any(p.dtype == torch.float64 for p in step.parameters())
    try:
        f32 = _reference(step, x, wide=False, narrow=double)
    except Exception:  # noqa: BLE001 - PyTorch refusing the sample in float32: the floor alone
        f32 = f64
    for key, want in f64.items():
        tensor = kept.get(key, key)
        if tensor not in got:
            if key.startswith("out"):
                continue  # an output the loss does not read through a `mul` (folded away)
            return result("failed", f"`{key}` is not an output of the graph")
        err = _finite_error(got[tensor], want)
        tol = _tolerance(floor, slack, _finite_error(f32[key], want))
        if not err <= tol:
            return result("failed", f"`{key}`: error {err:.3g} above {tol:.3g}")
    return result("passed")


def walk(names: list[str] | None = None, dtype: torch.dtype = torch.float32, max_samples: int | None = None,
         floor: float = 1e-5, progress=None) -> Report:
    """Runs the samples of the OpInfos named (all of `op_db` when `None`) in `dtype`; at
    most `max_samples` per OpInfo (the first ones, in PyTorch's order). An OpInfo whose first
    three samples are refused at export for ops the executor lacks is not walked further."""
    from torch.testing._internal.common_methods_invocations import op_db  # noqa: PLC0415 - slow import

    def full(o):
        return f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name

    infos = [o for o in op_db if names is None or o.name in names or full(o) in names]
    if names is not None:
        missing = sorted(set(names) - {o.name for o in infos} - {full(o) for o in infos})
        if missing:
            raise ValueError(f"no OpInfo named {', '.join(missing)} in this torch's op_db")
    report = Report(dtype=str(dtype).replace("torch.", ""))
    for info in infos:
        name = f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name
        if progress:
            progress(name)
        if info.name.split(".")[-1] in _UNDEFINED:
            report.results.append(SampleResult(name, 0, "skipped", "its values are undefined (uninitialised memory)"))
            continue
        if dtype not in info.supported_dtypes("cpu"):
            report.results.append(SampleResult(name, 0, "skipped", "PyTorch does not support the dtype"))
            continue
        if dtype not in _RUNS:
            report.results.append(SampleResult(name, 0, "skipped", "the executor runs float32, float64, bfloat16 and float16 only"))
            continue
        torch.manual_seed(0)
        differentiable = bool(info.supports_autograd)
        try:
            samples = list(info.sample_inputs("cpu", dtype, requires_grad=differentiable))
        except Exception as e:  # noqa: BLE001 - a sample generator PyTorch cannot run here
            report.results.append(SampleResult(name, 0, "skipped", f"no samples ({type(e).__name__})"))
            continue
        for i, sample in enumerate(samples[:max_samples]):
            r = run_sample(name, i, info.op, sample, differentiable, floor=max(floor, _FLOORS.get(dtype, 0.0)))
            report.results.append(r)
            gaps = [x for x in report.of(name) if x.reason.startswith("not run by the executor")]
            if i == 2 and len(gaps) == 3:
                break
    return report
