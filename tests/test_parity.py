"""The parity comparator and the approximate-math source screen."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.evidence.parity import compare_leaf, compare_outputs, validate_tolerance
from registry.evidence.source_screen import screen_source

TOL = {"atol": 0.02, "rtol": 0.02, "max_abs": 1.0}
INF, NAN = float("inf"), float("nan")


def _next_up(t: torch.Tensor) -> torch.Tensor:
    """The same tensor with its first element moved up by one ulp (bit pattern + 1)."""
    bits = t.clone().view(torch.int16)
    bits.view(-1)[0] += 1
    return bits.view(t.dtype)


def test_identical_tensors_are_byte_equal_with_zero_error():
    ref = torch.linspace(-3, 3, 24, dtype=torch.bfloat16).reshape(4, 6)
    leaf = compare_leaf("y", ref, ref.clone(), "byte_equal", None)
    assert leaf == {"name": "y", "dtype": "bfloat16", "shape": [4, 6], "byte_equal": True, "strides_equal": True,
                    "has_nan": False, "has_inf": False, "reference_has_nan": False, "reference_has_inf": False,
                    "nonfinite_mismatch": False, "max_abs_error": 0.0, "max_rel_error": 0.0}


def test_one_ulp_difference_fails_byte_equal_and_is_measured():
    ref = torch.full((3, 5), 1.0, dtype=torch.bfloat16)
    leaf = compare_leaf("y", ref, _next_up(ref), "byte_equal", None)
    assert leaf["byte_equal"] is False and leaf["strides_equal"] is True
    assert leaf["max_abs_error"] == 2**-7 and leaf["max_rel_error"] == 2**-7
    assert "tolerance" not in leaf and "outside_tolerance" not in leaf


def test_stride_only_difference_is_not_byte_equal():
    ref = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    column_major = ref.t().contiguous().t()
    assert torch.equal(ref, column_major) and ref.stride() != column_major.stride()
    leaf = compare_leaf("y", ref, column_major, "byte_equal", None)
    assert leaf["byte_equal"] is False and leaf["strides_equal"] is False
    assert leaf["max_abs_error"] == 0.0


def test_dtype_difference_is_not_byte_equal():
    ref = torch.ones(4, dtype=torch.bfloat16)
    leaf = compare_leaf("y", ref, ref.half(), "byte_equal", None)
    assert leaf["byte_equal"] is False and leaf["max_abs_error"] == 0.0 and leaf["dtype"] == "bfloat16"


def test_candidate_nan_where_reference_has_none_is_a_mismatch_kept_out_of_the_error():
    ref = torch.tensor([1.0, 2.0, 3.0])
    leaf = compare_leaf("y", ref, torch.tensor([1.0, NAN, 3.5]), "tolerance", TOL)
    assert leaf["has_nan"] is True and leaf["reference_has_nan"] is False
    assert leaf["nonfinite_mismatch"] is True
    assert leaf["max_abs_error"] == 0.5 and not math.isnan(leaf["max_abs_error"])
    assert leaf["outside_tolerance"] == 1  # the finite 3.0 vs 3.5; the NaN is reported as a mismatch


def test_nan_at_the_same_position_matches():
    ref = torch.tensor([NAN, 2.0])
    leaf = compare_leaf("y", ref, ref.clone(), "byte_equal", None)
    assert leaf["nonfinite_mismatch"] is False and leaf["byte_equal"] is True
    assert leaf["has_nan"] is True and leaf["reference_has_nan"] is True


def test_reference_nan_missing_from_candidate_is_a_mismatch():
    leaf = compare_leaf("y", torch.tensor([NAN, 2.0]), torch.tensor([0.0, 2.0]), "byte_equal", None)
    assert leaf["nonfinite_mismatch"] is True and leaf["has_nan"] is False


def test_matching_infinities_count_as_zero_error():
    leaf = compare_leaf("y", torch.tensor([INF, -INF]), torch.tensor([INF, -INF]), "tolerance", TOL)
    assert leaf["max_abs_error"] == 0.0 and leaf["max_rel_error"] == 0.0
    assert leaf["nonfinite_mismatch"] is False and leaf["has_inf"] is True and leaf["outside_tolerance"] == 0


def test_infinity_sign_mismatch_is_a_mismatch():
    leaf = compare_leaf("y", torch.tensor([INF, 1.0]), torch.tensor([-INF, 1.0]), "byte_equal", None)
    assert leaf["nonfinite_mismatch"] is True and leaf["max_abs_error"] == 0.0


def test_no_finite_pair_gives_null_errors():
    leaf = compare_leaf("y", torch.tensor([NAN, 1.0]), torch.tensor([NAN, NAN]), "byte_equal", None)
    assert leaf["max_abs_error"] is None and leaf["max_rel_error"] is None
    assert leaf["nonfinite_mismatch"] is True


def test_tolerance_and_its_absolute_cap_are_recorded_with_the_leaf():
    # rtol alone would admit 131072.0 of absolute error at this magnitude; the
    # leaf keeps the measured maximum and the declared cap side by side.
    ref = torch.tensor([2.0**23, 1.0])
    cand = torch.tensor([2.0**23 + 131072.0, 1.0])
    leaf = compare_leaf("y", ref, cand, "tolerance", TOL)
    assert leaf["tolerance"] == {"atol": 0.02, "rtol": 0.02, "max_abs": 1.0}
    assert leaf["outside_tolerance"] == 0
    assert leaf["max_abs_error"] == 131072.0 > leaf["tolerance"]["max_abs"]


def test_outside_tolerance_counts_elements_past_atol_plus_rtol():
    ref = torch.tensor([0.0, 1.0, 10.0, -10.0])
    cand = torch.tensor([0.03, 1.03, 10.1, -10.3])  # bounds: 0.02, 0.04, 0.22, 0.22
    leaf = compare_leaf("y", ref, cand, "tolerance", {"atol": 0.02, "rtol": 0.02})
    assert leaf["outside_tolerance"] == 2 and leaf["tolerance"] == {"atol": 0.02, "rtol": 0.02}


def test_shape_mismatch_counts_every_element_as_outside():
    leaf = compare_leaf("y", torch.zeros(2, 3), torch.zeros(3, 2), "tolerance", TOL)
    assert leaf["byte_equal"] is False and leaf["strides_equal"] is False
    assert leaf["max_abs_error"] is None and leaf["outside_tolerance"] == 6 and leaf["shape"] == [2, 3]


def test_tolerance_policy_without_tolerance_is_an_error():
    with pytest.raises(ValueError, match="needs a declared tolerance"):
        compare_leaf("y", torch.zeros(2), torch.zeros(2), "tolerance", None)
    with pytest.raises(ValueError, match="needs tolerances_by_dtype"):
        compare_outputs(torch.zeros(2), torch.zeros(2), ["y"], "tolerance", None)


def test_byte_equal_policy_takes_no_tolerance_and_unknown_policies_fail():
    with pytest.raises(ValueError, match="byte_equal policy takes no tolerance"):
        compare_leaf("y", torch.zeros(2), torch.zeros(2), "byte_equal", TOL)
    with pytest.raises(ValueError, match="unknown parity policy 'close_enough'"):
        compare_leaf("y", torch.zeros(2), torch.zeros(2), "close_enough", None)


@pytest.mark.parametrize("tolerance,message", [
    ({"atol": 0.1}, "lacks \\['rtol'\\]"),
    ({"atol": -0.1, "rtol": 0.0}, "atol must be >= 0"),
    ({"atol": 0.1, "rtol": float("nan")}, "rtol must be a finite number"),
    ({"atol": 0.1, "rtol": 0.1, "max_abs": 0.0}, "max_abs must be > 0"),
    ({"atol": 0.1, "rtol": 0.1, "slack": 1.0}, "unknown tolerance fields \\['slack'\\]"),
    ({"atol": True, "rtol": 0.1}, "atol must be a finite number"),
])
def test_bad_tolerances_are_refused(tolerance, message):
    with pytest.raises(ValueError, match=message):
        validate_tolerance(tolerance)


def test_compare_outputs_applies_the_tolerance_of_each_reference_dtype():
    refs = (torch.ones(3, dtype=torch.bfloat16), torch.ones(2, dtype=torch.float16))
    cands = (_next_up(refs[0]), refs[1].clone())
    tols = {"bfloat16": {"atol": 0.01, "rtol": 0.0}, "float16": {"atol": 0.001, "rtol": 0.001}}
    item = compare_outputs(refs, cands, ["a.n", "a.u"], "tolerance", tols)
    assert item["kind"] == "parity" and item["policy"] == "tolerance" and "approx_math" not in item
    assert [(l["name"], l["tolerance"], l["outside_tolerance"]) for l in item["leaves"]] == [
        ("a.n", tols["bfloat16"], 0), ("a.u", tols["float16"], 0)]
    with pytest.raises(ValueError, match="no tolerance declared for dtype float16"):
        compare_outputs(refs, cands, ["a.n", "a.u"], "tolerance", {"bfloat16": tols["bfloat16"]})


def test_compare_outputs_under_byte_equal_ignores_declared_tolerances_and_records_the_screen():
    ref = torch.ones(3, dtype=torch.bfloat16)
    item = compare_outputs(ref, _next_up(ref), ["y"], "byte_equal", {"bfloat16": {"atol": 1.0, "rtol": 1.0}},
                           approx_math=["__expf"])
    assert item["approx_math"] == ["__expf"]
    assert item["leaves"][0]["byte_equal"] is False and "tolerance" not in item["leaves"][0]
    with pytest.raises(ValueError, match="1 output names, 1 reference and 2 candidate outputs"):
        compare_outputs(ref, (ref, ref), ["y"], "byte_equal", None)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=40), st.integers(0, 2**31 - 1))
def test_outside_tolerance_agrees_with_a_numpy_oracle(values, seed):
    ref = np.asarray(values, dtype=np.float32)
    noise = np.random.default_rng(seed).normal(0, 0.5, ref.shape).astype(np.float32)
    cand = ref + noise
    leaf = compare_leaf("y", torch.from_numpy(ref), torch.from_numpy(cand), "tolerance", {"atol": 0.1, "rtol": 0.01})
    r64, c64 = ref.astype(np.float64), cand.astype(np.float64)
    assert leaf["outside_tolerance"] == int((np.abs(c64 - r64) > 0.1 + 0.01 * np.abs(r64)).sum())
    assert leaf["max_abs_error"] == pytest.approx(float(np.abs(c64 - r64).max()), rel=0, abs=0)
    assert leaf["byte_equal"] == bool(np.array_equal(ref.view(np.uint32), cand.view(np.uint32)))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=16), min_size=1, max_size=30))
def test_a_tensor_always_matches_its_copy(values):
    ref = torch.tensor(values, dtype=torch.float16)
    leaf = compare_leaf("y", ref, ref.clone(), "byte_equal", None)
    assert leaf["byte_equal"] and not leaf["nonfinite_mismatch"]
    assert leaf["max_abs_error"] in (0.0, None)


def test_source_screen_flags_approximate_math():
    text = '''
    asm("rcp.approx.ftz.f32 $0, $1;")
    y = __expf(x); z = tl.math.fast_expf(x); w = libdevice.fast_dividef(a, b)
    torch.backends.cuda.matmul.allow_tf32 = True
    acc = tl.dot(a, b, input_precision="tf32"); r = tl.rsqrt(v)
    '''
    assert screen_source(text) == ["rcp.approx", "__expf", "fast_expf", "fast_dividef", "allow_tf32",
                                   "tf32 precision", "tl.rsqrt"]


def test_source_screen_passes_precise_math():
    assert screen_source("y = tl.div_rn(a, tl.sqrt_rn(v)); e = torch.exp(x); expf(x)") == []
