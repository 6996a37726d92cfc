"""Timing statistics the registry computes itself from raw benchmark runs, in plain Python (no numpy).

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
  no resampling: one sort of the runs. Too
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

Every promote re-derives each stored benchmark with these functions, so they
are plain Python: numpy's import alone cost a deciding promote about a quarter
of its start-up. They give the same doubles, bit for bit, as the numpy code
that derived the stored events (tests/formats/test_stats.py compares them
over generated runs): a mean is numpy's pairwise sum (`pairwise_sum`) over
the count, a standard deviation the square root of the mean of squared
deviations, a median the middle element or the two middle ones' sum halved,
a ratio or bound one IEEE division. The Wilcoxon test reads the log ratios
only through their signs, ranks and ties; `math.log` is the C library's log,
which numpy's float64 log is except on CPUs where numpy dispatches its own
AVX-512 log: that one differs from it in the last bit for about one ratio in
sixty near 1.0, enough to make or break a tie of two near-reciprocal ratios
(a/b against b/a from a coarse timer), and so a different p-value. The gate
never reads `wilcoxon_p`, and this module's value no longer depends on which
SIMD code numpy picked for the CPU.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

from registry.formats.order_statistics import as_doubles, is_interleaved, median, ratios
from registry.formats.ranks import ARM_TAIL, PAIRED_TAIL, median_rank

EXACT_MAX_N = 25
# numpy's pairwise summation: blocks of fewer than this many values are summed in one plain loop.
_PAIRWISE_LEAF = 8
# ... and blocks of up to this many with eight running sums; longer ones are split in two.
_PAIRWISE_BLOCK = 128
# Run times in seconds, as a document holds them (or anything iterable the same way).
Times = Sequence[float]


def pairwise_sum(values: Sequence[float]) -> float:
    """The sum of doubles in numpy's order of additions (its float64 `add.reduce`), so the same double.

    numpy adds from 0.0, by pairwise summation: fewer than 8 values in one
    loop; up to 128 in eight interleaved running sums, combined as
    ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the values left
    over past the last multiple of 8; more than 128 split at half the count
    rounded down to a multiple of 8, each half summed so and the two added.
    """
    return 0.0 + _pairwise(values, 0, len(values))


def _pairwise(values: Sequence[float], start: int, count: int) -> float:
    if count < _PAIRWISE_LEAF:
        total = 0.0
        for value in values[start:start + count]:
            total += value
        return total
    if count <= _PAIRWISE_BLOCK:
        sums = list(values[start:start + _PAIRWISE_LEAF])
        whole = count - count % _PAIRWISE_LEAF
        for block in range(start + _PAIRWISE_LEAF, start + whole, _PAIRWISE_LEAF):
            for lane in range(_PAIRWISE_LEAF):
                sums[lane] += values[block + lane]
        total = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))
        for value in values[start + whole:start + count]:
            total += value
        return total
    half = count // 2
    half -= half % _PAIRWISE_LEAF
    return _pairwise(values, start, half) + _pairwise(values, start + half, count - half)


def mean(values: Times) -> float:
    """The arithmetic mean, as numpy's `mean` of float64 values: the pairwise sum over the count."""
    x = as_doubles(values)
    return pairwise_sum(x) / len(x)


def population_cv(values: Times) -> float:
    """Population standard deviation over the mean (ddof = 0), as numpy's `std(x) / mean(x)` gives it.

    numpy's `std` is the square root of the mean squared deviation from the
    mean, each deviation squared by one multiplication.
    """
    x = as_doubles(values)
    centre = pairwise_sum(x) / len(x)
    squares = [(value - centre) * (value - centre) for value in x]
    return math.sqrt(pairwise_sum(squares) / len(x)) / centre


def paired_ratios(baseline: Times, candidate: Times) -> list[float]:
    """baseline_i / candidate_i for each pair: > 1 means the candidate was faster."""
    return ratios(baseline, candidate)


def speedup(protocol: str, baseline: Times, candidate: Times) -> float:
    if protocol == "paired":
        return median(paired_ratios(baseline, candidate))
    if protocol == "sequential":
        return median(baseline) / median(candidate)
    raise ValueError(f"unknown protocol {protocol!r}")


def median_interval(values: Times, tail: float) -> tuple[float, float, float]:
    """Order-statistic bounds of the median of one sample, and their guaranteed coverage.

    Each bound misses the median (lies strictly beyond it) with probability
    at most `tail`, for any distribution, when `min_conclusive_runs` allows;
    below that the bounds are the extremes and the coverage says how little
    they guarantee.
    """
    ordered = sorted(as_doubles(values))
    n = len(ordered)
    rank, lower_tail = median_rank(n, tail)
    if rank == 0:
        rank, lower_tail = 1, 0.5**n
    return ordered[rank - 1], ordered[n - rank], 1.0 - 2.0 * lower_tail


def speedup_interval(protocol: str, baseline: Times, candidate: Times) -> tuple[float, float, float]:
    """(low, high, coverage) of the speedup statistic (see the module notes)."""
    if protocol == "paired":
        return median_interval(paired_ratios(baseline, candidate), PAIRED_TAIL)
    if protocol == "sequential":
        b_low, b_high, b_coverage = median_interval(baseline, ARM_TAIL)
        c_low, c_high, c_coverage = median_interval(candidate, ARM_TAIL)
        return b_low / c_high, b_high / c_low, b_coverage * c_coverage
    raise ValueError(f"unknown protocol {protocol!r}")


def log_ratio(ratio: float) -> float:
    """The natural log of a positive ratio; -inf for one that underflowed to 0.0 (as numpy's log gives)."""
    return -math.inf if ratio == 0.0 else math.log(ratio)


def wilcoxon_signed_rank(differences: Sequence[float]) -> float:
    """Two-sided p-value of the signed-rank test that the differences centre on zero."""
    d = [value for value in as_doubles(differences) if value != 0.0]
    n = len(d)
    if n == 0:
        return 1.0  # every pair tied: no evidence of any difference
    ranks, tie_sizes = _average_ranks([abs(value) for value in d])
    # Ranks are whole or half numbers far below 2**52, so any order of addition gives this exact sum.
    w_plus = sum(rank for rank, value in zip(ranks, d) if value > 0)
    if n <= EXACT_MAX_N and max(tie_sizes) == 1:
        return _exact_p(int(round(w_plus)), n)
    mean_w = n * (n + 1) / 4.0
    variance = n * (n + 1) * (2 * n + 1) / 24.0 - float(sum(size**3 - size for size in tie_sizes)) / 48.0
    if variance <= 0.0:
        return 1.0
    z = (w_plus - mean_w) / math.sqrt(variance)
    return min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))


def summarize_benchmark(
    protocol: str,
    baseline: Sequence[float],
    candidate: Sequence[float],
    schedule: Sequence[str] | None,
) -> dict[str, object]:
    """Everything the gate reads from a benchmark, derived from the raw runs alone.

    Extreme but finite timings may overflow: that shows up as a non-finite
    statistic, which the document parser refuses by name.
    """
    b, c = as_doubles(baseline), as_doubles(candidate)
    low, high, coverage = speedup_interval(protocol, b, c)
    derived: dict[str, object] = {
        "baseline_runs": len(b),
        "candidate_runs": len(c),
        "runs_per_arm": min(len(b), len(c)),
        "baseline_median": median(b),
        "candidate_median": median(c),
        "baseline_mean": mean(b),
        "candidate_mean": mean(c),
        "baseline_cv": population_cv(b),
        "candidate_cv": population_cv(c),
        "speedup": speedup(protocol, b, c),
        "speedup_ci": [low, high],
        "ci_level": coverage,
        "ratios": None,
        "wilcoxon_p": None,
        "interleaved": None,
    }
    if protocol == "paired":
        pair_ratios = paired_ratios(b, c)
        derived["ratios"] = pair_ratios
        derived["wilcoxon_p"] = wilcoxon_signed_rank([log_ratio(ratio) for ratio in pair_ratios])
        derived["interleaved"] = is_interleaved(list(schedule or []))
    return derived


def _average_ranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Ranks 1..n with ties given their average rank, and the size of each group of tied values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    sizes = []
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and values[order[end]] == values[order[start]]:
            end += 1
        size = end - start
        average = start + (size + 1) / 2.0  # mean of ranks start+1 .. end
        for index in order[start:end]:
            ranks[index] = average
        sizes.append(size)
        start = end
    return ranks, sizes


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
