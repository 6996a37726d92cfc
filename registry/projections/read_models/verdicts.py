"""The verdict history read model: one row per verdict an artifact ever had (`projection_verdicts`).

The fold keeps an artifact's verdicts in its state (`verdicts`, a list) so an
as-of answer and a replay see them in one place. The live read models store
them apart: the artifact row keeps only the current verdict, and each verdict
of the history is its own bounded row keyed by (artifact, position). Without
that split the artifact row of an artifact judged a hundred thousand times
held every one of those verdicts and was rewritten, whole, after each promote.
A catch-up loads an artifact's row with an empty history, so every history
entry its fold leaves is one to insert.

`VerdictRecord` is the typed row: the indexed columns, and the history entry
the fold wrote (as canonical JSON, so any key the fold adds is kept as is).
"""
# No `from __future__ import annotations`: TypedDict reads its annotations evaluated.
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol, TypedDict

from sqlalchemy import BigInteger, Column, String, Table, Text

from registry.events.canonical import canonical_json, strict_json_loads
from registry.events.schema import METADATA
from registry.formats.names import ARTIFACT_PREFIX

from ..log import LogEvent
from .declaration import Keyed, ReadModel

VERSION = 1
HISTORY_KEY = "verdicts"


class VerdictEntry(TypedDict):
    """One verdict of an artifact's history (`_history`); the live read models keep each in
    `projection_verdicts` (`VerdictRecord`), not in the artifact's row."""

    position: int
    event_id: str
    decision: str
    rule: str
    recorded_at: str
    payload_sha256: str | None
    identity: str | None
    contract_version: int
    benchmark_attempts: int | None


VERDICTS = Table(
    "projection_verdicts", METADATA,
    Column("artifact", String(200), primary_key=True),
    Column("position", BigInteger, primary_key=True),
    Column("event_id", String(36), nullable=False),
    Column("decision", String(32), nullable=False),
    Column("identity", String(64), nullable=True),
    Column("entry", Text, nullable=False),
)


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
    def from_entry(cls, artifact: str, entry: dict[str, Any]) -> "VerdictRecord":
        return cls(artifact, entry["position"], entry["event_id"], entry["decision"], entry.get("identity"), entry)

    @classmethod
    def from_row(cls, row: Any) -> "VerdictRecord":
        return cls(row.artifact, row.position, row.event_id, row.decision, row.identity, strict_json_loads(row.entry))

    def to_row(self) -> dict[str, Any]:
        return {"artifact": self.artifact, "position": self.position, "event_id": self.event_id,
                "decision": self.decision, "identity": self.identity, "entry": canonical_json(self.entry)}


def records_of(state: dict[str, Any]) -> Iterator[VerdictRecord]:
    """The history rows of one folded artifact state."""
    for entry in state.get(HISTORY_KEY, ()):
        yield VerdictRecord.from_entry(state["artifact"], entry)


def with_history(state: Any, records: Iterable[VerdictRecord]) -> Any:
    """An artifact row's state with its history put back, in position order: the fold's shape."""
    state[HISTORY_KEY] = [record.entry for record in sorted(records, key=lambda record: record.position)]
    return state


class Histories(Protocol):
    """What this model's handler folds into (RegistryState): the artifacts, each with its history."""

    artifacts: dict[str, Any]


def _history(state: Histories, event: LogEvent) -> None:
    """A verdict joins its artifact's history, whichever identity it is about (artifacts.py placed it)."""
    payload = event.payload
    verdict = payload["verdict"]
    # A row loaded by a catch-up holds no history: what this catch-up folds is what it inserts.
    state.artifacts[event.stream[len(ARTIFACT_PREFIX):]].setdefault(HISTORY_KEY, []).append({
        "position": event.position, "event_id": event.event_id, "decision": verdict["decision"],
        "rule": verdict["rule"], "recorded_at": event.recorded_at,
        "payload_sha256": payload["payload_sha256"], "identity": payload.get("identity"),
        "contract_version": payload["contract_version"], "benchmark_attempts": payload.get("benchmark_attempts"),
    })


def _rows(state: dict[str, Any]) -> Keyed:
    return {(record.artifact, record.position): record.to_row() for record in records_of(state)}


DECLARATION = ReadModel(
    name="verdicts", version=VERSION, row_type=VerdictEntry, singular="verdict",
    folds={"VerdictRendered": _history},
    table=VERDICTS, key=("artifact", "position"), parent="artifacts", derive=_rows,
    key_text=lambda key: f"{key[0]}@{key[1]}",
)
