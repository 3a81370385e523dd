"""Every OpInfo of PyTorch's `op_db` whose samples sgc's executor runs, sample by sample
against PyTorch (`sgc_trace.tools.opinfo`): the table of docs/ops.md (`just opinfo`).

    python bench/opinfo_walk.py --out ../target/opinfo.md [--max-samples 8] [--only exp,sum]
    python bench/opinfo_walk.py --dtype bfloat16   # the samples in bf16 (float32, float64, bfloat16, float16)
    python bench/opinfo_walk.py --check 0.95   # exit 1 below a 95% pass rate
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import torch

from sgc_trace.tools.opinfo import walk


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the markdown table here (default: stdout)")
    ap.add_argument("--max-samples", type=int, default=8, help="samples per OpInfo, the first ones (default 8)")
    ap.add_argument("--only", help="comma-separated OpInfo names (default: all of op_db)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"],
                    help="the samples' dtype (default float32)")
    ap.add_argument("--check", type=float, help="exit 1 when the pass rate is below this fraction, or a sample crashed")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    start = time.time()
    names = args.only.split(",") if args.only else None
    report = walk(names, dtype=getattr(torch, args.dtype), max_samples=args.max_samples, progress=lambda n: print(n, file=sys.stderr, flush=True))
    c = report.counts()
    head = (f"torch {torch.__version__}; at most {args.max_samples} samples per OpInfo; "
            f"{len(set(r.opinfo for r in report.results))} OpInfos walked in {time.time() - start:.0f} s.\n\n")
    text = head + report.markdown()
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        print(text)
    print(f"{args.dtype}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped of the implemented OpInfos; "
          f"pass rate {100 * report.pass_rate:.1f}%", file=sys.stderr)
    if args.check is not None and report.pass_rate < args.check:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
