"""The outcomes read model: records imported from other systems about a whole workload (`projection_outcomes`).

An `ExternalOutcome` (docs/import.md: support runs, fidelity verdicts) is
kept beside what it concerns, never as evidence: one naming an artifact in
that artifact's state (artifacts.py, `external`), one about a workload as a
whole here, in the stream `outcomes:<workload>`. Reports show them; the
gate never reads them. Outcomes are not decided on, so their rows are
checked against their hash and key only.
"""
# No `from __future__ import annotations`: TypedDict reads its annotations evaluated.
from typing import Any, Protocol, TypedDict

from sqlalchemy import BigInteger, Column

from registry.formats.names import OUTCOMES_PREFIX

from ..log import LogEvent
from .declaration import ReadModel, same_subject, state_table

VERSION = 1
# What an outcome record keeps in the projected state: all but the bulky summary, which history shows.
_OUTCOME_KEYS = ("workload", "artifact", "arch", "outcome", "recorded_verdict", "recorded_utc", "model_id", "family",
                 "origin")


class OutcomeRecord(TypedDict):
    """An imported `ExternalOutcome` (docs/import.md): shown by reports, never read by the gate."""

    workload: str
    artifact: str | None
    arch: str | None
    outcome: str | None  # one of ExternalOutcome's outcomes, or none recorded
    recorded_verdict: dict[str, Any] | None
    recorded_utc: str | None
    model_id: str | None
    family: str | None
    origin: dict[str, Any]
    position: int
    event_id: str
    recorded_at: str


class OutcomesState(TypedDict):
    """Imported outcomes about a whole workload (no artifact named): the `projection_outcomes` row."""

    workload: str
    records: list[OutcomeRecord]
    last_position: int


class Outcomes(Protocol):
    """What this model's handler folds into (RegistryState): the workloads' imported outcomes."""

    outcomes: dict[str, OutcomesState]


OUTCOMES = state_table("projection_outcomes", "workload", Column("last_position", BigInteger, nullable=False))


def outcome_record(event: LogEvent) -> OutcomeRecord:
    """What the state keeps of an imported record (artifacts.py keeps those naming an artifact)."""
    payload = event.payload
    record: dict[str, Any] = {key: payload.get(key) for key in _OUTCOME_KEYS}
    record.update(position=event.position, event_id=event.event_id, recorded_at=event.recorded_at)
    return record  # type: ignore[return-value]


def _external(state: Outcomes, event: LogEvent) -> None:
    """An imported record about a workload as a whole (one naming an artifact is artifacts.py's)."""
    payload = event.payload
    if payload.get("artifact") is not None:
        return
    workload = payload["workload"]
    same_subject(event, OUTCOMES_PREFIX + workload, event.stream)
    entry = state.outcomes.setdefault(workload, {"workload": workload, "records": [], "last_position": event.position})
    entry["records"].append(outcome_record(event))
    entry["last_position"] = event.position


DECLARATION = ReadModel(
    name="outcomes", version=VERSION, row_type=OutcomesState, singular="outcomes",
    folds={"ExternalOutcome": _external},
    table=OUTCOMES, key=("workload",),
    stream_prefix=OUTCOMES_PREFIX,
)
