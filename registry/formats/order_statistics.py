"""Order statistics of one sample, in plain Python (no numpy): what the speed record's reading needs.

`show` folds a speed record on every call, so this reading must not pay for
numpy's import (a quarter of a read command's start-up). Each function gives
the same floats, bit for bit, as numpy's float64 arithmetic over the same
runs (tests/formats/test_stats.py compares them over generated samples):
a ratio is one IEEE division of two doubles either way, an order statistic
is an element of the sorted sample, and a median of an even count is the
two middle elements' sum halved, as `numpy.median` takes their mean.

- `median`: the sample median.
- `speedup_bounds`: the confident rule's bounds of the true speedup from a
  complete benchmark (docs/gate.md, "Confident speed decisions"): the
  order-statistic interval of the per-pair ratios with `alpha` in each tail
  (paired), or each arm's median interval with alpha / 2 in each tail,
  divided crosswise (sequential: a bound is wrong only if one of the two
  arms' bounds is, probability at most alpha / 2 + alpha / 2). The ranks
  come from registry/formats/ranks.py.
- `is_interleaved`: the ABBA rule for a paired schedule.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from registry.formats.ranks import median_rank


def as_doubles(values: Sequence[float]) -> list[float]:
    """Each value as a double, as numpy's float64 conversion makes it."""
    return [float(value) for value in values]


def ratios(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """baseline_i / candidate_i over the pairs both arms have: > 1 means the candidate was faster."""
    return [b / c for b, c in zip(as_doubles(baseline), as_doubles(candidate))]


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sample (NaN for an empty one, as numpy gives with a warning)."""
    ordered = sorted(as_doubles(values))
    return _sorted_median(ordered)


def _sorted_median(ordered: list[float]) -> float:
    n = len(ordered)
    if n == 0:
        return math.nan
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2.0


def is_interleaved(schedule: Sequence[str]) -> bool:
    """ABBA rule: at least two pairs, and each pair's order differs from the previous one."""
    return len(schedule) >= 2 and all(a != b for a, b in zip(schedule, schedule[1:]))


def speedup_bounds(protocol: str, baseline: Sequence[float], candidate: Sequence[float],
                   alpha: float) -> tuple[float, float] | None:
    """Bounds of the true speedup, each wrong (beyond it) with probability at most `alpha`; None if too few runs.

    When no rank reaches that level the runs cannot show anything at alpha.
    Paired arms have one run each per pair (the evidence parser refuses others).
    """
    if protocol == "paired":
        tails = [(ratios(baseline, candidate), alpha)]
    elif protocol == "sequential":
        tails = [(as_doubles(baseline), alpha / 2.0), (as_doubles(candidate), alpha / 2.0)]
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    ranks = [median_rank(len(values), tail)[0] for values, tail in tails]
    if 0 in ranks:
        return None
    intervals = []
    for (values, _), rank in zip(tails, ranks):
        ordered = sorted(values)
        intervals.append((ordered[rank - 1], ordered[len(ordered) - rank]))
    if protocol == "paired":
        return intervals[0]
    (b_low, b_high), (c_low, c_high) = intervals
    return b_low / c_high, b_high / c_low
