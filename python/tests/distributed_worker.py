"""One rank of `test_distributed.py`, started by `torchrun --nproc_per_node 2` (gloo, CPU).

Each case trains the same model twice from the same weights, three steps of Adam on each
rank's own batch: once as PyTorch runs it eagerly (DDP, FSDP2), once planned by sgc (the
`torch.compile` backend, or the selective checkpointing policy). Every rank compares its
own gradients after every step, relative to each tensor's largest value, and checks that
both ranks end with the same parameters; rank 0 prints one JSON line per case:
`{"case": ..., "ranks": [{"worst": ..., "graphs": ..., "recomputed": ...}, ...],
"same_across_ranks": ...}`.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sgc_trace  # noqa: E402
from models import CNN, TinyLM  # noqa: E402

STEPS = 3


def _batch(case: str, rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * rank + step)
    if case.startswith("ddp_cnn"):
        return torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
    return torch.randint(0, 64, (4, 32), generator=g), torch.randint(0, 64, (4, 32), generator=g)


def _loss(case: str, out, y):
    return F.cross_entropy(out, y) if case.startswith("ddp_cnn") else F.cross_entropy(out.flatten(0, 1), y.flatten())


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _train(case: str, model: nn.Module, planned: bool, rank: int):
    """Three steps; the gradients after each (whole tensors, FSDP2's gathered), the model,
    and what sgc planned."""
    from torch.distributed.fsdp import fully_shard

    holder = None
    if case.startswith("ddp"):
        # ddp_lm_buckets: 1 MB buckets, so that dynamo's DDPOptimizer cuts the graph in pieces.
        net = DDP(model, bucket_cap_mb=1) if case.endswith("buckets") else DDP(model)
        if planned:
            holder = sgc_trace.backend(genetic_iters=3)
            net = torch.compile(net, backend=holder, dynamic=False)
    elif case == "fsdp2":
        if planned:
            holder = sgc_trace.backend(genetic_iters=3)
            for i, block in enumerate(model.layers):
                model.layers[i] = torch.compile(block, backend=holder, dynamic=False)
        for block in model.layers:
            fully_shard(block)
        net = fully_shard(model)
    elif case == "fsdp2_sac":
        if planned:
            holder = sgc_trace.policy(genetic_iters=3)
            holder.apply(model)
        for block in model.layers:
            fully_shard(block)
        net = fully_shard(model)
    else:
        raise SystemExit(f"unknown case {case}")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    grads = []
    for step in range(STEPS):
        x, y = _batch(case, rank, step)
        opt.zero_grad()
        torch.manual_seed(step)  # the same dropout draws in both runs
        _loss(case, net(x), y).backward()
        grads.append([_full(p.grad).clone() for p in model.parameters()])
        opt.step()
    return grads, model, holder


def _case(case: str, rank: int) -> dict:
    torch.manual_seed(0)
    if case.startswith("ddp_cnn"):
        base = CNN()
    elif case.endswith("buckets"):
        base = TinyLM(d=128, n=3, dropout=0.1)
    else:
        base = TinyLM(dropout=0.1)
    torch._dynamo.reset()
    eager_grads, eager, _ = _train(case, copy.deepcopy(base), False, rank)
    torch._dynamo.reset()
    planned_grads, planned, holder = _train(case, copy.deepcopy(base), True, rank)
    worst = 0.0
    for before, after in zip(eager_grads, planned_grads):
        for a, b in zip(before, after):
            scale = a.abs().max().clamp_min(1e-30)
            worst = max(worst, ((a - b).abs().max() / scale).item())
    flat = torch.cat([_full(p).detach().flatten() for p in planned.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    same_params = all(torch.equal(gathered[0], g) for g in gathered)
    eager_flat = torch.cat([_full(p).detach().flatten() for p in eager.parameters()])
    graphs = getattr(holder, "graphs", [])
    out = {"worst": worst, "graphs": len(graphs), "recomputed": sum(len(g.partition.recomputed_ops) for g in graphs),
           "params_equal_eager": bool(torch.equal(flat, eager_flat)), "same_across_ranks": same_params}
    if case == "fsdp2_sac":
        out["blocks"] = len(holder.blocks)
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch._dynamo.config.cache_size_limit = 64
    for case in sys.argv[1:]:
        try:
            mine = _case(case, rank)
        except Exception as e:  # reported, not hidden: the test prints it
            mine = {"error": f"{type(e).__name__}: {e}"}
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        if rank == 0:
            print(json.dumps({"case": case, "ranks": everyone}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
