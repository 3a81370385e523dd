"""Small models the tests train: shared by the single-process and the distributed tests
(`distributed_worker.py` runs without pytest)."""

from __future__ import annotations

import torch
from torch import nn


class CNN(nn.Module):
    """A stem, residual conv blocks with BatchNorm, a linear head."""

    def __init__(self, c=8, blocks=3):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU())
            for _ in range(blocks)
        )
        self.head = nn.Linear(c, 10)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = x + b(x)
        return self.head(x.mean((2, 3)))


class Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each with a residual."""

    def __init__(self, d: int, dropout: float = 0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Dropout(dropout), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """Embedding, `layers` (a ModuleList of blocks: what FSDP2 and the SAC policy wrap), head."""

    def __init__(self, vocab: int = 64, d: int = 32, n: int = 2, dropout: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, dropout) for _ in range(n))
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.layers:
            x = block(x)
        return self.head(x)
