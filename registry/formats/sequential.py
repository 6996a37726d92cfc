"""Anytime-valid speed decisions on paired ratios, in plain Python (no numpy).

The question "is the median per-pair ratio at or above the gate g?" is a
Bernoulli question: for pair ratios r_1, r_2, ... the median is above g
exactly when P(r > g) > 1/2 and below it exactly when P(r < g) > 1/2. Each
side is answered by a test martingale on the signs of r_t - g, looked at after
every pair, whatever the distribution of the timings.

Construction (one per side, both the same shape). For the promotion side let
X_t = 1 when r_t > g, else 0. For a fixed belief q in (1/2, 1] the wealth

    W_n(q) = prod_t (2q)^X_t (2(1 - q))^(1 - X_t)

is the capital of a bettor who stakes the constant fraction lambda = 2(2q - 1)
on X_t - 1/2 (Waudby-Smith and Ramdas 2023, "Estimating means of bounded
random variables by betting", JRSS-B: the capital process of a constant
bet). When P(X_t = 1 | past) <= 1/2 each factor has conditional mean
1 + (2p - 1)(2q - 1) <= 1, so W(q) is a nonnegative supermartingale with
W_0 = 1. A fixed mixture K_n = sum_j w_j W_n(q_j) (weights summing to 1) is
one too: the discrete-mixture martingale of Robbins (1970), used for
confidence sequences by Howard, Ramdas, McAuliffe and Sekhon 2021,
"Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann.
Statist. (the method of mixtures), and by Waudby-Smith and Ramdas 2023
(averaging constant bets over a grid, their "diversified Kelly"). Ville's
inequality (Ville 1939, stated as Lemma 1 of Howard et al. 2021) gives P(sup_n K_n >= 1/alpha) <= alpha: the
test may be read after every pair and stopped at any time.

Why this mixture and not a predictable plug-in (aGRAPA, ONS): the wealth then
depends only on the counts (successes, failures), so the rule is a table of
count thresholds: exact, monotone in the gate (which yields the running
confidence bounds below), identical in a simulation and in the registry, and
free of any bet-tuning state that a replay would have to reproduce. The prior
puts three quarters of its weight on a near-certain effect (q = 0.98: every
pair beats the gate) so that a clear speedup decides in the fewest pairs any
level-alpha sign test allows (5 pairs at alpha 0.05, where a fixed sign test
needs 5 too: 2^-5 < 0.05 <= 2^-4), and spreads the rest evenly over q = 0.55,
0.60, ..., 0.95 so that smaller effects still decide.

Ties and the two errors. A pair exactly at the gate counts against both
conclusions: promotion counts only r > g, rejection only r < g. Hence when
the true median is below the gate, P(r > g) < 1/2 and a promotion has
probability at most alpha; when the gate is a median (the boundary, however
many timer ties sit on it) or the median is above it, P(r < g) <= 1/2 and a
rejection has probability at most alpha; at the boundary both wrong outcomes
are each at most alpha. The guarantee needs only that each pair's sign
probability given the past respects the null (independent pairs, or any
drift that does not move the pairs' median across the gate).

Running confidence bounds. Because each W(q) grows with the count above g,
K_n at threshold m falls as m rises, so {m : K_n(m) >= 1/alpha} is the set of
thresholds already shown exceeded. Its supremum is the s*-th largest ratio,
where s*(n) is the fewest successes that reach 1/alpha; the running maximum of
that order statistic over n is a lower confidence sequence for the median
(miss probability at most alpha over all n, Howard and Ramdas 2022,
"Sequential estimation of quantiles with applications to A/B-testing and
best-arm identification", Bernoulli: confidence sequences for quantiles built
from sign-test martingales). The upper bound is the mirror image;
[lower, upper] holds the median at every n with probability >= 1 - 2 alpha.
Promotion is "lower bound above the gate", rejection "upper bound below it".
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache

from registry.formats.errors import UserError

# (q, weight): a near-certain effect, then an even spread of smaller ones.
PRIOR: tuple[tuple[float, float], ...] = ((0.98, 0.75),) + tuple(
    (round(0.55 + 0.05 * j, 2), 0.25 / 9) for j in range(9)
)
# Longest stream the count table is built for; sessions and contracts stay below it.
MAX_SEQUENTIAL_PAIRS = 100_000
# Thresholds are accepted only with this relative margin in log wealth, so
# floating-point rounding can delay a decision, never advance it.
_LOG_MARGIN = 1e-9


def log_wealth(above: int, below: int) -> float:
    """log K after `above` pairs past the threshold and `below` not past it (ties count as `below`)."""
    terms = []
    for q, weight in PRIOR:
        term = math.log(weight) + above * math.log(2.0 * q)
        if below:
            term += below * math.log(2.0 * (1.0 - q))
        terms.append(term)
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def check_alpha(alpha: float) -> None:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha <= 0.5:
        raise UserError(f"alpha {alpha!r} is outside (0, 0.5]")


@lru_cache(maxsize=4096)
def needed_count(pairs: int, alpha: float) -> int:
    """Fewest pairs on one side of the threshold, out of `pairs`, that show that side at level alpha; pairs + 1 if none."""
    check_alpha(alpha)
    target = math.log(1.0 / alpha) * (1.0 + _LOG_MARGIN) + _LOG_MARGIN
    low, high = 0, pairs + 1  # wealth grows with the count: binary search on it
    while low < high:
        middle = (low + high) // 2
        if log_wealth(middle, pairs - middle) >= target:
            high = middle
        else:
            low = middle + 1
    return low


def fewest_pairs_to_decide(alpha: float) -> int:
    """Smallest stream length at which any decision is possible (every pair on one side)."""
    pairs = 1
    while needed_count(pairs, alpha) > pairs:
        pairs += 1
    return pairs


@dataclass(frozen=True)
class SequentialResult:
    """The rule's reading of a stream of ratios.

    decision: promoted, rejected or held. pairs: how many pairs the stream has;
    decided_at: the pair at which the decision was reached (None while held).
    lower / upper: the running confidence bounds of the median ratio after the
    last pair counted (None where no bound exists yet). stop: why reading stopped.
    """

    decision: str
    pairs: int
    decided_at: int | None
    lower: float | None
    upper: float | None
    alpha: float
    stop: str


def running_bounds(ratios: list[float], alpha: float,
                   alphas: list[float] | None = None) -> list[tuple[float | None, float | None]]:
    """(lower, upper) after each pair: the running confidence sequence for the median ratio.

    `alphas`, when given, is the level of each look (the loosening rule of
    docs/gate.md: a look at a pair recorded before a loosening is taken at the
    strictest alpha in force since); otherwise every look is at `alpha`.
    """
    check_alpha(alpha)
    bounds: list[tuple[float | None, float | None]] = []
    lower: float | None = None
    upper: float | None = None
    ordered: list[float] = []
    for index, ratio in enumerate(ratios):
        bisect.insort(ordered, ratio)
        n = len(ordered)
        need = needed_count(n, alpha if alphas is None else alphas[index])
        if need <= n:
            low_now, high_now = ordered[n - need], ordered[need - 1]
            lower = low_now if lower is None else max(lower, low_now)
            upper = high_now if upper is None else min(upper, high_now)
        bounds.append((lower, upper))
    return bounds


def decide_stream(ratios: list[float], gate: float, alpha: float, max_pairs: int) -> SequentialResult:
    """Read pairs in recorded order; stop at the first pair that decides, or hold at max_pairs.

    Promoted at the first n with #{r > gate} >= needed_count(n); rejected at
    the first n with #{r < gate} >= needed_count(n). Both at once cannot
    happen: with no more pairs above than below, every W(q) is at most
    (4q(1 - q))^above <= 1 < 1/alpha, so each side needs more than half of the
    pairs. Pairs recorded after the deciding one do not change the decision.
    """
    check_alpha(alpha)
    count = min(len(ratios), max_pairs)
    return decide_terms(ratios, [gate] * count, [gate] * count, [alpha] * count, max_pairs, alpha)


def decide_terms(ratios: list[float], promote_gates: list[float], reject_gates: list[float], alphas: list[float],
                 max_pairs: int, alpha: float,
                 bounds: list[tuple[float | None, float | None]] | None = None) -> SequentialResult:
    """The rule with terms that may differ pair by pair (the loosening rule of docs/gate.md, "The speed record").

    Pair t counts for promotion when r_t > promote_gates[t] and for rejection
    when r_t < reject_gates[t]; the look after pair n needs needed_count(n,
    alphas[n]). Each capital stays a nonnegative supermartingale under its
    null as long as every promotion gate is at least the gate promotion is
    claimed against (so P(r_t > g_t) <= 1/2 under "median <= gate") and every
    rejection gate at most the one rejection is claimed against; a look at a
    level alpha_n reaches 1/alpha_n with probability at most alpha_n by
    Ville's inequality, so error stays at most the loosest alpha used.
    `alpha` is the level in force now, which the result reports. `bounds`,
    when given, receives the running bounds after each pair counted (the
    series the result's last bounds come from).
    """
    check_alpha(alpha)
    for level in set(alphas):
        check_alpha(level)
    above = below = 0
    counted: list[float] = []
    for index, ratio in enumerate(ratios[:max_pairs]):
        counted.append(ratio)
        above += ratio > promote_gates[index]
        below += ratio < reject_gates[index]
        need = needed_count(len(counted), alphas[index])
        if above >= need or below >= need:
            decision = "promoted" if above >= need else "rejected"
            return _result(decision, counted, len(counted), alpha, alphas[: len(counted)], "decided", bounds)
    stop = "max_pairs" if len(counted) >= max_pairs else "undecided"
    return _result("held", counted, None, alpha, alphas[: len(counted)], stop, bounds)


def _result(decision: str, counted: list[float], decided_at: int | None, alpha: float, alphas: list[float],
            stop: str, bounds: list | None = None) -> SequentialResult:
    series = running_bounds(counted, alpha, alphas) if counted else []
    if bounds is not None:
        bounds.extend(series)
    lower, upper = series[-1] if series else (None, None)
    return SequentialResult(decision, len(counted), decided_at, lower, upper, alpha, stop)
