"""One subject's state, by its key: the question behind `show`, evidence import, `promote`, approve and revoke.

An artifact (with its verdict history for `show --json`; without it for an
append or a promote, which need only the row: identity, stream version,
current verdict), a workload (its contract), a frame set. Now: one indexed
row of the live read models, caught up first; as of a position: that
subject's own stream folded, since a subject's state depends on its stream
only. Never the whole log, never a whole stream for a live answer.
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select

from registry.formats.names import ARTIFACT_PREFIX, FRAMESET_PREFIX, WORKLOAD_PREFIX

from .asof import check_position, fold_log
from .catchup import ReadModels
from .read_models import ArtifactState, FrameSetState, WorkloadState
from .rows import MODELS, load_state
from .schema import VERDICTS
from .snapshot import read_checkpoint, reading
from .verdict_history import VerdictRecord, with_history


def read_history(conn: Connection, artifact_id: str) -> list[VerdictRecord]:
    """One artifact's verdict history rows, in position order (an indexed range of the primary key)."""
    rows = conn.execute(select(VERDICTS).where(VERDICTS.c.artifact == artifact_id).order_by(VERDICTS.c.position))
    return [VerdictRecord.from_row(row) for row in rows]


class SubjectReads(ReadModels):
    """One subject by its key, from the live row or its own stream folded."""

    def artifact(self, artifact_id: str, as_of: int | None = None) -> ArtifactState | None:
        """The artifact's state with its whole verdict history (`verdicts`)."""
        return self._one("artifacts", ARTIFACT_PREFIX, artifact_id, as_of, history=True)

    def current_artifact(self, artifact_id: str) -> ArtifactState | None:
        """The artifact's state now, without reading its verdict history: what an append or a promote needs.

        Its `stream_version` is the version of the stream's event at
        `last_position`, so an append that expects it fails (ConcurrencyError)
        when anything reached the stream after this state was read.
        """
        return self._one("artifacts", ARTIFACT_PREFIX, artifact_id, None, history=False)

    def workload(self, workload_id: str, as_of: int | None = None) -> WorkloadState | None:
        """The workload's state: its current contract and every version it had."""
        return self._one("workloads", WORKLOAD_PREFIX, workload_id, as_of)

    def frameset(self, name: str, as_of: int | None = None) -> FrameSetState | None:
        """The frame set as registered."""
        return self._one("framesets", FRAMESET_PREFIX, name, as_of)

    def _one(self, model: str, prefix: str, key: str, as_of: int | None, history: bool = True) -> Any:
        """The state of `key` in `model` (its declared type is the caller's: read_models.py)."""
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            # A subject's state depends on its own stream only, so fold just that stream.
            state = fold_log(self.store, check_position(self.store, as_of), stream=prefix + key)
            return getattr(state, model).get(key)
        table, column, _ = MODELS[model]
        with reading(self.engine) as conn:
            self.served_position = read_checkpoint(conn) or 0
            text = conn.execute(select(table.c.state).where(table.c[column] == key)).scalar()
            records = read_history(conn, key) if text is not None and model == "artifacts" and history else None
        if text is None:
            return None
        state = load_state(text)
        return state if records is None else with_history(state, records)
