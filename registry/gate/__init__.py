"""The one promotion decision: a pure function of contract, evidence and artifact facts.

`decide` is imported when first asked for: the rules it runs import numpy
and every evidence format, which a read that only folds a speed record
(`show`) or returns a standing verdict (`promote`) has no use for.
"""
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


def __getattr__(name: str):
    if name != "decide":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from registry.gate.decide import decide

    globals()["decide"] = decide  # the import bound the submodule under this name: the function replaces it
    return decide
