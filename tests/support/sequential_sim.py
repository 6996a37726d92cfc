"""Vectorised paired-timing streams and the rules read on them, shared by the simulation test and
benchmarks/sequential.py (numpy only: one array of streams x pairs per case).

The count rule of registry/formats/sequential.py depends only on how many
pairs lie above and below the gate, so a whole stack of streams is decided at
once from cumulative counts and the table `needed_count(n, alpha)`.
"""
from __future__ import annotations

import math

import numpy as np

from registry.formats.ranks import median_rank
from registry.formats.sequential import needed_count

TIMING_DISTRIBUTIONS = ("lognormal", "student_t3", "preemption", "coarse_timer")


def ratio_streams(rng: np.random.Generator, distribution: str, streams: int, pairs: int, speedup: float,
                  cv: float = 0.05) -> np.ndarray:
    """Per-pair ratios baseline / candidate whose true median is exactly `speedup`.

    Each pair's log ratio is log(speedup) plus the difference of two
    independent, identically distributed per-run noises, which is symmetric
    about 0, so `speedup` is the median whatever the noise:
    - lognormal: normal log-time noise, sd `cv`;
    - student_t3: Student t with 3 degrees of freedom, scaled to `cv` (heavy tails);
    - preemption: log-normal noise plus, with probability 0.2, a preempted run
      taking 1.6 times as long (a bimodal mixture);
    - coarse_timer: both runs are whole ticks of a timer about ten ticks per
      run, the candidate's tick scaled by 1/speedup, so a ratio equals the
      speedup exactly whenever the two runs read the same number of ticks
      (P(tie) is large; the speedup is still a median).
    """
    shape = (streams, pairs)
    if distribution == "coarse_timer":
        ticks_b = np.maximum(1.0, np.round(10.0 * np.exp(rng.normal(0.0, cv * 2, shape))))
        ticks_c = np.maximum(1.0, np.round(10.0 * np.exp(rng.normal(0.0, cv * 2, shape))))
        return speedup * ticks_b / ticks_c
    if distribution == "lognormal":
        noise_b, noise_c = rng.normal(0.0, cv, shape), rng.normal(0.0, cv, shape)
    elif distribution == "student_t3":
        scale = cv / math.sqrt(3.0)  # t3 has variance 3
        noise_b, noise_c = scale * rng.standard_t(3, shape), scale * rng.standard_t(3, shape)
    elif distribution == "preemption":
        noise_b = rng.normal(0.0, cv, shape) + math.log(1.6) * (rng.random(shape) < 0.2)
        noise_c = rng.normal(0.0, cv, shape) + math.log(1.6) * (rng.random(shape) < 0.2)
    else:
        raise ValueError(f"unknown timing distribution {distribution!r}")
    return speedup * np.exp(noise_b - noise_c)


def confident_rule(ratios: np.ndarray, gate: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(decision, pairs spent) per stream: +1 promoted, -1 rejected, 0 held after all the pairs."""
    streams, pairs = ratios.shape
    need = np.array([needed_count(n, alpha) for n in range(1, pairs + 1)])
    promote = np.cumsum(ratios > gate, axis=1) >= need
    reject = np.cumsum(ratios < gate, axis=1) >= need
    decided = promote | reject
    any_decided = decided.any(axis=1)
    first = np.where(any_decided, decided.argmax(axis=1), pairs - 1)
    rows = np.arange(streams)
    decision = np.where(promote[rows, first], 1, np.where(reject[rows, first], -1, 0))
    return decision, first + 1


def point_rule_promotes_at_some_look(ratios: np.ndarray, gate: float, first_look: int = 1) -> np.ndarray:
    """True where the point median of the first n ratios reaches the gate at some look n >= first_look."""
    promoted = np.zeros(ratios.shape[0], dtype=bool)
    for n in range(first_look, ratios.shape[1] + 1):
        promoted |= np.median(ratios[:, :n], axis=1) >= gate
    return promoted


def fixed_rules(ratios: np.ndarray, gate: float, pairs: int, tail: float) -> dict[str, np.ndarray]:
    """Decisions (+1 / -1 / 0) of the fixed-size rules on the first `pairs` ratios.

    point: median >= gate promotes, else rejects (the seed project's rule).
    order-statistic: the distribution-free interval at `tail` per side
    (registry/formats/stats.py): lower above the gate promotes, upper below rejects.
    """
    head = np.sort(ratios[:, :pairs], axis=1)
    point = np.where(np.median(head, axis=1) >= gate, 1, -1)
    rank, _ = median_rank(pairs, tail)
    rank = max(rank, 1)
    low, high = head[:, rank - 1], head[:, pairs - rank]
    order = np.where(low > gate, 1, np.where(high < gate, -1, 0))
    return {"point": point, "order-statistic": order}


def binomial_upper_bound(failures: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a rate from `failures` in `trials` (bisection on the exact tail)."""
    if failures >= trials:
        return 1.0

    def lower_tail(p: float) -> float:
        total = 0.0
        for k in range(failures + 1):
            total += math.exp(math.lgamma(trials + 1) - math.lgamma(k + 1) - math.lgamma(trials - k + 1)
                              + k * math.log(p) + (trials - k) * math.log1p(-p))
        return total

    low, high = failures / trials, 1.0
    for _ in range(60):
        middle = (low + high) / 2.0
        if middle <= 0.0 or lower_tail(middle) > 1.0 - confidence:
            low = middle
        else:
            high = middle
    return high
