"""The committed fixtures `tests/fixtures/torch_values_*.json`: small models traced by
`sgc_trace`, with the inputs, weights and state they were run on and what PyTorch computed
in float32: the loss and the gradient of every parameter. `tiny_resnet` is a ResNet-style
CNN (7x7 stem, BatchNorm, max pooling, a depthwise convolution with bias and hardswish,
two residual stages, global average pooling, Mish, a linear head, cross-entropy);
`tiny_lm` a one-block transformer language model (embedding, learned positions,
LayerNorm, multi-head attention through matmul and softmax without a mask, an exact-GELU
MLP, a linear head); `tiny_gpt` a two-block GPT-style model written the ways the corpus's
transformers are (positions from `arange`, token types gathered from an i64 buffer through
`expand`, a causal mask from `ones`/`tril`/`where`, q/k/v selected from one tensor, an
empty cache concatenated before the keys, a `pow` GELU, and
`scaled_dot_product_attention`, causal in one block); `tiny_unet` a small U-Net (1x3 and
3x1 convolutions with padding per axis, a transposed convolution with bias, per-pixel
cross-entropy: `log_softmax` over the channels and `nll_loss2d`). The Rust test
`tests/torch_values.rs` runs each graph on sgc's CPU backend with the same values and
compares.

Regenerate: python3 python/tests/values_fixture.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "examples"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import resnet_cnn  # noqa: E402

from sgc_trace import InputSpec, export  # noqa: E402

FIXTURES = HERE.parents[1] / "tests" / "fixtures"
PATH = FIXTURES / "torch_values_tiny_resnet.json"
LM_PATH = FIXTURES / "torch_values_tiny_lm.json"
BATCH, IMAGE, CLASSES = 4, 16, 10
GPT_PATH = FIXTURES / "torch_values_tiny_gpt.json"
UNET_PATH = FIXTURES / "torch_values_tiny_unet.json"
CLASSES_2D, SIDE = 3, 8
VOCAB, SEQ, WIDTH, HEADS = 50, 8, 16, 2


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        self.depthwise = nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=True)
        self.layers = resnet_cnn.build(widths=(8, 16), blocks=1, classes=CLASSES).layers
        self.fc = nn.Linear(16, CLASSES)

    def forward(self, x):
        h = self.layers(F.hardswish(self.depthwise(self.stem(x))))
        return self.fc(F.mish(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1)))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(0.1 * torch.randn(SEQ, WIDTH))
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.fc1 = nn.Linear(WIDTH, 4 * WIDTH)
        self.fc2 = nn.Linear(4 * WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
        split = lambda x: x.reshape(b, t, HEADS, d // HEADS).transpose(1, 2)  # noqa: E731
        q, k, v = split(q), split(k), split(v)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // HEADS) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        h = h + self.proj(y)
        h = h + self.fc2(F.gelu(self.fc1(self.ln2(h))))
        return self.head(self.lnf(h))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.types = nn.Embedding(2, WIDTH)
        self.register_buffer("type_ids", torch.tensor([[0, 1] * (SEQ // 2)]))
        self.qkv = nn.ModuleList(nn.Linear(WIDTH, 3 * WIDTH) for _ in range(2))
        self.fc = nn.ModuleList(nn.Linear(WIDTH, 2 * WIDTH) for _ in range(2))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def attend(self, h, i):
        b, t, d = h.shape
        qkv = self.qkv[i](h).reshape(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if i == 0:
            k = torch.cat([torch.tensor([]), k], dim=-2)
            s = q @ k.transpose(-1, -2) / (d // HEADS) ** 0.5
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
            s = torch.where(mask, s, float("-inf"))
            y = torch.softmax(s, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, d)

    def forward(self, tokens):
        b, t = tokens.shape
        positions = torch.arange(t)
        types = torch.gather(self.type_ids.expand(1, -1), 1, positions.unsqueeze(0)).expand(b, t)
        h = self.embed(tokens) + self.pos(positions) + self.types(types)
        for i in range(2):
            h = h + self.attend(h, i)
            u = self.fc[i](h)
            u = 0.5 * u * (1.0 + torch.tanh(0.7978845608 * (u + 0.044715 * torch.pow(u, 3.0))))
            a, g = u.chunk(2, dim=-1)
            h = h + a * g
        return self.head(self.ln(h))


class TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Sequential(
            nn.Conv2d(3, 4, (1, 3), padding=(0, 1)), nn.ReLU(), nn.Conv2d(4, 6, (3, 1), padding=(1, 0))
        )
        self.pool = nn.MaxPool2d(2)
        self.mid = nn.Conv2d(6, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 6, 2, stride=2)
        self.head = nn.Conv2d(12, CLASSES_2D, 1)

    def forward(self, x):
        d = F.relu(self.down(x))
        u = self.up(F.relu(self.mid(self.pool(d))))
        return self.head(torch.cat([d, u], dim=1))


def lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def _values(t: torch.Tensor) -> dict:
    flat = t.detach().reshape(-1)
    data = [int(v) for v in flat.tolist()] if not t.dtype.is_floating_point else flat.tolist()
    return {"shape": list(t.shape), "data": data}


def _record(model, loss_fn, specs, real: dict, name: str) -> dict:
    graph = export(model, loss_fn, specs, num_model_inputs=1, name=name, mark_batch=False)
    values = {k: _values(v) for k, v in real.items()}
    for pname, t in list(model.named_parameters()) + list(model.named_buffers()):
        values[pname] = _values(t)
    args = list(real.values())
    loss = loss_fn(model(args[0]), *args[1:])
    loss.backward()
    expected = {"loss": _values(loss)}
    for pname, p in model.named_parameters():
        expected[f"{pname}.grad"] = _values(p.grad)
    return {"torch_version": torch.__version__.split("+")[0], "graph": graph, "values": values, "expected": expected}


def make_fixture() -> dict:
    torch.manual_seed(0)
    model = Tiny().train()
    real = {"image": torch.randn(BATCH, 3, IMAGE, IMAGE), "label": torch.randint(0, CLASSES, (BATCH,))}
    specs = resnet_cnn.inputs(BATCH, image=IMAGE, classes=CLASSES)
    return _record(model, F.cross_entropy, specs, real, "torch_values_tiny_resnet")


def make_lm_fixture() -> dict:
    torch.manual_seed(0)
    model = TinyLM().train()
    real = {"tokens": torch.randint(0, VOCAB, (BATCH, SEQ)), "target": torch.randint(0, VOCAB, (BATCH, SEQ))}
    specs = [InputSpec(n, (BATCH, SEQ), torch.int64, high=VOCAB) for n in real]
    return _record(model, lm_loss, specs, real, "torch_values_tiny_lm")


def make_gpt_fixture() -> dict:
    torch.manual_seed(0)
    model = TinyGPT().train()
    real = {"tokens": torch.randint(0, VOCAB, (BATCH, SEQ)), "target": torch.randint(0, VOCAB, (BATCH, SEQ))}
    specs = [InputSpec(n, (BATCH, SEQ), torch.int64, high=VOCAB) for n in real]
    return _record(model, lm_loss, specs, real, "torch_values_tiny_gpt")


def make_unet_fixture() -> dict:
    torch.manual_seed(0)
    model = TinyUNet().train()
    real = {
        "image": torch.randn(2, 3, SIDE, SIDE),
        "mask": torch.randint(0, CLASSES_2D, (2, SIDE, SIDE)),
    }
    specs = [
        InputSpec("image", (2, 3, SIDE, SIDE)),
        InputSpec("mask", (2, SIDE, SIDE), torch.int64, high=CLASSES_2D),
    ]
    return _record(model, F.cross_entropy, specs, real, "torch_values_tiny_unet")


FIXTURES_MADE = (
    (PATH, make_fixture),
    (LM_PATH, make_lm_fixture),
    (GPT_PATH, make_gpt_fixture),
    (UNET_PATH, make_unet_fixture),
)

if __name__ == "__main__":
    only = set(sys.argv[1:])
    for path, make in FIXTURES_MADE:
        if only and path.stem.removeprefix("torch_values_") not in only:
            continue
        path.write_text(json.dumps(make()) + "\n")
        print(f"wrote {path} ({path.stat().st_size} bytes)")
