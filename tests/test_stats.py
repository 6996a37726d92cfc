"""Timing statistics: checked against scipy and against their definitions."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.evidence.stats import (
    BOOTSTRAP_RESAMPLES,
    EXACT_MAX_N,
    bootstrap_ci,
    is_interleaved,
    paired_ratios,
    population_cv,
    speedup,
    summarize_benchmark,
    wilcoxon_signed_rank,
)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 20, EXACT_MAX_N])
@pytest.mark.parametrize("shift", [0.0, 0.03, 0.2])
def test_wilcoxon_exact_matches_scipy(n, shift):
    d = np.random.default_rng(n * 7 + int(shift * 100)).normal(shift, 0.1, n)
    expected = scipy.stats.wilcoxon(d, method="exact").pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("n", [EXACT_MAX_N + 1, 40, 101])
@pytest.mark.parametrize("shift", [0.0, 0.02, 0.1])
def test_wilcoxon_normal_approximation_matches_scipy_above_the_exact_limit(n, shift):
    d = np.random.default_rng(n + int(shift * 1000)).normal(shift, 0.1, n)
    expected = scipy.stats.wilcoxon(d, method="asymptotic", correction=False).pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("n", [8, 30])
def test_wilcoxon_ties_and_zeros_use_the_tie_corrected_normal_approximation(n):
    d = np.round(np.random.default_rng(n).normal(0.05, 0.1, n), 1)  # many tied magnitudes and zeros
    assert np.any(d == 0) and len(np.unique(np.abs(d[d != 0]))) < np.count_nonzero(d)
    expected = scipy.stats.wilcoxon(d, zero_method="wilcox", method="asymptotic", correction=False).pvalue
    assert wilcoxon_signed_rank(d) == pytest.approx(expected, rel=1e-10)


def test_wilcoxon_zeros_without_ties_stay_exact_over_the_nonzero_pairs():
    d = np.array([0.0, 0.11, -0.02, 0.35, 0.0, 0.07, 0.23])
    expected = scipy.stats.wilcoxon(d[d != 0], method="exact").pvalue
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
    expected = scipy.stats.wilcoxon(d, **method).pvalue
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
        bootstrap_ci("abba", [1.0], [1.0])


def test_bootstrap_is_deterministic_and_brackets_the_estimate():
    rng = np.random.default_rng(3)
    baseline = rng.normal(1.0, 0.02, 16)
    candidate = rng.normal(0.8, 0.02, 16)
    for protocol in ("paired", "sequential"):
        first = bootstrap_ci(protocol, baseline, candidate)
        assert first == bootstrap_ci(protocol, baseline, candidate)
        low, high = first
        assert low <= speedup(protocol, baseline, candidate) <= high
        assert 1.0 < low < high < 1.6


def test_bootstrap_interval_narrows_with_more_runs():
    rng = np.random.default_rng(5)
    widths = []
    for n in (4, 64):
        baseline = rng.normal(1.0, 0.05, n)
        candidate = rng.normal(0.9, 0.05, n)
        low, high = bootstrap_ci("paired", baseline, candidate)
        widths.append(high - low)
    assert widths[1] < widths[0] / 2


def test_bootstrap_of_identical_ratios_is_a_point():
    assert bootstrap_ci("paired", [2.0, 4.0, 6.0], [1.0, 2.0, 3.0]) == (2.0, 2.0)


def test_bootstrap_seed_changes_the_interval():
    rng = np.random.default_rng(9)
    baseline, candidate = rng.normal(1.0, 0.05, 10), rng.normal(0.9, 0.05, 10)
    intervals = {bootstrap_ci("paired", baseline, candidate, resamples=200, seed=seed) for seed in range(5)}
    assert len(intervals) > 1
    assert BOOTSTRAP_RESAMPLES == 10_000


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
    expected_p = scipy.stats.wilcoxon(np.log(np.array(baseline) / np.array(candidate)), method="exact").pvalue
    assert summary["wilcoxon_p"] == pytest.approx(expected_p)
    low, high = summary["speedup_ci"]
    assert 1.0 <= low <= summary["speedup"] <= high <= 1.3


def test_summary_of_a_sequential_benchmark_has_no_pair_statistics():
    summary = summarize_benchmark("sequential", [1.0, 1.1, 0.9], [0.5, 0.6], None)
    assert summary["speedup"] == pytest.approx(1.0 / 0.55)
    assert (summary["baseline_runs"], summary["candidate_runs"], summary["runs_per_arm"]) == (3, 2, 2)
    assert summary["ratios"] is None and summary["wilcoxon_p"] is None and summary["interleaved"] is None
