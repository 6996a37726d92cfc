"""Properties of the gate over generated contracts and evidence (hypothesis)."""
from __future__ import annotations

import copy
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.contracts import Contract
from registry.evidence.document import parse_item
from registry.gate import RULES, ArtifactFacts, GateEvidence, Recorded, Verdict, decide

ARTIFACT = ArtifactFacts("kernel-v1", "fused_kernel")
FRAME_SET = "wan-1.3b-fixed-seed-8"
SLOTS = ("execution", "benchmark", "fidelity")
PROPERTY_SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
            "name": "out", "dtype": "bfloat16", "shape": [4], "byte_equal": byte_equal,
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
