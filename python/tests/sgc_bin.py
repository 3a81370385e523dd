"""Finding and running the `sgc` binary, for the tests that hold the command line and the
native module to the same answers (the package itself plans with the native module).

Order: `$SGC_BIN`; `target/release/sgc` or `target/debug/sgc` under the repository root;
else `cargo build` there and use `target/debug/sgc`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # python/tests/ -> the repository


def find_sgc(build: bool = True) -> Path:
    env = os.environ.get("SGC_BIN")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        candidate = REPO / "target" / profile / "sgc"
        if candidate.is_file():
            return candidate
    if not build:
        raise FileNotFoundError("no sgc binary: set SGC_BIN or run `cargo build`")
    subprocess.run(["cargo", "build", "--bin", "sgc"], cwd=REPO, check=True)
    return REPO / "target" / "debug" / "sgc"


def run_sgc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(find_sgc()), *args], capture_output=True, text=True, check=check)


def has_plan() -> bool:
    """Whether this `sgc` has the `plan` subcommand."""
    return run_sgc("plan", "--help", check=False).returncode == 0
