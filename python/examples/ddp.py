"""DDP under sgc plans: your loop, `torch.compile` with sgc's backend, started by torchrun.

    torchrun --nproc_per_node 2 examples/ddp.py                  # gloo on the CPU, nccl on GPUs
    torchrun --nproc_per_node 8 examples/ddp.py --budget 0.5 --steps 100

The model (`train.TinyGPT`, a small GPT-style language model that learns to count) is
wrapped in `DistributedDataParallel` and compiled with `sgc_trace.backend`: dynamo cuts the
graph at DDP's gradient buckets (its DDPOptimizer), each piece is planned (here to
`--budget`, a share of its unplanned activation bytes), and autograd runs the planned
pieces, so DDP's all-reduce hooks fire as in eager: every rank ends each step with the
mean gradient. Each rank trains on its own batches; rank 0 prints the loss and the plans.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sgc_trace  # noqa: E402
from train import TinyGPT, lm_loss  # noqa: E402


def counting_batch(batch: int, context: int, vocab: int, generator: torch.Generator, device) -> tuple:
    start = torch.randint(0, vocab, (batch, 1), generator=generator)
    data = (start + torch.arange(context + 1)) % vocab
    return data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)


def setup() -> torch.device:
    """The process group (nccl on GPUs, gloo on the CPU) and this rank's device."""
    if torch.cuda.is_available():
        dist.init_process_group("nccl")
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        return device
    dist.init_process_group("gloo")
    return torch.device("cpu")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16, help="per rank")
    p.add_argument("--budget", type=float, default=None,
                   help="each graph's share of its unplanned activation bytes (default: the lowest-peak plan)")
    p.add_argument("--compiler", choices=("aot_eager", "inductor"), default="aot_eager")
    a = p.parse_args(argv)
    device = setup()
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same weights on every rank
    model = TinyGPT().to(device)
    backend = sgc_trace.backend(budget=a.budget, compiler=a.compiler)
    net = torch.compile(DDP(model), backend=backend, dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.Generator().manual_seed(1 + rank)  # each rank its own batches
    for step in range(a.steps):
        x, y = counting_batch(a.batch, 64, 256, data, device)
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(net(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and (step % 5 == 0 or step == a.steps - 1):
            print(f"step {step:3d}  loss {loss.item():.3f}", flush=True)
    if rank == 0:
        for g in backend.graphs:
            s = g.plan["summary"]
            print(f"{g.name}: {len(g.graph['ops'])} ops, planned peak {s['planned_peak']:,} B of "
                  f"{s['unplanned_peak']:,} B unplanned, recompute {s['recompute_share']:.1%} of the graph's step")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
