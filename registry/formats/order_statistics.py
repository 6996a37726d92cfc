"""Order statistics of one sample, in plain Python (no numpy): what the speed record's reading needs.

`show` folds a speed record on every call, so this reading must not pay for
numpy's import (a quarter of a read command's start-up). Each function gives
the same floats, bit for bit, as numpy's float64 arithmetic over the same
runs (tests/test_stats.py compares them over generated samples):
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
- `drift_between_halves`: whether an arm timed in order moved between its
  first and second half (docs/gate.md, "The drift check").
- `is_interleaved`: the ABBA rule for a paired schedule.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class DriftCheck:
    """The baseline arm's early and late halves compared (docs/gate.md, "The drift check").

    `drifted` is True when the halves' distribution-free median intervals are
    disjoint, False when they overlap, None when a half is too short for an
    interval at the level. Each half's (low, median, high) is kept so that a
    verdict can show the figures.
    """

    drifted: bool | None
    early: tuple[float, float, float]
    late: tuple[float, float, float]
    alpha: float

    def text(self) -> str:
        def half(name: str, figures: tuple[float, float, float]) -> str:
            low, middle, high = figures
            return f"{name} median {middle:.4g} s [{low:.4g}, {high:.4g}]"

        return (f"baseline {half('early', self.early)}, {half('late', self.late)} "
                f"(each half's interval at {1.0 - self.alpha / 2.0:.1%}, disjoint at most {self.alpha:.0%} "
                "of the time without drift)")


def drift_between_halves(times: Sequence[float], alpha: float) -> DriftCheck:
    """Whether an arm timed in order moved between its first and second half, at level `alpha`.

    Each half gets its order-statistic median interval with alpha / 4 in each
    tail; if the runs are exchangeable both halves share one median, and the
    intervals can be disjoint only when one of them misses it: probability at
    most alpha / 2 + alpha / 2 = alpha, for any distribution of the times.
    An empty half (fewer than two times) has NaN figures.
    """
    values = as_doubles(times)
    middle = len(values) // 2
    figures = []
    checkable = True
    for half in (values[:middle], values[middle:]):
        rank = median_rank(len(half), alpha / 4.0)[0] if half else 0
        checkable = checkable and rank > 0
        ordered = sorted(half) or [math.nan]
        low, high = (ordered[rank - 1], ordered[len(half) - rank]) if rank else (ordered[0], ordered[-1])
        figures.append((low, _sorted_median(ordered), high))
    early, late = figures
    drifted = None if not checkable else (early[2] < late[0] or late[2] < early[0])
    return DriftCheck(drifted, early, late, alpha)
