"""A GPT-style decoder (token + position embeddings, pre-norm blocks of causal
self-attention and MLP, dropout, tied output head), exported, inspected, planned.

    python examples/gpt.py --batch 8 -o gpt.json
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from _example import run_example

from sgc_trace import InputSpec


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, dropout)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, dim: int, layers: int, heads: int, dropout: float):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied: one parameter, counted once

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(vocab: int = 512, context: int = 64, dim: int = 64, layers: int = 2, heads: int = 4, dropout: float = 0.1) -> nn.Module:
    return GPT(vocab, context, dim, layers, heads, dropout)


def inputs(batch: int, context: int = 64, vocab: int = 512) -> list[InputSpec]:
    return [
        InputSpec("tokens", (batch, context), torch.int64, high=vocab),
        InputSpec("target", (batch, context), torch.int64, high=vocab),
    ]


def loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


if __name__ == "__main__":
    run_example("gpt", build, inputs, loss, default_batch=8)
