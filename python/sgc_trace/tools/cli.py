"""`sgc-trace`: export a model's training step as an sgc graph, plan it, apply the plan.

    sgc-trace export examples/gpt.py:build --input idx:8,256:i64:50257 --target target:8,256:i64:50257 \\
        --loss lm_cross_entropy -o gpt.json
    sgc-trace plan examples/gpt.py:build --input ... --budget 10GiB -o gpt.plan.json
    sgc-trace report examples/gpt.py:build --input ...      (also: python -m sgc_trace report ...)

`export` writes the graph (the form without a subcommand still works: `sgc-trace MODEL ...
-o FILE`). `plan` exports, plans (`sgc_trace.apply.planner`), applies the plan in PyTorch and
measures it (`report`'s table), and writes the plan. `report` prints the table: the
unplanned and the planned step, measured (saved for backward, peak) beside sgc's
prediction, and checked against the eager step.

MODEL is `path/to/file.py:factory` or `package.module:factory`; the factory is called with
the `--arg KEY=VALUE` pairs inside a FakeTensorMode, so the weights are never allocated.
A failure prints one `error:` line and exits with status 1 (`SGC_TRACE_DEBUG=1` adds the
traceback).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

from ..exporter.api import export, save, summary
from ..exporter.convert import UPDATES
from ..native import defaults, parse_profile, profiles
from ..errors import ExportError, first_line
from ..exporter.trace import InputSpec

DTYPE_NAMES = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "bool": torch.bool,
}


def lm_cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over the last axis of `logits` (language models: [B, T, V] vs [B, T])."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


AUTOCAST = {"bf16": torch.bfloat16, "f16": torch.float16}

LOSSES = {"cross_entropy": F.cross_entropy, "mse": F.mse_loss, "lm_cross_entropy": lm_cross_entropy}


def parse_input(text: str) -> InputSpec:
    """`NAME:D0,D1,...[:DTYPE[:HIGH]]`, batch axis 0 (e.g. `x:8,3,224,224`, `y:8:i64:1000`)."""
    parts = text.split(":")
    if len(parts) < 2 or not parts[0]:
        raise argparse.ArgumentTypeError(f"`{text}`: expected NAME:D0,D1,...[:DTYPE[:HIGH]]")
    try:
        shape = tuple(int(d) for d in parts[1].split(",") if d)
        dtype = DTYPE_NAMES[parts[2]] if len(parts) > 2 else torch.float32
        high = int(parts[3]) if len(parts) > 3 else 2
    except (ValueError, KeyError) as e:
        raise argparse.ArgumentTypeError(f"`{text}`: {e}") from None
    return InputSpec(parts[0], shape, dtype, batch_dim=0 if shape else None, high=high)


def load_object(spec: str):
    """`file.py:name` or `module:name` -> the object (an `ExportError` saying why not)."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ExportError(f"`{spec}`: expected FILE.py:NAME or MODULE:NAME")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise ExportError(f"`{spec}`: no file `{where}`")
            sys.path.insert(0, str(path.resolve().parent))
            mod_spec = importlib.util.spec_from_file_location(path.stem, path)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ExportError:
        raise
    except Exception as e:
        raise ExportError(f"`{spec}`: importing `{where}` failed: {first_line(e)}") from e
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ExportError(f"`{where}` has no `{attr}`") from None


def parse_kv(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"`{text}`: expected KEY=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


COMMANDS = ("export", "plan", "report")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="FILE.py:FACTORY or MODULE:FACTORY returning an nn.Module")
    p.add_argument("--arg", type=parse_kv, action="append", default=[], help="KEY=VALUE for the factory")
    p.add_argument("--input", type=parse_input, action="append", required=True,
                   help="model input NAME:D0,D1,...[:DTYPE[:HIGH]] (batch axis 0); repeat for several")
    p.add_argument("--target", type=parse_input, action="append", default=[],
                   help="loss target, same syntax; passed to the loss after the model output")
    p.add_argument("--loss", default="cross_entropy",
                   help=f"{', '.join(LOSSES)} or FILE.py:NAME / MODULE:NAME taking (output, *targets)")
    p.add_argument("--raw-output", action="store_true",
                   help="pass the model's output to the loss as is (default: a ModelOutput, dict "
                        "or tuple is reduced to its logits or first tensor)")
    p.add_argument("--device", default="cpu",
                   help="where the step runs: cpu (default) or cuda. export traces with fake tensors on it "
                        "(no GPU needed); plan and report build the model there and measure it there")
    p.add_argument("--autocast", choices=AUTOCAST, default=None,
                   help="trace the step under torch.autocast with this dtype (mixed precision)")


def _planning(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget", help="device bytes the plan must fit (e.g. 10GiB; default: the lowest peak)")
    p.add_argument("--budget-of", choices=("device", "peak", "saved"), default="device",
                   help="what --budget bounds: device bytes (default), the memory model's peak, or the bytes "
                        "saved for the backward (with --strategy partition, as torch.compile's "
                        "activation_memory_budget)")
    p.add_argument("--strategy", default="sublinear",
                   help="sgc plan --strategy: sublinear (default), partition, chen-sqrt, dtr, none")
    p.add_argument("--genetic-iters", type=int, default=defaults()["genetic_iters"],
                   help=f"sgc plan --genetic-iters (default {defaults()['genetic_iters']})")
    p.add_argument("--seed", type=int, default=0, help="seed of the planner and of the measured steps")
    p.add_argument("--backend", choices=("aot_eager", "inductor"), default="aot_eager",
                   help="how the planned step runs (default aot_eager: bitwise the unplanned step)")


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"sgc-trace {command}", description=__doc__.split("\n\n")[0])
    _common(p)
    if command == "export":
        p.add_argument("--update", choices=UPDATES, default="none",
                       help="none: gradients are outputs; sgd: in-place SGD update ops per parameter")
        p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (recorded in attrs)")
        default = defaults()["device_profile"]
        p.add_argument("--device-profile", default=default, type=_profile,
                       help=f"device whose roofline gives each op's time_us: {', '.join(profiles())} "
                            f"(default {default}) or F32/HALF/GBPS rates, e.g. 19.5/312/2039")
        p.add_argument("--name", help="graph name (default: the factory's name)")
        p.add_argument("-o", "--output", required=True, help="graph file to write (.json, or .json.gz for gzip)")
    else:
        _planning(p)
        if command == "plan":
            p.add_argument("-o", "--output", help="plan file to write (default: FACTORY.plan.json)")
            p.add_argument("--no-measure", action="store_true", help="plan only: no PyTorch runs")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv in (["-h"], ["--help"]):
        print(__doc__)
        print(f"commands: {', '.join(COMMANDS)}; `sgc-trace COMMAND --help` for each")
        return 0 if argv else 2
    command = argv.pop(0) if argv[0] in COMMANDS else "export"
    a = _parser(command).parse_args(argv)
    try:
        return {"export": _run, "plan": _run_plan, "report": _run_report}[command](a)
    except ExportError as e:
        if os.environ.get("SGC_TRACE_DEBUG"):
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug of the exporter itself: still one line, traceback on request
        if os.environ.get("SGC_TRACE_DEBUG"):
            traceback.print_exc()
        print(f"error: unexpected failure: {first_line(e)} (run with SGC_TRACE_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


def _real_setup(a: argparse.Namespace):
    """A real model (random weights, the factory's own initialisation, seeded), loss and batch."""
    factory = load_object(a.model)
    if not callable(factory):
        raise ExportError(f"`{a.model}` is a {type(factory).__name__}, not a callable that builds the model")
    loss = LOSSES.get(a.loss) or load_object(a.loss)
    if torch.device(a.device).type == "cuda" and not torch.cuda.is_available():
        raise ExportError(f"--device {a.device}: this machine has no usable CUDA device (torch.cuda.is_available() "
                          f"is false); `sgc-trace export --device {a.device}` traces for one without it, plan and "
                          f"report run the step on it")
    torch.manual_seed(a.seed)
    try:
        model = factory(**dict(a.arg))
    except Exception as e:
        raise ExportError(f"building the model failed: {first_line(e)}") from e
    if not isinstance(model, torch.nn.Module):
        raise ExportError(f"the factory returned a {type(model).__name__}, not a torch.nn.Module")
    gen = torch.Generator().manual_seed(a.seed)
    batch = [spec.real(gen).to(a.device) for spec in a.input + a.target]
    return model.to(a.device).train(), loss, batch


def _measure(a: argparse.Namespace) -> dict:
    from .report import measure_plans

    model, loss, batch = _real_setup(a)
    return measure_plans(model, loss, batch, num_model_inputs=len(a.input), budget=a.budget,
                         strategy=a.strategy, genetic_iters=a.genetic_iters, seed=a.seed,
                         backend=a.backend, raw_output=a.raw_output, budget_of=a.budget_of,
                         autocast=AUTOCAST.get(a.autocast))


def _run_report(a: argparse.Namespace) -> int:
    from .report import markdown

    print(markdown(_measure(a)))
    return 0


def _run_plan(a: argparse.Namespace) -> int:
    import json

    from .report import markdown

    out = a.output or f"{a.model.rpartition(':')[2]}.plan.json"
    if a.no_measure:
        from ..apply.step import input_specs, trace
        from ..apply.planner import plan

        model, loss, batch = _real_setup(a)
        graph, _, _ = trace(model, loss, input_specs(batch, len(a.input)), len(a.input), a.raw_output,
                            autocast=AUTOCAST.get(a.autocast))
        planned = plan(graph, strategy=a.strategy, budget=a.budget, genetic_iters=a.genetic_iters, seed=a.seed,
                       budget_of=a.budget_of)
    else:
        result = _measure(a)
        print(markdown(result))
        planned = result["plan"]
    try:
        Path(out).write_text(json.dumps(planned, indent=1) + "\n")
    except OSError as e:
        raise ExportError(f"cannot write `{out}`: {e.strerror or e}") from e
    s = planned["summary"]
    print(f"wrote {out}: planned peak {s['planned_peak']:,} B of {s['unplanned_peak']:,} B unplanned "
          f"({s['planned_peak'] / s['unplanned_peak']:.3f}), {s['recomputed_ops']} ops recomputed, "
          f"recompute share {s['recompute_share']:.1%}")
    return 0


def _profile(text: str):
    try:
        return parse_profile(text)
    except ExportError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _run(a: argparse.Namespace) -> int:
    factory = load_object(a.model)
    if not callable(factory):
        raise ExportError(f"`{a.model}` is a {type(factory).__name__}, not a callable that builds the model")
    kwargs = dict(a.arg)
    loss = LOSSES.get(a.loss) or load_object(a.loss)
    start = time.perf_counter()
    graph = export(lambda: factory(**kwargs), loss, a.input + a.target,
                   num_model_inputs=len(a.input), name=a.name or a.model.rpartition(":")[2],
                   update=a.update, lr=a.lr, meta={"factory_args": kwargs} if kwargs else None,
                   device_profile=a.device_profile, raw_output=a.raw_output, device=a.device,
                   autocast=AUTOCAST.get(a.autocast))
    seconds = time.perf_counter() - start
    try:
        save(graph, a.output)
    except OSError as e:
        raise ExportError(f"cannot write `{a.output}`: {e.strerror or e}") from e
    s = summary(graph)
    print(f"wrote {a.output}: {s['ops']} ops {s['ops_per_phase']}, {s['tensors']} tensors "
          f"{s['tensors_per_kind']}, {s['views']} views, {s['param_count']:,} parameters, "
          f"{s['flops']:.3e} FLOPs, {s['time_us']:.4e} us on {a.device_profile.name}; "
          f"traced in {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
