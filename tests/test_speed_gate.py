"""The speed gate's attempt cap and its calibrated "conclusive" rule, on real evidence items."""
from __future__ import annotations

import pytest

from registry.contracts import Contract, ContractError
from registry.evidence.document import parse_item
from registry.gate import RULES, ArtifactFacts, GateEvidence, Recorded, decide

MODULE = ArtifactFacts("fused-rmsnorm-v1", "module")
SPEED = {"min_speedup": 1.3, "runs_per_arm": 16, "protocol": "paired"}


def contract(**speed) -> Contract:
    return Contract.from_mapping({"workload": "w", "speed": {**SPEED, **speed}})


def paired(baseline: list[float], candidate: list[float]) -> Recorded:
    return Recorded("ev-bench", parse_item({
        "kind": "benchmark", "protocol": "paired", "device": "NVIDIA H200", "timer": "cuda_event",
        "baseline_s": baseline, "candidate_s": candidate,
        "schedule": ["BC" if i % 2 == 0 else "CB" for i in range(len(baseline))],
    }))


def passing_evidence(attempts: int | None = None, benchmark: Recorded | None = None) -> GateEvidence:
    candidate = [1.0 + 0.002 * (i % 4) for i in range(16)]
    return GateEvidence(
        execution=Recorded("ev-exec", parse_item({"kind": "execution", "candidate_calls": 4, "fallbacks": 0})),
        parity=Recorded("ev-parity", parse_item({"kind": "parity", "leaves": [{
            "name": "out", "dtype": "bfloat16", "shape": [4], "byte_equal": True, "strides_equal": True,
            "max_abs_error": 0.0, "max_rel_error": 0.0, "has_nan": False, "has_inf": False}]})),
        benchmark=benchmark or paired([1.5 * c for c in candidate], candidate),
        benchmark_attempts=attempts,
    )


# ---- speed.max_benchmark_attempts -------------------------------------------------------------------

def test_within_the_cap_promotes_and_states_the_count():
    verdict = decide(contract(max_benchmark_attempts=3), passing_evidence(attempts=3), MODULE)
    assert (verdict.decision, verdict.rule) == ("promoted", "speed.passed")
    assert verdict.reasons == [
        "3 benchmark attempts for this identity, of at most 3 (speed.max_benchmark_attempts)",
        "speedup 1.50x meets the gate 1.30x (min_speedup)",
    ]


def test_over_the_cap_holds_even_a_passing_benchmark():
    verdict = decide(contract(max_benchmark_attempts=3), passing_evidence(attempts=4), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.attempts_exceeded")
    assert verdict.reasons == [
        "4 benchmark attempts for this identity exceed speed.max_benchmark_attempts 3: "
        "no further benchmark of this identity can promote it",
    ]


@pytest.mark.parametrize(("attempts", "why"), [
    (None, "the number of benchmark attempts was not counted"),
    (0, "benchmark evidence is recorded but the attempt count is 0"),
    (-1, "the benchmark attempt count -1 is not a count"),
    (True, "the benchmark attempt count True is not a count"),
])
def test_a_declared_cap_without_a_usable_count_holds(attempts, why):
    verdict = decide(contract(max_benchmark_attempts=3), passing_evidence(attempts=attempts), MODULE)
    assert (verdict.decision, verdict.rule) == ("held", "speed.attempts_unknown")
    assert verdict.reasons == [f"{why}, so speed.max_benchmark_attempts 3 cannot be checked"]


def test_no_cap_is_stated_with_the_count():
    verdict = decide(contract(), passing_evidence(attempts=1), MODULE)
    assert verdict.decision == "promoted"
    assert verdict.reasons[0] == (
        "1 benchmark attempt for this identity; speed.max_benchmark_attempts is not declared, "
        "so attempts are not capped"
    )


def test_the_count_is_stated_whatever_the_decision():
    slow = [1.0] * 16
    verdict = decide(contract(max_benchmark_attempts=5), passing_evidence(2, paired(slow, slow)), MODULE)
    assert verdict.decision == "rejected"
    assert verdict.reasons == [
        "2 benchmark attempts for this identity, of at most 5 (speed.max_benchmark_attempts)",
        "speedup 1.00x is below the gate 1.30x (min_speedup)",
    ]
    no_speed = Contract.from_mapping({"workload": "w"})
    verdict = decide(no_speed, passing_evidence(attempts=2), MODULE)
    assert verdict.decision == "held"
    assert verdict.reasons[0].startswith("2 benchmark attempts for this identity; speed.max_benchmark_attempts")


def test_the_attempt_rules_are_listed():
    assert {"speed.attempts", "speed.attempts_unknown", "speed.attempts_exceeded"} <= set(RULES)


@pytest.mark.parametrize(("value", "message"), [
    (0, "speed.max_benchmark_attempts: 0 is below the minimum 1"),
    (2.5, "speed.max_benchmark_attempts: expected an integer, got float"),
    (True, "speed.max_benchmark_attempts: expected an integer, got bool"),
])
def test_the_cap_must_be_a_positive_integer(value, message):
    with pytest.raises(ContractError) as refused:
        contract(max_benchmark_attempts=value)
    assert str(refused.value).startswith(message)


def test_an_undeclared_cap_keeps_the_contract_hash():
    """A manifest that does not use the new field hashes as it did before the field existed."""
    assert "max_benchmark_attempts" not in contract().canonical()["speed"]
    assert contract(max_benchmark_attempts=2).canonical()["speed"]["max_benchmark_attempts"] == 2
    assert contract().content_hash() != contract(max_benchmark_attempts=2).content_hash()
