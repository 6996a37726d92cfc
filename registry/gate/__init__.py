"""The one promotion decision: a pure function of contract, evidence and artifact facts."""
from registry.gate.decide import decide
from registry.gate.model import (
    DECISIONS,
    GATE_VERSION,
    RULES,
    ArtifactFacts,
    GateEvidence,
    SpeedRecord,
    Margin,
    Recorded,
    Verdict,
)

__all__ = [
    "DECISIONS",
    "GATE_VERSION",
    "RULES",
    "ArtifactFacts",
    "GateEvidence",
    "SpeedRecord",
    "Margin",
    "Recorded",
    "Verdict",
    "decide",
]
