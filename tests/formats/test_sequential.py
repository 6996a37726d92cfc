"""The anytime-valid speed rule (registry/formats/sequential.py): its error bound under every look, by
simulation, and its count table and running bounds on small streams worked by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sequential_sim import (
    TIMING_DISTRIBUTIONS, binomial_upper_bound, confident_rule, point_rule_promotes_at_some_look, ratio_streams,
)

from registry.formats.sequential import (
    decide_stream, fewest_pairs_to_decide, log_wealth, needed_count, running_bounds,
)

GATE = 1.2
ALPHA = 0.05
STREAMS = 2_000
MAX_PAIRS = 200
ALLOWANCE = 0.01  # the 95% upper binomial bound of each error rate may reach alpha + this


@pytest.mark.parametrize("distribution", TIMING_DISTRIBUTIONS)
def test_at_the_gate_both_wrong_outcomes_stay_under_alpha_when_looked_at_after_every_pair(distribution):
    """True median ratio exactly at the gate; the rule is read after every pair up to MAX_PAIRS.

    At the boundary a promotion and a rejection are both wrong (neither is shown), so each rate's
    95% upper binomial bound must be at most alpha + 0.01. The point rule, looked at after every
    pair from the fourth on, promotes most of these streams: the same bound fails for it.
    """
    rng = np.random.default_rng(20260121)
    ratios = ratio_streams(rng, distribution, STREAMS, MAX_PAIRS, GATE)
    decision, _ = confident_rule(ratios, GATE, ALPHA)
    false_promotions, false_rejections = int(np.sum(decision == 1)), int(np.sum(decision == -1))
    assert binomial_upper_bound(false_promotions, STREAMS) <= ALPHA + ALLOWANCE, false_promotions
    assert binomial_upper_bound(false_rejections, STREAMS) <= ALPHA + ALLOWANCE, false_rejections
    point_promotions = int(np.sum(point_rule_promotes_at_some_look(ratios, GATE, first_look=4)))
    assert binomial_upper_bound(point_promotions, STREAMS) > ALPHA + ALLOWANCE
    assert point_promotions / STREAMS > 0.5


@pytest.mark.parametrize("distribution", TIMING_DISTRIBUTIONS)
def test_a_clear_speedup_and_a_clear_slowdown_are_decided_in_a_few_pairs(distribution):
    rng = np.random.default_rng(7)
    fast, fast_pairs = confident_rule(ratio_streams(rng, distribution, STREAMS, 64, 2.0 * GATE), GATE, ALPHA)
    slow, slow_pairs = confident_rule(ratio_streams(rng, distribution, STREAMS, 64, 0.5 * GATE), GATE, ALPHA)
    assert np.mean(fast == 1) > 0.95 and np.mean(slow == -1) > 0.95
    assert np.median(fast_pairs) <= 6 and np.median(slow_pairs) <= 6


def test_the_bound_check_can_fail():
    """The allowance is tight enough that a rule erring at 7% fails it with 2,000 streams."""
    assert binomial_upper_bound(140, STREAMS) > ALPHA + ALLOWANCE
    assert binomial_upper_bound(60, STREAMS) <= ALPHA + ALLOWANCE


def test_the_count_table_matches_the_mixture_wealth():
    for n in (1, 4, 5, 6, 20, 64):
        need = needed_count(n, ALPHA)
        if need <= n:
            assert log_wealth(need, n - need) >= math.log(1 / ALPHA)
        assert need == n + 1 or need == 0 or log_wealth(need - 1, n - need + 1) < math.log(1 / ALPHA)
        assert need > n / 2  # one side needs a majority, so both sides never decide at once
    assert fewest_pairs_to_decide(ALPHA) == 5  # the fewest any level-0.05 sign test allows: 2**-5 < 0.05
    assert fewest_pairs_to_decide(0.01) >= 7  # 2**-7 < 0.01 <= 2**-6


@pytest.mark.parametrize("alpha", [0.0, -0.1, 0.51, 1.0, float("nan"), True])
def test_alpha_outside_zero_to_one_half_is_refused(alpha):
    with pytest.raises(ValueError, match="outside"):
        needed_count(5, alpha)


def test_a_stream_decides_at_its_first_crossing_and_later_pairs_change_nothing():
    result = decide_stream([2.0] * 5 + [0.5] * 50, GATE, ALPHA, max_pairs=100)
    assert (result.decision, result.decided_at, result.pairs, result.stop) == ("promoted", 5, 5, "decided")
    assert result.lower == 2.0 > GATE
    rejected = decide_stream([1.0] * 5, GATE, ALPHA, max_pairs=100)
    assert (rejected.decision, rejected.decided_at) == ("rejected", 5)
    assert rejected.upper == 1.0 < GATE


def test_pairs_exactly_at_the_gate_decide_nothing_and_max_pairs_holds():
    result = decide_stream([GATE] * 40, GATE, ALPHA, max_pairs=40)
    assert (result.decision, result.decided_at, result.stop) == ("held", None, "max_pairs")
    assert result.lower == result.upper == GATE  # bounds touching the gate decide nothing
    short = decide_stream([GATE] * 3, GATE, ALPHA, max_pairs=40)
    assert (short.decision, short.stop, short.lower, short.upper) == ("held", "undecided", None, None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.3, 3.0, allow_nan=False), min_size=1, max_size=60),
       st.sampled_from([1.0, 1.1, 1.2, 1.5]))
def test_the_decision_is_the_running_bounds_against_the_gate(ratios, gate):
    """Promoted exactly when the running lower bound passes above the gate first; rejected when the
    upper bound passes below it; the bounds only ever narrow."""
    result = decide_stream(ratios, gate, ALPHA, max_pairs=len(ratios))
    bounds = running_bounds(ratios, ALPHA)
    for (low_a, high_a), (low_b, high_b) in zip(bounds, bounds[1:]):
        if low_a is not None:
            assert low_b >= low_a and high_b <= high_a
    crossed = [i + 1 for i, (low, high) in enumerate(bounds)
               if low is not None and (low > gate or high < gate)]
    if result.decision == "held":
        assert not crossed
    else:
        assert result.decided_at == crossed[0]
        low, high = bounds[crossed[0] - 1]
        assert (low > gate) == (result.decision == "promoted") and (high < gate) == (result.decision == "rejected")
