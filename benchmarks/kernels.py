"""Our Triton kernels against torch eager, per operation and corpus shape.

On a CUDA machine this times the gpu corpus (Wan 2.x shapes) with CUDA events
and an L2 flush before every call, and prints achieved GB/s and the share of
the device's peak bandwidth. Without CUDA the kernels run under Triton's
interpreter on the small cpu corpus: the times then measure the interpreter,
not the kernels, and are printed only to show the harness works.

    python benchmarks/kernels.py [--corpus cpu|gpu] [--runs N] [--warmup N] [--ops a,b] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

if not torch.cuda.is_available():  # must precede the kernel imports: Triton reads it at decoration
    os.environ.setdefault("TRITON_INTERPRET", "1")

from registry.evidence.timing import time_paired  # noqa: E402
from registry.kernels.evaluate import execution_device  # noqa: E402
from registry.kernels.ops import get_operation, list_operations, resolve_entry  # noqa: E402


def _parse(argv: list[str] | None) -> argparse.Namespace:
    gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=["cpu", "gpu"], default="gpu" if gpu else "cpu")
    parser.add_argument("--runs", type=int, default=20 if gpu else 3, help="timed ABBA pairs per shape")
    parser.add_argument("--warmup", type=int, default=5 if gpu else 1, help="untimed pairs per shape")
    parser.add_argument("--ops", default=",".join(s.name for s in list_operations()), help="comma-separated")
    parser.add_argument("--json", help="also write one row per op and shape to this file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if not torch.cuda.is_available():
        print("No CUDA device: kernels run under Triton's interpreter on CPU. These timings measure the "
              "interpreter and are NOT meaningful as kernel speed; only the small cpu corpus is run.")
        args.corpus = "cpu"
    device = execution_device(args.corpus)
    rows = []
    header = f"{'op':26} {'shape (B,S,D)':22} {'dtype':9} {'kernel ms':>10} {'eager ms':>10} {'speedup':>8}"
    if device.type == "cuda":
        header += f" {'GB/s':>8} {'% peak':>7}"
        print(f"device: {torch.cuda.get_device_name(device)}; torch {torch.__version__}")
    print(header)
    for name in args.ops.split(","):
        spec = get_operation(name)
        reference, kernel = resolve_entry(spec.reference), resolve_entry(spec.kernels[0])
        for case in spec.corpus(args.corpus):
            inputs = spec.make_inputs(case, device)
            cost = spec.cost(case)
            item = time_paired(lambda: reference(*inputs), lambda: kernel(*inputs), args.runs, args.warmup, device,
                               bytes_moved=cost.bytes, triton_candidate=True)
            kernel_s = statistics.median(item["candidate_s"])
            eager_s = statistics.median(item["baseline_s"])
            speedup = statistics.median(b / c for b, c in zip(item["baseline_s"], item["candidate_s"]))
            row = {"op": name, "shape": [case.batch, case.seq, case.dim], "dtype": case.dtype,
                   "kernel_s": kernel_s, "eager_s": eager_s, "speedup_median_of_pairs": speedup,
                   "timer": item["timer"], "device": item["device"], "bytes": cost.bytes,
                   "kernel_gb_s": cost.bytes / kernel_s / 1e9, "bandwidth_share": item.get("bandwidth_share")}
            rows.append(row)
            line = (f"{name:26} {str(tuple(row['shape'])):22} {case.dtype:9} {kernel_s * 1e3:10.3f} "
                    f"{eager_s * 1e3:10.3f} {speedup:8.2f}")
            if device.type == "cuda":
                share = row["bandwidth_share"]
                line += f" {row['kernel_gb_s']:8.0f} {'' if share is None else f'{100 * share:6.1f}%':>7}"
            print(line, flush=True)
            del inputs
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"corpus": args.corpus, "runs": args.runs, "warmup": args.warmup, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
