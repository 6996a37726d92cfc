"""The gate: contract + recorded evidence + artifact facts -> verdict. Pure, fail closed.

Rules run in the order of docs/architecture.md, "The gate, in order": 1 failed stages,
2 execution, 3 fidelity by tier, 4 speed. Every rule runs, so the verdict
lists every problem found; the decision follows precedence (quarantined,
held, rejected, promoted) and `rule` names the first rule that reached it.
Promotion therefore needs a passing speed gate and no other finding at all.
The advisory tier is always `recorded`: a person decides (HumanDecision),
with every reason and margin in front of them.
"""
from __future__ import annotations

from registry.contracts import Contract
from registry.gate.execution import check_execution
from registry.gate.failures import check_failures
from registry.gate.ledger import Ledger
from registry.gate.model import GATE_VERSION, ArtifactFacts, GateEvidence, Verdict
from registry.gate.parity import check_parity
from registry.gate.perceptual import check_perceptual
from registry.gate.speed import check_speed

ADVISORY_REASON = "advisory tier: never promoted by the gate; recorded for a HumanDecision"


def decide(contract: Contract, evidence: GateEvidence, artifact: ArtifactFacts) -> Verdict:
    ledger = Ledger()
    check_failures(evidence.failures, ledger)
    check_execution(evidence.execution, artifact, ledger)
    if contract.tier == "exact":
        check_parity(contract.parity, evidence.parity, ledger)
    else:
        check_perceptual(contract.fidelity, evidence.perceptual, ledger)
    speedup, speedup_ci, level = check_speed(contract.speed, evidence.benchmark, evidence.benchmark_attempts,
                                              ledger, evidence.record)
    if contract.tier == "advisory":
        decision, rule = "recorded", "advisory"
        reasons = [*ledger.reasons(include_passes=True), ADVISORY_REASON]
    else:
        decision, rule = ledger.outcome()
        reasons = ledger.reasons(include_passes=decision == "promoted")
    return Verdict(
        decision=decision,
        tier=contract.tier,
        reasons=reasons,
        margins=list(ledger.margins),
        speedup=speedup,
        speedup_ci=speedup_ci,
        rule=rule,
        evidence_ids=list(ledger.evidence_ids),
        gate_version=GATE_VERSION,
        speedup_ci_level=level if speedup_ci is not None else None,
    )
