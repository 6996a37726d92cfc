"""Drift at any point: a change-point test of one arm timed in order, in plain Python (no numpy).

The confident rule's bounds assume a benchmark's runs are exchangeable. An
interleaved (paired) design protects that; a design that times one arm after
the other does not, and a baseline that steps to another level after three
of its fifteen runs is then read as signal. This module asks, of one arm's
runs in the order they were timed, whether they show a level shift at some
unknown point, with a p-value that holds for any distribution of the times.

The statistic: a min-p Mann-Whitney scan. For each split k = 1 .. n - 1 the
runs before it and after it are compared by the Mann-Whitney (Wilcoxon
rank-sum) test: S_k, the sum of the ranks of the first k runs, against its
exact null law (every k-subset of the ranks 1..n equally likely), two-sided,
p_k = min(1, 2 min(P(S <= S_k), P(S >= S_k))). The scan's statistic is
M = min_k p_k, the split where it is reached is where the shift most likely
is; its p-value is P(M <= m) for the observed m under the permutation null
(all n! orders of the runs equally likely, which is what exchangeable runs
without ties give). The scan is Pettitt's test (1979, "A non-parametric
approach to the change-point problem", Applied Statistics 28) with each
split weighed by its own exact p-value instead of |2 S_k - k(n + 1)|, so a
shift near either end is not drowned by the wider spread of the middle
splits' statistics (Schechtman and Wolfe 1985 tabulate the same scan's
null law for small n).

The p-value is exact, never simulated: P(M <= m) is the share of the n!
orders whose path of rank sums enters the rejection region of some split,
counted over subsets (a chain of subsets A_1 < A_2 < ... of the first k
runs' ranks) by scripts/changepoint_table.py for every n up to TABLE_RUNS and
every achievable m whose p is at most MAX_TABLED_P, and shipped as
registry/formats/changepoint_table.py; a read looks it up (nothing is
computed at read time but the n - 1 split p-values). tests/formats/test_changepoint.py
checks the table against an enumeration of every permutation for small n and
against the subset count in plain Python, and the two published figures.

Ties. Timer resolution makes equal times. The null law above is that of
untied ranks; for runs with ties, each split takes the rank sum nearest the
middle that some breaking of the ties could give (the least significant
p_k). A random breaking of the ties would give a uniformly random order
under the null, and every p_k used is at least that order's, so P(p-value
<= a) <= a still holds: ties can only make the test more cautious.

Long arms. An arm of more than TABLE_RUNS runs is read as the medians of
consecutive blocks of b = ceil(n / TABLE_RUNS) runs (n // b blocks; the last
n mod b runs are not scanned). Blocks of an exchangeable sequence are
exchangeable, so their medians are too, and the same exact table applies;
the shift is then located to a block.

The drift check holds a document when either of its non-interleaved arms
has p <= alpha / 2, so for exchangeable runs the chance that a document is
held is at most alpha (docs/gate.md, "The drift check"). No test can do
better than the least p an arm's length allows: 15 runs whose first three are
the three smallest give M = 2 / C(15, 3) and p = 0.024, which is why a
stricter rate could not hold such a run at all.
"""
from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from registry.formats.changepoint_table import MAX_TABLED_P, SCAN_P, TABLE_RUNS
from registry.formats.order_statistics import median


@lru_cache(maxsize=None)
def _lower_tails(n: int) -> tuple[tuple[int, ...], ...]:
    """lower[k][s] = how many k-subsets of the ranks 1..n sum to at most s (the null law of S_k, times C(n, k))."""
    top = n * (n + 1) // 2
    counts = [[1] + [0] * top] + [[0] * (top + 1) for _ in range(n)]
    for rank in range(1, n + 1):
        for k in range(rank, 0, -1):
            below = counts[k - 1]
            counts[k] = [here + there for here, there in zip(counts[k], [0] * rank + below[: top + 1 - rank])]
    tails = []
    for row in counts:
        total, cumulative = 0, []
        for count in row:
            total += count
            cumulative.append(total)
        tails.append(tuple(cumulative))
    return tuple(tails)


def split_p_value(n: int, k: int, rank_sum: int) -> float:
    """Two-sided exact Mann-Whitney p-value of the first k of n untied runs having ranks summing to `rank_sum`.

    The null law is symmetric (the ranks r -> n + 1 - r map a k-subset summing
    to s onto one summing to k(n + 1) - s), so the upper tail is a lower one.
    """
    lower = _lower_tails(n)[k]
    total = math.comb(n, k)
    tail = min(lower[rank_sum], lower[k * (n + 1) - rank_sum])
    return min(2 * tail, total) / total


def _least_significant_sums(values: Sequence[float]) -> list[int]:
    """For each split k = 1 .. n - 1, the rank sum of the first k runs nearest the middle k(n + 1) / 2 that some
    breaking of the ties among `values` gives (the exact rank sum when there are no ties)."""
    n = len(values)
    order = sorted(range(n), key=values.__getitem__)
    group_of = [0] * n
    start: list[int] = []
    size: list[int] = []
    for place, index in enumerate(order):
        if place and values[index] == values[order[place - 1]]:
            size[-1] += 1
        else:
            start.append(place)  # the group's lowest rank, less one
            size.append(1)
        group_of[index] = len(start) - 1
    taken = [0] * len(start)
    lowest = highest = 0
    sums = []
    for k in range(1, n):
        group = group_of[k - 1]
        lowest += start[group] + taken[group] + 1
        highest += start[group] + size[group] - taken[group]
        taken[group] += 1
        middle = k * (n + 1) // 2
        sums.append(min(max(middle, lowest), highest))
    return sums


@dataclass(frozen=True)
class LevelShift:
    """One arm's scan: where a shift most likely is, how large, and the scan's exact p-value.

    `after`: the shift lies between run `after` and run `after + 1` (runs
    counted from 1 in the order timed); `before` and `later` are the medians
    of the runs before and after it; `minimum` is the split's own p-value (the
    scan's statistic, not a p-value of the scan). `p` is the exact permutation p-value of
    the scan, None where it exceeds MAX_TABLED_P (no contract's alpha / 2
    reaches it). `least_p` is the smallest p-value an arm of this length can
    give (None when even that exceeds MAX_TABLED_P): an arm whose `least_p`
    is above alpha / 2 cannot be checked at alpha. `block` is how many runs
    each scanned value stands for (1 unless the arm is longer than TABLE_RUNS).
    """

    runs: int
    block: int
    after: int
    before: float
    later: float
    minimum: float  # the scan's statistic: the smallest split p-value, at `after`
    p: float | None
    least_p: float | None

    def shifted(self, alpha: float) -> bool:
        """Whether the arm is shown to shift at level alpha / 2 (the drift check spends alpha / 2 on each arm)."""
        return self.p is not None and self.p <= alpha / 2.0

    def checkable(self, alpha: float) -> bool:
        """Whether an arm of this length can show a shift at level alpha / 2 at all."""
        return self.least_p is not None and self.least_p <= alpha / 2.0

    def text(self) -> str:
        """The figures a verdict shows: where, how large, and p."""
        size = self.later / self.before - 1.0
        where = f"after run {self.after} of {self.runs}" + (f" (in blocks of {self.block} runs)" if self.block > 1
                                                             else "")
        p = f"{self.p:.2g}" if self.p is not None else f"above {MAX_TABLED_P:g}"
        return (f"shifted {where} by {size:+.1%} (median {self.before:.4g} s before, {self.later:.4g} s after; "
                f"exact permutation p {p})")


def level_shift(times: Sequence[float]) -> LevelShift | None:
    """The min-p Mann-Whitney scan of one arm's runs in the order timed; None for fewer than two runs."""
    times = [float(t) for t in times]
    block = -(-len(times) // TABLE_RUNS) if times else 1
    values = [median(times[i * block:(i + 1) * block]) for i in range(len(times) // block)]
    n = len(values)
    if n < 2:
        return None
    levels = [split_p_value(n, k, rank_sum) for k, rank_sum in enumerate(_least_significant_sums(values), start=1)]
    least = min(levels)
    split = levels.index(least) + 1
    after = split * block
    table = SCAN_P.get(n, ())
    return LevelShift(len(times), block, after, median(times[:after]), median(times[after:block * n]), least,
                      _tabled(table, least, n), table[0][1] if table else None)


def _tabled(table: tuple[tuple[float, float], ...], least: float, n: int) -> float | None:
    """P(M <= least) from the table of achievable scan minima, or None past its last (largest) entry."""
    levels = [level for level, _ in table]
    at = bisect.bisect_left(levels, least)
    if at == len(levels):
        return None
    if levels[at] != least:
        raise AssertionError(f"scan minimum {least!r} of {n} runs is not an achievable level of the table")
    return table[at][1]
