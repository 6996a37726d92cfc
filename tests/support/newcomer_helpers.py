"""What a new user writes by hand: a workload, a kernel, a bundle's window, and evidence from their own harness."""
from __future__ import annotations

WORKLOAD = """\
workload: my-wan-modln
parity: {policy: byte_equal}
speed: {min_speedup: 1.1, runs_per_arm: 8, protocol: paired}
"""
KERNEL = "def fused_modln(x, scale, shift):\n    return x * (1 + scale) + shift\n"
WINDOW = {"model": {"id": "*", "revision": "*"}, "gpu_architectures": ["sm90", "sm100"],
          "torch": {"min": "2.4", "max_exclusive": "3.0"}, "cuda": {"min": "12.0"}, "triton": {"min": "3.0"},
          "execution_modes": ["inference"], "distributed_modes": ["single"]}


def evidence(digest: str) -> dict:
    """What a user's own harness measured, written as docs/evidence-format.md says, naming the payload it timed."""
    leaf = {"name": "y", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [2, 8],
            "candidate_shape": [2, 8], "reference_strides": [8, 1], "candidate_strides": [8, 1], "byte_equal": True,
            "has_nan": False, "has_inf": False}
    baseline = [2.0, 2.02, 2.01, 2.03, 2.0, 2.02, 2.01, 2.03]
    return {"format": "registry.evidence/1", "artifact": "my-modln", "payload_sha256": digest, "evidence": [
        {"kind": "execution", "candidate_calls": 64, "fallbacks": 0},
        {"kind": "parity", "leaves": [leaf]},
        {"kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event", "arch": "sm90",
         "baseline_s": baseline, "candidate_s": [b / 1.6 for b in baseline], "schedule": ["BC", "CB"] * 4}]}
