"""Training across processes under a plan: DDP and FSDP2 with the `torch.compile` backend,
FSDP2 with the selective checkpointing policy, against the same setups run eagerly.

One `torchrun --nproc_per_node 2` (gloo, CPU) runs `distributed_worker.py` over every case;
each rank trains three Adam steps on its own batch, eagerly and planned, from the same
weights. Must hold on both ranks: each step's gradients equal eager's within 1e-6 of each
tensor's largest value (they are in fact bitwise equal on the CPU), the parameters after
the steps are eager's and the same on every rank, and the plan recomputes something (a
plan that recomputes nothing would test nothing). About 40 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CASES = ["ddp_cnn", "ddp_lm", "ddp_lm_buckets", "fsdp2", "fsdp2_sac"]


@pytest.fixture(scope="module")
def results() -> dict:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.fail("torchrun is not installed beside this Python (it comes with torch)")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(_free_port()),
                           str(HERE / "distributed_worker.py"), *CASES],
                          capture_output=True, text=True, env=env, timeout=900)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(lines) != len(CASES):
        pytest.fail(f"torchrun exited {done.returncode} with {len(lines)} of {len(CASES)} cases:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return {r["case"]: r["ranks"] for r in lines}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", CASES)
def test_every_rank_trains_as_eager_does(results, case):
    ranks = results[case]
    assert len(ranks) == 2
    for rank, r in enumerate(ranks):
        assert "error" not in r, f"rank {rank}: {r['error']}"
        assert r["worst"] <= 1e-6, f"rank {rank}: gradients differ from eager's by {r['worst']:.3e} of their scale"
        assert r["params_equal_eager"], f"rank {rank}: parameters after {case} differ from eager's"
        assert r["same_across_ranks"], f"rank {rank}: the ranks' parameters differ"
        assert r["graphs"] >= 1 and r["recomputed"] > 0, f"rank {rank}: nothing planned or recomputed: {r}"


def test_ddp_buckets_are_planned_one_graph_each(results):
    """DDP's 1 MB buckets make dynamo cut the graph (DDPOptimizer): each piece is planned."""
    assert all(r["graphs"] >= 2 for r in results["ddp_lm_buckets"])


def test_the_policy_checkpoints_every_block_under_fsdp2(results):
    assert all(r["blocks"] == 2 for r in results["fsdp2_sac"])


@pytest.mark.parametrize("example", [["ddp.py"], ["fsdp2.py", "--mode", "sac"]])
def test_the_examples_train_under_torchrun(example):
    """`examples/ddp.py` and `examples/fsdp2.py` run as their docs say, two steps."""
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = HERE.parent / "examples" / example[0]
    done = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", str(_free_port()), str(script),
                           *example[1:], "--steps", "2", "--batch", "4"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "step   1  loss" in done.stdout and "planned peak" in done.stdout, done.stdout
