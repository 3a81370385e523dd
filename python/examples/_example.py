"""Shared driver of the examples: export (timed), then inspect and plan the graph with the
native module (`sgc.inspect`, `sgc.plan`: what `sgc inspect` and `sgc plan` do)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from sgc_trace import export, save, summary  # noqa: E402
from sgc_trace.native import module  # noqa: E402


def run_example(name, build, inputs, loss, default_batch: int) -> None:
    p = argparse.ArgumentParser(description=f"Export, inspect and plan the {name} example.")
    p.add_argument("--batch", type=int, default=default_batch)
    p.add_argument("--update", choices=("none", "sgd"), default="sgd")
    p.add_argument("-o", "--output", default=f"{name}.json")
    p.add_argument("--no-sgc", action="store_true", help="only export")
    a = p.parse_args()
    start = time.perf_counter()
    graph = export(build, loss, inputs(a.batch), name=name, update=a.update)
    seconds = time.perf_counter() - start
    save(graph, a.output)
    print(f"exported {a.output} in {seconds:.2f} s: {summary(graph)}")
    if a.no_sgc:
        return
    sgc = module()
    report = sgc.inspect(a.output)
    print(f"inspect: {report['ops']} ops, {report['tensors']} tensors, unplanned peak "
          f"{report['unplanned_peak_bytes']:,} B, per-op lower bound {report['lower_bound_bytes']:,} B")
    print(sgc.plan(a.output).report())
