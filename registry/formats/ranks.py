"""Sign-test ranks for the speedup interval, in plain Python (no numpy).

The contract refuses a `require_conclusive` run count no interval can serve
and a runs-per-arm count beyond what evidence may carry; it needs these
numbers without importing numpy (a runtime that only reads a lock file
imports the contracts package), so they live here and
`registry/formats/stats.py` builds the interval from them.
"""
from __future__ import annotations

import math
from functools import lru_cache

CI_LEVEL = 0.95
# Most runs one benchmark arm may carry (docs/evidence-format.md): every
# statistic is linear in the runs, but each item is stored whole in the log
# and re-derived at every promote.
MAX_RUNS_PER_ARM = 100_000
# Each bound of the paired interval may miss with this probability; the
# sequential interval spends half as much on each arm's two bounds.
PAIRED_TAIL = (1.0 - CI_LEVEL) / 2.0
ARM_TAIL = (1.0 - CI_LEVEL) / 4.0
# Binomial tails are summed in floating point from lgamma (relative error
# about 1e-9 at 10^5 runs); a rank is accepted only with this relative margin
# to spare, so rounding can make an interval wider, never narrower.
_TAIL_MARGIN = 1e-6


@lru_cache(maxsize=1024)
def median_rank(n: int, tail: float) -> tuple[int, float]:
    """(k, P(Binomial(n, 1/2) <= k - 1)) for the largest k whose lower tail is at most `tail`; (0, 0.0) if none."""
    log_all = math.lgamma(n + 1) + n * math.log(0.5)
    allowed = tail * (1.0 - _TAIL_MARGIN)
    rank, lower_tail = 0, 0.0
    while rank < (n + 1) // 2:
        mass = math.exp(log_all - math.lgamma(rank + 1) - math.lgamma(n - rank + 1))
        if lower_tail + mass > allowed:
            break
        lower_tail += mass
        rank += 1
    return rank, lower_tail


def min_conclusive_runs(protocol: str) -> int:
    """Fewest runs per arm whose interval reaches CI_LEVEL (and so can exclude 1.0 at 1 - CI_LEVEL)."""
    tail = {"paired": PAIRED_TAIL, "sequential": ARM_TAIL}.get(protocol)
    if tail is None:
        raise ValueError(f"unknown protocol {protocol!r}")
    n = 1
    while median_rank(n, tail)[0] == 0:
        n += 1
    return n
