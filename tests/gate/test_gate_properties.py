"""Properties of the gate over generated contracts and evidence (hypothesis)."""
from __future__ import annotations

import copy
import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.contracts import Contract
from registry.formats.evidence.errors import EvidenceError
from registry.formats.evidence.items import parse_item
from registry.gate import RULES, ArtifactFacts, GateEvidence, Recorded, Verdict, decide

ARTIFACT = ArtifactFacts("kernel-v1", "fused_kernel")
FRAME_SET = "wan-1.3b-fixed-seed-8"
SLOTS = ("execution", "benchmark", "fidelity")
PROPERTY_SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LAYOUT = {"reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
          "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1]}


@st.composite
def contracts(draw, tiers=("exact", "perceptual", "advisory"), with_speed=None) -> Contract:
    tier = draw(st.sampled_from(tiers))
    manifest: dict = {"workload": "w"}
    if tier != "exact":
        manifest["fidelity"] = {"tier": tier, "frame_set": FRAME_SET,
                                "min_ssim": draw(st.floats(0.5, 0.99)), "max_lpips": draw(st.floats(0.0, 0.3))}
    if with_speed if with_speed is not None else draw(st.booleans()):
        manifest["speed"] = {"min_speedup": draw(st.floats(1.0, 1.5)), "runs_per_arm": 6,
                             "protocol": "paired", "require_conclusive": draw(st.booleans())}
    return Contract.from_mapping(manifest)


@st.composite
def raw_items(draw, clean: bool) -> dict[str, dict]:
    """Raw evidence items; `clean` ones pass every check of the contracts drawn above."""
    n = draw(st.sampled_from([6, 8, 10]))
    candidate = draw(st.lists(st.floats(0.5, 2.0), min_size=n, max_size=n))
    factor = 2.0 if clean else draw(st.floats(0.5, 3.0))
    frames = draw(st.integers(1, 4))
    ssim = [1.0] * frames if clean else draw(st.lists(st.floats(-1.0, 1.0), min_size=frames, max_size=frames))
    lpips = [0.0] * frames if clean else draw(st.lists(st.floats(0.0, 1.0), min_size=frames, max_size=frames))
    byte_equal = True if clean else draw(st.booleans())
    return {
        "execution": {"kind": "execution", "candidate_calls": 1 if clean else draw(st.integers(0, 3)),
                      "fallbacks": 0 if clean else draw(st.integers(0, 1))},
        "benchmark": {"kind": "benchmark", "protocol": "paired", "device": "H100", "timer": "cuda_event",
                      "baseline_s": [factor * c for c in candidate], "candidate_s": candidate,
                      "schedule": ["BC", "CB"] * (n // 2)},
        "parity": {"kind": "parity", "leaves": [{
            "name": "out", **LAYOUT, "byte_equal": byte_equal,
            "max_abs_error": 0.0 if byte_equal else 0.5, "max_rel_error": 0.0 if byte_equal else 0.1,
            "has_nan": False, "has_inf": False}]},
        "perceptual": {"kind": "perceptual", "frame_set": FRAME_SET, "seed": 1, "ssim": ssim, "lpips": lpips,
                       "vbench": None, "stage_status": "ok"},
    }


def gate_evidence(raw: dict[str, dict], drop: frozenset[str] = frozenset()) -> GateEvidence:
    recorded = {kind: Recorded(f"ev-{kind}", parse_item(item)) for kind, item in raw.items()}
    fidelity_missing = "fidelity" in drop
    return GateEvidence(
        execution=None if "execution" in drop else recorded["execution"],
        benchmark=None if "benchmark" in drop else recorded["benchmark"],
        parity=None if fidelity_missing else recorded["parity"],
        perceptual=None if fidelity_missing else recorded["perceptual"],
    )


def numeric_paths(obj, prefix=()):
    """Every path to a raw (non-bool) number in an item, skipping the registry's own `derived`."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key != "derived":
                yield from numeric_paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from numeric_paths(value, (*prefix, index))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield prefix


def with_nan(payload: dict, path: tuple) -> dict:
    poisoned = copy.deepcopy(payload)
    node = poisoned
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = math.nan
    return poisoned


@PROPERTY_SETTINGS
@given(contracts(tiers=("exact", "perceptual"), with_speed=True), raw_items(clean=True))
def test_clean_evidence_is_promoted(contract, raw):
    """The generators can reach promotion, so the properties below are not vacuous."""
    assert decide(contract, gate_evidence(raw), ARTIFACT).decision == "promoted"


@PROPERTY_SETTINGS
@given(contracts(), raw_items(clean=True), st.sets(st.sampled_from(SLOTS), min_size=1).map(frozenset))
def test_missing_required_evidence_is_never_promoted(contract, raw, drop):
    verdict = decide(contract, gate_evidence(raw, drop), ARTIFACT)
    assert verdict.decision != "promoted"
    assert verdict.decision in {"held", "quarantined", "recorded"}


@PROPERTY_SETTINGS
@given(contracts(), raw_items(clean=True), st.data())
def test_a_nan_in_any_gated_measurement_is_never_promoted(contract, raw, data):
    evidence = gate_evidence(raw)
    fidelity_slot = "parity" if contract.tier == "exact" else "perceptual"
    slot = data.draw(st.sampled_from(["execution", "benchmark", fidelity_slot]))
    recorded: Recorded = getattr(evidence, slot)
    path = data.draw(st.sampled_from(list(numeric_paths(recorded.payload))))
    poisoned = Recorded(recorded.event_id, with_nan(recorded.payload, path))
    verdict = decide(contract, GateEvidence(**{**evidence.__dict__, slot: poisoned}), ARTIFACT)
    assert verdict.decision != "promoted"
    assert all(math.isfinite(m.value) and math.isfinite(m.margin) for m in verdict.margins)


@PROPERTY_SETTINGS
@given(contracts(tiers=("advisory",)), raw_items(clean=False))
def test_advisory_is_never_promoted(contract, raw):
    verdict = decide(contract, gate_evidence(raw), ARTIFACT)
    assert (verdict.decision, verdict.rule) == ("recorded", "advisory")


@PROPERTY_SETTINGS
@given(contracts(), raw_items(clean=False))
def test_decisions_are_deterministic_and_margins_are_consistent(contract, raw):
    first = decide(contract, gate_evidence(raw), ARTIFACT)
    second = decide(contract, gate_evidence(raw), ARTIFACT)
    assert first == second
    assert Verdict.from_dict(first.to_dict()) == first
    for margin in first.margins:
        assert margin.passed == (margin.margin >= 0)
    if first.decision == "promoted":
        assert all(margin.passed for margin in first.margins)
        assert first.rule == "speed.passed"
    assert first.reasons, "every verdict states its reasons"
    assert first.rule in RULES


# ---- the parity decision table over the whole leaf space ---------------------------------------------

DECLARED = {"atol": 0.02, "rtol": 0.02}
PARITY_POLICIES = {
    "byte_equal": None,
    "tolerance": {"policy": "tolerance", "tolerances": {"bfloat16": DECLARED, "float32": {**DECLARED, "max_abs": 0.4}}},
}
DTYPES = ("bfloat16", "torch.bfloat16", "float32", "float16", "int32", "bool")  # float16: no tolerance declared
SHAPES = {(4,): [(1,), (2,)], (2, 2): [(2, 1), (1, 2)], (): [()]}
ERRORS = (None, 0.0, 0.01, 0.02, 0.3, 0.5, 2.0)
# Recorded tolerances: as declared, stricter, looser, and mixed (one bound each way).
RECORDED = ({"atol": 0.02, "rtol": 0.02}, {"atol": 0.01, "rtol": 0.0}, {"atol": 0.5, "rtol": 0.1},
            {"atol": 0.01, "rtol": 0.5}, {"atol": 0.5, "rtol": 0.0, "max_abs": 1.0})
MAYBE_FLAG = (..., None, True, False)  # ... = omitted


def put(leaf: dict, key: str, value) -> None:
    if value is not ...:
        leaf[key] = value


@st.composite
def any_leaves(draw) -> dict:
    """Any leaf, valid or not: one- or two-sided, every layout mismatch, null and omitted errors, every
    NaN/inf flag combination, recorded tolerances stricter, looser and mixed against the declared one."""
    leaf: dict = {"name": "out"}
    shape = draw(st.sampled_from(sorted(SHAPES)))
    if draw(st.integers(0, 4)):
        reference = {"dtype": draw(st.sampled_from(DTYPES)), "shape": list(shape),
                     "strides": list(draw(st.sampled_from(SHAPES[shape])))}
        candidate = dict(reference)
        mutation = draw(st.sampled_from((None, None, None, "dtype", "shape", "strides")))
        if mutation == "dtype":
            candidate["dtype"] = draw(st.sampled_from(DTYPES))
        elif mutation is not None:
            other = draw(st.sampled_from(sorted(SHAPES)))
            candidate["shape"] = list(other) if mutation == "shape" else candidate["shape"]
            candidate["strides"] = list(draw(st.sampled_from(SHAPES[tuple(candidate["shape"])])))
        for side, layout in (("reference", reference), ("candidate", candidate)):
            leaf.update({f"{side}_{key}": value for key, value in layout.items()})
    else:
        leaf.update(dtype=draw(st.sampled_from(DTYPES)), shape=list(shape))
        put(leaf, "strides_equal", draw(st.sampled_from(MAYBE_FLAG)))
    leaf["byte_equal"] = draw(st.integers(0, 3)) == 0
    put(leaf, "max_abs_error", draw(st.sampled_from((..., *ERRORS))))
    put(leaf, "max_rel_error", draw(st.sampled_from((..., *ERRORS))))
    leaf["has_nan"], leaf["has_inf"] = draw(st.booleans()), draw(st.booleans())
    for key in ("reference_has_nan", "reference_has_inf", "nonfinite_mismatch"):
        put(leaf, key, draw(st.sampled_from(MAYBE_FLAG)))
    if draw(st.booleans()):
        leaf["tolerance"] = draw(st.sampled_from(RECORDED))
        put(leaf, "outside_tolerance", draw(st.sampled_from((..., None, 0, 1, 3))))
    return leaf


def shown_good(leaf: dict, policy: str) -> bool:
    """The table stated plainly: shown equal, or shown within the declared tolerance; nothing else."""
    if "reference_dtype" not in leaf:
        return False
    sides = [(leaf[f"{side}_dtype"].removeprefix("torch."), leaf[f"{side}_shape"], leaf[f"{side}_strides"])
             for side in ("reference", "candidate")]
    if sides[0] != sides[1]:
        return False
    if leaf["byte_equal"]:
        return True
    declared = (PARITY_POLICIES[policy] or {}).get("tolerances", {}).get(sides[0][0])
    error = leaf.get("max_abs_error")
    if declared is None or error is None or error > declared.get("max_abs", math.inf):
        return False
    flags = [leaf["has_nan"], leaf["has_inf"], leaf.get("reference_has_nan"), leaf.get("reference_has_inf")]
    pattern_matches = leaf.get("nonfinite_mismatch") is False or (
        leaf.get("nonfinite_mismatch") is None and flags == [False] * 4)
    recorded, outside = leaf.get("tolerance"), leaf.get("outside_tolerance")
    counted_within = outside == 0 and recorded["atol"] <= declared["atol"] and recorded["rtol"] <= declared["rtol"]
    return pattern_matches and (error <= declared["atol"] or counted_within)


def parity_verdict(leaf: dict, policy: str) -> tuple[Verdict, bool]:
    """The verdict with every other rule passing, and whether the parser accepted the leaf.
    A refused leaf goes to the gate as a stored payload, as if it had bypassed the parser."""
    raw = {"kind": "parity", "leaves": [leaf]}
    try:
        payload, valid = parse_item(raw), True
    except EvidenceError:
        payload, valid = raw, False
    clean = {kind: Recorded(f"ev-{kind}", parse_item(item)) for kind, item in CLEAN.items()}
    manifest = {"workload": "w", "speed": {"min_speedup": 1.1, "runs_per_arm": 4, "protocol": "paired", "decision": "point"}}
    if PARITY_POLICIES[policy]:
        manifest["parity"] = PARITY_POLICIES[policy]
    evidence = GateEvidence(execution=clean["execution"], benchmark=clean["benchmark"],
                            parity=Recorded("ev-parity", payload))
    return decide(Contract.from_mapping(manifest), evidence, ARTIFACT), valid


CLEAN = {
    "execution": {"kind": "execution", "candidate_calls": 1, "fallbacks": 0},
    "benchmark": {"kind": "benchmark", "protocol": "paired", "device": "H100", "timer": "cuda_event",
                  "baseline_s": [2.0] * 4, "candidate_s": [1.0] * 4, "schedule": ["BC", "CB"] * 2},
}


def check_table(leaf: dict, policy: str) -> Verdict:
    verdict, valid = parity_verdict(leaf, policy)
    if not valid:
        assert (verdict.decision, verdict.rule) == ("held", "evidence.invalid"), verdict.reasons
    else:
        assert (verdict.decision == "promoted") == shown_good(leaf, policy), (leaf, policy, verdict.reasons)
        assert verdict.decision in {"promoted", "held", "quarantined"}
    return verdict


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(any_leaves(), st.sampled_from(sorted(PARITY_POLICIES)))
def test_a_leaf_is_promoted_exactly_when_the_evidence_shows_it_good(leaf, policy):
    verdict = check_table(leaf, policy)
    if "reference_dtype" in leaf and verdict.rule != "evidence.invalid":
        sides_differ = any(
            (leaf[f"reference_{key}"] != leaf[f"candidate_{key}"]) if key != "dtype"
            else leaf["reference_dtype"].removeprefix("torch.") != leaf["candidate_dtype"].removeprefix("torch.")
            for key in ("dtype", "shape", "strides"))
        if sides_differ:
            assert verdict.decision == "quarantined" and "differ" in verdict.reasons[0]


def test_every_nonfinite_flag_combination_follows_the_table():
    base = {"name": "out", **LAYOUT, "byte_equal": False, "max_abs_error": 0.01}
    decisions = set()
    for flags in itertools.product((False, True), (False, True), MAYBE_FLAG, MAYBE_FLAG, MAYBE_FLAG):
        leaf = dict(base, has_nan=flags[0], has_inf=flags[1])
        for key, value in zip(("reference_has_nan", "reference_has_inf", "nonfinite_mismatch"), flags[2:]):
            put(leaf, key, value)
        decisions.add(check_table(leaf, "tolerance").decision)
    assert decisions == {"promoted", "held", "quarantined"}


def test_every_recorded_tolerance_against_the_declared_one_follows_the_table():
    base = {"name": "out", **LAYOUT, "byte_equal": False, "has_nan": False, "has_inf": False,
            "nonfinite_mismatch": False}
    decisions = set()
    for error, recorded, outside in itertools.product(ERRORS, (..., *RECORDED), (..., None, 0, 2)):
        leaf = dict(base)
        put(leaf, "max_abs_error", error)
        put(leaf, "tolerance", recorded)
        put(leaf, "outside_tolerance", outside)
        decisions.add(check_table(leaf, "tolerance").decision)
    assert decisions == {"promoted", "held", "quarantined"}
