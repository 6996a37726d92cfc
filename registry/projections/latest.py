"""The registry's latest page: the artifacts and speed records that moved last, a given number of each, and how
many there are in all: what the live view shows (serve/live.py), read every few seconds while a server runs.

A whole-registry read (whole_registry.py) costs every row, and a speed
record's row holds every batch of its pairs: read whole every few seconds
while artifacts keep arriving, it holds memory, and takes time, in
proportion to everything ever measured. A page costs its size instead,
however large the registry grows. Live: the `most` artifact rows that moved
last (by `last_position`, a column stored before the state, so the rows not
taken are never decoded), the promoted artifacts that moved last (their
monitors carry the page's alerts) up to the same number, and the records
that moved last chosen on their small heads table and then read by key; each
row checked as a row a decision rests on is (row_checks.py), and the totals
counted from the side tables and an index. The workloads are read whole: an
administrator declares each one. As of a position, or over a connection that
may only read, the log is folded (view.py) and the same page taken from it.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, func, select

from .read_models import ArtifactState, RegistryState, SpeedRecordState, WorkloadState
from .read_models.artifacts import ARTIFACTS, WORKLOAD_COUNTS
from .read_models.speed_records import RECORD_HEADS, SPEED_RECORDS
from .row_checks import checked_states, row_columns
from .whole_registry import live_workloads

PROMOTED = "promoted"


@dataclass
class LatestPage:
    """The latest page at `position`: artifacts and promoted artifacts newest first, records newest first, each
    list at most the page's size, beside how many there are in all."""

    position: int
    workloads: dict[str, WorkloadState]
    artifacts: list[ArtifactState]
    artifacts_in_all: dict[str, int]  # by workload
    promoted: list[ArtifactState]
    promoted_in_all: int
    records: list[SpeedRecordState]
    records_in_all: int


def read_live(conn: Connection, position: int, most_artifacts: int, most_records: int) -> LatestPage:
    """The page from the live tables in the view's snapshot, each row checked."""
    newest = select(*row_columns("artifacts")).order_by(ARTIFACTS.c.last_position.desc())
    artifacts = checked_states(conn, "artifacts", conn.execute(newest.limit(most_artifacts)).all(), position)
    listed = {artifact["artifact"]: artifact for artifact in artifacts}
    promoted = [listed.get(artifact["artifact"], artifact) for artifact in checked_states(conn, "artifacts", conn.execute(
        newest.where(ARTIFACTS.c.decision == PROMOTED).limit(most_artifacts)).all(), position)]
    promoted_in_all = conn.execute(select(func.count()).select_from(ARTIFACTS)
                                   .where(ARTIFACTS.c.decision == PROMOTED)).scalar_one()
    keys = select(RECORD_HEADS.c.record).order_by(RECORD_HEADS.c.last_position.desc()).limit(most_records)
    rows = conn.execute(select(*row_columns("records")).where(SPEED_RECORDS.c.record.in_(keys))).all()
    records = sorted(checked_states(conn, "records", rows, position), key=lambda record: -record["last_position"])
    records_in_all = conn.execute(select(func.count()).select_from(RECORD_HEADS)).scalar_one()
    counts = {row.workload: row.artifacts for row in conn.execute(select(WORKLOAD_COUNTS))}
    workloads = {workload["workload"]: workload for workload in live_workloads(conn)}
    return LatestPage(position, workloads, artifacts, counts, promoted, promoted_in_all, records, records_in_all)


def of_folded(state: RegistryState, most_artifacts: int, most_records: int) -> LatestPage:
    """The same page taken from a folded registry (a view as of a position, or one that may only read)."""
    newest = sorted(state.artifacts.values(), key=lambda artifact: -artifact["last_position"])
    promoted = [artifact for artifact in newest if artifact["decision"] == PROMOTED]
    counts: dict[str, int] = {}
    for artifact in newest:
        counts[artifact["workload"]] = counts.get(artifact["workload"], 0) + 1
    records = sorted(state.records.values(), key=lambda record: -record["last_position"])
    return LatestPage(state.position, dict(state.workloads), newest[:most_artifacts], counts,
                      promoted[:most_artifacts], len(promoted), records[:most_records], len(records))
