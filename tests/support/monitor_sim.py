"""The e-Shiryaev-Roberts detector of registry/formats/monitor.py run on a stack of sign streams at once
(numpy), and the fastest detection any detector of the median allows; shared by tests/formats/test_monitor.py and
benchmarks/monitor.py.

Only the signs (ratio below the threshold or not) enter the detector, so a
stream of pairs is simulated as its signs: a Bernoulli draw per pair whose
probability is P(r < threshold) under the timing model of
tests/support/sequential_sim.py (`ratio_streams`), computed from drawn ratios.

The limit (`fastest_sign_detection`). Whatever the timing distribution Q
after a change, with p = Q(r < m), the null distribution nearest to it
(least Kullback-Leibler divergence among those with median at m) is Q with
its two sides reweighted to 1/2 each, and the likelihood ratio between the
two depends on the sign alone: (2p)^below (2(1 - p))^(1 - below). So the
best any detector valid for every distribution with median >= m can do
against Q is the best a sign detector can do against P(below) = p. Among
those, the CUSUM of that likelihood ratio, with its threshold set so that
its ARL at P(below) = 1/2 is exactly 1/alpha, minimises the worst-case mean
delay (Lorden 1971, "Procedures for reacting to a change in distribution",
Ann. Math. Statist.; optimal: Moustakides 1986, "Optimal stopping times for
detecting changes in distributions", Ann. Statist.). Its worst case is a
change met at statistic 0, which is the benchmark's case (200 pairs at the
promoted speed leave the statistic at 0 but rarely). Computed exactly, not
sampled: the CUSUM's increments are rounded to a lattice (that rounded
CUSUM is itself a detector, and its ARL and delay distribution are solved
as a Markov chain), and the belief is searched over a grid, because with
discrete data the best CUSUM need not bet on p exactly.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from registry.formats.monitor import alarm_level, batch_signs, flagged_pairs
from registry.formats.sequential import PRIOR

if TYPE_CHECKING:
    from scipy import sparse


def alarm_times(below: np.ndarray, alpha: float,
                prior: tuple[tuple[float, float], ...] = PRIOR) -> np.ndarray:
    """Pair (1-based) of each stream's first alarm, 0 where none within the stream. `below`: bool (streams, pairs).

    `prior`: (belief q, weight) pairs; the registry's detector uses the speed rule's PRIOR.
    """
    log_weights = np.log(np.array([w for _, w in prior]))
    log_up = np.log(np.array([2.0 * q for q, _ in prior]))
    log_down = np.log(np.array([2.0 * (1.0 - q) for q, _ in prior]))
    streams, pairs = below.shape
    level = alarm_level(alpha)
    log_r = np.full((streams, len(prior)), -np.inf)
    alarm = np.zeros(streams, dtype=np.int64)
    for t in range(pairs):
        factors = np.where(below[:, t:t + 1], log_up, log_down)
        log_r = np.logaddexp(log_r, 0.0) + factors
        statistic = np.logaddexp.reduce(log_r + log_weights, axis=1)
        newly = (alarm == 0) & (statistic >= level)
        alarm[newly] = t + 1
    return alarm


def screened_alarm_times(baseline: np.ndarray, candidate: np.ndarray, waited: np.ndarray, threshold: float,
                         wait_share: float, alpha: float, batch: int) -> tuple[np.ndarray, int]:
    """First alarm of each stream, counted in every pair timed (0: none), with the monitor's rule for the
    harness's baseline waits applied batch by batch; and how many batches were contended.

    The rule is the registry's own (registry/formats/monitor.py `flagged_pairs` and `batch_signs`, which
    the fold applies to every `PairsRemeasured`): per batch of `batch` pairs, the pairs whose baseline
    waited past `wait_share` of its time are left out, or, in a batch with more of them than may be left
    out, counted as below. The signs fed are then read by the vectorised detector.
    """
    streams, pairs = baseline.shape
    fed = np.zeros((streams, pairs), dtype=bool)
    places = np.zeros((streams, pairs), dtype=np.int64)
    counts = np.zeros(streams, dtype=np.int64)
    contended = 0
    for s in range(streams):
        at = 0
        for start in range(0, pairs, batch):
            chunk = slice(start, start + batch)
            b, c = baseline[s, chunk].tolist(), candidate[s, chunk].tolist()
            signs = batch_signs([x / y for x, y in zip(b, c)], threshold,
                                flagged_pairs(b, waited[s, chunk].tolist(), wait_share))
            fed[s, at:at + len(signs.below)] = signs.below
            places[s, at:at + len(signs.below)] = np.array(signs.places, dtype=np.int64) + start
            at += len(signs.below)
            contended += signs.contended
        counts[s] = at
    alarms = alarm_times(fed, alpha)
    timed = np.take_along_axis(places, np.maximum(alarms - 1, 0)[:, None], axis=1)[:, 0] + 1
    return np.where((alarms > 0) & (alarms <= counts), timed, 0), contended


def run_lengths(rng: np.random.Generator, p_below: float, streams: int, pairs: int, alpha: float) -> np.ndarray:
    """First alarm of streams whose every pair is below the threshold with probability p_below; 0: none."""
    return alarm_times(rng.random((streams, pairs)) < p_below, alpha)


def _cusum_chain(p_below: float, belief: float, states: int, lattice: float) -> sparse.csr_matrix:
    """Transition matrix of the sign CUSUM on states 0..states-1 (the alarm, state >= states, is left out).

    scipy is imported here, by the tests that solve a chain, not by every test process that collects them."""
    from scipy import sparse

    up = round(math.log(2.0 * belief) / lattice)
    down = round(math.log(2.0 * (1.0 - belief)) / lattice)
    rows = np.arange(states)
    alive = rows + up < states
    return sparse.csr_matrix(
        (np.concatenate([np.full(int(alive.sum()), p_below), np.full(states, 1.0 - p_below)]),
         (np.concatenate([rows[alive], rows]), np.concatenate([rows[alive] + up, np.maximum(rows + down, 0)]))),
        shape=(states, states))


def _cusum_arl(belief: float, states: int, lattice: float) -> float:
    from scipy import sparse
    from scipy.sparse.linalg import spsolve

    chain = _cusum_chain(0.5, belief, states, lattice)
    return float(spsolve((sparse.identity(states, format="csr") - chain).tocsc(), np.ones(states))[0])


def fastest_sign_detection(p_below: float, alpha: float, beliefs: np.ndarray | None = None,
                           lattice: float = 0.01, horizon: int = 400) -> tuple[float, float, int]:
    """(belief, mean delay, p90 delay) of the sign CUSUM with the least mean delay at ARL exactly 1/alpha.

    Delays count the pairs after the change up to and including the alarm's, met at statistic 0.
    """
    best = None
    for belief in np.arange(0.80, 0.995, 0.01) if beliefs is None else beliefs:
        low, high = 1, int(math.ceil(2.0 * math.log(1.0 / alpha) / lattice))
        while low < high:  # fewest lattice states whose ARL at P(below) = 1/2 reaches 1/alpha
            middle = (low + high) // 2
            low, high = (low, middle) if _cusum_arl(belief, middle, lattice) >= 1.0 / alpha else (middle + 1, high)
        chain = _cusum_chain(p_below, belief, low, lattice)
        mass = np.zeros(low)
        mass[0] = 1.0
        survive = []
        for _ in range(horizon):
            mass = chain.T @ mass
            survive.append(mass.sum())
        survive = np.array(survive)
        mean, p90 = 1.0 + float(survive.sum()), int(np.argmax(survive <= 0.1)) + 1
        if best is None or mean < best[1]:
            best = (float(belief), mean, p90)
    return best
