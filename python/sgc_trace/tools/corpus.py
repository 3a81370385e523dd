"""The corpus of real traced graphs (`graphs/real/NAME.json.gz`), regenerated deterministically.

    python -m sgc_trace.tools.corpus --out graphs/real            # every model (a few minutes)
    python -m sgc_trace.tools.corpus --out /tmp/x --only gpt2     # some of them
    python -m sgc_trace.tools.corpus --out /tmp/x --small         # the test sizes

Every model is built in code with random weights (nothing is downloaded) and traced at a
realistic training batch; `--small` traces the same architectures at a small batch,
sequence or image size (what the tests export). Files are gzip with a fixed header, so
the same torch, torchvision and transformers versions regenerate identical bytes.
Language models use token-level cross-entropy; image models cross-entropy over classes
(U-Net: per pixel).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..exporter.api import export, save, summary
from .cli import lm_cross_entropy
from ..errors import ExportError
from ..exporter.trace import InputSpec, LossFn
from .zoo import LSTMLanguageModel, TransformerEncoderLM, UNet


@dataclass(frozen=True)
class Spec:
    """One export: the factory, the inputs (model inputs first, then targets), the loss."""

    factory: Callable[[], nn.Module]
    inputs: list[InputSpec]
    loss: LossFn
    num_model_inputs: int = 1
    raw_output: bool = False


@dataclass(frozen=True)
class Entry:
    name: str
    model: str  # meta.model: how the model is built
    library: str  # "torchvision", "transformers" or "sgc_trace.tools.zoo"
    make: Callable[[bool], Spec]  # small -> Spec
    notes: str = field(default="")


def image_inputs(batch: int, size: int, classes: int = 1000) -> list[InputSpec]:
    """An image batch and its class labels."""
    return [InputSpec("image", (batch, 3, size, size)), InputSpec("label", (batch,), torch.int64, high=classes)]


def token_inputs(batch: int, seq: int, vocab: int) -> list[InputSpec]:
    """A token batch and its next-token targets."""
    return [
        InputSpec("tokens", (batch, seq), torch.int64, high=vocab),
        InputSpec("target", (batch, seq), torch.int64, high=vocab),
    ]


def _torchvision(fn: str, size: int, small_size: int, **kwargs) -> Callable[[bool], Spec]:
    def make(small: bool) -> Spec:
        import torchvision

        build = getattr(torchvision.models, fn)
        s = small_size if small else size
        return Spec(lambda: build(weights=None, **kwargs), image_inputs(2 if small else 64, s), F.cross_entropy)

    return make


def inception_loss(out, label):
    """Inception-v3's training loss: the main head plus 0.4 x the auxiliary head."""
    return F.cross_entropy(out.logits, label) + 0.4 * F.cross_entropy(out.aux_logits, label)


def _inception(small: bool) -> Spec:
    import torchvision

    size = 299  # the auxiliary head needs 17 x 17 features, which takes 299 x 299 images
    return Spec(
        lambda: torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=True),
        image_inputs(2 if small else 64, size),
        inception_loss,
        raw_output=True,
    )


def _vit(small: bool) -> Spec:
    import torchvision

    size = 64 if small else 224
    return Spec(lambda: torchvision.models.vit_b_16(weights=None, image_size=size), image_inputs(2 if small else 64, size), F.cross_entropy)


def _gpt2(small: bool) -> Spec:
    import transformers

    return Spec(
        lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()),
        token_inputs(2, 32, 50257) if small else token_inputs(8, 1024, 50257),
        lm_cross_entropy,
    )


def _bert(small: bool) -> Spec:
    import transformers

    return Spec(
        lambda: transformers.BertForMaskedLM(transformers.BertConfig()),
        token_inputs(2, 32, 30522) if small else token_inputs(16, 512, 30522),
        lm_cross_entropy,
    )


def _transformer_lm(small: bool) -> Spec:
    return Spec(TransformerEncoderLM, token_inputs(2, 32, 32000) if small else token_inputs(32, 512, 32000), lm_cross_entropy)


def _lstm(small: bool) -> Spec:
    return Spec(LSTMLanguageModel, token_inputs(2, 8, 10000) if small else token_inputs(20, 35, 10000), lm_cross_entropy)


def _unet(small: bool) -> Spec:
    batch, size = (2, 32) if small else (16, 256)
    inputs = [InputSpec("image", (batch, 3, size, size)), InputSpec("mask", (batch, size, size), torch.int64, high=2)]
    return Spec(UNet, inputs, F.cross_entropy)


CORPUS = [
    Entry("resnet18", "torchvision.models.resnet18()", "torchvision", _torchvision("resnet18", 224, 64)),
    Entry("resnet50", "torchvision.models.resnet50()", "torchvision", _torchvision("resnet50", 224, 64)),
    Entry("densenet121", "torchvision.models.densenet121()", "torchvision", _torchvision("densenet121", 224, 64)),
    Entry("inception_v3", "torchvision.models.inception_v3(aux_logits=True)", "torchvision", _inception,
          "loss = CE(logits) + 0.4 CE(aux_logits), as Inception-v3 trains"),
    Entry("mobilenet_v3_large", "torchvision.models.mobilenet_v3_large()", "torchvision",
          _torchvision("mobilenet_v3_large", 224, 64)),
    Entry("vit_b_16", "torchvision.models.vit_b_16()", "torchvision", _vit),
    Entry("efficientnet_b0", "torchvision.models.efficientnet_b0()", "torchvision",
          _torchvision("efficientnet_b0", 224, 64)),
    Entry("transformer_lm", "sgc_trace.tools.zoo.TransformerEncoderLM() (nn.TransformerEncoder, 6 x 512, 8 heads)",
          "sgc_trace.tools.zoo", _transformer_lm),
    Entry("gpt2", "transformers.GPT2LMHeadModel(GPT2Config())", "transformers", _gpt2),
    Entry("bert_base", "transformers.BertForMaskedLM(BertConfig())", "transformers", _bert,
          "MLM loss on every token (real MLM scores the masked 15%)"),
    Entry("lstm_lm", "sgc_trace.tools.zoo.LSTMLanguageModel() (Zaremba et al. 2014 large: 2 x 1500)", "sgc_trace.tools.zoo", _lstm),
    Entry("unet", "sgc_trace.tools.zoo.UNet() (Ronneberger et al. 2015, BatchNorm, 64..1024 channels)", "sgc_trace.tools.zoo", _unet),
]
BY_NAME = {e.name: e for e in CORPUS}


def library_version(library: str) -> str:
    if library == "sgc_trace.tools.zoo":
        from ..version import __version__

        return f"sgc_trace {__version__}"
    module = __import__(library)
    return f"{library} {module.__version__.split('+')[0]}"


def export_entry(entry: Entry, small: bool = False, device_profile: str | None = None) -> dict:
    """The graph of one corpus model (`small`: at the test size)."""
    spec = entry.make(small)
    meta = {"model": entry.model, "library": library_version(entry.library)}
    if entry.notes:
        meta["notes"] = entry.notes
    return export(
        spec.factory,
        spec.loss,
        spec.inputs,
        num_model_inputs=spec.num_model_inputs,
        name=entry.name,
        raw_output=spec.raw_output,
        meta=meta,
        device_profile=device_profile,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sgc_trace.tools.corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for NAME.json.gz")
    p.add_argument("--only", nargs="+", choices=sorted(BY_NAME), help="export only these models")
    p.add_argument("--small", action="store_true", help="small batch/sequence/image (the test sizes)")
    p.add_argument("--device-profile", default=None, help="roofline device for time_us (default: sgc's, a100)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    entries = [BY_NAME[n] for n in a.only] if a.only else CORPUS
    print(f"{'model':<20} {'batch':>5} {'input':<18} {'ops':>6} {'tensors':>7} {'bytes':>10} {'export':>8}")
    for entry in entries:
        start = time.perf_counter()
        try:
            graph = export_entry(entry, a.small, a.device_profile)
        except ExportError as e:
            print(f"error: {entry.name}: {e}", file=sys.stderr)
            return 1
        seconds = time.perf_counter() - start
        path = out / f"{entry.name}.json.gz"
        save(graph, path)
        s = summary(graph)
        first = next(t for t in graph["tensors"] if t.get("kind") == "input")
        shape = "x".join(str(d) for d in first["shape"])
        print(f"{entry.name:<20} {graph['meta']['batch_size']:>5} {shape:<18} {s['ops']:>6} {s['tensors']:>7} "
              f"{path.stat().st_size:>10} {seconds:>7.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
