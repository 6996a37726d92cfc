"""The one promotion decision: a pure function of contract, evidence and artifact facts.

`decide` is imported when first asked for: the rules it runs import every
evidence format and the statistics derived from them, which a read that only
folds a speed record (`show`) or returns a standing verdict (`promote`) has
no use for.
"""
import sys
import types

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


class _Gate(types.ModuleType):
    """The package's class: `decide` is always the function, whichever import came first.

    Importing the submodule ``registry.gate.decide`` (directly, or through
    this lookup) makes the import system bind the module under the same name
    on this package; a plain lazy ``__getattr__`` would then never run again
    and ``from registry.gate import decide`` would return the module. The
    property ignores that binding; any other value set (a test's stand-in)
    is what the name returns until it is set again.
    """

    @property
    def decide(self):
        chosen = self.__dict__.get("_decide_set")
        if chosen is None:
            from registry.gate.decide import decide as chosen
        return chosen

    @decide.setter
    def decide(self, value) -> None:
        if not isinstance(value, types.ModuleType):
            self.__dict__["_decide_set"] = value


sys.modules[__name__].__class__ = _Gate
