"""An artifact's verdict history, one row per verdict (the `projection_verdicts` read model).

The fold keeps an artifact's verdicts in its state (`verdicts`, a list) so an
as-of answer and a replay see them in one place. The live read models store
them apart: the artifact row keeps only the current verdict, and each verdict
of the history is its own bounded row keyed by (artifact, position). Without
that split the artifact row of an artifact judged a hundred thousand times
held every one of those verdicts and was rewritten, whole, after each promote.

`VerdictRecord` is the typed row: the indexed columns, and the history entry
the fold wrote (as canonical JSON, so any key the fold adds is kept as is).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from registry.events.canonical import canonical_json, strict_json_loads

HISTORY_KEY = "verdicts"


@dataclass(frozen=True)
class VerdictRecord:
    """One verdict in an artifact's history, as its read-model row holds it."""

    artifact: str
    position: int
    event_id: str
    decision: str
    identity: str | None
    entry: dict[str, Any]

    @classmethod
    def from_entry(cls, artifact: str, entry: dict[str, Any]) -> VerdictRecord:
        return cls(artifact, entry["position"], entry["event_id"], entry["decision"], entry.get("identity"), entry)

    @classmethod
    def from_row(cls, row: Any) -> VerdictRecord:
        return cls(row.artifact, row.position, row.event_id, row.decision, row.identity, strict_json_loads(row.entry))

    def to_row(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "position": self.position, "event_id": self.event_id,
                "decision": self.decision, "identity": self.identity, "entry": canonical_json(self.entry)}


def records_of(state: dict[str, Any]) -> Iterator[VerdictRecord]:
    """The history rows of one folded artifact state."""
    for entry in state.get(HISTORY_KEY, ()):
        yield VerdictRecord.from_entry(state["artifact"], entry)


def without_history(state: dict[str, Any]) -> dict[str, Any]:
    """The artifact state as its row stores it: everything but the verdict history."""
    return {key: value for key, value in state.items() if key != HISTORY_KEY}


def with_history(state: dict[str, Any], records: Iterable[VerdictRecord]) -> dict[str, Any]:
    """An artifact row's state with its history put back, in position order: the fold's shape."""
    state[HISTORY_KEY] = [record.entry for record in sorted(records, key=lambda record: record.position)]
    return state
