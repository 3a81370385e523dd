"""A complete training loop under an sgc plan: `budget=` is the one knob.

    python examples/train.py                       # on cuda when available, else the CPU
    python examples/train.py --budget 60MiB --steps 20 --device cpu

A small GPT-style language model learns to count: each sequence runs up by one from a
random start (modulo the vocabulary), and the model predicts the next token. The
training step is `sgc_trace.compile(model, loss_fn, batch, budget=...)`: traced once for
a batch shape, planned to fit `budget` device bytes (activations freed in the forward are
recomputed in the backward), and called like the eager step it replaces: it computes the
loss and accumulates `.grad` into the model's own parameters, so the optimizer, the
scheduler and `zero_grad` are the usual ones. A batch of another shape (the smaller last
batch of an epoch) gets its own step, traced and planned on first sight and kept.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import sgc_trace  # noqa: E402


class TinyGPT(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 128, layers: int = 4, heads: int = 4, context: int = 64):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        x = self.tokens(idx) + self.positions(pos)
        x = self.blocks(x, mask=self.causal[:t, :t], is_causal=True)
        return self.head(self.norm(x))


def lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def batches(n: int, batch: int, context: int, vocab: int, device: str, generator: torch.Generator):
    """`n` samples of (tokens, next tokens) in batches of `batch`; the last one smaller."""
    start = torch.randint(0, vocab, (n, 1), generator=generator)
    data = (start + torch.arange(context + 1)) % vocab
    for i in range(0, n, batch):
        chunk = data[i:i + batch].to(device)
        yield chunk[:, :-1], chunk[:, 1:]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--budget", default="32MiB", help="device bytes each step's plan must fit (e.g. 10GiB)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--samples", type=int, default=200, help="samples per epoch (200 at batch 16: a last batch of 8)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    a = p.parse_args(argv)

    torch.manual_seed(0)
    model = TinyGPT().to(a.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    total = a.epochs * math.ceil(a.samples / a.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=total)
    steps: dict = {}  # batch shape -> its planned step
    gen = torch.Generator().manual_seed(0)
    for epoch in range(a.epochs):
        start, losses = time.perf_counter(), []
        for x, y in batches(a.samples, a.batch, 64, 256, a.device, gen):
            shape = tuple(x.shape)
            if shape not in steps:
                steps[shape] = sgc_trace.compile(model, lm_loss, (x, y), budget=a.budget)
                s = steps[shape].plan["summary"]
                print(f"planned a step for batch {shape}: {s['planned_peak'] / 2**20:.1f} MiB peak "
                      f"(budget {a.budget}; unplanned {s['unplanned_peak'] / 2**20:.1f} MiB), "
                      f"recomputing {s['recompute_share']:.1%} of a step")
            opt.zero_grad(set_to_none=True)
            loss = steps[shape](x, y)
            opt.step()
            sched.step()
            losses.append(loss.item())
        print(f"epoch {epoch}: mean loss {sum(losses) / len(losses):.4f} over {len(losses)} steps "
              f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
