"""The GPU-only part of the cheat gallery (technique 15, and technique 1 on torch's CUDA caching allocator).

These need compiled Triton kernels on a CUDA device; they skip elsewhere and
are marked `device`. benchmarks/gpu_kernels.sh runs them when a GPU is lent.
The small cpu corpus is used except where the byte floor needs real sizes.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from gallery import candidate_file
from registry.kernels.evaluate import evaluate_kernel

pytestmark = [pytest.mark.device, pytest.mark.skipif(
    not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
    reason="needs a CUDA GPU with compiled Triton kernels")]


def _evaluate(module: str, folder: Path, corpus: str = "cpu") -> list[dict]:
    entry = f"{candidate_file(module, folder)}:modulated_layernorm"
    return evaluate_kernel("modulated_layernorm", entry, corpus=corpus, runs=2,
                           warmup=1, policy="byte_equal", tolerances_by_dtype=None)


def test_1_freed_reference_memory_on_the_caching_allocator(tmp_path):
    """Written to pass the harness before the isolation change on a GPU: there the reference's fp32
    result was freed just before the candidate ran, and the caching allocator hands that block to the
    candidate's fp32 request of the same size. Not yet run against that harness: no GPU was lent to
    this work. Now no reference runs in the worker on the candidate's inputs; what the block holds is
    not the answer."""
    items = _evaluate("freed_memory", tmp_path)
    assert items[0]["kind"] == "failure"
    assert "stale result" in items[0]["error"] or "non-finite output" in items[0]["error"]


def test_15a_side_stream_work_is_waited_for(tmp_path):
    """Passes the harness before the isolation change with a time that leaves the side stream's work
    out (its CUDA events were recorded on the current stream). Now the worker synchronises the whole
    device before it answers, and outputs are copied after that: the evidence is an honest run's."""
    parity, benchmark, execution = _evaluate("side_stream", tmp_path)
    assert all(leaf["byte_equal"] for leaf in parity["leaves"])
    assert "synchronises the whole device" in benchmark["notes"] and execution["candidate_calls"] > 0


def test_15b_l2_persistence_gains_nothing(tmp_path):
    """Passes the harness before the isolation change reading inputs from L2 on every timed call (the
    same tensors each time). Now every call's inputs are new storage, written before a 256 MB L2
    eviction: a window over last call's inputs covers nothing this call reads."""
    parity, benchmark, _ = _evaluate("l2_persistence", tmp_path)
    assert all(leaf["byte_equal"] for leaf in parity["leaves"])
    assert "L2 flushed" in benchmark["notes"]


def test_15c_time_below_the_byte_floor_is_refused(tmp_path):
    """Passes the harness before the isolation change as a large speedup would (it had no floor). Now a
    time below the op's bytes over the device's peak bandwidth is refused as impossible."""
    items = _evaluate("forged_done", tmp_path, corpus="gpu")
    assert items[0]["kind"] == "failure" and "impossible speed" in items[0]["error"], items
