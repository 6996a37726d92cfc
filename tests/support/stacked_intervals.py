"""The speedup interval of registry/formats/stats.py over a stack of benchmarks at once (numpy: one row each).

The registry derives one benchmark at a time in plain Python; the simulations
that measure the interval's error rates draw thousands of benchmarks per
case, and a row-by-row loop would multiply their time. This is the numpy
code the registry used before, kept as the tests' vectorised form of the same
rule: tests/formats/test_stats.py checks the registry's figures against it
bit for bit.
"""
from __future__ import annotations

import numpy as np

from registry.formats.ranks import ARM_TAIL, PAIRED_TAIL, median_rank


def median_interval(values: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Order-statistic bounds of each row's median (a partial sort at the two ranks), and their coverage."""
    n = values.shape[-1]
    rank, lower_tail = median_rank(n, tail)
    if rank == 0:
        rank, lower_tail = 1, 0.5**n
    bounds = np.partition(values, (rank - 1, n - rank), axis=-1)
    return bounds[..., rank - 1], bounds[..., n - rank], 1.0 - 2.0 * lower_tail


def speedup_interval(protocol: str, baseline: np.ndarray, candidate: np.ndarray,
                     ) -> tuple[np.ndarray, np.ndarray, float]:
    """(low, high, coverage) of each row's speedup: the pair ratios' interval, or the arms' divided crosswise."""
    if protocol == "paired":
        return median_interval(baseline / candidate, PAIRED_TAIL)
    b_low, b_high, b_coverage = median_interval(baseline, ARM_TAIL)
    c_low, c_high, c_coverage = median_interval(candidate, ARM_TAIL)
    return b_low / c_high, b_high / c_low, b_coverage * c_coverage
