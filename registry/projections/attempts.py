"""The artifacts sharing an artifact's bytes: what `promote` reads to count the benchmark attempts on them.

docs/gate.md, "Attempts": the same payload under another artifact id, or
under set-aside claims of this one, does not start a fresh count. The
payload index (payload_index.py) says which artifacts of a workload ever
registered given bytes; this module reads their states through it.
"""
from __future__ import annotations

from sqlalchemy import select

from .asof import fold_log
from .catchup import ReadModels
from .read_models import ArtifactState
from .payload_index import index_rows, payload_key
from .rows import load_state
from .schema import ARTIFACTS, PAYLOADS
from .snapshot import read_checkpoint, reading


class AttemptReads(ReadModels):
    """The artifacts sharing given bytes, for promote's attempt count."""

    def artifacts_sharing_payload(self, workload: str, payload_sha256: str) -> list[ArtifactState]:
        """The current states (no verdict history) of the artifacts of `workload` that ever registered
        `payload_sha256`, under any of their identities, sorted by artifact id (and perhaps a few whose
        registered value only shares its index key: see payload_index.py; they count nothing for it).

        An indexed range of the payload index (payload_index.py) joined to the
        artifact rows, so it costs the artifacts that share the bytes, not
        the workload's size. A connection that may not write the read models
        folds the log to its head instead.
        """
        as_of = self.position_to_fold(None)
        if as_of is not None:
            state = fold_log(self.store, as_of)
            return [state.artifacts[key] for key in sorted(state.artifacts)
                    if (workload, payload_key(payload_sha256), key) in index_rows(state.artifacts[key])]
        statement = (select(ARTIFACTS.c.state)
                     .join(PAYLOADS, PAYLOADS.c.artifact == ARTIFACTS.c.artifact)
                     .where(PAYLOADS.c.workload == workload, PAYLOADS.c.payload_sha256 == payload_key(payload_sha256),
                            ARTIFACTS.c.workload == workload)
                     .order_by(ARTIFACTS.c.artifact))
        with reading(self.engine) as conn:
            position = read_checkpoint(conn) or 0
            texts = conn.execute(statement).scalars().all()
        self.served_position = position
        return [load_state(text) for text in texts]
