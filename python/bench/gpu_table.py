"""sgc plans applied in PyTorch on a GPU, beside eager and `torch.compile` (the GPU check).

    python bench/gpu_table.py --out gpu.md [--only resnet50,gpt2] [--small] [--device cuda]
    (also: python bench/vs_torch.py --device cuda --out gpu.md)

Per model (ResNet-50 batch 64 at 224x224, GPT-2 small batch 8 x 512 tokens, ViT-B/16 batch
32; `--small`: the same architectures at CPU sizes, for a dry run), one row per step:

* `eager`: `loss_fn(model(x), y).backward()`, the reference;
* `torch.compile (inductor)`: `torch.compile(model)` with the same loss and backward: what
  PyTorch's own compiler changes in the numbers, the yardstick of the last column;
* `sgc none`: sgc's `none` plan applied (`sgc_trace.compile`, aot_eager: the traced step,
  nothing recomputed), and the same with `backend="inductor"`;
* `sgc sublinear`: the default plan at its lowest peak (20 generations);
* `sgc backend (aot_eager)`, `sgc backend (inductor)`: the user's own loop with
  `torch.compile(model, backend=sgc_trace.backend(compiler=...))`, each graph planned at
  its lowest peak;
* `torch.compile` at `activation_memory_budget` 1.0, 0.5 and 0.2 (AOTAutograd with eager
  kernels and the min-cut partitioner: the same runtime as sgc's aot_eager steps), and
  `sgc partition` at the bytes each of the last two saves for the backward.

Columns: the peak (bytes allocated during the step over the parameters, the batch and
what was allocated before it: `torch.cuda.max_memory_allocated`), milliseconds per step
(CUDA events; median of `--repeat` steps after `--warmup` steps that are not counted; each
step starts with `.grad` unset, as after `zero_grad()`), sgc's prediction of the peak, the
bytes saved for the backward, and the gradient check: the largest difference from eager's
loss and gradients, each relative to that tensor's largest value (`rel. diff`), and that
difference over `torch.compile`'s own on the same model (`vs torch.compile`: sgc's rows
must stay within 2x of it; `--check` exits non-zero when one does not). Dropout is off in
every model (GPT-2's three dropouts are 0): with it, every compiled step draws other masks
than eager's and no difference would mean anything.

A second table checks the numbers under strict settings: TF32 off and deterministic
algorithms (`torch.use_deterministic_algorithms(True)`, cuDNN benchmark off) for a small
transformer and for ResNet-50 after a few SGD steps: eager against the `none` and the
sublinear steps, and against `torch.compile`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sgc_trace  # noqa: E402
from sgc_trace.apply import compile as sgc_compile  # noqa: E402
from sgc_trace.apply import input_specs, predicted_peak, trace  # noqa: E402
from sgc_trace.tools.cli import lm_cross_entropy  # noqa: E402
from sgc_trace.errors import first_line  # noqa: E402
from sgc_trace.tools.measure import eager_step, fresh, torch_compiled_step  # noqa: E402
from sgc_trace.apply.planner import plan  # noqa: E402

BUDGETS = (1.0, 0.5, 0.2)
# An sgc row may differ from eager by at most this multiple of torch.compile's own
# difference, plus TINY (where both are at rounding level).
DIFF_LIMIT = 2.0
TINY = 1e-6


def models(small: bool) -> dict:
    """name -> (what, factory, batch maker (device -> tensors), loss)."""
    import torchvision
    import transformers

    def images(b, size):
        def make(device):
            g = torch.Generator().manual_seed(0)
            return (torch.randn(b, 3, size, size, generator=g).to(device),
                    torch.randint(0, 1000, (b,), generator=g).to(device))
        return make

    def tokens(b, seq, vocab):
        def make(device):
            g = torch.Generator().manual_seed(0)
            return (torch.randint(0, vocab, (b, seq), generator=g).to(device),
                    torch.randint(0, vocab, (b, seq), generator=g).to(device))
        return make

    off = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}  # dropout off: see the module doc
    gpt = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, **off) if small else transformers.GPT2Config(**off)
    return {
        "resnet50": (f"ResNet-50, batch {4 if small else 64}, {64 if small else 224}x{64 if small else 224}",
                     torchvision.models.resnet50, images(4 if small else 64, 64 if small else 224), F.cross_entropy),
        "gpt2": (f"GPT-2 {'(2 x 128)' if small else 'small (12 x 768)'}, batch {2 if small else 8}, "
                 f"{64 if small else 512} tokens",
                 lambda: transformers.GPT2LMHeadModel(gpt), tokens(2 if small else 8, 64 if small else 512, 50257),
                 lm_cross_entropy),
        "vit_b_16": (f"ViT-B/16, batch {2 if small else 32}, {64 if small else 224}x{64 if small else 224}",
                     (lambda: torchvision.models.vit_b_16(image_size=64)) if small else torchvision.models.vit_b_16,
                     images(2 if small else 32, 64 if small else 224), F.cross_entropy),
    }


class Clock:
    """Milliseconds and peak bytes of one step function, as a user's loop sees them."""

    def __init__(self, device: torch.device, warmup: int, repeat: int):
        self.device, self.warmup, self.repeat = device, warmup, repeat

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def peak(self, model, fn, batch) -> int:
        for p in model.parameters():
            p.grad = None
        self._sync()
        if self.device.type != "cuda":
            from sgc_trace.tools.measure import peak_bytes
            return peak_bytes(fn, *batch)[1].bytes
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fn(*batch)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    def ms(self, model, fn, batch) -> float:
        times = []
        for i in range(self.warmup + self.repeat):
            for p in model.parameters():
                p.grad = None
            if self.device.type == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(*batch)
                end.record()
                end.synchronize()
                t = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                fn(*batch)
                t = (time.perf_counter() - t0) * 1e3
            if i >= self.warmup:
                times.append(t)
        return statistics.median(times)


def rel_diff(model, loss, ref_model, ref_loss) -> float:
    """The largest difference from the reference, each tensor's relative to its largest
    value: the loss, every gradient."""
    worst = abs(loss.item() - ref_loss.item()) / max(abs(ref_loss.item()), 1e-30)
    ref = dict(ref_model.named_parameters())
    for name, p in model.named_parameters():
        q = ref[name]
        if p.grad is None or q.grad is None:
            if (p.grad is None) != (q.grad is None):
                return float("inf")
            continue
        scale = q.grad.abs().max().item()
        worst = max(worst, (p.grad - q.grad).abs().max().item() / max(scale, 1e-30))
    return worst


def one_step(model, fn, batch, seed=0):
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    return fn(*batch)


def model_rows(name, what, factory, make_batch, loss_fn, device, clock, genetic_iters) -> list[str]:
    torch.manual_seed(0)
    base_model = factory().to(device).train()
    batch = make_batch(device)
    rows = []

    ref = fresh(base_model)
    ref_step = eager_step(ref, loss_fn)
    ref_loss = one_step(ref, ref_step, batch)

    yardstick: list[float] = []  # torch.compile's own difference from eager

    def row(label, model, fn, predicted=None, saved=None, note=""):
        try:
            return measured_row(label, model, fn, predicted, saved, note)
        except Exception as e:  # one failing step is a row that says so, not a lost table
            rows.append(f"| {name} | {label} | | | | | | | **failed**: {first_line(e, 200)} |")
            print(rows[-1], flush=True)
            return float("nan"), float("nan")

    def measured_row(label, model, fn, predicted, saved, note):
        loss = one_step(model, fn, batch)
        diff = rel_diff(model, loss, ref, ref_loss)
        peak = clock.peak(model, fn, batch)
        ms = clock.ms(model, fn, batch)
        pred = f"{predicted / 1e9:.2f} GB ({peak / predicted:.2f}x)" if predicted else ""
        sv = f"{saved / 1e9:.2f} GB" if saved is not None else ""
        vs = f"{diff / yardstick[0]:.2f}x" if yardstick and yardstick[0] > 0 else ""
        if label.startswith("sgc") and yardstick and diff > DIFF_LIMIT * yardstick[0] + TINY:
            note = f"**over {DIFF_LIMIT:g}x torch.compile's difference** {note}"
        rows.append(f"| {name} | {label} | {peak / 1e9:.2f} GB | {ms:.1f} | {pred} | {sv} | {diff:.1e} | {vs} | {note} |")
        print(rows[-1], flush=True)
        return peak, ms

    eager_peak, eager_ms = row("eager", ref, ref_step, note="the reference")
    torch._dynamo.reset()
    theirs = fresh(base_model)
    compiled_model = torch.compile(theirs)
    row("torch.compile (inductor)", theirs, eager_step(compiled_model, loss_fn),
        note="PyTorch's own compiler: the yardstick of the last column")
    yardstick.append(rel_diff(theirs, one_step(theirs, eager_step(compiled_model, loss_fn), batch), ref, ref_loss))
    for compiler in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        mine = fresh(base_model)
        be = sgc_trace.backend(genetic_iters=genetic_iters, compiler=compiler)
        fn = eager_step(torch.compile(mine, backend=be, dynamic=False), loss_fn)
        try:
            one_step(mine, fn, batch)  # compiles and plans
        except Exception:
            pass  # the row says what failed
        row(f"sgc backend ({compiler})", mine, fn,
            note=f"{len(be.graphs)} graph(s) planned; loss.backward() in the user's loop")
    torch._dynamo.reset()
    t0 = time.perf_counter()
    traced = trace(base_model, loss_fn, input_specs(batch, 1))
    trace_s = time.perf_counter() - t0
    graph = traced[0]

    def sgc_row(label, p, backend="aot_eager", note=""):
        m = fresh(base_model)
        step = sgc_compile(m, loss_fn, batch, plan=p, traced=traced, backend=backend)
        peak, ms = row(label, m, step, predicted=predicted_peak(graph, p)["step"], saved=None, note=note)
        return step, peak, ms

    none = plan(graph, strategy="none")
    step, _, none_ms = sgc_row("sgc none (aot_eager)", none, note=f"traced in {trace_s:.0f} s")
    sgc_row("sgc none (inductor)", none, backend="inductor")
    t0 = time.perf_counter()
    sub = plan(graph, genetic_iters=genetic_iters)
    plan_s = time.perf_counter() - t0
    s = sub["summary"]
    _, sub_peak, sub_ms = sgc_row(
        "sgc sublinear", sub,
        note=f"planned in {plan_s:.0f} s; recompute {s['recompute_share']:.1%} of a step predicted")
    rows.append(f"| {name} | (sublinear vs eager) | {sub_peak / eager_peak:.2f}x | {sub_ms / eager_ms:.2f}x | | | | | "
                f"none {none_ms / eager_ms:.2f}x eager's time |")
    print(rows[-1], flush=True)
    def torch_budget_rows(b: float) -> None:
        """torch.compile at budget `b`; below 1.0, sgc's partition plan at the bytes it saved."""
        torch._dynamo.reset()
        m = fresh(base_model)
        ts = torch_compiled_step(m, loss_fn, b)
        one_step(m, ts.run, batch)  # compiles; records what it saves
        peak_t, ms_t = row(f"torch.compile {b:.1f}", m, ts.run, saved=ts.saved_bytes)
        if b < 1.0:
            p = plan(graph, strategy="partition", budget=ts.saved_bytes, budget_of="saved")
            m2 = fresh(base_model)
            st = sgc_compile(m2, loss_fn, batch, plan=p, traced=traced)
            one_step(m2, st, batch)
            peak_s, ms_s = row(f"sgc partition at torch {b:.1f}'s saved bytes", m2, st,
                               predicted=predicted_peak(graph, p)["step"], saved=st.saved_bytes)
            rows.append(f"| {name} | (sgc vs torch at {b:.1f}) | {peak_s / peak_t:.2f}x | {ms_s / ms_t:.2f}x | | | | | |")
            print(rows[-1], flush=True)

    for b in BUDGETS:
        try:
            torch_budget_rows(b)
        except Exception as e:
            rows.append(f"| {name} | torch.compile {b:.1f} | | | | | | | **failed**: {first_line(e, 200)} |")
            print(rows[-1], flush=True)
    torch._dynamo.reset()
    del base_model, ref
    return rows


@contextlib.contextmanager
def strict_numerics():
    """TF32 off, deterministic algorithms, cuDNN's autotuner off; restored after."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark,
             torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"))
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved[:3]
        torch.use_deterministic_algorithms(saved[3])
        if saved[4] is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


def strict_rows(device, small: bool) -> list[str]:
    """Eager vs the applied steps (and vs torch.compile's) under `strict_numerics`."""
    import torchvision

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    import train

    rows = []
    g = torch.Generator().manual_seed(0)
    cases = []
    start = torch.randint(0, 256, (16, 1), generator=g)
    data = (start + torch.arange(65)) % 256
    cases.append(("small transformer (examples/train.py TinyGPT), batch 16 x 64", train.TinyGPT,
                  (data[:, :-1].contiguous().to(device), data[:, 1:].contiguous().to(device)), train.lm_loss, 0))
    b, size = (4, 64) if small else (32, 224)
    images = (torch.randn(b, 3, size, size, generator=g).to(device), torch.randint(0, 1000, (b,), generator=g).to(device))
    cases.append((f"ResNet-50 after 20 SGD steps, batch {b}, {size}x{size}", torchvision.models.resnet50, images,
                  F.cross_entropy, 20))
    with strict_numerics():
        for what, factory, batch, loss_fn, warm in cases:
            torch.manual_seed(0)
            model = factory().to(device).train()
            if warm:
                opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
                run = eager_step(model, loss_fn)
                for _ in range(warm):
                    opt.zero_grad(set_to_none=True)
                    run(*batch)
                    opt.step()
            ref = fresh(model)
            ref_loss = one_step(ref, eager_step(ref, loss_fn), batch)
            traced = trace(model, loss_fn, input_specs(batch, 1))
            diffs = {}
            for label, p in (("none", plan(traced[0], strategy="none")), ("sublinear", plan(traced[0], genetic_iters=5))):
                m = fresh(model)
                step = sgc_compile(m, loss_fn, batch, plan=p, traced=traced)
                diffs[label] = rel_diff(m, one_step(m, step, batch), ref, ref_loss)
            torch._dynamo.reset()
            m = fresh(model)
            ts = torch_compiled_step(m, loss_fn, 1.0)
            diffs["torch.compile 1.0"] = rel_diff(m, one_step(m, ts.run, batch), ref, ref_loss)
            torch._dynamo.reset()
            rows.append(f"| {what} | {diffs['none']:.1e} | {diffs['sublinear']:.1e} | {diffs['torch.compile 1.0']:.1e} |")
            print(rows[-1], flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--only", default="")
    p.add_argument("--small", action="store_true", help="CPU-sized models (a dry run of the script)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--genetic-iters", type=int, default=20)
    p.add_argument("--no-strict", action="store_true", help="skip the strict-numerics table")
    p.add_argument("--check", action="store_true",
                   help=f"exit 1 when a row failed or an sgc row differs from eager by more than {DIFF_LIMIT:g}x "
                        f"torch.compile's own difference")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    clock = Clock(device, a.warmup, a.repeat)
    table = models(a.small)
    names = [n for n in table if not a.only or n in a.only.split(",")]
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    start = time.time()
    head = [f"`python/bench/gpu_table.py` on {gpu}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}: "
            f"peak = bytes allocated during the step over what was allocated before it; ms = median of "
            f"{a.repeat} steps after {a.warmup} uncounted; predicted = sgc's prediction of that peak (measured / "
            f"predicted); rel. diff = largest difference from eager's loss and gradients, each relative to the "
            f"tensor's largest value.", "",
            "| model | step | peak | ms / step | predicted peak | saved for backward | rel. diff | vs torch.compile | note |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    rows = []
    out = Path(a.out)
    for name in names:
        what, factory, make_batch, loss_fn = table[name]
        rows.append(f"| **{what}** | | | | | | | | |")
        rows += model_rows(name, what, factory, make_batch, loss_fn, device, clock, a.genetic_iters)
        out.write_text("\n".join(head + rows) + "\n")
        if device.type == "cuda":
            torch.cuda.empty_cache()
    strict = []
    if not a.no_strict:
        strict = ["", "Strict numerics (TF32 off, deterministic algorithms): largest difference from eager, relative "
                      "to each tensor's largest value.", "",
                  "| model | sgc none | sgc sublinear | torch.compile 1.0 |", "|---|---:|---:|---:|"]
        strict += strict_rows(device, a.small)
    out.write_text("\n".join(head + rows + strict) + f"\n\n({time.time() - start:.0f} s)\n")
    print(f"wrote {out} ({time.time() - start:.0f} s)")
    bad = [r for r in rows if "**failed**" in r or "**over" in r]
    if a.check and bad:
        print("check failed:\n" + "\n".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
