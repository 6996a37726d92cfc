"""Timing statistics the registry computes itself from raw benchmark runs (numpy only).

A client-supplied "speedup" is never trusted (docs/architecture.md, "Events"): these
functions turn per-run wall times into the numbers the gate reads.

- Speedup, sequential protocol: median(baseline) / median(candidate); medians
  resist the occasional preempted run.
- Speedup, paired protocol: the median of per-pair ratios baseline_i /
  candidate_i. Pairing cancels drift (clocks, thermals) that both arms of a
  pair share.
- CV: population standard deviation (ddof = 0) over the mean.
- Confidence interval: a distribution-free order-statistic interval of the
  median (Thompson 1936; the interval that inverts the sign test). For n
  values, the k-th smallest and k-th largest bound the population median with
  probability at least 1 - 2 P(Binomial(n, 1/2) <= k - 1), whatever the
  distribution (ties and discrete timer resolution included); k is the
  largest rank whose tail P(Binomial(n, 1/2) <= k - 1) is at most the tail
  asked for (rounding in that sum only ever widens the interval). Paired
  runs: the interval of the per-pair ratios at tail (1 - CI_LEVEL) / 2. Sequential
  runs: each arm's median interval at tail (1 - CI_LEVEL) / 4, divided
  crosswise ([low_b / high_c, high_b / low_c]); both arms cover with
  probability >= (1 - (1 - CI_LEVEL) / 2)**2 >= CI_LEVEL. Under a null of
  equal arms (exchangeable within a pair, or identically distributed arms)
  the interval excludes 1.0 with probability at most 1 - CI_LEVEL. It needs
  no resampling: one partial sort, memory and time linear in the runs. Too
  few runs for CI_LEVEL (fewer than `min_conclusive_runs`) give the widest
  interval, [min, max], and its own lower coverage in `ci_level`. The ranks
  come from registry/formats/ranks.py.
- Wilcoxon signed-rank test (Wilcoxon 1945), two-sided, on per-pair log
  ratios. Zero differences are dropped (Wilcoxon's own treatment). With at
  most EXACT_MAX_N nonzero pairs and no tied magnitudes the p-value is exact,
  from the enumerated null distribution of W+; otherwise it is the normal
  approximation with the tie-corrected variance and no continuity correction.
- Interleaving (ABBA): a paired schedule is interleaved when it has at least
  two pairs and consecutive pairs run in opposite orders (BC, CB, BC, ...
  or CB, BC, ...), so neither arm systematically runs first
  (registry/formats/order_statistics.py, with the confident rule's bounds
  and the drift check, which the speed record reads without numpy).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from registry.formats.order_statistics import is_interleaved
from registry.formats.ranks import ARM_TAIL, PAIRED_TAIL, median_rank

EXACT_MAX_N = 25
# Run times in seconds: as a document holds them, or an array of them (one row per benchmark, or many).
Times = Sequence[float] | np.ndarray


def population_cv(values: Times) -> float:
    """Population standard deviation over the mean (ddof = 0)."""
    x = np.asarray(values, dtype=np.float64)
    return float(np.std(x) / np.mean(x))


def paired_ratios(baseline: Times, candidate: Times) -> np.ndarray:
    """baseline_i / candidate_i for each pair: > 1 means the candidate was faster."""
    return np.asarray(baseline, dtype=np.float64) / np.asarray(candidate, dtype=np.float64)


def speedup(protocol: str, baseline: Times, candidate: Times) -> float:
    if protocol == "paired":
        return float(np.median(paired_ratios(baseline, candidate)))
    if protocol == "sequential":
        return float(np.median(baseline) / np.median(candidate))
    raise ValueError(f"unknown protocol {protocol!r}")


def median_interval(values: np.ndarray, tail: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Order-statistic bounds of the median along the last axis, and their guaranteed coverage.

    Each bound misses the median (lies strictly beyond it) with probability
    at most `tail`, for any distribution, when `min_conclusive_runs` allows;
    below that the bounds are the extremes and the coverage says how little
    they guarantee. Works on a stack of samples (one per row) at once.
    """
    n = values.shape[-1]
    rank, lower_tail = median_rank(n, tail)
    if rank == 0:
        rank, lower_tail = 1, 0.5**n
    bounds = np.partition(values, (rank - 1, n - rank), axis=-1)
    return bounds[..., rank - 1], bounds[..., n - rank], 1.0 - 2.0 * lower_tail


def speedup_interval(
    protocol: str, baseline: np.ndarray, candidate: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(low, high, coverage) of the speedup statistic; runs along the last axis (see the module notes)."""
    if protocol == "paired":
        return median_interval(paired_ratios(baseline, candidate), PAIRED_TAIL)
    if protocol == "sequential":
        b_low, b_high, b_coverage = median_interval(baseline, ARM_TAIL)
        c_low, c_high, c_coverage = median_interval(candidate, ARM_TAIL)
        return b_low / c_high, b_high / c_low, b_coverage * c_coverage
    raise ValueError(f"unknown protocol {protocol!r}")


def wilcoxon_signed_rank(differences: Sequence[float]) -> float:
    """Two-sided p-value of the signed-rank test that the differences centre on zero."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[d != 0.0]
    n = d.size
    if n == 0:
        return 1.0  # every pair tied: no evidence of any difference
    magnitudes = np.abs(d)
    ranks, tie_sizes = _average_ranks(magnitudes)
    w_plus = float(ranks[d > 0].sum())
    if n <= EXACT_MAX_N and not np.any(tie_sizes > 1):
        return _exact_p(int(round(w_plus)), n)
    mean = n * (n + 1) / 4.0
    variance = n * (n + 1) * (2 * n + 1) / 24.0 - float(np.sum(tie_sizes**3 - tie_sizes)) / 48.0
    if variance <= 0.0:
        return 1.0
    z = (w_plus - mean) / math.sqrt(variance)
    return min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


@np.errstate(over="ignore", invalid="ignore", divide="ignore")
def summarize_benchmark(
    protocol: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    schedule: Sequence[str] | None,
) -> dict[str, object]:
    """Everything the gate reads from a benchmark, derived from the raw runs alone.

    Overflow in extreme but finite timings is not warned about here: it shows
    up as a non-finite statistic, which the document parser refuses by name.
    """
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    low, high, coverage = speedup_interval(protocol, b, c)
    derived: dict[str, object] = {
        "baseline_runs": int(b.size),
        "candidate_runs": int(c.size),
        "runs_per_arm": int(min(b.size, c.size)),
        "baseline_median": float(np.median(b)),
        "candidate_median": float(np.median(c)),
        "baseline_mean": float(np.mean(b)),
        "candidate_mean": float(np.mean(c)),
        "baseline_cv": population_cv(b),
        "candidate_cv": population_cv(c),
        "speedup": speedup(protocol, b, c),
        "speedup_ci": [float(low), float(high)],
        "ci_level": coverage,
        "ratios": None,
        "wilcoxon_p": None,
        "interleaved": None,
    }
    if protocol == "paired":
        ratios = paired_ratios(b, c)
        derived["ratios"] = ratios.tolist()
        derived["wilcoxon_p"] = wilcoxon_signed_rank(np.log(ratios))
        derived["interleaved"] = is_interleaved(list(schedule or []))
    return derived


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks 1..n with ties given their average rank, and each element's tie-group size."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    sizes = np.diff(np.r_[starts, values.size])
    average = starts + (sizes + 1) / 2.0  # mean of ranks start+1 .. start+size
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(average, sizes)
    return ranks, sizes.astype(np.float64)


@lru_cache(maxsize=None)
def _signed_rank_counts(n: int) -> tuple[int, ...]:
    """counts[k] = number of subsets of ranks {1..n} summing to k (the null law of W+ times 2**n)."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    top = 0
    for rank in range(1, n + 1):
        top += rank
        for total in range(top, rank - 1, -1):
            counts[total] += counts[total - rank]
    return tuple(counts)


def _exact_p(w_plus: int, n: int) -> float:
    counts = _signed_rank_counts(n)
    total = 2**n
    lower = sum(counts[: w_plus + 1]) / total
    upper = sum(counts[w_plus:]) / total
    return min(1.0, 2.0 * min(lower, upper))
