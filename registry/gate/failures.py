"""Rule 1: evidence from an evaluation stage that did not complete holds the artifact.

A stage that produced nothing is not a pass by omission (docs/architecture.md, "The
gate, in order", 1): whatever else was recorded, the evaluation is incomplete. The
reason quotes the error as the candidate (or its harness) wrote it, on one line.
"""
from __future__ import annotations

from collections.abc import Sequence

from registry.formats.text import one_line, quoted_text
from registry.gate.ledger import Ledger
from registry.gate.model import Recorded


def check_failures(failures: Sequence[Recorded], ledger: Ledger) -> None:
    for recorded in failures:
        item = ledger.admit(recorded, "failure")
        if item is not None:
            ledger.add(
                "evaluation_failed", "held",
                f"evaluation stage '{one_line(item['stage'])}' did not complete: {quoted_text(item['error'])}",
            )
