"""The registry as a whole, or all of one workload: `report`, `rejudge`, `what-if`, `resolve --as-of`, `replay`.

These questions cost every row they cover (a report is linear in artifacts),
so they are kept apart from the one-subject reads (subject.py), which must
cost the same at any size of the log. Now: the live tables after a
catch-up, read in one snapshot; as of a position: the whole log folded up to
it. Either way the artifacts' evidence items are then read from the log by
position, a few thousand a read (items.py), never one read per artifact.
"""
from __future__ import annotations

from sqlalchemy import Connection, select

from .asof import check_position, fold_log
from .catchup import ReadModels
from .items import attach_items
from .record_items import attach_state_documents
from .read_models import ArtifactState, WorkloadState
from .rows import MODELS, load_state
from .schema import ARTIFACTS, VERDICTS, WORKLOADS
from .snapshot import read_checkpoint, reading, snapshot
from .state import RegistryState
from .verdict_history import VerdictRecord, with_history


def read_live(conn: Connection, history: bool = True) -> RegistryState:
    """Every live row, as a RegistryState at the checkpoint (call inside `snapshot`).

    Without `history` the artifacts carry no `verdicts` and the history table is not read.
    """
    state = RegistryState(position=read_checkpoint(conn) or 0)
    for model, (table, key, _) in MODELS.items():
        target = getattr(state, model)
        for row in conn.execute(select(table.c[key], table.c.state)):
            target[row[0]] = load_state(row[1])
    if not history:
        return state
    records: dict[str, list[VerdictRecord]] = {name: [] for name in state.artifacts}
    for row in conn.execute(select(VERDICTS)):
        records.setdefault(row.artifact, []).append(VerdictRecord.from_row(row))
    for name, artifact in state.artifacts.items():
        with_history(artifact, records[name])
    return state


class WholeRegistryReads(ReadModels):
    """The registry as a whole, or all of one workload."""

    def state(self, as_of: int | None = None, *, history: bool = True, items: bool = True) -> RegistryState:
        """The whole registry: live tables after a catch-up, or the log folded up to `as_of`.

        `history=False` leaves out the artifacts' verdict histories where they
        are read from the live tables (a report needs none), so reading the
        registry costs its artifacts, not every verdict they ever had.
        `items=False` leaves the evidence entries and the speed records' documents as
        references (read_models.py `EvidenceEntry`, `RecordEntry`), for a caller that shows
        no evidence (`replay`'s count).
        """
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            folded = fold_log(self.store, check_position(self.store, as_of))
        else:
            with snapshot(self.engine) as conn:
                folded = read_live(conn, history)
            self.served_position = folded.position
        if items:
            attach_items(self.store, folded.artifacts.values())
            attach_state_documents(self.store, folded)
        return folded

    def artifacts(self, workload: str | None = None, as_of: int | None = None) -> list[ArtifactState]:
        """Artifacts (of one workload if given), sorted by artifact id, each with its verdict history."""
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            found = self.state(as_of).artifacts.values()
        else:
            statement = select(ARTIFACTS.c.artifact, ARTIFACTS.c.state)
            verdicts = select(VERDICTS)
            if workload is not None:
                statement = statement.where(ARTIFACTS.c.workload == workload)
                verdicts = verdicts.where(VERDICTS.c.artifact.in_(
                    select(ARTIFACTS.c.artifact).where(ARTIFACTS.c.workload == workload)))
            with reading(self.engine) as conn:
                self.served_position = read_checkpoint(conn) or 0
                rows = conn.execute(statement).all()
                history: dict[str, list[VerdictRecord]] = {name: [] for name, _ in rows}
                for row in conn.execute(verdicts):
                    history.setdefault(row.artifact, []).append(VerdictRecord.from_row(row))
            found = [with_history(load_state(text), history[name]) for name, text in rows]
            attach_items(self.store, found)
        chosen = [a for a in found if workload is None or a["workload"] == workload]
        return sorted(chosen, key=lambda a: a["artifact"])

    def workloads(self, as_of: int | None = None) -> list[WorkloadState]:
        """Workloads sorted by id."""
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            found = list(self.state(as_of).workloads.values())
        else:
            with snapshot(self.engine) as conn:
                self.served_position = read_checkpoint(conn) or 0
                found = [load_state(text) for text in conn.execute(select(WORKLOADS.c.state)).scalars()]
        return sorted(found, key=lambda w: w["workload"])
