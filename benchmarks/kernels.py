"""Our Triton kernels against torch eager, per operation and corpus shape.

On a CUDA machine this times the gpu corpus (Wan 2.x shapes) with CUDA events
and an L2 flush before every call, and prints achieved GB/s and the share of
the device's peak bandwidth. Without CUDA the kernels run under Triton's
interpreter on the small cpu corpus: the times then measure the interpreter,
not the kernels, and are printed only to show the harness works.

    python benchmarks/kernels.py [--corpus cpu|gpu] [--runs N] [--warmup N] [--ops a,b] [--json FILE]
                                 [--overhead-calls N] [--startup-runs N]

It then reports the isolated harness's overhead per call (registry evaluate
runs the candidate in a worker process, docs/kernels.md "Threat model"): for
each op, the median time the harness's clock sees for one call over the
corpus, against the same kernel called over the same inputs in this process
(the unisolated path the harness used before), and the whole per-call cost
(staging fresh inputs, the run, copying outputs and inputs back, the checks).

Last, the evaluation's start-up (worker start, until the entry is imported
and answers): one unsandboxed worker holding the kernel (the harness before
the sandbox, which ran both arms in one process) against what an evaluation
starts now, the candidate's sandboxed worker and the baseline's, side by side.
The two are timed alternately in one run (ABBA), and the ratio of medians is
the start-up cost of the sandbox.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

if not torch.cuda.is_available():  # must precede the kernel imports: Triton reads it at decoration
    os.environ.setdefault("TRITON_INTERPRET", "1")

from registry.evidence.timing import time_paired  # noqa: E402
from contextlib import ExitStack  # noqa: E402

from registry.evidence.timing import abba_schedule  # noqa: E402
from registry.kernels.evaluate import open_workers, execution_device, fresh_inputs  # noqa: E402
from registry.kernels.isolation import CandidateWorker  # noqa: E402
from registry.kernels.ops import get_operation, list_operations, resolve_entry  # noqa: E402


def _parse(argv: list[str] | None) -> argparse.Namespace:
    gpu = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=["cpu", "gpu"], default="gpu" if gpu else "cpu")
    parser.add_argument("--runs", type=int, default=20 if gpu else 3, help="timed ABBA pairs per shape")
    parser.add_argument("--warmup", type=int, default=5 if gpu else 1, help="untimed pairs per shape")
    parser.add_argument("--ops", default=",".join(s.name for s in list_operations()), help="comma-separated")
    parser.add_argument("--json", help="also write one row per op and shape to this file")
    parser.add_argument("--overhead-calls", type=int, default=20 if gpu else 10,
                        help="calls per op for the isolation overhead table (0 skips it)")
    parser.add_argument("--startup-runs", type=int, default=4,
                        help="start-ups timed per arm for the start-up table (0 skips it)")
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
            item = time_paired(lambda: reference(*inputs), lambda: kernel(*inputs), args.runs, args.warmup, device,  # noqa: F821 - called before the del
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
    overhead = []
    if args.overhead_calls > 0:
        print(f"\nisolation overhead per call over the {args.corpus} corpus ({args.overhead_calls} calls, medians; "
              "in-process = the unisolated path)")
        print(f"{'op':26} {'in-process ms':>14} {'isolated clock ms':>18} {'overhead ms':>12} {'whole call ms':>14} "
              f"{'eager ms':>10} {'eager iso ms':>12} {'eager ovh ms':>12} {'eager waited ms':>15}")
        overhead = [harness_overhead(name, args.corpus, device, args.overhead_calls) for name in args.ops.split(",")]
    startup = startup_overhead(get_operation(args.ops.split(",")[0]), device, args.startup_runs) \
        if args.startup_runs > 0 else None
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"corpus": args.corpus, "runs": args.runs, "warmup": args.warmup, "rows": rows,
                       "isolation_overhead": overhead, "startup": startup}, fh, indent=1)
    return 0


def _in_process_seconds(kernel, inputs) -> float:
    if inputs[0][0].device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter_ns()
    for case_inputs in inputs:
        kernel(*case_inputs)
    if inputs[0][0].device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / 1e9


def _measure_overhead(spec, cases, device: torch.device, calls: int, seen: dict[str, list[float]]) -> None:
    arms = {"C": resolve_entry(spec.kernels[0]), "B": resolve_entry(spec.reference)}
    with ExitStack() as stack:
        workers = dict(zip("CB", open_workers(stack, spec.kernels[0], spec.reference, device, screen=False,
                                                sandboxed=True)))
        for i in range(calls + 1):  # the first call of each path compiles or warms up; dropped
            for arm, fn in arms.items():
                inputs = fresh_inputs(spec, cases, device)
                direct = _in_process_seconds(fn, inputs)
                start = time.perf_counter_ns()
                call = workers[arm].call(arm, inputs, output_bytes=1 << 40)
                total = (time.perf_counter_ns() - start) / 1e9
                if i:
                    seen[f"{arm}_in"].append(direct)
                    seen[f"{arm}_clock"].append(call.seconds)
                    if arm == "C":
                        seen["C_whole"].append(total)
                    elif call.waited_s is not None:
                        seen["B_waited"].append(call.waited_s)


def harness_overhead(name: str, corpus: str, device: torch.device, calls: int) -> dict:
    """Median per-call times over the corpus, kernel and eager reference: in this process, and as the
    isolated harness's clock sees it; and the kernel's whole isolated call (staging, checks). Prints
    one line of the overhead table. The eager columns show the fixed cost of the round trip, which
    interpreter times on CPU drown. Both paths run on one torch thread, as the worker does. Last, the
    median time the eager reference's isolated call waited for a CPU, as the harness read it from
    /proc (`baseline_waited_s`; "-" where unreported)."""
    spec = get_operation(name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    seen: dict[str, list[float]] = {key: [] for key in ("C_in", "C_clock", "C_whole", "B_in", "B_clock",
                                                        "B_waited")}
    try:
        _measure_overhead(spec, spec.corpus(corpus), device, calls, seen)
    finally:
        torch.set_num_threads(threads)
    median = {key: statistics.median(values) if values else None for key, values in seen.items()}
    row = {"op": name, "corpus": corpus, "calls": calls, "in_process_s": median["C_in"],
           "isolated_clock_s": median["C_clock"], "isolated_whole_call_s": median["C_whole"],
           "clock_overhead_s": median["C_clock"] - median["C_in"],
           "eager_in_process_s": median["B_in"], "eager_isolated_clock_s": median["B_clock"],
           "eager_clock_overhead_s": median["B_clock"] - median["B_in"], "eager_waited_s": median["B_waited"]}
    waited = "-" if row["eager_waited_s"] is None else f"{row['eager_waited_s'] * 1e3:.3f}"
    print(f"{name:26} {row['in_process_s'] * 1e3:14.3f} {row['isolated_clock_s'] * 1e3:18.3f} "
          f"{row['clock_overhead_s'] * 1e3:12.3f} {row['isolated_whole_call_s'] * 1e3:14.3f} "
          f"{row['eager_in_process_s'] * 1e3:10.3f} {row['eager_isolated_clock_s'] * 1e3:12.3f} "
          f"{row['eager_clock_overhead_s'] * 1e3:12.3f} {waited:>15}", flush=True)
    return row


def _start_seconds(spec, device: torch.device, sandboxed: bool) -> float:
    """Seconds from nothing to an evaluation's workers answering their hello (and closed again)."""
    start = time.perf_counter_ns()
    if sandboxed:
        with ExitStack() as stack:
            open_workers(stack, spec.kernels[0], spec.reference, device, screen=False, sandboxed=True)
            seconds = (time.perf_counter_ns() - start) / 1e9
    else:
        with CandidateWorker(spec.kernels[0], device, screen=False, sandboxed=False):
            seconds = (time.perf_counter_ns() - start) / 1e9
    return seconds


def startup_overhead(spec, device: torch.device, runs: int) -> dict:
    """Median start-up of one unsandboxed worker (before) and of the two sandboxed ones (now), timed in ABBA
    order in this run; prints the table's lines."""
    seen: dict[str, list[float]] = {"before": [], "sandboxed": []}
    for order in abba_schedule(runs):
        for arm in order:
            key = "before" if arm == "B" else "sandboxed"
            seen[key].append(_start_seconds(spec, device, sandboxed=key == "sandboxed"))
    median = {key: statistics.median(values) for key, values in seen.items()}
    row = {"op": spec.name, "runs": runs, "before_s": median["before"], "sandboxed_s": median["sandboxed"],
           "ratio": median["sandboxed"] / median["before"], "before_all_s": seen["before"],
           "sandboxed_all_s": seen["sandboxed"]}
    print(f"\nevaluation start-up ({runs} per arm, medians): one unsandboxed worker {row['before_s']:.2f} s, "
          f"two sandboxed workers side by side {row['sandboxed_s']:.2f} s, ratio {row['ratio']:.2f}", flush=True)
    return row


if __name__ == "__main__":
    sys.exit(main())
