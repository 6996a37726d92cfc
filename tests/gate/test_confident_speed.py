"""The speed block's decision rule: confident by default for new manifests, point for contracts stored before
the rule existed, and complete benchmark documents judged by their bounds against the gate."""
from __future__ import annotations

import json
import shutil

import pytest

from registry.contracts import Contract, ContractError
from registry.formats.evidence.items import parse_item
from registry.gate import ArtifactFacts, GateEvidence, Recorded, decide
from paths import MOTIONKERNEL

MODULE = ArtifactFacts("fused-rmsnorm-v1", "module")
BASE = {"min_speedup": 1.2, "runs_per_arm": 16, "protocol": "paired"}
PASSING_LEAF = {"name": "out", "reference_dtype": "bfloat16", "candidate_dtype": "bfloat16", "reference_shape": [4],
                "candidate_shape": [4], "reference_strides": [1], "candidate_strides": [1], "byte_equal": True,
                "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}


def speed_of(manifest_speed: dict, stored: bool = False):
    return Contract.from_mapping({"workload": "w", "speed": manifest_speed}, stored=stored).speed


def evidence(ratios: list[float]) -> GateEvidence:
    candidate = [1.0 + 0.001 * (i % 3) for i in range(len(ratios))]
    benchmark = parse_item({
        "kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
        "baseline_s": [r * c for r, c in zip(ratios, candidate)], "candidate_s": candidate,
        "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(len(ratios))],
    })
    return GateEvidence(
        execution=Recorded("ev-exec", parse_item({"kind": "execution", "candidate_calls": 4, "fallbacks": 0})),
        parity=Recorded("ev-parity", parse_item({"kind": "parity", "leaves": [PASSING_LEAF]})),
        benchmark=Recorded("ev-bench", benchmark), benchmark_attempts=1,
    )


# ---- the contract --------------------------------------------------------------------------------

def test_a_new_manifest_without_a_rule_is_confident_with_the_documented_defaults():
    speed = speed_of(BASE)
    assert (speed.decision, speed.alpha, speed.max_pairs) == ("confident", 0.05, 128)
    canonical = speed.canonical()
    assert (canonical["decision"], canonical["alpha"], canonical["max_pairs"]) == ("confident", 0.05, 128)


def test_a_stored_contract_without_a_rule_means_point_and_keeps_its_hash():
    """What a log recorded before the rule existed holds: the same dict, read back, is the point rule, and a
    point contract's canonical form (so its content hash) has none of the new fields."""
    old_canonical = {"workload": "w", "speed": {**BASE, "ceiling_share": None, "max_cv": None,
                                                "require_conclusive": False, "max_peak_memory_regression": None}}
    stored = Contract.from_stored(old_canonical)
    assert stored.speed.decision == "point" and stored.speed.alpha is None
    declared_point = Contract.from_mapping({"workload": "w", "speed": {**BASE, "decision": "point"}})
    assert declared_point.canonical() == stored.canonical()
    assert declared_point.content_hash() == stored.content_hash()
    assert set(stored.canonical()["speed"]) == {"min_speedup", "ceiling_share", "runs_per_arm", "protocol",
                                                "max_cv", "require_conclusive", "max_peak_memory_regression"}
    assert Contract.from_mapping(old_canonical).content_hash() != stored.content_hash()  # a new manifest differs


def test_a_confident_contract_reads_back_as_itself():
    contract = Contract.from_mapping({"workload": "w", "speed": {**BASE, "alpha": 0.01, "max_pairs": 64}})
    again = Contract.from_stored(contract.canonical())
    assert again.canonical() == contract.canonical() and again.speed.decision == "confident"


@pytest.mark.parametrize("change, message", [
    ({"alpha": 0.0}, "speed.alpha: 0.0 is outside (0, 0.5]"),
    ({"alpha": 0.6}, "speed.alpha: 0.6 is outside (0, 0.5]"),
    ({"alpha": -0.01}, "speed.alpha: -0.01 is outside (0, 0.5]"),
    ({"alpha": float("nan")}, "speed.alpha"),
    ({"alpha": True}, "speed.alpha: expected a number"),
    ({"alpha": "0.05"}, "speed.alpha: '0.05' is text"),
    ({"max_pairs": 4}, "speed.max_pairs: 4 is below the minimum 5"),
    ({"max_pairs": 10.0}, "speed.max_pairs: expected an integer"),
    ({"max_pairs": 10**9}, "speed.max_pairs: 1000000000 is above"),
    ({"decision": "bayes"}, "speed.decision: 'bayes' is not one of confident, point"),
    ({"decision": "point", "alpha": 0.05}, "speed.alpha: applies only to decision: confident"),
    ({"decision": "point", "max_pairs": 64}, "speed.max_pairs: applies only to decision: confident"),
])
def test_a_rule_that_cannot_hold_its_guarantee_is_refused(change, message):
    with pytest.raises(ContractError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        speed_of({**BASE, **change})


def test_max_pairs_must_allow_a_decision_at_the_declared_alpha():
    assert speed_of({**BASE, "alpha": 0.01, "max_pairs": 8}).max_pairs == 8
    with pytest.raises(ContractError, match="speed.max_pairs: 7 is below the minimum 8"):
        speed_of({**BASE, "alpha": 0.01, "max_pairs": 7})


# ---- complete documents under the confident rule ------------------------------------------------

def test_a_clear_speedup_promotes_on_its_lower_bound():
    verdict = decide(Contract.from_mapping({"workload": "w", "speed": BASE}), evidence([1.5] * 16), MODULE)
    assert (verdict.decision, verdict.rule) == ("promoted", "speed.passed")
    assert verdict.reasons[0].startswith("speedup 1.50x: its bounds [1.5, 1.5] (alpha 0.05 per side) lie above")
    assert verdict.speedup_ci == (1.5, 1.5)


def test_a_point_above_the_gate_whose_bounds_reach_below_it_is_held():
    ratios = [1.25, 1.3, 1.1, 1.12, 1.35, 1.05, 1.28, 1.24, 1.31, 1.0, 1.26, 1.13, 1.4, 1.15, 1.27, 1.21]
    confident = decide(Contract.from_mapping({"workload": "w", "speed": BASE}), evidence(ratios), MODULE)
    assert (confident.decision, confident.rule) == ("held", "speed.undecided")
    assert "reach both sides of the gate 1.20x" in confident.reasons[0]
    low, high = confident.speedup_ci
    assert low < 1.2 < high
    point = decide(Contract.from_mapping({"workload": "w", "speed": {**BASE, "decision": "point"}}),
                   evidence(ratios), MODULE)
    assert (point.decision, point.rule) == ("promoted", "speed.passed")


def test_a_bound_exactly_at_the_gate_shows_nothing():
    verdict = decide(Contract.from_mapping({"workload": "w", "speed": BASE}), evidence([1.2] * 16), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.undecided")


def test_too_few_runs_for_any_bound_at_alpha_hold():
    contract = Contract.from_mapping({"workload": "w", "speed": {**BASE, "runs_per_arm": 4}})
    verdict = decide(contract, evidence([2.0] * 4), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.undecided")
    assert "4 runs per arm are too few for distribution-free bounds at alpha 0.05 per side" in verdict.reasons[0]


def test_a_clear_slowdown_is_rejected_on_its_upper_bound():
    verdict = decide(Contract.from_mapping({"workload": "w", "speed": BASE}), evidence([1.05] * 16), MODULE)
    assert (verdict.decision, verdict.rule) == ("rejected", "speed.below_gate")
    assert "lie below the gate 1.20x" in verdict.reasons[0]


# ---- the two LTX dispatch measurements ----------------------------------------------------------

LTX_CONFIDENT = "workload: ltx-t2v-480p\nparity: {policy: byte_equal}\nfidelity: {tier: exact}\n" \
                "speed: {min_speedup: 1.2, runs_per_arm: 15, protocol: sequential}\n"
LTX_POINT = LTX_CONFIDENT.replace("protocol: sequential}", "protocol: sequential, decision: point}")


def imported_ltx_verdicts(cli, manifest: str) -> dict[str, dict]:
    path = cli.tmp / "ltx.yaml"
    path.write_text(manifest)
    assert cli("workload", "declare", str(path)).exit_code == 0
    report = json.loads(cli("report", "--format", "json").stdout)
    return {row["origin"]["path"]: row["registry"] for row in report["imported"] if row["workload"] == "ltx-t2v-480p"}


def test_the_ltx_measurements_under_a_confident_gate_promote_neither(registry_cli, tmp_path):
    """Same artifact, two days, each timed arm after arm: under the confident rule each is judged alone and held,
    its baseline shifting level partway (docs/gate.md, "The drift check"); read as exchangeable (drift_check:
    none), 1.027x lies wholly below the 1.2x gate (rejected) and 1.246x has bounds reaching below it (held), where
    the point rule promotes the 1.246x one and so lets the day decide."""
    tree = tmp_path / "campaign"
    shutil.copytree(MOTIONKERNEL / "dispatch", tree)
    assert registry_cli("import", "motionkernel", str(tree), "--json").exit_code == 0
    confident = imported_ltx_verdicts(registry_cli, LTX_CONFIDENT)
    slow, fast = confident["sm100-1030.measurement.json"], confident["sm100-1040.measurement.json"]
    assert (slow["decision"], slow["rule"]) == (fast["decision"], fast["rule"]) == ("held", "speed.drift")
    assert "baseline shifted after run 8 of 15" in slow["reason"] and "after run 3 of 15" in fast["reason"]
    exchangeable = imported_ltx_verdicts(registry_cli, LTX_CONFIDENT.replace("sequential}", "sequential, "
                                                                                            "drift_check: none}"))
    slow, fast = exchangeable["sm100-1030.measurement.json"], exchangeable["sm100-1040.measurement.json"]
    assert (slow["decision"], slow["rule"]) == ("rejected", "speed.below_gate")
    assert slow["reason"].startswith("speedup 1.03x: its bounds [0.99")
    assert (fast["decision"], fast["rule"]) == ("held", "speed.undecided")
    assert fast["reason"].startswith("speedup 1.25x: its bounds [1.18") and "reach both sides" in fast["reason"]
    point = imported_ltx_verdicts(registry_cli, LTX_POINT)
    assert point["sm100-1040.measurement.json"]["decision"] == "promoted"
    assert point["sm100-1030.measurement.json"]["decision"] == "rejected"


def test_a_log_declared_before_the_rule_decides_as_it_did(registry_cli, tmp_path):
    """A contract stored without `decision` (every contract declared before the rule existed, and every
    point contract since) is judged by the point rule; the same manifest without a rule is a new version."""
    import sqlite3

    manifest = tmp_path / "w.yaml"
    manifest.write_text("workload: w\nparity: {policy: byte_equal}\n"
                        "speed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, decision: point}\n")
    assert registry_cli("workload", "declare", str(manifest)).exit_code == 0
    with sqlite3.connect(registry_cli.url.removeprefix("sqlite:///")) as conn:
        [stored] = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM events WHERE type='WorkloadDeclared'")]
    assert "decision" not in stored["contract"]["speed"] and "alpha" not in stored["contract"]["speed"]
    (tmp_path / "k.bin").write_bytes(b"kernel")
    assert registry_cli("artifact", "register", "k", "--workload", "w", "--kind", "module",
                        "--payload", str(tmp_path / "k.bin")).exit_code == 0
    ratios = [1.25, 1.3, 1.1, 1.12, 1.35, 1.05, 1.28, 1.24, 1.31, 1.0, 1.26, 1.13, 1.4, 1.15, 1.27, 1.21]
    evidence_items = evidence(ratios)
    document = tmp_path / "e.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "k", "evidence": [
        {key: value for key, value in item.payload.items() if key != "derived"}
        for item in (evidence_items.execution, evidence_items.parity, evidence_items.benchmark)]}))
    assert registry_cli("evidence", "import", str(document)).exit_code == 0, "import"
    what_if = tmp_path / "confident.yaml"
    what_if.write_text(manifest.read_text().replace(", decision: point", ""))
    proposed = registry_cli("what-if", str(what_if), "--json")
    assert proposed.exit_code == 0 and '"held"' in proposed.stdout
    promoted = json.loads(registry_cli("promote", "k", "--json").stdout)
    assert (promoted["decision"], promoted["rule"]) == ("promoted", "speed.passed")
    assert promoted["reasons"][0].startswith("speedup 1.25x meets the gate 1.20x")
    declared = json.loads(registry_cli("workload", "declare", str(what_if), "--json").stdout)
    assert declared["appended"] is True and declared["contract_version"] == 2
