"""Timing statistics the registry computes itself from raw benchmark runs (numpy only).

A client-supplied "speedup" is never trusted (docs/architecture.md, "Events"): these
functions turn per-run wall times into the numbers the gate reads.

- Speedup, sequential protocol: median(baseline) / median(candidate); medians
  resist the occasional preempted run.
- Speedup, paired protocol: the median of per-pair ratios baseline_i /
  candidate_i. Pairing cancels drift (clocks, thermals) that both arms of a
  pair share.
- CV: population standard deviation (ddof = 0) over the mean.
- Confidence interval: percentile bootstrap (Efron & Tibshirani 1993) of the
  same statistic, with a fixed seed so the same runs always give the same
  interval. Paired runs resample whole pairs; sequential runs resample each
  arm independently.
- Wilcoxon signed-rank test (Wilcoxon 1945), two-sided, on per-pair log
  ratios. Zero differences are dropped (Wilcoxon's own treatment). With at
  most EXACT_MAX_N nonzero pairs and no tied magnitudes the p-value is exact,
  from the enumerated null distribution of W+; otherwise it is the normal
  approximation with the tie-corrected variance and no continuity correction.
- Interleaving (ABBA): a paired schedule is interleaved when it has at least
  two pairs and consecutive pairs run in opposite orders (BC, CB, BC, ...
  or CB, BC, ...), so neither arm systematically runs first.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 20_240_611
CI_LEVEL = 0.95
EXACT_MAX_N = 25


def population_cv(values: Sequence[float]) -> float:
    """Population standard deviation over the mean (ddof = 0)."""
    x = np.asarray(values, dtype=np.float64)
    return float(np.std(x) / np.mean(x))


def paired_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    """baseline_i / candidate_i for each pair: > 1 means the candidate was faster."""
    return np.asarray(baseline, dtype=np.float64) / np.asarray(candidate, dtype=np.float64)


def speedup(protocol: str, baseline: Sequence[float], candidate: Sequence[float]) -> float:
    if protocol == "paired":
        return float(np.median(paired_ratios(baseline, candidate)))
    if protocol == "sequential":
        return float(np.median(baseline) / np.median(candidate))
    raise ValueError(f"unknown protocol {protocol!r}")


def bootstrap_ci(
    protocol: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = CI_LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the speedup statistic; deterministic for a seed."""
    rng = np.random.default_rng(seed)
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    if protocol == "paired":
        ratios = b / c
        picks = rng.integers(0, ratios.size, size=(resamples, ratios.size))
        stats = np.median(ratios[picks], axis=1)
    elif protocol == "sequential":
        b_picks = rng.integers(0, b.size, size=(resamples, b.size))
        c_picks = rng.integers(0, c.size, size=(resamples, c.size))
        stats = np.median(b[b_picks], axis=1) / np.median(c[c_picks], axis=1)
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return float(low), float(high)


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


def is_interleaved(schedule: Sequence[str]) -> bool:
    """ABBA rule: at least two pairs, and each pair's order differs from the previous one."""
    return len(schedule) >= 2 and all(a != b for a, b in zip(schedule, schedule[1:]))


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
    low, high = bootstrap_ci(protocol, b, c)
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
        "speedup_ci": [low, high],
        "ci_level": CI_LEVEL,
        "ratios": None,
        "wilcoxon_p": None,
        "interleaved": None,
    }
    if protocol == "paired":
        ratios = paired_ratios(b, c)
        derived["ratios"] = [float(r) for r in ratios]
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
