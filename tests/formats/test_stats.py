"""Timing statistics: checked against scipy and against their definitions; the plain-Python derivation of a
benchmark (registry/formats/stats.py) and the speed record's order statistics (registry/formats/order_statistics.py)
checked bit for bit against numpy's float64 arithmetic, which derived the events already stored."""
from __future__ import annotations

import math

import numpy as np
import pytest
import stacked_intervals as stacked
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.formats import order_statistics
from registry.formats.order_statistics import is_interleaved
from registry.formats.ranks import CI_LEVEL, median_rank, min_conclusive_runs
from registry.formats.stats import (
    EXACT_MAX_N,
    mean,
    median_interval,
    pairwise_sum,
    paired_ratios,
    population_cv,
    speedup,
    speedup_interval,
    summarize_benchmark,
    wilcoxon_signed_rank,
)



def _scipy_stats():
    """scipy.stats, imported by the tests that compare with it (about 0.7 CPU-s that collecting this module in
    every test process would otherwise pay)."""
    import scipy.stats

    return scipy.stats


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 20, EXACT_MAX_N])
@pytest.mark.parametrize("shift", [0.0, 0.03, 0.2])
def test_wilcoxon_exact_matches_scipy(n, shift):
    d = np.random.default_rng(n * 7 + int(shift * 100)).normal(shift, 0.1, n)
    expected = _scipy_stats().wilcoxon(d, method="exact").pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("n", [EXACT_MAX_N + 1, 40, 101])
@pytest.mark.parametrize("shift", [0.0, 0.02, 0.1])
def test_wilcoxon_normal_approximation_matches_scipy_above_the_exact_limit(n, shift):
    d = np.random.default_rng(n + int(shift * 1000)).normal(shift, 0.1, n)
    expected = _scipy_stats().wilcoxon(d, method="asymptotic", correction=False).pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("n", [8, 30])
def test_wilcoxon_ties_and_zeros_use_the_tie_corrected_normal_approximation(n):
    d = np.round(np.random.default_rng(n).normal(0.05, 0.1, n), 1)  # many tied magnitudes and zeros
    assert np.any(d == 0) and len(np.unique(np.abs(d[d != 0]))) < np.count_nonzero(d)
    expected = _scipy_stats().wilcoxon(d, zero_method="wilcox", method="asymptotic", correction=False).pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-10)


def test_wilcoxon_zeros_without_ties_stay_exact_over_the_nonzero_pairs():
    d = np.array([0.0, 0.11, -0.02, 0.35, 0.0, 0.07, 0.23])
    expected = _scipy_stats().wilcoxon(d[d != 0], method="exact").pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-12)


def test_wilcoxon_all_zero_differences_show_no_difference():
    assert wilcoxon_signed_rank([0.0, 0.0, 0.0]) == 1.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False).filter(lambda x: abs(x) > 1e-9), min_size=1, max_size=40,
                unique=True))
def test_wilcoxon_property_agrees_with_scipy(values):
    d = np.array(values)
    if len(np.unique(np.abs(d))) < d.size:
        method = {"method": "asymptotic", "correction": False}
    else:
        method = {"method": "exact"} if d.size <= EXACT_MAX_N else {"method": "asymptotic", "correction": False}
    expected = _scipy_stats().wilcoxon(d, **method).pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_population_cv_uses_ddof_zero():
    x = [1.0, 2.0, 4.0]
    assert population_cv(x) == pytest.approx(np.std(x, ddof=0) / np.mean(x), rel=1e-15)
    assert population_cv(x) != pytest.approx(np.std(x, ddof=1) / np.mean(x))


def test_paired_speedup_is_the_median_of_per_pair_ratios_not_the_ratio_of_medians():
    baseline = [1.0, 2.0, 10.0]
    candidate = [0.5, 4.0, 5.0]
    assert list(paired_ratios(baseline, candidate)) == [2.0, 0.5, 2.0]
    assert speedup("paired", baseline, candidate) == 2.0
    assert speedup("sequential", baseline, candidate) == 2.0 / 4.0


def test_unknown_protocol_is_an_error():
    with pytest.raises(ValueError, match="unknown protocol 'abba'"):
        speedup("abba", [1.0], [1.0])
    with pytest.raises(ValueError, match="unknown protocol 'abba'"):
        speedup_interval("abba", np.ones(8), np.ones(8))
    with pytest.raises(ValueError, match="unknown protocol 'abba'"):
        min_conclusive_runs("abba")


def test_interval_is_deterministic_and_brackets_the_estimate():
    rng = np.random.default_rng(3)
    baseline = rng.normal(1.0, 0.02, 16)
    candidate = rng.normal(0.8, 0.02, 16)
    for protocol in ("paired", "sequential"):
        low, high, coverage = speedup_interval(protocol, baseline, candidate)
        assert (low, high) == speedup_interval(protocol, baseline, candidate)[:2]
        assert low <= speedup(protocol, baseline, candidate) <= high
        assert 1.0 < low < high < 1.6
        assert CI_LEVEL <= coverage < 1.0


@pytest.mark.parametrize("n", [*range(1, 80), 101, 257, 1000, 4001, 20_000, 100_000])
@pytest.mark.parametrize("tail", [0.025, 0.0125])
def test_median_bounds_are_the_order_statistics_the_binomial_law_gives(n, tail):
    """Rank k: the largest with P(Binomial(n, 1/2) <= k - 1) <= tail (scipy's exact law), else the extremes."""
    ranks = np.arange(1, (n + 1) // 2 + 1)
    allowed = ranks[_scipy_stats().binom.cdf(ranks - 1, n, 0.5) <= tail]
    k = int(allowed[-1]) if allowed.size else 1
    values = np.random.default_rng(n).permutation(np.arange(n, dtype=np.float64))
    low, high, coverage = median_interval(values, tail)
    assert (low, high) == (k - 1, n - k)
    assert coverage == pytest.approx(1 - 2 * _scipy_stats().binom.cdf(k - 1, n, 0.5), rel=1e-8)
    assert (coverage >= 1 - 2 * tail) is bool(allowed.size)


def test_the_fewest_runs_that_can_be_conclusive():
    """5 pairs all on one side of 1.0 happen by chance 2/32 > 5%; 6 pairs 2/64. Sequential needs 7 per arm."""
    assert (min_conclusive_runs("paired"), min_conclusive_runs("sequential")) == (6, 7)
    assert median_interval(np.arange(5.0), 0.025)[2] < CI_LEVEL <= median_interval(np.arange(6.0), 0.025)[2]


def test_interval_narrows_with_more_runs():
    rng = np.random.default_rng(5)
    widths = []
    for n in (8, 64):
        baseline = rng.normal(1.0, 0.05, n)
        candidate = rng.normal(0.9, 0.05, n)
        low, high, _ = speedup_interval("paired", baseline, candidate)
        widths.append(high - low)
    assert widths[1] < widths[0] / 2


def test_interval_of_identical_ratios_is_a_point():
    low, high, coverage = speedup_interval("paired", np.array([2.0, 4.0, 6.0]), np.array([1.0, 2.0, 3.0]))
    assert (low, high) == (2.0, 2.0) and coverage == 0.75  # three pairs guarantee only 1 - 2/8


def test_sequential_interval_divides_the_arm_intervals_crosswise():
    baseline, candidate = np.arange(1.0, 17.0), np.arange(1.0, 17.0) / 2
    b_low, b_high, b_coverage = median_interval(baseline, (1 - CI_LEVEL) / 4)
    c_low, c_high, c_coverage = median_interval(candidate, (1 - CI_LEVEL) / 4)
    low, high, coverage = speedup_interval("sequential", baseline, candidate)
    assert (low, high, coverage) == (b_low / c_high, b_high / c_low, b_coverage * c_coverage)
    assert coverage >= CI_LEVEL


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        (["BC", "CB"], True),
        (["CB", "BC", "CB", "BC"], True),
        (["BC", "CB", "BC"], True),
        (["BC"], False),
        ([], False),
        (["BC", "BC", "CB", "CB"], False),
        (["BC", "CB", "CB", "BC"], False),
        (["BC"] * 6, False),
    ],
)
def test_interleaving_rule_is_strict_alternation(schedule, expected):
    assert is_interleaved(schedule) is expected


def test_summary_of_a_paired_benchmark():
    baseline = [1.2, 1.0, 1.1, 1.3]
    candidate = [1.0, 1.0, 1.0, 1.0]
    summary = summarize_benchmark("paired", baseline, candidate, ["BC", "CB", "BC", "CB"])
    assert summary["speedup"] == pytest.approx(1.15)
    assert summary["ratios"] == pytest.approx([1.2, 1.0, 1.1, 1.3])
    assert summary["baseline_median"] == pytest.approx(1.15)
    assert summary["candidate_cv"] == 0.0
    assert summary["runs_per_arm"] == 4 and summary["interleaved"] is True
    expected_p = _scipy_stats().wilcoxon(np.log(np.array(baseline) / np.array(candidate)), method="exact").pvalue
    assert summary["wilcoxon_p"] == pytest.approx(expected_p)
    low, high = summary["speedup_ci"]
    assert (low, high) == (1.0, 1.3) and summary["ci_level"] == 0.875  # four pairs: the extremes, 1 - 2/16


def test_summary_of_a_sequential_benchmark_has_no_pair_statistics():
    summary = summarize_benchmark("sequential", [1.0, 1.1, 0.9], [0.5, 0.6], None)
    assert summary["speedup"] == pytest.approx(1.0 / 0.55)
    assert (summary["baseline_runs"], summary["candidate_runs"], summary["runs_per_arm"]) == (3, 2, 2)
    assert summary["ratios"] is None and summary["wilcoxon_p"] is None and summary["interleaved"] is None


# -- the speed record's order statistics without numpy: the same doubles as numpy's -----------------------------
# Times as the evidence parser admits them: positive and finite, from the smallest subnormal to the largest
# double, integers among them, with ties (a coarse timer) drawn often.
TIMES = st.one_of(
    st.floats(min_value=5e-324, max_value=1.7976931348623157e308, allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 2.2250738585072014e-308, 1e-9, 0.5, 1.0, 2.0, 1.7976931348623157e308]),
    st.integers(min_value=1, max_value=2**64),
)
ALPHAS = st.one_of(st.sampled_from([0.05, 0.01, 0.1, 0.25, 0.5, 1e-6]),
                   st.floats(min_value=1e-9, max_value=0.5, exclude_min=True))


def bits(value) -> str:
    """A double's exact bits as text (every NaN alike), so that equal means bit-identical."""
    value = float(value)
    return "nan" if value != value else value.hex()


def numpy_bounds(protocol, baseline, candidate, alpha):
    """The confident rule's bounds as numpy computed them before the record was read without it."""
    b, c = np.asarray(baseline, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    tails = [(b / c, alpha)] if protocol == "paired" else [(b, alpha / 2.0), (c, alpha / 2.0)]
    if any(median_rank(values.shape[-1], tail)[0] == 0 for values, tail in tails):
        return None
    intervals = [stacked.median_interval(values, tail) for values, tail in tails]
    if protocol == "paired":
        return float(intervals[0][0]), float(intervals[0][1])
    (b_low, b_high, _), (c_low, c_high, _) = intervals
    return float(b_low / c_high), float(b_high / c_low)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(arms=st.integers(min_value=1, max_value=60).flatmap(
    lambda n: st.tuples(st.lists(TIMES, min_size=n, max_size=n), st.lists(TIMES, min_size=n, max_size=n))),
       unpaired=st.lists(TIMES, min_size=1, max_size=60), alpha=ALPHAS)
@np.errstate(over="ignore", under="ignore")
def test_the_record_s_order_statistics_are_numpy_s_bit_for_bit(arms, unpaired, alpha):
    baseline, candidate = arms
    ratios = order_statistics.ratios(baseline, candidate)
    assert list(map(bits, ratios)) == list(map(bits, np.asarray(baseline, dtype=np.float64) / np.asarray(candidate, dtype=np.float64)))
    for sample in (baseline, unpaired, ratios):
        assert bits(order_statistics.median(sample)) == bits(np.median(np.asarray(sample, dtype=np.float64)))
    for protocol, other in (("paired", candidate), ("sequential", unpaired)):
        ours, theirs = (order_statistics.speedup_bounds(protocol, baseline, other, alpha),
                        numpy_bounds(protocol, baseline, other, alpha))
        assert (ours is None) == (theirs is None)
        assert ours is None or list(map(bits, ours)) == list(map(bits, theirs))


# -- the derived statistics without numpy: the same doubles as the numpy code that derived the stored events ------
def numpy_summary(protocol, baseline, candidate, logs):
    """What `summarize_benchmark` gave when it computed with numpy (its code before the promote stopped importing
    numpy; the interval is tests/support/stacked_intervals.py, which the simulations use), the log ratios given:
    numpy's log is the C library's except where it dispatches its own AVX-512 one."""
    b, c = np.asarray(baseline, dtype=np.float64), np.asarray(candidate, dtype=np.float64)

    low, high, coverage = stacked.speedup_interval(protocol, b, c)
    speed = np.median(b / c) if protocol == "paired" else np.median(b) / np.median(c)
    summary = {"baseline_median": np.median(b), "candidate_median": np.median(c), "baseline_mean": np.mean(b),
               "candidate_mean": np.mean(c), "baseline_cv": np.std(b) / np.mean(b),
               "candidate_cv": np.std(c) / np.mean(c), "speedup": speed, "low": low, "high": high,
               "ci_level": coverage}
    if protocol == "paired":
        summary["ratios"] = (b / c).tolist()
        d = np.asarray(logs, dtype=np.float64)
        d = d[d != 0.0]
        if d.size == 0:
            summary["wilcoxon_p"] = 1.0
        else:
            magnitudes = np.abs(d)
            order = np.argsort(magnitudes, kind="stable")
            ordered = magnitudes[order]
            starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
            sizes = np.diff(np.r_[starts, d.size])
            ranks = np.empty(d.size)
            ranks[order] = np.repeat(starts + (sizes + 1) / 2.0, sizes)
            w_plus, n = float(ranks[d > 0].sum()), d.size
            if n <= EXACT_MAX_N and not np.any(sizes > 1):
                summary["wilcoxon_p"] = wilcoxon_signed_rank(d)  # the enumerated law: integers, no numpy in it
            else:
                variance = n * (n + 1) * (2 * n + 1) / 24.0 - float(np.sum(sizes.astype(float)**3 - sizes)) / 48.0
                z = (w_plus - n * (n + 1) / 4.0) / math.sqrt(variance) if variance > 0.0 else None
                summary["wilcoxon_p"] = 1.0 if z is None else min(1.0, math.erfc(abs(z) / math.sqrt(2.0)))
    return summary


# Timings as the parser admits them (TIMES) and a coarse timer's (few values, reciprocal pairs among them), drawn
# from a palette of at most 40, so ties are common; each arm of 1 to 600 runs picks from it. Drawing each of 600
# runs separately took most of the test's time.
COARSE = st.sampled_from([1.0, 1.1, 0.9, 2.0, 1.25, 1e-3, 1.001])
PALETTE = st.lists(st.one_of(TIMES, COARSE), min_size=1, max_size=40)


def runs(palette, rng, n):
    return [rng.choice(palette) for _ in range(n)]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(palette=PALETTE, pairs=st.integers(min_value=1, max_value=600),
       unpaired=st.integers(min_value=1, max_value=600), rng=st.randoms(use_true_random=False))
@np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore")
def test_the_derived_statistics_are_numpy_s_bit_for_bit(palette, pairs, unpaired, rng):
    """Every figure `summarize_benchmark` derives, both protocols, against numpy's float64 code (a few seconds:
    each example derives up to 600 runs a side in both)."""
    baseline, candidate, other_arm = runs(palette, rng, pairs), runs(palette, rng, pairs), runs(palette, rng, unpaired)
    for protocol, other in (("paired", candidate), ("sequential", other_arm)):
        ours = summarize_benchmark(protocol, baseline, other, ["BC", "CB"] * len(baseline))
        logs = [-math.inf if ratio == 0.0 else math.log(ratio) for ratio in (ours["ratios"] or [])]
        theirs = numpy_summary(protocol, baseline, other, logs)
        ours = {**ours, "low": ours["speedup_ci"][0], "high": ours["speedup_ci"][1]}
        for key, value in theirs.items():
            if key == "ratios":
                assert list(map(bits, ours[key])) == list(map(bits, value))
            else:
                assert bits(ours[key]) == bits(value), key


@pytest.mark.parametrize("n", [*range(1, 20), 127, 128, 129, 136, 255, 256, 257, 1000, 8191, 8193, 100_000])
def test_the_pairwise_sum_is_numpy_s_at_every_block_boundary(n):
    """Around numpy's block sizes (8, 128, its splits, its 8192-element buffer) and at the most runs an arm holds."""
    values = np.random.default_rng(n).lognormal(0.0, 4.0, n)
    assert bits(pairwise_sum(values.tolist())) == bits(np.sum(values))
    assert bits(mean(values.tolist())) == bits(np.mean(values))
    assert bits(population_cv(values.tolist())) == bits(np.std(values) / np.mean(values))

