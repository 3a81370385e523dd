#!/usr/bin/env python3
"""Solves a program written by `SGC_HIGHS_MPS=FILE sgc plan ... --strategy optimal` with
OR-Tools' CP-SAT (its MIP import), to compare another solver with HiGHS on the same program.

Not a project dependency: `python3 -m venv /tmp/ortools && /tmp/ortools/bin/pip install ortools`,
then `/tmp/ortools/bin/python scripts/cpsat-solve.py FILE.mps SECONDS [WORKERS]`
(docs/benchmarks.md, "How far from optimal", ran 9.15 with two workers). Prints CP-SAT's
log, then its status, objective and bound in the program's own unit (ten-thousandths of a
step, as HiGHS sees it).
"""
import sys
import time

from ortools.linear_solver.python import model_builder as mb


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    path, limit = sys.argv[1], float(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) == 4 else 2
    model = mb.Model()
    if not model.import_from_mps_file(path):
        sys.exit(f"{path}: not an MPS file OR-Tools can read")
    print(f"{path}: {model.num_variables} columns, {model.num_constraints} rows", flush=True)
    solver = mb.Solver("sat")
    solver.set_time_limit_in_seconds(limit)
    solver.enable_output(True)
    solver.set_solver_specific_parameters(f"num_workers:{workers},relative_gap_limit:0.001")
    start = time.time()
    status = solver.solve(model)
    found = status in (mb.SolveStatus.OPTIMAL, mb.SolveStatus.FEASIBLE)
    print(
        f"status {status.name}, objective {solver.objective_value if found else None}, "
        f"bound {solver.best_objective_bound}, {time.time() - start:.1f} s"
    )


if __name__ == "__main__":
    main()
