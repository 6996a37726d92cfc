"""Rows a decision may rest on: each read-model row checked against its own hash and against the log, cheaply.

The read models are derived and anyone with write access to the database
can change them; a decision (promote, rejudge, approve, resolve, lock) must
never rest on a row that no longer says what the log says. Each row a
question reads is checked when it is read, at the cost of a few indexed
lookups for a whole page of rows, never a fold:

- its `state` hashes to its `row_hash` (an edited or truncated state);
- the row's key is the state's own;
- for an artifact or a workload row, the event at its `last_position` is
  in the subject's stream (with, for an artifact, the row's `stream_version`),
  and the stream has no later event at or before the checkpoint (a row
  left behind, or moved back);
- a subject missing from its table while its stream has events at or
  before the checkpoint is a deleted row, not an unknown subject.

Each failure is one line (`DamagedReadModel`, a ProjectionError) naming
`registry replay`, which rebuilds every row from the log.
"""
from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection, select, tuple_

from registry.events.canonical import sha256_hex
from registry.events.schema import EVENTS
from registry.formats.names import ARTIFACT_PREFIX, FRAMESET_PREFIX, WORKLOAD_PREFIX

from .rows import MODELS, load_state
from .state import ProjectionError

# Rows checked against the log per pair of reads (bound parameters stay far below every backend's limit).
CHUNK = 500
REPLAY = "`registry replay` rebuilds the read models from the log"
# The subject each model's rows fold, by the stream its events are filed under; outcomes are not decided on.
STREAM_PREFIX = {"artifacts": ARTIFACT_PREFIX, "workloads": WORKLOAD_PREFIX, "framesets": FRAMESET_PREFIX}
_SINGULAR = {"artifacts": "artifact", "workloads": "workload", "framesets": "frame set", "outcomes": "outcomes"}


class DamagedReadModel(ProjectionError):
    """A read-model row that does not match its hash or its log: refused, never decided on."""


def damaged(model: str, key: str, why: str) -> DamagedReadModel:
    return DamagedReadModel(f"the read model of {_SINGULAR[model]} {key!r} does not match the log ({why}); {REPLAY}")


def row_columns(model: str) -> list:
    """The columns `checked_states` needs of a `model` row, in its order."""
    table, key, _ = MODELS[model]
    columns = [table.c[key], table.c.state, table.c.row_hash]
    if model in ("artifacts", "workloads"):
        columns.append(table.c.last_position)
    return columns


def checked_states(conn: Connection, model: str, rows: Sequence[Sequence[Any]], checkpoint: int) -> list[dict]:
    """The states of `rows` (selected with `row_columns(model)`), each checked as the module docstring says."""
    states = []
    for row in rows:
        key, text, row_hash = row[0], row[1], row[2]
        if sha256_hex(text) != row_hash:
            raise damaged(model, key, "its state does not hash to its row_hash")
        state = load_state(text)
        if state.get(MODELS[model][1]) != key:
            raise damaged(model, key, "its state is another subject's")
        states.append(state)
    if model in ("artifacts", "workloads"):
        checked = [(row[0], row[3], state) for row, state in zip(rows, states)]
        for start in range(0, len(checked), CHUNK):
            _check_against_log(conn, model, checked[start:start + CHUNK], checkpoint)
    return states


def _check_against_log(conn: Connection, model: str, rows: list[tuple[str, int, dict]], checkpoint: int) -> None:
    prefix = STREAM_PREFIX[model]
    found = {position: (stream, version) for position, stream, version in conn.execute(
        select(EVENTS.c.position, EVENTS.c.stream, EVENTS.c.version)
        .where(EVENTS.c.position.in_([position for _, position, _ in rows])))}
    following = []
    for key, position, state in rows:
        stream, version = found.get(position, (None, None))
        if stream != prefix + key or position > checkpoint:
            raise damaged(model, key, f"position {position} is not an event of stream {prefix + key} "
                                      f"at or before the checkpoint {checkpoint}")
        if model == "artifacts" and state.get("stream_version") != version:
            raise damaged(model, key, f"its stream is at version {version} at position {position}, "
                                      f"the row says {state.get('stream_version')}")
        following.append((stream, version + 1))
    later = conn.execute(select(EVENTS.c.stream, EVENTS.c.position)
                         .where(tuple_(EVENTS.c.stream, EVENTS.c.version).in_(following),
                                EVENTS.c.position <= checkpoint)).first()
    if later is not None:
        raise damaged(model, later[0][len(prefix):], f"its stream has an event at position {later[1]} that the "
                                                     "row does not fold")


def check_absent(conn: Connection, model: str, key: str, checkpoint: int) -> None:
    """Refuse a missing row whose subject has events at or before the checkpoint (the row was deleted)."""
    prefix = STREAM_PREFIX.get(model)
    if prefix is None:
        return
    position = conn.execute(select(EVENTS.c.position).where(EVENTS.c.stream == prefix + key,
                                                           EVENTS.c.position <= checkpoint).limit(1)).scalar()
    if position is not None:
        raise damaged(model, key, f"it has no row, but its stream has an event at position {position}")
