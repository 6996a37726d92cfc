"""The one promotion decision: a pure function of contract, evidence and artifact facts."""
from registry.gate.decide import decide
from registry.gate.model import (
    ARTIFACT_KINDS,
    DECISIONS,
    GATE_VERSION,
    RULES,
    ArtifactFacts,
    GateEvidence,
    PairRecord,
    Margin,
    Recorded,
    Verdict,
)

__all__ = [
    "ARTIFACT_KINDS",
    "DECISIONS",
    "GATE_VERSION",
    "RULES",
    "ArtifactFacts",
    "GateEvidence",
    "PairRecord",
    "Margin",
    "Recorded",
    "Verdict",
    "decide",
]
