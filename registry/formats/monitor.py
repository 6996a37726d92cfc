"""A sequential change detector for a promoted artifact's speed, on the signs of re-measured pairs. Pure.

After a promotion, re-measured pairs keep arriving (paired against the
baseline, as for the gate). The question changes from "is the median ratio
above the gate?" to "has the median ratio fallen below the threshold since
some unknown pair?", asked after every pair, with a stated average run
length to false alarm (ARL: the expected number of pairs before an alarm
when nothing changed).

Each pair is one sign: X_t = 1 when its ratio r_t is strictly below the
threshold m, else 0 (a tie counts as in control, as the speed rule's
rejection side counts only r < g). While the artifact holds its speed, the
median ratio is at or above m, so P(X_t = 1 | past) <= 1/2.

The e-detector. For each belief q of the speed rule's prior
(registry/formats/sequential.py, `PRIOR`) the per-pair likelihood ratio

    L_t(q) = (2q)^X_t (2(1 - q))^(1 - X_t)

has conditional mean 1 + (2p - 1)(2q - 1) <= 1 when p = P(X_t = 1) <= 1/2:
it is an e-value for "no regression at pair t". The e-Shiryaev-Roberts
detector of Shin, Ramdas and Rinaldo (2023, "E-detectors: a nonparametric
framework for sequential change detection", New England J. Statist. Data
Sci.) sums, over every pair j where the change might have begun, the e-process
started there:

    R_n = sum_{j<=n} sum_q w_q prod_{t=j..n} L_t(q) = sum_q w_q R_n(q),
    R_n(q) = (R_{n-1}(q) + 1) L_n(q),  R_0(q) = 0,

and alarms at the first n with R_n >= 1/alpha. Why the ARL holds: under
no change E[R_n | past] <= R_{n-1} + 1, so R_n - n is a supermartingale
started at 0; at the stopping time tau, optional stopping on tau ^ N gives
(1/alpha) P(tau <= N) <= E[R_{tau ^ N}] <= E[tau ^ N], and letting N grow,
E[tau] >= 1/alpha (their Theorem for e-SR; infinite when tau may never
come). This holds at the worst case p = 1/2 (the median exactly at m) and
for any timing distribution, heavy tails included, because only signs enter.

Counts only. The statistic is a function of the sequence of signs, kept as
one log R(q) per belief (floats computed in a fixed order from integers), so
a replay of the same pairs reproduces every alarm position exactly. The
alarm threshold carries the same small relative margin as the speed rule's
count table: rounding can delay an alarm, never advance it.

Pairs left out. A pair whose baseline run, as the harness saw it from
outside the timings, waited for a CPU past the monitor's declared share
(`flagged_pairs`) is not fed, up to half a batch; a batch with more is
contended and its flagged pairs are fed as below (`batch_signs`). The null
is then "each pair fed is below the threshold with probability at most
1/2", the proof runs over the pairs fed, and the ARL holds counted in them
(docs/monitor.md, "Leaving out preempted pairs"). No share declared, or no
waits recorded: every pair is fed, as before.

What a sign detector cannot do. Its fastest alarm is when every pair is
below m: R_n then grows like 1.96^n, so at alpha 1e-3 no alarm can come
before pair 10 (`fewest_pairs_to_alarm`), however large the drop. And since
only the side of m counts, a change is seen as fast as P(r < m) approaches
1: a 10% drop under 3% timing noise makes nearly every pair fall below,
under noise as wide as the drop it makes about 84% of them fall below and
the delay grows (docs/monitor.md gives the figures).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from registry.formats.errors import UserError
from registry.formats.sequential import PRIOR, check_alpha

# Relative margin on the log threshold, as in sequential.py: rounding may delay an alarm, never advance it.
_LOG_MARGIN = 1e-9
_LOG_UP = tuple(math.log(2.0 * q) for q, _ in PRIOR)
_LOG_DOWN = tuple(math.log(2.0 * (1.0 - q)) for q, _ in PRIOR)
_LOG_WEIGHTS = tuple(math.log(w) for _, w in PRIOR)


def alarm_level(alpha: float) -> float:
    """log(1/alpha), raised by the rounding margin: the log statistic at which the detector alarms."""
    check_alpha(alpha)
    return math.log(1.0 / alpha) * (1.0 + _LOG_MARGIN) + _LOG_MARGIN


def _log1p_exp(value: float) -> float:
    """log(1 + e^value), without overflow."""
    if value == -math.inf:
        return 0.0
    return value + math.log1p(math.exp(-value)) if value > 0 else math.log1p(math.exp(value))


def _log_sum(terms: list[float]) -> float:
    top = max(terms)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(t - top) for t in terms))


@dataclass(frozen=True)
class DetectorState:
    """The detector after `pairs` signs: log R(q) per belief (None before any pair), and how many were below."""

    pairs: int
    below: int
    log_components: tuple[float, ...] | None

    @property
    def log_statistic(self) -> float:
        """log R_n (minus infinity before any pair)."""
        if self.log_components is None:
            return -math.inf
        return _log_sum([w + c for w, c in zip(_LOG_WEIGHTS, self.log_components)])

    def to_dict(self) -> dict:
        return {"pairs": self.pairs, "below": self.below,
                "log_components": None if self.log_components is None else list(self.log_components)}

    @classmethod
    def from_dict(cls, data: dict) -> DetectorState:
        components = data["log_components"]
        return cls(data["pairs"], data["below"], None if components is None else tuple(components))


START = DetectorState(0, 0, None)


def step(state: DetectorState, below: bool) -> DetectorState:
    """The detector after one more sign (below: the pair's ratio is under the threshold)."""
    factors = _LOG_UP if below else _LOG_DOWN
    previous = state.log_components or (-math.inf,) * len(PRIOR)
    components = tuple(_log1p_exp(c) + f for c, f in zip(previous, factors))
    return DetectorState(state.pairs + 1, state.below + bool(below), components)


MAX_LEFT_OUT_SHARE = 0.5
"""The most of one batch's pairs the harness's flags may leave out. A batch with more flagged pairs is
contended: none is left out, and each flagged pair counts as below the threshold (docs/monitor.md,
"Leaving out preempted pairs")."""


def flagged_pairs(baseline_s: list[float], waited_s: list[float | None] | None,
                  wait_share: float | None) -> list[bool]:
    """Per pair, whether its baseline run waited for a CPU more than `wait_share` of its time.

    `waited_s` is what the harness recorded around each baseline call
    (seconds runnable but not running; None: unreported, never flagged);
    without it, or without a declared share, no pair is flagged.
    """
    if waited_s is None or wait_share is None:
        return [False] * len(baseline_s)
    return [waited is not None and waited > wait_share * baseline for baseline, waited in zip(baseline_s, waited_s)]


@dataclass(frozen=True)
class Signs:
    """What one batch feeds the detector: the signs in recorded order, the place in the batch (0-based) of
    each, the pairs left out, and whether the batch was contended (more flagged than may be left out)."""

    below: tuple[bool, ...]
    places: tuple[int, ...]
    left_out: int
    contended: bool


def batch_signs(ratios: list[float], threshold: float, flagged: list[bool] | None = None) -> Signs:
    """The signs a batch of ratios feeds the detector, the harness's flags applied.

    A flagged pair (its baseline run waited for a CPU past the declared share)
    is left out, unless more than MAX_LEFT_OUT_SHARE of the batch is flagged:
    then the batch is contended, nothing is left out, and every flagged pair
    counts as below. Waiting only slows the baseline run, which raises the
    pair's ratio: a candidate that contends for the CPU during the baseline's
    calls either has those pairs dropped (a bounded share of each batch) or
    counted against it.
    """
    check_threshold(threshold)
    flagged = flagged if flagged is not None else [False] * len(ratios)
    if len(flagged) != len(ratios):
        raise UserError(f"{len(flagged)} flags for {len(ratios)} pairs")
    count = sum(flagged)
    contended = count > MAX_LEFT_OUT_SHARE * len(ratios)
    kept = [(i, flag or ratio < threshold) for i, (ratio, flag) in enumerate(zip(ratios, flagged))
            if contended or not flag]
    return Signs(tuple(below for _, below in kept), tuple(i for i, _ in kept), 0 if contended else count, contended)


@dataclass(frozen=True)
class Reading:
    """What a batch did to the detector: its state after it; the pair that alarmed, counted in pairs fed since
    the monitor started (None: no alarm); the batch's pairs read, up to and including that one (all when none
    alarmed); how many of those were left out; and whether the batch was contended."""

    state: DetectorState
    alarm_at: int | None
    timed: int
    left_out: int
    contended: bool


def read(state: DetectorState, ratios: list[float], threshold: float, alpha: float,
         flagged: list[bool] | None = None) -> Reading:
    """Feed a batch's signs (`batch_signs`) in recorded order; stop at the first pair at which R_n >= 1/alpha.

    Pairs after the alarming one are not fed: the detector stands alarmed
    (a known regression is not alerted again). `alarm_at` counts pairs fed
    since the monitor started, so it is the same in a replay.
    """
    signs = batch_signs(ratios, threshold, flagged)
    level = alarm_level(alpha)
    for fed, (below, place) in enumerate(zip(signs.below, signs.places), start=1):
        state = step(state, below)
        if state.log_statistic >= level:
            return Reading(state, state.pairs, place + 1, place + 1 - fed, signs.contended)
    return Reading(state, None, len(ratios), signs.left_out, signs.contended)


def check_threshold(threshold: float) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold) \
            or threshold <= 0:
        raise UserError(f"regression threshold {threshold!r} is not a positive finite ratio")


def fewest_pairs_to_alarm(alpha: float) -> int:
    """Fewest pairs after which an alarm is possible (every pair below the threshold)."""
    state, level = START, alarm_level(alpha)
    while True:
        state = step(state, True)
        if state.log_statistic >= level:
            return state.pairs
