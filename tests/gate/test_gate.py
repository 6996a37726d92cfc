"""The gate: every rule of "The gate, in order" (docs/architecture.md), each as a case on real evidence items."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from registry.contracts import Contract
from registry.formats.evidence.items import parse_item
from registry.gate import GATE_VERSION, ArtifactFacts, GateEvidence, Margin, Recorded, Verdict, decide

from limits import HANG_GUARD_S

MODULE = ArtifactFacts("fused-rmsnorm-v1", "module")
SAGE = ArtifactFacts("sage-attn-v1", "attention_backend", claimed_backend="sage")


# ---- builders: raw items go through parse_item, exactly as an imported document would ----

def rec(event_id: str, raw: dict) -> Recorded:
    return Recorded(event_id, parse_item(raw))


def execution(**over) -> Recorded:
    return rec("ev-exec", {"kind": "execution", "candidate_calls": 40, "fallbacks": 0, **over})


def benchmark(speedup: float = 1.5, n: int = 16, **over) -> Recorded:
    candidate = [1.0 + 0.002 * (i % 4) for i in range(n)]
    raw = {
        "kind": "benchmark", "protocol": "paired", "device": "NVIDIA H100 80GB", "timer": "cuda_event",
        "baseline_s": [speedup * c for c in candidate], "candidate_s": candidate,
        "schedule": ["BC", "CB"] * (n // 2) + ["BC"] * (n % 2),
    }
    raw.update(over)
    return rec("ev-bench", raw)


def leaf(name: str = "frames", **over) -> dict:
    return {"name": name, "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16",
            "reference_shape": [2, 3], "candidate_shape": [2, 3], "reference_strides": [3, 1],
            "candidate_strides": [3, 1], "byte_equal": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False,
            "reference_has_nan": False, "reference_has_inf": False, "nonfinite_mismatch": False, **over}


def parity(*leaves: dict) -> Recorded:
    return rec("ev-parity", {"kind": "parity", "leaves": list(leaves) or [leaf()]})


def perceptual(ssim=(0.995, 0.9912, 0.998), lpips=(0.001, 0.0071, 0.002), **over) -> Recorded:
    raw = {"kind": "perceptual", "frame_set": "wan-1.3b-fixed-seed-8", "seed": 1024,
           "ssim": None if ssim is None else list(ssim), "lpips": None if lpips is None else list(lpips),
           "vbench": None, "stage_status": "ok", **over}
    return rec("ev-perc", raw)


def failure(stage: str = "perceptual", error: str = "LPIPS weights are not installed") -> Recorded:
    return rec("ev-fail", {"kind": "failure", "stage": stage, "error": error})


SPEED = {"min_speedup": 1.3, "runs_per_arm": 16, "protocol": "paired", "decision": "point"}


def contract(tier: str = "exact", speed: dict | None = SPEED, parity_block: dict | None = None,
             **fidelity) -> Contract:
    manifest: dict = {"workload": "wan-t2v-1.3b-480p"}
    if tier != "exact":
        manifest["fidelity"] = {"tier": tier, "frame_set": "wan-1.3b-fixed-seed-8",
                                **({"min_ssim": 0.98, "max_lpips": 0.02} if not fidelity else fidelity)}
    if speed is not None:
        manifest["speed"] = speed
    if parity_block is not None:
        manifest["parity"] = parity_block
    return Contract.from_mapping(manifest)


def evidence(**over) -> GateEvidence:
    fields = {"execution": execution(), "benchmark": benchmark(), "parity": parity(),
              "perceptual": perceptual(), "failures": []}
    fields.update(over)
    return GateEvidence(**fields)


def margin(verdict: Verdict, metric: str) -> Margin:
    (found,) = [m for m in verdict.margins if m.metric == metric]
    return found


# ---- the two exit criteria --------------------------------------------------------------

def test_exit_lossy_control_is_quarantined_on_its_two_failing_metrics_alone():
    verdict = decide(
        contract("perceptual", speed={"min_speedup": 1.1, "runs_per_arm": 16, "protocol": "paired", "decision": "point"},
                 min_ssim=0.98, max_lpips=0.02),
        evidence(benchmark=benchmark(1.21), perceptual=perceptual([0.93, 0.71, 0.88], [0.05, 0.24, 0.11])),
        MODULE,
    )
    assert verdict.decision == "quarantined" and verdict.rule == "fidelity.failed"
    assert verdict.reasons == [
        "worst-frame SSIM 0.71 (frame 1) is below fidelity.min_ssim 0.98 (margin -0.27)",
        "worst-frame LPIPS 0.24 (frame 1) exceeds fidelity.max_lpips 0.02 (margin -0.22)",
    ]
    assert [(m.metric, m.passed) for m in verdict.margins] == [("ssim", False), ("lpips", False), ("speedup", True)]
    assert verdict.speedup == pytest.approx(1.21)


def test_exit_bit_inexact_but_perceptually_clean_artifact_is_promoted_with_margins():
    verdict = decide(
        contract("perceptual", speed={"min_speedup": 1.1, "runs_per_arm": 16, "protocol": "paired", "decision": "point"},
                 min_ssim=0.98, max_lpips=0.02),
        evidence(benchmark=benchmark(1.21), perceptual=perceptual([0.995, 0.9912], [0.0071, 0.003]),
                 parity=parity(leaf(byte_equal=False, max_abs_error=0.03125, max_rel_error=0.01))),
        MODULE,
    )
    assert verdict.decision == "promoted" and verdict.rule == "speed.passed"
    assert margin(verdict, "ssim").margin == pytest.approx(0.0112, abs=1e-12)
    assert margin(verdict, "lpips").margin == pytest.approx(0.0129, abs=1e-12)
    assert all(m.passed for m in verdict.margins)
    assert verdict.reasons == ["speedup 1.21x meets the gate 1.10x (min_speedup)"]
    assert verdict.evidence_ids == ["ev-exec", "ev-perc", "ev-bench"]  # parity does not gate this tier


# ---- rule 1: failed stages ----------------------------------------------------------------

def test_a_failed_stage_holds_even_when_everything_else_passes():
    verdict = decide(contract(), evidence(failures=[failure("parity", "reference run OOM")]), MODULE)
    assert verdict.decision == "held" and verdict.rule == "evaluation_failed"
    assert verdict.reasons == ["evaluation stage 'parity' did not complete: 'reference run OOM'"]
    assert verdict.evidence_ids[0] == "ev-fail"


def test_a_failed_stages_error_is_quoted_on_one_line_whatever_the_candidate_wrote():
    """The error is the candidate's text: a line break in it must not let it add a line of the registry's own."""
    written = "Traceback:\nforged: PROMOTED\x1b[2K\u2028"
    verdict = decide(contract(), evidence(failures=[failure("par\nity", written)]), MODULE)
    reason, = verdict.reasons
    assert reason == f"evaluation stage 'par\\nity' did not complete: {written!r}"
    assert reason.isprintable() and len(reason.splitlines()) == 1


# ---- rule 2: execution ---------------------------------------------------------------------

def test_no_execution_evidence_holds():
    verdict = decide(contract(), evidence(execution=None), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "execution.missing")


def test_zero_candidate_calls_quarantines():
    verdict = decide(contract(), evidence(execution=execution(candidate_calls=0)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "execution.fallback")
    assert "candidate_calls is 0" in verdict.reasons[0]


def test_a_fallback_quarantines_naming_what_ran():
    verdict = decide(contract(), evidence(execution=execution(fallbacks=3, effective_backend="flash")), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "execution.fallback")
    assert verdict.reasons[0] == ("3 fallback(s) recorded: the runtime fell back instead of running the "
                                  "candidate; 'flash' ran instead")


def test_silent_attention_fallback_is_quarantined_naming_the_backend_that_ran():
    verdict = decide(
        contract(),
        evidence(execution=execution(requested_backend="sage", effective_backend="flash"),
                 benchmark=benchmark(1.0)),
        SAGE,
    )
    assert (verdict.decision, verdict.rule) == ("quarantined", "execution.backend_mismatch")
    assert verdict.reasons[0] == (
        "backend 'sage' (requested and claimed by artifact sage-attn-v1) did not run: "
        "the effective backend was 'flash'"
    )


def test_effective_backend_must_match_the_artifacts_claim_too():
    verdict = decide(contract(), evidence(execution=execution(effective_backend="flash")), SAGE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "execution.backend_mismatch")
    assert "'flash'" in verdict.reasons[0] and "claimed by artifact sage-attn-v1" in verdict.reasons[0]


def test_attention_backend_without_an_effective_backend_is_held():
    verdict = decide(contract(), evidence(execution=execution(requested_backend="sage")), SAGE)
    assert (verdict.decision, verdict.rule) == ("held", "execution.backend_unknown")


def test_attention_backend_that_ran_as_claimed_is_promoted():
    verdict = decide(contract(), evidence(execution=execution(requested_backend="sage",
                                                              effective_backend="sage")), SAGE)
    assert verdict.decision == "promoted"


def test_unknown_artifact_kind_is_refused():
    with pytest.raises(ValueError, match="artifact kind 'lora'"):
        ArtifactFacts("a", "lora")


# ---- rule 3, exact tier ---------------------------------------------------------------------

def test_exact_tier_without_parity_is_held():
    verdict = decide(contract(), evidence(parity=None), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.missing")


def test_exact_tier_any_leaf_not_byte_equal_is_quarantined():
    verdict = decide(contract(), evidence(parity=parity(
        leaf("latents"), leaf(byte_equal=False, max_abs_error=131072.0, max_rel_error=0.5))), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert verdict.reasons == ["parity (byte_equal) failed on leaf frames: max_abs_error 131072.0"]


def test_exact_tier_different_strides_fail_byte_equality():
    transposed = leaf(byte_equal=False, candidate_strides=[1, 2])
    verdict = decide(contract(), evidence(parity=parity(transposed)), MODULE)
    assert verdict.reasons == ["parity (byte_equal) failed on leaf frames: strides differ: reference [3, 1], "
                               "candidate [1, 2]; max_abs_error 0.0"]


def test_exact_tier_byte_equal_everywhere_is_promoted():
    verdict = decide(contract(), evidence(), MODULE)
    assert (verdict.decision, verdict.rule) == ("promoted", "speed.passed")
    assert verdict.reasons == ["speedup 1.50x meets the gate 1.30x (min_speedup)"]


TOLERANCE = {"policy": "tolerance", "tolerances": {"bfloat16": {"atol": 0.02, "rtol": 0.1, "max_abs": 1.0}}}
HUGE = {"policy": "tolerance", "tolerances": {"bfloat16": {"atol": 1e9, "rtol": 1e9}}}


def inexact(**over) -> dict:
    return leaf(**{"byte_equal": False, "max_abs_error": 0.01, "max_rel_error": 0.01,
                   "tolerance": {"atol": 0.02, "rtol": 0.1}, "outside_tolerance": 0, **over})


def test_tolerance_policy_within_tolerance_is_promoted():
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(inexact())), MODULE)
    assert verdict.decision == "promoted"
    assert margin(verdict, "max_abs_error:frames").margin == pytest.approx(0.99)


@pytest.mark.parametrize(
    "flags",
    [
        {"nonfinite_mismatch": True},
        {"has_nan": True, "reference_has_nan": False, "nonfinite_mismatch": None},
        {"has_inf": True, "reference_has_inf": False, "nonfinite_mismatch": None},
    ],
)
def test_candidate_nonfinite_where_reference_has_none_fails_under_a_huge_tolerance(flags):
    verdict = decide(contract(parity_block=HUGE), evidence(parity=parity(inexact(**flags))), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert verdict.reasons[0].startswith("parity (tolerance) failed on leaf frames: ")


def test_rtol_alone_cannot_hide_a_huge_absolute_error_when_max_abs_is_declared():
    big = leaf(byte_equal=False, max_abs_error=32768.0, max_rel_error=0.0099,
               tolerance={"atol": 0.02, "rtol": 0.1}, outside_tolerance=0)  # |ref| ~ 3.3e6
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(big)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert verdict.reasons == ["parity (tolerance) failed on leaf frames: max_abs_error 32768.0 exceeds "
                               "parity.tolerances.bfloat16.max_abs 1.0"]
    assert not margin(verdict, "max_abs_error:frames").passed
    no_max_abs = {"policy": "tolerance", "tolerances": {"bfloat16": {"atol": 0.02, "rtol": 0.1}}}
    assert decide(contract(parity_block=no_max_abs), evidence(parity=parity(big)), MODULE).decision == "promoted"


def test_error_within_atol_passes_without_an_outside_count():
    small = leaf(byte_equal=False, max_abs_error=0.02, max_rel_error=0.3)
    assert decide(contract(parity_block=TOLERANCE), evidence(parity=parity(small)), MODULE).decision == "promoted"


def test_outside_count_under_a_different_tolerance_is_undecidable():
    other = inexact(max_abs_error=0.5, tolerance={"atol": 0.5, "rtol": 0.0}, outside_tolerance=0)
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(other)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.undecidable")
    assert verdict.reasons == [
        "parity (tolerance) cannot be decided for leaf frames from the evidence: max_abs_error 0.5 exceeds "
        "parity.tolerances.bfloat16.atol 0.02 and the comparator counted 0 outside atol 0.5, rtol 0.0, "
        "not the declared atol 0.02, rtol 0.1"
    ]


def test_no_outside_count_and_error_above_atol_is_undecidable():
    uncounted = leaf(byte_equal=False, max_abs_error=0.5, max_rel_error=0.01)
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(uncounted)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.undecidable")


def test_zero_outside_a_stricter_tolerance_passes_and_outside_a_looser_one_fails():
    stricter = inexact(max_abs_error=0.5, tolerance={"atol": 0.01, "rtol": 0.05}, outside_tolerance=0)
    assert decide(contract(parity_block=TOLERANCE), evidence(parity=parity(stricter)), MODULE).decision == "promoted"
    looser = inexact(max_abs_error=0.5, tolerance={"atol": 0.05, "rtol": 0.2}, outside_tolerance=5)
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(looser)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert "5 element(s) outside atol 0.05 + rtol 0.2*|ref|" in verdict.reasons[0]


def test_nan_positions_not_compared_are_undecidable():
    unpaired = inexact(has_nan=True, reference_has_nan=True, nonfinite_mismatch=None)
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(unpaired)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.undecidable")
    assert "positions were not compared" in verdict.reasons[0]


def test_integer_leaves_need_byte_equality_under_the_tolerance_policy():
    index = leaf("index", reference_dtype="int64", candidate_dtype="int64", byte_equal=False, max_abs_error=1.0, max_rel_error=1.0)
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(inexact(), index)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert verdict.reasons == ["parity (tolerance) failed on leaf index: int64 is not a floating dtype, "
                               "so it needs byte equality"]


def test_a_dtype_without_a_declared_tolerance_is_held_never_defaulted():
    half = inexact(reference_dtype="torch.float16", candidate_dtype="float16")
    verdict = decide(contract(parity_block=TOLERANCE), evidence(parity=parity(half)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.no_tolerance")
    assert verdict.reasons == ["no tolerance declared for dtype float16 (leaf frames); parity.policy is "
                               "tolerance and no tolerance is invented"]


# ---- the parity decision table: states not shown good (issue: the gate promoted each of these) ----

BF16_TOLERANCE = {"policy": "tolerance", "tolerances": {"bfloat16": {"atol": 0.02, "rtol": 0.02}}}


def test_a_null_error_with_elements_counted_outside_the_tolerance_is_quarantined():
    counted = inexact(max_abs_error=None, max_rel_error=None, tolerance={"atol": 0.02, "rtol": 0.02},
                      outside_tolerance=6)
    verdict = decide(contract(parity_block=BF16_TOLERANCE), evidence(parity=parity(counted)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert verdict.reasons == ["parity (tolerance) failed on leaf frames: 6 element(s) outside atol 0.02 + rtol "
                               "0.02*|ref| (parity.tolerances.bfloat16 declares atol 0.02, rtol 0.02)"]


def test_the_reported_null_error_leaf_is_quarantined_not_promoted():
    """The leaf as reported (written as evidence was then): bf16, not byte-equal, no error, 16 counted outside."""
    reported = {"name": "frames", "dtype": "bfloat16", "shape": [2, 8], "byte_equal": False, "strides_equal": True,
                "max_abs_error": None, "max_rel_error": None, "has_nan": False, "has_inf": False,
                "reference_has_nan": False, "reference_has_inf": False, "nonfinite_mismatch": False,
                "tolerance": {"atol": 0.02, "rtol": 0.02}, "outside_tolerance": 16}
    verdict = decide(contract(parity_block=BF16_TOLERANCE), evidence(parity=parity(reported)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert "16 element(s) outside atol 0.02 + rtol 0.02*|ref|" in verdict.reasons[0]
    uncounted = {key: value for key, value in reported.items() if key not in ("tolerance", "outside_tolerance")}
    verdict = decide(contract(parity_block=BF16_TOLERANCE), evidence(parity=parity(uncounted)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.undecidable")
    assert "max_abs_error was not measured" in verdict.reasons[0]


@pytest.mark.parametrize("over", [
    {},
    {"tolerance": None, "outside_tolerance": None},
    {"outside_tolerance": 0},
])
def test_a_null_error_never_passes_a_leaf_that_is_not_byte_equal(over):
    unmeasured = inexact(**{"max_abs_error": None, "max_rel_error": None, **over})
    verdict = decide(contract(parity_block=BF16_TOLERANCE), evidence(parity=parity(unmeasured)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.undecidable")
    assert verdict.reasons == ["parity (tolerance) cannot be decided for leaf frames from the evidence: "
                               "max_abs_error was not measured, so no element is shown within the tolerance"]


@pytest.mark.parametrize(("over", "named"), [
    ({"candidate_dtype": "float32"}, "dtype differs: reference bfloat16, candidate float32"),
    ({"candidate_shape": [3, 2], "candidate_strides": [2, 1]},
     "shape differs: reference [2, 3], candidate [3, 2]; strides differ: reference [3, 1], candidate [2, 1]"),
    ({"candidate_strides": [1, 2]}, "strides differ: reference [3, 1], candidate [1, 2]"),
])
@pytest.mark.parametrize("policy", [None, BF16_TOLERANCE, HUGE])
def test_a_layout_mismatch_is_quarantined_naming_it_under_either_policy(over, named, policy):
    mismatched = inexact(max_abs_error=0.0, **over)
    verdict = decide(contract(parity_block=policy), evidence(parity=parity(mismatched)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "parity.failed")
    assert verdict.reasons[0].startswith(f"parity ({'tolerance' if policy else 'byte_equal'}) failed on leaf "
                                         f"frames: {named}")


@pytest.mark.parametrize("policy", [None, BF16_TOLERANCE])
def test_a_one_sided_leaf_from_older_evidence_is_held_with_the_reason(policy):
    one_sided = {"name": "frames", "dtype": "bfloat16", "shape": [2, 3], "byte_equal": True, "strides_equal": True,
                 "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}
    verdict = decide(contract(parity_block=policy), evidence(parity=parity(one_sided)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.undecidable")
    assert "records one dtype and shape, not the reference's and the candidate's" in verdict.reasons[0]
    failing = {**one_sided, "byte_equal": False, "max_abs_error": 3.0}
    verdict = decide(contract(parity_block=policy), evidence(parity=parity(failing)), MODULE)
    assert verdict.decision == ("quarantined" if policy is None else "held")


@pytest.mark.parametrize("over", [
    {"byte_equal": True, "candidate_dtype": "float32", "max_abs_error": 0.0},
    {"byte_equal": True, "candidate_strides": [1, 2], "max_abs_error": 0.0},
    {"max_abs_error": 0.01, "tolerance": {"atol": 0.02, "rtol": 0.02}, "outside_tolerance": 4},
    {"outside_tolerance": 7},
    {"has_nan": True, "reference_has_nan": False, "nonfinite_mismatch": False},
])
def test_a_contradictory_leaf_is_invalid_evidence_and_never_passes(over):
    stored = {"kind": "parity", "leaves": [inexact(**over)]}  # stored by some path that bypassed the parser
    verdict = decide(contract(parity_block=BF16_TOLERANCE),
                     evidence(parity=Recorded("ev-parity", stored)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "evidence.invalid")


# ---- rule 3, perceptual tier ------------------------------------------------------------------

def test_perceptual_tier_ignores_a_failing_parity_record():
    broken = parity(leaf(byte_equal=False, max_abs_error=3.0, max_rel_error=1.0))
    assert decide(contract("perceptual"), evidence(parity=broken), MODULE).decision == "promoted"


def test_perceptual_tier_without_evidence_is_held():
    verdict = decide(contract("perceptual"), evidence(perceptual=None), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "fidelity.missing")


@pytest.mark.parametrize(
    ("budget", "over", "reason"),
    [
        ({}, {"frame_set": "ltx-fixed-seed-4"},
         "the evidence is from frame set 'ltx-fixed-seed-4' but fidelity.frame_set is 'wan-1.3b-fixed-seed-8'"),
        ({"seed": 7}, {}, "the evidence used seed 1024 but fidelity.seed is 7"),
        ({"frames": 8}, {}, "the evidence measured 3 frames but fidelity.frames is 8"),
    ],
)
def test_evidence_from_other_frames_is_held_naming_both(budget, over, reason):
    verdict = decide(contract("perceptual", min_ssim=0.98, max_lpips=0.02, **budget),
                     evidence(perceptual=perceptual(**over)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "fidelity.frame_set_mismatch")
    assert verdict.reasons == [reason]


def test_failing_margins_on_the_wrong_frame_set_are_recorded_but_hold():
    verdict = decide(contract("perceptual"), evidence(perceptual=perceptual(
        [0.5, 0.6], [0.3, 0.4], frame_set="other")), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "fidelity.frame_set_mismatch")
    assert [m.passed for m in verdict.margins[:2]] == [False, False]


def test_a_gated_metric_that_was_not_measured_is_held_with_the_absent_reason():
    verdict = decide(contract("perceptual"), evidence(perceptual=perceptual(
        lpips=None, absent={"lpips": "lpips weights not installed"})), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "fidelity.metric_absent")
    assert verdict.reasons == ["the budget gates on lpips (fidelity.max_lpips 0.02) but the harness measured "
                               "ssim (absent: lpips weights not installed)"]
    assert [m.metric for m in verdict.margins] == ["ssim", "speedup"]


def test_a_perceptual_stage_that_did_not_finish_is_held():
    verdict = decide(contract("perceptual"), evidence(perceptual=perceptual(stage_status="partial")), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "fidelity.stage_failed")


def test_exactly_at_threshold_passes():
    verdict = decide(contract("perceptual", min_ssim=0.98, max_lpips=0.02, min_vbench=0.8),
                     evidence(perceptual=perceptual([0.98, 0.99], [0.02, 0.01], vbench=0.8),
                              benchmark=rec("b", {"kind": "benchmark", "protocol": "paired", "device": "H100",
                                                  "timer": "cuda_event", "baseline_s": [1.3] * 16,
                                                  "candidate_s": [1.0] * 16, "schedule": ["BC", "CB"] * 8})),
                     MODULE)
    assert verdict.decision == "promoted"
    assert [(m.metric, m.margin, m.passed) for m in verdict.margins] == [
        ("ssim", 0.0, True), ("lpips", 0.0, True), ("vbench", 0.0, True), ("speedup", 0.0, True)]


def test_every_failing_metric_is_named():
    verdict = decide(contract("perceptual", min_ssim=0.98, max_lpips=0.02, min_vbench=0.8),
                     evidence(perceptual=perceptual([0.97], [0.03], vbench=0.79)), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "fidelity.failed")
    assert verdict.reasons == [
        "worst-frame SSIM 0.97 (frame 0) is below fidelity.min_ssim 0.98 (margin -0.01)",
        "worst-frame LPIPS 0.03 (frame 0) exceeds fidelity.max_lpips 0.02 (margin -0.01)",
        "VBench 0.79 is below fidelity.min_vbench 0.8 (margin -0.01)",
    ]


# ---- rule 3, advisory tier ----------------------------------------------------------------------

def test_advisory_is_recorded_never_promoted_with_margins():
    verdict = decide(contract("advisory"), evidence(), MODULE)
    assert (verdict.decision, verdict.rule, verdict.tier) == ("recorded", "advisory", "advisory")
    assert [m.metric for m in verdict.margins] == ["ssim", "lpips", "speedup"]
    assert verdict.reasons[-1] == "advisory tier: never promoted by the gate; recorded for a HumanDecision"


def test_advisory_with_failures_is_still_recorded_listing_them():
    verdict = decide(contract("advisory"), evidence(perceptual=perceptual([0.5], [0.5]),
                                                    execution=execution(fallbacks=1)), MODULE)
    assert verdict.decision == "recorded"
    assert any("fallback" in reason for reason in verdict.reasons)
    assert any("SSIM 0.5" in reason for reason in verdict.reasons)


# ---- rule 4: speed --------------------------------------------------------------------------------

def test_no_speed_block_holds():
    verdict = decide(contract(speed=None), evidence(), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.no_gate")
    assert verdict.speedup == pytest.approx(1.5) and verdict.margins == []


def test_no_benchmark_holds():
    verdict = decide(contract(), evidence(benchmark=None), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.missing")
    assert verdict.speedup is None and verdict.speedup_ci is None


def test_too_few_runs_hold():
    verdict = decide(contract(), evidence(benchmark=benchmark(2.0, n=2)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.runs_per_arm")
    assert verdict.reasons == ["2 baseline and 2 candidate runs: fewer than runs_per_arm 16"]


def test_a_different_protocol_holds():
    verdict = decide(contract(), evidence(benchmark=benchmark(schedule=None, protocol="sequential")), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.protocol")
    assert verdict.reasons == ["the benchmark used the sequential protocol but speed.protocol is paired"]


def test_a_broken_interleave_holds():
    verdict = decide(contract(), evidence(benchmark=benchmark(schedule=["BC"] * 8 + ["CB"] * 8)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.interleave")


def test_baseline_cv_over_max_cv_holds():
    baseline = [0.956, 1.044] * 8  # population CV exactly 0.044
    verdict = decide(contract(speed={**SPEED, "max_cv": 0.03}),
                     evidence(benchmark=benchmark(baseline_s=baseline, candidate_s=[0.5] * 16)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.max_cv")
    assert verdict.reasons == ["baseline CV 0.044 exceeds max_cv 0.03"]
    assert margin(verdict, "baseline_cv").margin == pytest.approx(-0.014)


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"timer": "interpreter", "device": "cpu"}, "timings came from Triton's interpreter and are not speed evidence"),
        ({"device": "cpu (TRITON_INTERPRETER)"}, "timings came from Triton's interpreter and are not speed evidence"),
        ({"timer": "emulator"}, "timings came from an emulator and are not speed evidence"),
    ],
)
def test_interpreter_or_emulator_timings_hold(over, reason):
    verdict = decide(contract(), evidence(benchmark=benchmark(**over)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.interpreter")
    assert verdict.reasons == [reason]


def test_below_the_gate_is_rejected():
    verdict = decide(contract(), evidence(benchmark=benchmark(1.04)), MODULE)
    assert (verdict.decision, verdict.rule) == ("rejected", "speed.below_gate")
    assert verdict.reasons == ["speedup 1.04x is below the gate 1.30x (min_speedup)"]
    assert margin(verdict, "speedup").margin == pytest.approx(-0.26)


def test_near_misses_are_printed_with_enough_digits_to_differ():
    verdict = decide(contract(), evidence(benchmark=benchmark(1.2999)), MODULE)
    assert verdict.reasons == ["speedup 1.2999x is below the gate 1.3000x (min_speedup)"]


def test_derived_gate_names_its_basis():
    verdict = decide(contract(speed={"ceiling_share": 0.2717, "runs_per_arm": 16, "protocol": "paired", "decision": "point"}),
                     evidence(benchmark=benchmark(1.15)), MODULE)
    assert verdict.reasons == ["speedup 1.15x is below the gate 1.19x (ceiling_share 0.2717, ceiling 1.37x)"]


def test_require_conclusive_holds_when_the_interval_includes_one():
    noisy = [1.3, 0.8] * 8
    verdict = decide(contract(speed={**SPEED, "min_speedup": 1.0, "require_conclusive": True}),
                     evidence(benchmark=benchmark(baseline_s=noisy, candidate_s=[1.0] * 16)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.inconclusive")
    low, high = verdict.speedup_ci
    assert low <= 1.0 <= high
    clear = decide(contract(speed={**SPEED, "require_conclusive": True}), evidence(), MODULE)
    assert clear.decision == "promoted" and clear.speedup_ci[0] > 1.0


def test_a_declared_memory_gate_without_memory_evidence_holds():
    verdict = decide(contract(speed={**SPEED, "max_peak_memory_regression": 0.1}), evidence(), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.memory_unmeasured")


def test_every_speed_problem_is_listed():
    verdict = decide(contract(speed={**SPEED, "max_cv": 0.03}),
                     evidence(benchmark=rec("b", {
                         "kind": "benchmark", "protocol": "paired", "device": "cpu", "timer": "interpreter",
                         "baseline_s": [1.0, 1.2, 1.0, 1.2], "candidate_s": [1.0] * 4,
                         "schedule": ["BC", "BC", "CB", "CB"]})), MODULE)
    assert verdict.rule == "speed.runs_per_arm"
    assert verdict.reasons == [
        "4 baseline and 4 candidate runs: fewer than runs_per_arm 16",
        "the paired schedule BBCC (first arm of each pair) does not alternate BC/CB, so run order is confounded "
        "with the arms",
        "baseline CV 0.0909091 exceeds max_cv 0.03",
        "timings came from Triton's interpreter and are not speed evidence",
    ]


# ---- precedence, margins, and evidence handling -----------------------------------------------------

def test_quarantine_outranks_hold_and_every_reason_is_kept():
    verdict = decide(contract("perceptual"), evidence(
        execution=None, benchmark=None, perceptual=perceptual([0.5], [0.5])), MODULE)
    assert (verdict.decision, verdict.rule) == ("quarantined", "fidelity.failed")
    assert verdict.reasons[0] == "no execution evidence: nothing shows the candidate ran"
    assert verdict.reasons[-1] == "no benchmark evidence: the speedup was never measured"
    assert len(verdict.reasons) == 4


def test_hold_outranks_reject():
    verdict = decide(contract(), evidence(parity=None, benchmark=benchmark(1.01)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "parity.missing")
    assert "speedup 1.01x is below the gate 1.30x (min_speedup)" in verdict.reasons


def test_margins_are_recorded_whatever_the_decision():
    verdict = decide(contract("perceptual"), evidence(execution=None), MODULE)
    assert verdict.decision == "held"
    assert [m.metric for m in verdict.margins] == ["ssim", "lpips", "speedup"]


def test_a_payload_that_bypassed_the_parser_is_re_validated():
    payload = dict(perceptual().payload, ssim=[float("nan"), 0.99])
    verdict = decide(contract("perceptual"), evidence(perceptual=Recorded("ev-x", payload)), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "evidence.invalid")
    assert verdict.reasons == ["invalid evidence: perceptual evidence ev-x.ssim[0]: nan is not a finite number"]


def test_a_stored_derived_summary_is_recomputed_not_trusted():
    slow = benchmark(1.04)
    forged = Recorded("ev-forged", {**slow.payload, "derived": {**slow.payload["derived"], "speedup": 9.9}})
    verdict = decide(contract(), evidence(benchmark=forged), MODULE)
    assert verdict.decision == "rejected" and verdict.speedup == pytest.approx(1.04)


def test_evidence_of_the_wrong_kind_is_held():
    verdict = decide(contract(), evidence(parity=benchmark()), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "evidence.invalid")
    assert verdict.reasons == ["parity evidence ev-bench is not a parity item (kind 'benchmark')"]


def test_decide_does_not_mutate_the_evidence():
    recorded = evidence()
    snapshot = json.dumps([recorded.execution.payload, recorded.benchmark.payload, recorded.parity.payload])
    decide(contract(), recorded, MODULE)
    assert json.dumps([recorded.execution.payload, recorded.benchmark.payload, recorded.parity.payload]) == snapshot


def test_verdict_round_trips_through_json():
    verdict = decide(contract("perceptual"), evidence(), MODULE)
    text = json.dumps(verdict.to_dict(), allow_nan=False)
    assert Verdict.from_dict(json.loads(text)) == verdict
    assert verdict.gate_version == GATE_VERSION
    assert verdict.to_dict()["margins"][0] == {"metric": "ssim", "value": 0.9912, "threshold": 0.98,
                                               "margin": verdict.margins[0].margin, "passed": True}


def test_verdict_from_dict_refuses_malformed_input():
    good = decide(contract(), evidence(), MODULE).to_dict()
    with pytest.raises(ValueError, match="verdict: expected keys"):
        Verdict.from_dict({**good, "extra": 1})
    with pytest.raises(ValueError, match="verdict.decision: 'approved'"):
        Verdict.from_dict({**good, "decision": "approved"})
    bad_margin = {**good, "margins": [{"metric": "speedup", "value": float("nan"), "threshold": 1.3,
                                       "margin": 0.1, "passed": True}]}
    with pytest.raises(ValueError, match=r"verdict.margins\[0\].value: expected a finite number"):
        Verdict.from_dict(bad_margin)


def test_the_gate_and_contracts_import_no_torch_and_no_database():
    code = ("import sys, registry.gate, registry.contracts; "
            "bad = [m for m in ('torch', 'sqlalchemy', 'sqlmodel', 'sqlite3', 'psycopg') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=HANG_GUARD_S)
    assert result.returncode == 0, result.stdout + result.stderr
