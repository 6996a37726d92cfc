"""The paired ABBA timing harness, on CPU with plain Python callables."""
from __future__ import annotations

import time

import pytest
import torch

from registry.evidence.timing import abba_schedule, peak_bandwidth, time_paired


def _arms(calls: list[str]):
    def baseline() -> None:
        calls.append("B")
        time.sleep(0.0005)

    def candidate() -> None:
        calls.append("C")
        time.sleep(0.0002)

    return baseline, candidate


def test_abba_schedule_alternates_who_goes_first():
    assert abba_schedule(1) == ["BC"]
    assert abba_schedule(5) == ["BC", "CB", "BC", "CB", "BC"]


@pytest.mark.parametrize("pairs", [0, -2, 1.5, True])
def test_abba_schedule_refuses_non_positive_counts(pairs):
    with pytest.raises(ValueError, match="pairs must be a positive integer"):
        abba_schedule(pairs)


def test_time_paired_runs_warmups_then_interleaved_pairs_and_keeps_raw_times(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    calls: list[str] = []
    item = time_paired(*_arms(calls), runs=4, warmup=2, device="cpu")
    assert "".join(calls) == "BCCB" + "BCCBBCCB"
    assert item["kind"] == "benchmark" and item["protocol"] == "paired"
    assert item["schedule"] == ["BC", "CB", "BC", "CB"] and item["warmup"] == 2
    assert item["timer"] == "perf_counter" and item["device"].startswith("cpu")
    assert len(item["baseline_s"]) == len(item["candidate_s"]) == 4
    assert all(isinstance(s, float) and s > 0 for s in item["baseline_s"] + item["candidate_s"])
    assert min(item["baseline_s"]) >= 0.0005 and min(item["candidate_s"]) >= 0.0002
    assert "bandwidth_share" not in item and "notes" not in item


def test_time_paired_reports_progress_after_every_call():
    seen: list[tuple[int, int]] = []
    time_paired(*_arms([]), runs=2, warmup=1, device="cpu", progress=lambda d, t: seen.append((d, t)))
    assert seen == [(i, 6) for i in range(1, 7)]


def test_interpreted_triton_candidate_is_marked_as_interpreter_timing(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    item = time_paired(*_arms([]), runs=2, warmup=0, device="cpu", triton_candidate=True, bytes_moved=1e6)
    assert item["timer"] == "interpreter" and item["device"] == "cpu (triton interpreter)"
    assert "bandwidth_share" not in item
    plain = time_paired(*_arms([]), runs=2, warmup=0, device="cpu", triton_candidate=False)
    assert plain["timer"] == "perf_counter"


def test_triton_candidate_without_the_interpreter_is_plain_timing(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    item = time_paired(*_arms([]), runs=1, warmup=0, device="cpu", triton_candidate=True, notes="whole generation")
    assert item["timer"] == "perf_counter" and item["notes"] == "whole generation"


def test_an_arm_that_raises_propagates():
    def broken() -> None:
        raise RuntimeError("kernel crashed")

    with pytest.raises(RuntimeError, match="kernel crashed"):
        time_paired(lambda: None, broken, runs=2, warmup=0, device="cpu")


@pytest.mark.parametrize("kwargs,message", [
    ({"runs": 0, "warmup": 0}, "pairs must be a positive integer"),
    ({"runs": 2, "warmup": -1}, "warmup must be a non-negative integer"),
    ({"runs": 2, "warmup": 0, "bytes_moved": 0}, "bytes_moved must be a positive number"),
    ({"runs": 100_001, "warmup": 0}, "runs: 100001 is above the 100000 runs per arm"),
])
def test_time_paired_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        time_paired(lambda: None, lambda: None, device="cpu", **kwargs)


def test_unsupported_devices_are_refused():
    with pytest.raises(ValueError, match="unsupported timing device meta"):
        time_paired(lambda: None, lambda: None, 1, 0, "meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="torch sees no CUDA device"):
            time_paired(lambda: None, lambda: None, 1, 0, "cuda")


def test_peak_bandwidth_is_looked_up_by_device_name():
    assert peak_bandwidth("NVIDIA H200") == 4.8e12
    assert peak_bandwidth("NVIDIA H200 NVL") == 4.8e12
    assert peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert peak_bandwidth("NVIDIA H2000") is None
    assert peak_bandwidth("cpu (x86_64)") is None


def test_a_caller_that_saw_interpreted_launches_gets_interpreter_timing_whatever_the_environment(monkeypatch):
    """Triton fixes interpretation when a kernel module is imported; the variable may be gone by the timing."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    item = time_paired(*_arms([]), runs=2, warmup=0, device="cpu", triton_candidate=True, interpreted=True)
    assert item["timer"] == "interpreter" and item["device"] == "cpu (triton interpreter)"
