"""Rule 1: evidence from an evaluation stage that did not complete holds the artifact.

A stage that produced nothing is not a pass by omission (docs/architecture.md, "The
gate, in order", 1): whatever else was recorded, the evaluation is incomplete.
"""
from __future__ import annotations

from collections.abc import Sequence

from registry.gate.ledger import Ledger
from registry.gate.model import Recorded


def check_failures(failures: Sequence[Recorded], ledger: Ledger) -> None:
    for recorded in failures:
        item = ledger.admit(recorded, "failure")
        if item is not None:
            ledger.add(
                "evaluation_failed", "held",
                f"evaluation stage '{item['stage']}' did not complete: {item['error']}",
            )
