"""Paired, interleaved (ABBA) timing: the raw material of benchmark evidence.

Timing each arm in its own block lets drift (clocks, thermals, a neighbour's
load) masquerade as a speedup; pairing each baseline run with a candidate run
and alternating which goes first (BC, CB, BC, ...) cancels linear drift within
a pair of pairs. The harness keeps every raw per-run time; the registry takes
medians and per-pair ratios itself and never trusts a client summary
(docs/architecture.md, "Events").

On CUDA each call is timed with CUDA events after a 256 MB write that evicts
the L2 cache (an H200 has 60 MB), so no arm reads inputs the other left
cached. On CPU the timer is ``time.perf_counter_ns``; a Triton candidate run
under ``TRITON_INTERPRET=1`` is marked ``timer: "interpreter"`` because the
interpreter's times say nothing about GPU speed.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from registry.formats.ranks import MAX_RUNS_PER_ARM

FLUSH_BYTES = 256 * 1024 * 1024

# Peak DRAM bandwidth in bytes/s by the name torch.cuda.get_device_name reports.
# Vendor datasheet figures; a device missing here gets no bandwidth share.
PEAK_BANDWIDTH = {
    "NVIDIA H200": 4.8e12,
    "NVIDIA H100 80GB HBM3": 3.35e12,
    "NVIDIA H100 PCIe": 2.0e12,
    "NVIDIA A100-SXM4-80GB": 2.039e12,
    "NVIDIA A100-SXM4-40GB": 1.555e12,
}

Progress = Callable[[int, int], None]


def peak_bandwidth(device_name: str) -> float | None:
    """Datasheet peak bytes/s for ``device_name`` (exact name or name + suffix), else None."""
    for name, peak in PEAK_BANDWIDTH.items():
        if device_name == name or device_name.startswith(name + " "):
            return peak
    return None


def triton_interpreter_active() -> bool:
    """True when TRITON_INTERPRET holds a value Triton reads as on."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in {"1", "true", "on", "yes"}


def abba_schedule(pairs: int) -> list[str]:
    """Order within each pair: "BC" (baseline first) for even pairs, "CB" for odd ones."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        raise ValueError(f"pairs must be a positive integer, got {pairs!r}")
    return ["BC" if i % 2 == 0 else "CB" for i in range(pairs)]


class _CpuTimer:
    timer = "perf_counter"
    arch = "cpu"

    def __init__(self) -> None:
        self.device = f"cpu ({platform.machine() or 'unknown'})"

    def __call__(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter_ns()
        fn()
        elapsed = time.perf_counter_ns() - start
        if elapsed <= 0:
            raise RuntimeError("a call measured 0 ns: below the timer's resolution")
        return elapsed / 1e9


class _CudaTimer:
    timer = "cuda_event"

    def __init__(self, device: torch.device) -> None:
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.device = torch.cuda.get_device_name(self.index)
        major, minor = torch.cuda.get_device_capability(self.index)
        self.arch = f"sm{major}{minor}"  # the support matrix's column (sm90, sm100)
        self.flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=f"cuda:{self.index}")

    def __call__(self, fn: Callable[[], Any]) -> float:
        with torch.cuda.device(self.index):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            self.flush.zero_()
            start.record()
            fn()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        if seconds <= 0:
            raise RuntimeError("a call measured 0 s on CUDA events")
        return seconds


def _timer_for(device: torch.device | str) -> _CpuTimer | _CudaTimer:
    dev = torch.device(device)
    if dev.type == "cpu":
        return _CpuTimer()
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {dev} requested but torch sees no CUDA device")
        return _CudaTimer(dev)
    raise ValueError(f"unsupported timing device {dev}; expected cpu or cuda")


def timer_names(device: torch.device | str) -> tuple[str, str]:
    """(timer, device name) that time_paired records for `device`: what a benchmark session is opened with."""
    timer = _timer_for(device)
    return timer.timer, timer.device


def time_paired(baseline_fn: Callable[[], Any], candidate_fn: Callable[[], Any], runs: int, warmup: int,
                device: torch.device | str, *, bytes_moved: float | None = None, triton_candidate: bool = False,
                interpreted: bool = False, progress: Progress | None = None,
                notes: str | None = None) -> dict[str, Any]:
    """Time ``runs`` ABBA pairs after ``warmup`` untimed pairs; return a paired benchmark item.

    Each arm therefore runs ``warmup + runs`` times; pair i of the item is
    (baseline_s[i], candidate_s[i]) in the order schedule[i] gives.

    ``bytes_moved`` (one candidate call's bytes, from a cost model) adds the
    achieved share of the device's peak bandwidth when timed with CUDA events
    on a device of known peak. ``triton_candidate`` says the candidate runs
    Triton kernels: with the interpreter on, the item is marked as interpreter
    timing. ``interpreted`` marks it so whatever the environment says now: a
    caller that saw its kernels launch interpreted (Triton fixes that when a
    kernel module is imported) passes it, so the mark never depends on the
    variable still being set. ``progress(done, total)`` is called after every call, warm-ups
    included (whole-generation timing can take minutes per call).
    """
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    schedule = abba_schedule(runs)
    if runs > MAX_RUNS_PER_ARM:  # refused before timing anything, not after hours of runs
        raise ValueError(f"runs: {runs} is above the {MAX_RUNS_PER_ARM} runs per arm benchmark evidence may carry")
    if bytes_moved is not None and not (isinstance(bytes_moved, (int, float)) and bytes_moved > 0):
        raise ValueError(f"bytes_moved must be a positive number, got {bytes_moved!r}")
    timer = _timer_for(device)
    arms = {"B": baseline_fn, "C": candidate_fn}
    total, done = 2 * (warmup + runs), 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    for order in abba_schedule(warmup) if warmup else []:
        for arm in order:
            arms[arm]()
            tick()
    if isinstance(timer, _CudaTimer):
        torch.cuda.synchronize(timer.index)
    times: dict[str, list[float]] = {"B": [], "C": []}
    for order in schedule:
        for arm in order:
            times[arm].append(timer(arms[arm]))
            tick()

    item: dict[str, Any] = {
        "kind": "benchmark",
        "protocol": "paired",
        "device": timer.device,
        "timer": timer.timer,
        "baseline_s": times["B"],
        "candidate_s": times["C"],
        "schedule": schedule,
        "warmup": warmup,
        "arch": timer.arch,
    }
    if interpreted or (triton_candidate and triton_interpreter_active()):
        item["device"] = f"{'cpu' if isinstance(timer, _CpuTimer) else timer.device} (triton interpreter)"
        item["timer"] = "interpreter"
    peak = peak_bandwidth(timer.device) if item["timer"] == "cuda_event" else None
    if bytes_moved is not None and peak is not None:
        item["bandwidth_share"] = bytes_moved / statistics.median(times["C"]) / peak
    texts = [notes] if notes else []
    if isinstance(timer, _CudaTimer):
        texts.append(f"L2 flushed by a {FLUSH_BYTES >> 20} MB write before every timed call")
    if texts:
        item["notes"] = "; ".join(texts)
    return item
