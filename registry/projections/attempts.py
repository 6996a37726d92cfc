"""The artifacts sharing an artifact's bytes: what `promote` reads to count the benchmark attempts on them.

docs/gate.md, "Attempts": the same payload under another artifact id, or
under set-aside claims of this one, does not start a fresh count. The
payload index (payload_index.py) says which artifacts of a workload ever
registered given bytes; this module reads their states through it.
"""
from __future__ import annotations

from sqlalchemy import func, select

from .asof import fold_log
from .catchup import ReadModels
from .read_models import ArtifactState
from .payload_index import index_rows, payload_key
from .row_checks import REPLAY, DamagedReadModel, checked_states, row_columns
from .schema import ARTIFACTS, PAYLOAD_COUNTS, PAYLOADS
from .snapshot import read_checkpoint, reading


class AttemptReads(ReadModels):
    """The artifacts sharing given bytes, for promote's attempt count."""

    def artifacts_sharing_payload(self, workload: str, payload_sha256: str,
                                  asking: str | None = None) -> list[ArtifactState]:
        """The current states (no verdict history) of the artifacts of `workload` that ever registered
        `payload_sha256`, under any of their identities, sorted by artifact id (and perhaps a few whose
        registered value only shares its index key: see payload_index.py; they count nothing for it).

        An indexed range of the payload index (payload_index.py) joined to the
        artifact rows, so it costs the artifacts that share the bytes, not
        the workload's size. A connection that may not write the read models
        folds the log to its head instead. The range must hold as many rows
        as `projection_payload_counts` says, each with a sound artifact row
        (row_checks.py), and `asking`, an artifact that registered these
        bytes, must be among them: an index that lost rows is refused,
        never read as fewer attempts.
        """
        as_of = self.position_to_fold(None)
        if as_of is not None:
            state = fold_log(self.store, as_of)
            return [state.artifacts[key] for key in sorted(state.artifacts)
                    if (workload, payload_key(payload_sha256), key) in index_rows(state.artifacts[key])]
        key = payload_key(payload_sha256)
        in_range = (PAYLOADS.c.workload == workload, PAYLOADS.c.payload_sha256 == key)
        statement = (select(*row_columns("artifacts"))
                     .join(PAYLOADS, PAYLOADS.c.artifact == ARTIFACTS.c.artifact)
                     .where(*in_range, ARTIFACTS.c.workload == workload)
                     .order_by(ARTIFACTS.c.artifact))
        with reading(self.engine) as conn:
            position = read_checkpoint(conn) or 0
            rows = conn.execute(statement).all()
            indexed = conn.execute(select(func.count()).select_from(PAYLOADS).where(*in_range)).scalar()
            counted = conn.execute(select(PAYLOAD_COUNTS.c.artifacts).where(
                PAYLOAD_COUNTS.c.workload == workload, PAYLOAD_COUNTS.c.payload_sha256 == key)).scalar()
            if (counted or 0) != indexed or indexed != len(rows) or (
                    asking is not None and asking not in {row[0] for row in rows}):
                raise DamagedReadModel(
                    f"the payload index of workload {workload!r} does not match its count for payload "
                    f"{str(payload_sha256)[:12]} ({indexed} rows, {len(rows)} with an artifact row, "
                    f"{'no count' if counted is None else f'{counted} counted'}); {REPLAY}")
            states = checked_states(conn, "artifacts", rows, position)
        self.served_position = position
        return states
