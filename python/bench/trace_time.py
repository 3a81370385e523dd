"""How long tracing takes, phase by phase, on CPU fakes and CUDA fakes.

    python bench/trace_time.py [--devices cpu,cuda] [--only gpt2,vit_b_16] [--check 60] [--out FILE]
                               [--profile FILE]

Exports GPT-2 small (12 layers, 768 wide, batch 8, 512 tokens), ViT-B/16 (batch 32, 224x224)
and BERT-base (batch 8, 512 tokens), built in code with random weights, with
`sgc_trace.exporter` (batch marking included, as `sgc_trace.compile` traces), once per device:
`cpu` and `cuda`. A CUDA trace needs no GPU: the weights and the batch are fake CUDA tensors
and nothing reaches the CUDA runtime (`tests/test_devices.py`); where a GPU is present, the
same path runs there. Each row gives the phases `export(timings=...)` reports: the fake model
(`build`), AOTAutograd's joint graph (`trace`), the conversion to an sgc graph (`convert`),
and the second trace that marks batch axes (`mark_batch`), in wall seconds.

`--check S` exits 1 when any export takes S seconds or more (CI runs `--check 60`).
`--profile FILE` writes a cProfile listing of each export into one file (the 40 costliest
functions by cumulative time), to find what a slow trace spends its time on.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sgc_trace.exporter.api import export  # noqa: E402
from sgc_trace.tools.cli import lm_cross_entropy  # noqa: E402
from sgc_trace.tools.corpus import image_inputs, token_inputs  # noqa: E402

PHASES = ("build", "trace", "convert", "mark_batch")


def models() -> dict:
    """name -> (what, factory, inputs, loss)."""
    import torchvision
    import transformers

    return {
        "gpt2": ("GPT-2 small (12 x 768), batch 8, 512 tokens",
                 lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()), token_inputs(8, 512, 50257),
                 lm_cross_entropy),
        "vit_b_16": ("ViT-B/16, batch 32, 224x224", lambda: torchvision.models.vit_b_16(),
                     image_inputs(32, 224), F.cross_entropy),
        "bert_base": ("BERT-base (masked LM), batch 8, 512 tokens",
                      lambda: transformers.BertForMaskedLM(transformers.BertConfig()), token_inputs(8, 512, 30522),
                      lm_cross_entropy),
    }


def timed_export(factory, inputs, loss, device: str, profile: Path | None = None,
                 title: str = "") -> tuple[dict, dict]:
    """(phase seconds with `total`, the graph); with `profile`, appends a cProfile listing."""
    timings: dict = {}
    prof = cProfile.Profile() if profile is not None else None
    start = time.perf_counter()
    if prof is not None:
        prof.enable()
    graph = export(factory, loss, inputs, device=device, timings=timings)
    if prof is not None:
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(40)
        with profile.open("a") as f:
            f.write(f"== {title}\n{out.getvalue()}\n")
    timings["total"] = time.perf_counter() - start
    return timings, graph


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="cpu,cuda")
    p.add_argument("--only", default="")
    p.add_argument("--check", type=float, default=None, help="fail when an export takes this many seconds")
    p.add_argument("--out", help="also write the table to this markdown file")
    p.add_argument("--profile", help="file for a cProfile listing of each export")
    a = p.parse_args(argv)
    table = models()
    names = [n for n in table if not a.only or n in a.only.split(",")]
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU: CUDA traces use fake tensors"
    lines = [f"Tracing time (`python/bench/trace_time.py`; torch {torch.__version__}, {gpu}): wall seconds per "
             f"phase of `sgc_trace.exporter`, batch marking included.", "",
             "| model | device | ops | " + " | ".join(PHASES) + " | total |",
             "|---|---|---:|" + "---:|" * len(PHASES) + "---:|"]
    print("\n".join(lines), flush=True)
    slow = []
    for name in names:
        what, factory, inputs, loss = table[name]
        for device in a.devices.split(","):
            prof = Path(a.profile) if a.profile else None
            t, graph = timed_export(factory, inputs, loss, device, prof, f"{name} on {device}")
            row = (f"| {what} | {device} | {len(graph['ops'])} | "
                   + " | ".join(f"{t.get(k, 0.0):.1f}" for k in PHASES) + f" | {t['total']:.1f} |")
            lines.append(row)
            print(row, flush=True)
            if a.check is not None and t["total"] >= a.check:
                slow.append(f"{name} on {device}: {t['total']:.1f} s")
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    if slow:
        print(f"error: traced in {a.check:.0f} s or more: {', '.join(slow)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
