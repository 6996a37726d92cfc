"""The artifacts sharing an artifact's bytes: what `promote` reads to count the benchmark attempts on them.

docs/gate.md, "Attempts": the same payload under another artifact id, or
under set-aside claims of this one, does not start a fresh count. The
payload index (read_models/payload_index.py) says which artifacts of a
workload ever registered given bytes; this module reads their states
through it, an indexed range joined to the artifact rows, so it costs the
artifacts that share the bytes, not the workload's size. The range must hold
as many rows as `projection_payload_counts` says, each with a sound artifact
row, and the asking artifact among them: an index that lost rows is
refused, never read as fewer attempts.
"""
from __future__ import annotations

from sqlalchemy import Connection, bindparam, select

from .read_models import ArtifactState, RegistryState
from .read_models.artifacts import ARTIFACTS
from .read_models.payload_index import PAYLOADS, check_payload_count, index_rows, payload_key
from .row_checks import checked_states, row_columns

_SHARING = (select(*row_columns("artifacts"))
            .join(PAYLOADS, PAYLOADS.c.artifact == ARTIFACTS.c.artifact)
            .where(PAYLOADS.c.workload == bindparam("workload"), PAYLOADS.c.payload_sha256 == bindparam("key"),
                   ARTIFACTS.c.workload == bindparam("workload")))


def sharing_rows(conn: Connection, workload: str, payload_sha256: str, asking: str | None,
                 checkpoint: int) -> list[ArtifactState]:
    """The current states (no verdict history) of the artifacts of `workload` that ever registered
    `payload_sha256`, under any of their identities, sorted by artifact id (and perhaps a few whose registered
    value only shares its index key: see payload_index.py; they count nothing for it)."""
    rows = sorted(conn.execute(_SHARING, {"workload": workload, "key": payload_key(payload_sha256)}).all(),
                  key=lambda row: row[0])
    check_payload_count(conn, workload, payload_sha256, rows, asking)
    return checked_states(conn, "artifacts", rows, checkpoint)


def sharing_folded(state: RegistryState, workload: str, payload_sha256: str) -> list[ArtifactState]:
    """The same from a folded state (as of a position, or a connection that may only read)."""
    key = payload_key(payload_sha256)
    return [state.artifacts[name] for name in sorted(state.artifacts)
            if (workload, key, name) in index_rows(state.artifacts[name])]
