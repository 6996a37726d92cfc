"""The parity comparator and the approximate-math source screen."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.contracts import Contract
from registry.evidence.parity import compare_leaf, compare_outputs, validate_tolerance
from registry.evidence.source_screen import screen_source
from registry.formats.evidence.items import parse_item
from registry.gate import ArtifactFacts, GateEvidence, Recorded, decide

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
    assert leaf == {"name": "y", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16",
                    "reference_shape": [4, 6], "candidate_shape": [4, 6],
                    "reference_strides": [6, 1], "candidate_strides": [6, 1], "byte_equal": True, "has_nan": False, "has_inf": False, "reference_has_nan": False, "reference_has_inf": False,
                    "nonfinite_mismatch": False, "max_abs_error": 0.0, "max_rel_error": 0.0}


def test_one_ulp_difference_fails_byte_equal_and_is_measured():
    ref = torch.full((3, 5), 1.0, dtype=torch.bfloat16)
    leaf = compare_leaf("y", ref, _next_up(ref), "byte_equal", None)
    assert leaf["byte_equal"] is False and leaf["reference_strides"] == leaf["candidate_strides"] == [5, 1]
    assert leaf["max_abs_error"] == 2**-7 and leaf["max_rel_error"] == 2**-7
    assert "tolerance" not in leaf and "outside_tolerance" not in leaf


def test_stride_only_difference_is_not_byte_equal():
    ref = torch.arange(12, dtype=torch.float16).reshape(3, 4)
    column_major = ref.t().contiguous().t()
    assert torch.equal(ref, column_major) and ref.stride() != column_major.stride()
    leaf = compare_leaf("y", ref, column_major, "byte_equal", None)
    assert leaf["byte_equal"] is False
    assert (leaf["reference_strides"], leaf["candidate_strides"]) == ([4, 1], [1, 3])
    assert leaf["max_abs_error"] == 0.0


def test_dtype_difference_is_not_byte_equal_and_both_dtypes_are_recorded():
    ref = torch.ones(4, dtype=torch.bfloat16)
    leaf = compare_leaf("y", ref, ref.float(), "byte_equal", None)
    assert leaf["byte_equal"] is False and leaf["max_abs_error"] == 0.0
    assert (leaf["reference_dtype"], leaf["candidate_dtype"]) == ("bfloat16", "float32")


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


def test_no_finite_pair_gives_zero_errors_and_the_nonfinite_pattern_decides():
    """The maxima over no finite pair are 0.0: null is kept for "not compared" (a shape mismatch)."""
    leaf = compare_leaf("y", torch.tensor([NAN, 1.0]), torch.tensor([NAN, NAN]), "byte_equal", None)
    assert leaf["max_abs_error"] == 0.0 and leaf["max_rel_error"] == 0.0
    assert leaf["nonfinite_mismatch"] is True
    empty = compare_leaf("y", torch.zeros(0), torch.zeros(0), "tolerance", TOL)
    assert (empty["byte_equal"], empty["max_abs_error"], empty["outside_tolerance"]) == (True, 0.0, 0)


def test_relative_error_is_null_where_no_pair_defines_it():
    leaf = compare_leaf("y", torch.zeros(2), torch.tensor([0.5, 0.25]), "tolerance", TOL)
    assert leaf["max_abs_error"] == 0.5 and leaf["max_rel_error"] is None


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


def test_shape_mismatch_records_both_shapes_and_counts_every_element_as_outside():
    leaf = compare_leaf("y", torch.zeros(2, 8), torch.zeros(2, 4), "tolerance", TOL)
    assert leaf["byte_equal"] is False
    assert (leaf["reference_shape"], leaf["candidate_shape"]) == ([2, 8], [2, 4])
    assert leaf["max_abs_error"] is None and leaf["outside_tolerance"] == 16


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
    assert [(leaf["name"], leaf["tolerance"], leaf["outside_tolerance"]) for leaf in item["leaves"]] == [
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
    assert leaf["max_abs_error"] == 0.0


# ---- from the comparator through the gate: what the evidence shows decides ------------------------

def _verdict_on(reference: torch.Tensor, candidate: torch.Tensor, tolerance: dict | None):
    """The gate's verdict on one compared leaf, all other evidence passing (32 pairs at 2x)."""
    policy = "tolerance" if tolerance else "byte_equal"
    item = compare_outputs(reference, candidate, ["y"], policy, {dtype_of(reference): tolerance} if tolerance else None)
    manifest = {"workload": "w", "speed": {"min_speedup": 1.1, "runs_per_arm": 4, "protocol": "paired", "decision": "point"}}
    if tolerance:
        manifest["parity"] = {"policy": "tolerance", "tolerances": {dtype_of(reference): tolerance}}
    benchmark = {"kind": "benchmark", "protocol": "paired", "device": "H100", "timer": "cuda_event",
                 "baseline_s": [2.0, 2.0, 2.0, 2.0], "candidate_s": [1.0, 1.0, 1.0, 1.0],
                 "schedule": ["BC", "CB", "BC", "CB"]}
    evidence = GateEvidence(
        execution=Recorded("e", parse_item({"kind": "execution", "candidate_calls": 1, "fallbacks": 0})),
        benchmark=Recorded("b", parse_item(benchmark)), parity=Recorded("p", parse_item(item)))
    return decide(Contract.from_mapping(manifest), evidence, ArtifactFacts("k", "fused_kernel"))


def dtype_of(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def test_the_gate_promotes_an_identical_candidate_so_the_cases_below_are_not_vacuous():
    ref = torch.linspace(-2, 2, 16, dtype=torch.bfloat16).reshape(2, 8)
    assert _verdict_on(ref, ref.clone(), None).decision == "promoted"
    assert _verdict_on(ref, ref.clone(), {"atol": 0.02, "rtol": 0.02}).decision == "promoted"


@pytest.mark.parametrize("tolerance", [None, {"atol": 0.02, "rtol": 0.02}, {"atol": 1e9, "rtol": 1e9}])
def test_a_float32_candidate_of_a_bfloat16_reference_is_quarantined_naming_both_dtypes(tolerance):
    ref = torch.linspace(-2, 2, 16, dtype=torch.bfloat16).reshape(2, 8)
    verdict = _verdict_on(ref, ref.float(), tolerance)  # the same values: the errors are all 0.0
    assert verdict.decision == "quarantined"
    assert "dtype differs: reference bfloat16, candidate float32" in verdict.reasons[0]


@pytest.mark.parametrize("tolerance", [None, {"atol": 0.02, "rtol": 0.02}, {"atol": 1e9, "rtol": 1e9}])
def test_a_2x4_candidate_of_a_2x8_reference_is_quarantined_naming_both_shapes(tolerance):
    ref = torch.zeros(2, 8, dtype=torch.bfloat16)
    verdict = _verdict_on(ref, ref[:, :4].contiguous(), tolerance)
    assert verdict.decision == "quarantined"
    assert "shape differs: reference [2, 8], candidate [2, 4]" in verdict.reasons[0]


@pytest.mark.parametrize("tolerance", [None, {"atol": 0.02, "rtol": 0.02}])
def test_a_candidate_with_other_strides_is_quarantined_naming_them(tolerance):
    ref = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)
    verdict = _verdict_on(ref, ref.t().contiguous().t(), tolerance)  # equal values, column-major
    assert verdict.decision == "quarantined"
    assert "strides differ: reference [4, 1], candidate [1, 3]" in verdict.reasons[0]


tensors = st.tuples(
    st.sampled_from([torch.bfloat16, torch.float16, torch.float32, torch.int32]),
    st.sampled_from([(0,), (3,), (2, 3), (3, 2)]),
    st.booleans(),
    st.lists(st.sampled_from([0.0, 1.0, -2.5, 1e-3, INF, -INF, NAN]), min_size=6, max_size=6),
)


def _tensor(dtype, shape, transposed, values) -> torch.Tensor:
    count = math.prod(shape)
    flat = torch.tensor(values[:count], dtype=torch.float64)
    if not dtype.is_floating_point:
        flat = torch.nan_to_num(flat, nan=0.0, posinf=7.0, neginf=-7.0)
    tensor = flat.to(dtype).reshape(shape)
    return tensor.t().contiguous().t() if transposed and len(shape) == 2 else tensor


@settings(max_examples=60, deadline=None, derandomize=True)
@given(tensors, tensors, st.booleans())
def test_every_leaf_the_comparator_writes_is_valid_evidence_and_promoted_only_when_equal(ref, cand, tolerant):
    reference, candidate = _tensor(*ref), _tensor(*cand)
    tolerance = {"atol": 1e9, "rtol": 1e9} if tolerant and reference.dtype.is_floating_point else None
    verdict = _verdict_on(reference, candidate, tolerance)
    assert verdict.rule != "evidence.invalid", verdict.reasons
    same_layout = (reference.dtype, reference.shape, reference.stride()) == \
        (candidate.dtype, candidate.shape, candidate.stride())
    if verdict.decision == "promoted":
        assert same_layout
        if tolerance is None:
            assert torch.equal(_bytes(reference), _bytes(candidate))
        else:
            assert torch.equal(reference.isnan(), candidate.isnan())
            assert torch.equal(reference.isinf(), candidate.isinf())
    elif tolerance is None or not reference.dtype.is_floating_point:
        assert not (same_layout and torch.equal(_bytes(reference), _bytes(candidate)))


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


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
