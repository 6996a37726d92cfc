"""The e-Shiryaev-Roberts detector of registry/formats/monitor.py run on a stack of sign streams at once
(numpy), shared by tests/test_monitor.py and benchmarks/monitor.py.

Only the signs (ratio below the threshold or not) enter the detector, so a
stream of pairs is simulated as its signs: a Bernoulli draw per pair whose
probability is P(r < threshold) under the timing model of
tests/sequential_sim.py (`ratio_streams`), computed from drawn ratios.
"""
from __future__ import annotations

import numpy as np

from registry.formats.monitor import alarm_level
from registry.formats.sequential import PRIOR

_LOG_WEIGHTS = np.log(np.array([w for _, w in PRIOR]))
_LOG_UP = np.log(np.array([2.0 * q for q, _ in PRIOR]))
_LOG_DOWN = np.log(np.array([2.0 * (1.0 - q) for q, _ in PRIOR]))


def alarm_times(below: np.ndarray, alpha: float) -> np.ndarray:
    """Pair (1-based) of each stream's first alarm, 0 where none within the stream. `below`: bool (streams, pairs)."""
    streams, pairs = below.shape
    level = alarm_level(alpha)
    log_r = np.full((streams, len(PRIOR)), -np.inf)
    alarm = np.zeros(streams, dtype=np.int64)
    for t in range(pairs):
        factors = np.where(below[:, t:t + 1], _LOG_UP, _LOG_DOWN)
        log_r = np.logaddexp(log_r, 0.0) + factors
        statistic = np.logaddexp.reduce(log_r + _LOG_WEIGHTS, axis=1)
        newly = (alarm == 0) & (statistic >= level)
        alarm[newly] = t + 1
    return alarm


def run_lengths(rng: np.random.Generator, p_below: float, streams: int, pairs: int, alpha: float) -> np.ndarray:
    """First alarm of streams whose every pair is below the threshold with probability p_below; 0: none."""
    return alarm_times(rng.random((streams, pairs)) < p_below, alpha)
