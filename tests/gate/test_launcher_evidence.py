"""Evidence from the harness launcher, and what the gate makes of it.

An execution item that says `launch_signal: "harness_launcher"` names the
cubins the launcher loaded (kernel@arch -> sha256) and the launches of every
call; its fields must agree with each other, and nothing else may name
cubins. The gate takes it as execution evidence only for a triton_kernel
whose registered bundle holds exactly those cubin digests: the same claim
about other bytes, or on another kind, or a triton_kernel's evidence from
anywhere else, holds (`execution.launcher_unbound`). `candidate_process`
still holds (`execution.launches_unverified`).
"""
from __future__ import annotations

import pytest

from gate_evidence import decide_execution
from registry.formats.evidence.errors import EvidenceError
from registry.formats.evidence.items import parse_item
from registry.gate import ArtifactFacts

DIGEST, OTHER = "ab" * 32, "cd" * 32
HARNESS = {"sandbox": "linux-ns-seccomp/1", "harness_sha256": "ef" * 32,
           "confinement": {"identity": "sandbox_uid", "memory": "none"}}
REGISTERED = {"modln@sm_90a": DIGEST, "modln@sm_100a": OTHER}
LAUNCHED = {"kind": "execution", "candidate_calls": 3, "fallbacks": 0, "launch_signal": "harness_launcher",
            "cubins": {"modln@sm_90a": DIGEST}, "launches": [["modln@sm_90a"], ["modln@sm_90a", "modln@sm_90a"]],
            **HARNESS}


def _decide(execution: dict, facts: ArtifactFacts):
    return decide_execution(execution, facts, timer="cuda_event")


def test_the_harness_launchers_evidence_promotes_the_triton_kernel_whose_cubins_it_names():
    verdict = _decide(LAUNCHED, ArtifactFacts("modln", "triton_kernel", cubins=REGISTERED))
    assert (verdict.decision, verdict.rule) == ("promoted", "speed.passed"), verdict.reasons


@pytest.mark.parametrize("facts, reason", [
    (ArtifactFacts("modln", "triton_kernel", cubins={"modln@sm_90a": OTHER}),
     "cubin modln@sm_90a: the evidence names sha256 abababababab, and the registered bundle holds sha256 cdcdcdcdcdcd"),
    (ArtifactFacts("modln", "triton_kernel", cubins={"modln@sm_100a": OTHER}),
     "the registered bundle holds no such cubin"),
    (ArtifactFacts("modln", "triton_kernel"), "the registered bundle holds no such cubin"),
    (ArtifactFacts("modln", "fused_kernel"), "the launcher runs only a triton_kernel bundle's cubins"),
])
def test_the_same_claim_about_other_bytes_or_another_kind_is_held(facts, reason):
    verdict = _decide(LAUNCHED, facts)
    assert (verdict.decision, verdict.rule) == ("held", "execution.launcher_unbound")
    assert reason in verdict.reasons[0]


@pytest.mark.parametrize("execution", [
    {"kind": "execution", "candidate_calls": 3, "fallbacks": 0},  # counts only: an import from another harness
    {"kind": "execution", "candidate_calls": 3, "fallbacks": 0, "launch_signal": "candidate_process", **HARNESS},
])
def test_a_triton_kernels_execution_evidence_from_anywhere_but_the_launcher_is_held(execution):
    verdict = _decide(execution, ArtifactFacts("modln", "triton_kernel", cubins=REGISTERED))
    assert verdict.decision == "held"
    assert any("does not come from the harness launcher" in reason for reason in verdict.reasons)
    if execution.get("launch_signal") == "candidate_process":
        assert verdict.rule == "execution.launches_unverified"


def test_candidate_process_still_holds_a_fused_kernel():
    execution = {"kind": "execution", "candidate_calls": 3, "fallbacks": 0, "launch_signal": "candidate_process",
                 **HARNESS}
    verdict = _decide(execution, ArtifactFacts("modln", "fused_kernel"))
    assert (verdict.decision, verdict.rule) == ("held", "execution.launches_unverified")


@pytest.mark.parametrize("change, message", [
    ({"launch_signal": "candidate_process"}, "only launch_signal 'harness_launcher' names the cubins"),
    ({"launch_signal": None}, "only launch_signal 'harness_launcher' names the cubins"),
    ({"cubins": None}, "needs cubins"),
    ({"launches": None}, "needs launches"),
    ({"sandbox": None, "harness_sha256": None, "confinement": None}, "needs sandbox"),
    ({"candidate_calls": 4}, "candidate_calls: 4, but the launches listed number 3"),
    ({"fallbacks": 1}, "never falls back"),
    ({"launches": [["modln@sm_100a"], ["modln@sm_90a", "modln@sm_90a"]]}, "modln@sm_100a was launched, and no cubin"),
    ({"cubins": {}}, "names no cubin"),
    ({"cubins": {"modln": DIGEST}}, "is not a kernel@arch name"),
    ({"cubins": {"modln@sm90": DIGEST}}, "is not a kernel@arch name"),
    ({"cubins": {"modln@sm_90a": "AB" * 32}}, "sha256"),
    ({"launches": []}, "empty"),
    ({"launches": [[]]}, "empty"),
    ({"launches": [["modln@sm_90a"]] * 250_001, "candidate_calls": 250_001}, "at most 250000"),
])
def test_harness_launcher_fields_that_disagree_or_say_nothing_are_refused(change, message):
    item = {key: value for key, value in {**LAUNCHED, **change}.items() if value is not None}
    with pytest.raises(EvidenceError, match=message):
        parse_item(item)
