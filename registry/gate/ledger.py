"""The running record of one gate evaluation: findings, margins, evidence consulted.

Every rule writes here instead of returning early, so a verdict lists every
problem found; the decision is then taken by precedence (quarantined over
held over rejected; promoted only when nothing else was found).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from registry.formats.evidence.errors import EvidenceError
from registry.formats.evidence.items import parse_item
from registry.formats.errors import UserError
from registry.gate.model import RULES, Margin, Recorded

PRECEDENCE = ("quarantined", "held", "rejected", "promoted")
# The decision of a finding that decides nothing (the attempt count): never in
# PRECEDENCE, so it never decides, and always listed among the reasons.
NOTED = "noted"


@dataclass(frozen=True)
class Finding:
    rule: str
    decision: str
    reason: str


@dataclass
class Ledger:
    findings: list[Finding] = field(default_factory=list)
    margins: list[Margin] = field(default_factory=list)
    evidence_ids: list[str] = field(default_factory=list)

    def add(self, rule: str, decision: str, reason: str) -> None:
        if rule not in RULES:
            raise UserError(f"unknown gate rule {rule!r}")
        self.findings.append(Finding(rule, decision, reason))

    def note(self, rule: str, reason: str) -> None:
        """A fact every verdict states whatever its decision, without deciding anything."""
        self.add(rule, NOTED, reason)

    def margin(self, metric: str, value: float, threshold: float, higher_is_better: bool) -> Margin:
        """Record a signed margin; exactly at threshold passes."""
        if higher_is_better:
            result = Margin(metric, value, threshold, value - threshold, value >= threshold)
        else:
            result = Margin(metric, value, threshold, threshold - value, value <= threshold)
        self.margins.append(result)
        return result

    def admit(self, recorded: Recorded, kind: str) -> dict[str, Any] | None:
        """Re-validate a stored payload and re-derive its statistics; None (and held) if invalid.

        The payload's own `derived` dict is set aside and recomputed, so the
        gate decides only on numbers it derived from raw measurements.
        """
        if recorded.event_id not in self.evidence_ids:
            self.evidence_ids.append(recorded.event_id)
        where = f"{kind} evidence {recorded.event_id}"
        payload = recorded.payload
        if not isinstance(payload, Mapping) or payload.get("kind") != kind:
            found = payload.get("kind") if isinstance(payload, Mapping) else type(payload).__name__
            self.add("evidence.invalid", "held", f"{where} is not a {kind} item (kind {found!r})")
            return None
        try:
            return parse_item({key: value for key, value in payload.items() if key != "derived"}, where)
        except EvidenceError as exc:
            self.add("evidence.invalid", "held", f"invalid evidence: {exc}")
            return None

    def outcome(self) -> tuple[str, str]:
        """(decision, rule): the strongest decision found, and the first rule that reached it."""
        for decision in PRECEDENCE:
            for finding in self.findings:
                if finding.decision == decision:
                    return decision, finding.rule
        raise AssertionError("the speed rule always leaves a finding")

    def reasons(self, include_passes: bool) -> list[str]:
        """The findings' reasons in gate order, notes last: the first reason is always one that decided."""
        shown = [finding for finding in self.findings if include_passes or finding.decision != "promoted"]
        return [f.reason for f in shown if f.decision != NOTED] + [f.reason for f in shown if f.decision == NOTED]
