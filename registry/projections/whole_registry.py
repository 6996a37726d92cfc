"""The registry as a whole, or all of one workload: `report`, `rejudge`, `what-if`, `resolve --as-of`, `replay`.

These questions cost every row they cover (a report is linear in artifacts),
so they are kept apart from the one-subject reads (subject.py), which must
cost the same at any size of the log. Live: the tables read in the unit of
work's snapshot (view.py), one query per table; as of a position: the whole
log folded up to it. Either way the artifacts' evidence items are then read
from the log by position, a few thousand a read (items.py), never one read
per artifact.
"""
from __future__ import annotations

from sqlalchemy import Connection, select

from .read_models import DECLARATIONS, ArtifactState, RegistryState, WorkloadState
from .read_models.artifacts import ARTIFACTS
from .read_models.declaration import load_state
from .read_models.verdicts import VERDICTS, VerdictRecord, with_history
from .read_models.workloads import WORKLOADS


def read_live(conn: Connection, position: int, history: bool = True) -> RegistryState:
    """Every live row, as a RegistryState at `position` (the snapshot's checkpoint).

    Without `history` the artifacts carry no `verdicts` and the history table is not read.
    """
    state = RegistryState(position=position)
    for model in DECLARATIONS:
        if model.own_rows:
            assert model.table is not None
            target = state.states(model)
            for row in conn.execute(select(model.table.c[model.key[0]], model.table.c.state)):
                target[row[0]] = load_state(row[1])
    if not history:
        return state
    records: dict[str, list[VerdictRecord]] = {name: [] for name in state.artifacts}
    for row in conn.execute(select(VERDICTS)):
        records.setdefault(row.artifact, []).append(VerdictRecord.from_row(row))
    for name, artifact in state.artifacts.items():
        with_history(artifact, records[name])
    return state


def live_artifacts(conn: Connection, workload: str | None) -> list[ArtifactState]:
    """Artifacts (of one workload if given) with their verdict histories, sorted by artifact id."""
    statement = select(ARTIFACTS.c.artifact, ARTIFACTS.c.state)
    verdicts = select(VERDICTS)
    if workload is not None:
        statement = statement.where(ARTIFACTS.c.workload == workload)
        verdicts = verdicts.where(VERDICTS.c.artifact.in_(
            select(ARTIFACTS.c.artifact).where(ARTIFACTS.c.workload == workload)))
    rows = sorted(conn.execute(statement).all())
    found: dict[str, list[VerdictRecord]] = {name: [] for name, _ in rows}
    for row in conn.execute(verdicts):
        found.setdefault(row.artifact, []).append(VerdictRecord.from_row(row))
    return [with_history(load_state(text), found[name]) for name, text in rows]


def live_workloads(conn: Connection) -> list[WorkloadState]:
    """Workloads sorted by id."""
    rows = sorted(conn.execute(select(WORKLOADS.c.workload, WORKLOADS.c.state)).all())
    return [load_state(text) for _, text in rows]  # type: ignore[misc]
