"""FSDP2 under sgc plans, as torchtitan applies compile and activation checkpointing.

    torchrun --nproc_per_node 2 examples/fsdp2.py                # compiled blocks, planned
    torchrun --nproc_per_node 2 examples/fsdp2.py --mode sac     # eager blocks, sgc's SAC policy

`train.TinyGPT`'s transformer blocks are each sharded with `fully_shard`, and so is the
root. `--mode compile`: each block is compiled with `sgc_trace.backend` first (one graph
per distinct block, planned; FSDP2's all-gathers and reduce-scatters run between the
compiled blocks, in its hooks). `--mode sac`: no compiler; each block runs under
`torch.utils.checkpoint` with the selective checkpointing policy of its plan
(`sgc_trace.policy`). `--budget`: each block's share of its unplanned activation bytes.
To size a run before starting it, plan one trace per rank:
`sgc plan model.json --world-size 8 --shard fsdp2 --optimizer adam`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sgc_trace  # noqa: E402
from ddp import counting_batch, setup  # noqa: E402
from train import TinyGPT, lm_loss  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("compile", "sac"), default="compile")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--budget", type=float, default=None)
    a = p.parse_args(argv)
    device = setup()
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = TinyGPT().to(device)
    blocks = model.blocks.layers
    if a.mode == "compile":
        planner = sgc_trace.backend(budget=a.budget)
        for i, block in enumerate(blocks):
            blocks[i] = torch.compile(block, backend=planner, dynamic=False)
    else:
        planner = sgc_trace.policy(budget=a.budget)
        planner.apply(model, blocks=[f"blocks.layers.{i}" for i in range(len(blocks))])
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(1 + rank)
    for step in range(a.steps):
        x, y = counting_batch(a.batch, 64, 256, data, device)
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == a.steps - 1):
            print(f"step {step:3d}  loss {loss.item():.3f}", flush=True)
    if rank == 0:
        for g in planner.graphs:
            s = g.plan["summary"]
            print(f"{g.name}: planned peak {s['planned_peak']:,} B of {s['unplanned_peak']:,} B unplanned, "
                  f"recompute {s['recompute_share']:.1%} of the block's step")
        if a.mode == "sac":
            print(f"held for the backward after the last forward: predicted {planner.predicted_bytes():,} B")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
