"""The gate: contract + recorded evidence + artifact facts -> verdict. Pure, fail closed.

Rules run in the order of docs/architecture.md, "The gate, in order": 1 failed stages,
2 execution, 3 fidelity by tier, 4 speed. Every rule runs, so the verdict
lists every problem found; the decision follows precedence (quarantined,
held, rejected, promoted) and `rule` names the first rule that reached it.
Promotion therefore needs a passing speed gate and no other finding at all.
The advisory tier is always `recorded`: a person decides (HumanDecision),
with every reason and margin in front of them; bytes rejected before are
rejected under it too (a rejection stands, and a person cannot approve it).
"""
from __future__ import annotations

from registry.contracts import Contract
from registry.gate.execution import check_execution
from registry.gate.failures import check_failures
from registry.gate.ledger import Ledger
from registry.gate.model import GATE_VERSION, ArtifactFacts, GateEvidence, Verdict
from registry.gate.parity import check_parity
from registry.gate.perceptual import check_perceptual
from registry.gate.speed import check_speed, rejection_text

ADVISORY_REASON = "advisory tier: never promoted by the gate; recorded for a HumanDecision"


def decide(contract: Contract, evidence: GateEvidence, artifact: ArtifactFacts) -> Verdict:
    ledger = Ledger()
    check_failures(evidence.failures, ledger)
    check_execution(evidence.execution, artifact, ledger)
    if contract.tier == "exact":
        check_parity(contract.parity, evidence.parity, ledger)
    else:
        check_perceptual(contract.fidelity, evidence.perceptual, ledger)
    speed = check_speed(contract.speed, evidence.benchmark, evidence.benchmark_attempts, ledger, evidence.record,
                        evidence.rejection)
    if contract.tier == "advisory" and evidence.rejection is None:
        decision, rule = "recorded", "advisory"
        reasons = [*ledger.reasons(include_passes=True), ADVISORY_REASON]
    else:
        decision, rule = ledger.outcome()
        reasons = ledger.reasons(include_passes=decision == "promoted")
        if evidence.rejection is not None and decision != "quarantined":
            # Nothing but a contract broken outright outranks a rejection that stands: held evidence cannot reopen it.
            standing = rejection_text(evidence.rejection)
            decision, rule = "rejected", "speed.below_gate"
            reasons = [standing, *(reason for reason in reasons if reason != standing)]
    return Verdict(
        decision=decision,
        tier=contract.tier,
        reasons=reasons,
        margins=list(ledger.margins),
        speedup=speed.value,
        speedup_ci=speed.interval,
        rule=rule,
        evidence_ids=list(ledger.evidence_ids),
        gate_version=GATE_VERSION,
        speedup_ci_level=speed.level if speed.interval is not None else None,
        speedup_pairs=speed.pairs,
        speedup_ci_pair=speed.interval_pair,
        speed_record=speed.record,
    )
