"""The corpus models that torchvision and transformers do not provide, written here.

* `UNet`: the U-Net of Ronneberger et al. (2015) with padded 3x3 convolutions and
  BatchNorm (the common modern variant), 64 to 1024 channels over four levels,
  transposed-convolution upsampling and skip concatenations; a per-pixel classifier.
* `LSTMLanguageModel`: the "large" LSTM of Zaremba et al. (2014): embedding, two LSTM
  layers of 1500 units, dropout 0.65 between layers, a linear softmax head.
* `TransformerEncoderLM`: a decoder-only language model built from `nn.TransformerEncoder`
  (pre-norm layers, learned positions, a causal mask), the way the PyTorch tutorials
  build one.
"""

from __future__ import annotations

import torch
from torch import nn


class DoubleConv(nn.Sequential):
    def __init__(self, cin: int, cout: int):
        super().__init__(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )


class UNet(nn.Module):
    def __init__(self, in_channels: int = 3, classes: int = 2, width: int = 64, levels: int = 4):
        super().__init__()
        widths = [width * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList([DoubleConv(in_channels, widths[0])])
        self.down.extend(DoubleConv(widths[i], widths[i + 1]) for i in range(levels))
        self.pool = nn.MaxPool2d(2)
        self.upsample = nn.ModuleList(
            nn.ConvTranspose2d(widths[i + 1], widths[i], 2, stride=2) for i in reversed(range(levels))
        )
        self.up = nn.ModuleList(DoubleConv(2 * widths[i], widths[i]) for i in reversed(range(levels)))
        self.head = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        skips.pop()
        for upsample, block in zip(self.upsample, self.up):
            x = block(torch.cat([skips.pop(), upsample(x)], dim=1))
        return self.head(x)


class LSTMLanguageModel(nn.Module):
    """Dropout on the embeddings, between the layers and before the head, as in the paper.

    The layers are single-layer `nn.LSTM`s with explicit dropout between them, the same
    network as `nn.LSTM(num_layers=2, dropout=...)`: torch's decomposition of a multi-layer
    `aten.lstm`, which tracing uses on the CPU, leaves the inter-layer dropout out.
    """

    def __init__(self, vocab: int = 10000, dim: int = 1500, layers: int = 2, dropout: float = 0.65):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(nn.LSTM(dim, dim, batch_first=True) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h, _ = layer(self.drop(h))
        return self.head(self.drop(h))


class TransformerEncoderLM(nn.Module):
    def __init__(
        self,
        vocab: int = 32000,
        context: int = 512,
        dim: int = 512,
        heads: int = 8,
        ff: int = 2048,
        layers: int = 6,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout, batch_first=True, norm_first=True)
        # Clones `layer` with copy.deepcopy: under FakeTensorMode this is the case that
        # needs `build.adopt`.
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(dim), enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        t = tokens.shape[1]
        positions = torch.arange(t, device=tokens.device)
        x = self.drop(self.embed(tokens) + self.pos(positions))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device)
        return self.head(self.encoder(x, mask=mask, is_causal=True))
