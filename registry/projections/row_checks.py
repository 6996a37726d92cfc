"""Rows a decision may rest on: each read-model row checked against its own hash and against the log, cheaply.

The read models are derived and anyone with write access to the database
can change them; a decision (promote, rejudge, approve, resolve, lock) must
never rest on a row that no longer says what the log says. Each row a
question reads is checked when it is read, at the cost of a few indexed
lookups for a whole page of rows, never a fold:

- its `state` hashes to its `row_hash` (an edited or truncated state);
- the row's key is the state's own;
- for an artifact, a workload or a benchmark-session stream row, the event
  at its `last_position` is in the subject's stream (with, for an artifact
  and a bench stream, the version the row says), and the stream has no
  later event at or before the checkpoint (a row left behind, or moved
  back);
- a subject missing from its table while its stream has events at or
  before the checkpoint is a deleted row, not an unknown subject;
- a speed record, fed by many streams, is held to where
  `projection_record_heads` says it stands (a deleted row, or one moved
  back), and its entries must run in log order, each naming its event in
  its own stream, at or before the row's last position (an entry pasted
  twice, moved to another event or left after the end), as must the
  opening of each session it lists;
- a listing of a workload's artifacts must find as many rows as
  `projection_workload_counts` says it has (a deleted row among many).

Which model's rows are held to their stream (`logged`), with which version
key, and what a model checks beyond that (`checks`, `absent`: the speed
records, read_models/speed_records.py) is each model's declaration; the
checks of a listing against a side table are in the model's module
(`check_workload_count`, `check_record_count`, `check_payload_count`).
Each failure is one line (`DamagedReadModel`, a ProjectionError) naming
`registry replay`, which rebuilds every row from the log.
"""
from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection, bindparam, select, tuple_

from registry.events.canonical import sha256_hex
from registry.events.schema import EVENTS

from .errors import REPLAY, DamagedReadModel
from .read_models import ReadModel, by_name
from .read_models.declaration import load_state

__all__ = ["REPLAY", "DamagedReadModel", "check_absent", "checked_rows", "checked_states", "row_columns",
           "state_of"]

# Rows checked against the log per pair of reads (bound parameters stay far below every backend's limit).
CHUNK = 500


# The checks' statements, built once with their values bound (building a Core statement costs more CPU than
# running one of these).
_VERSIONS_AT = (select(EVENTS.c.position, EVENTS.c.stream, EVENTS.c.version)
                .where(EVENTS.c.position.in_(bindparam("positions", expanding=True))))
_LATER = (select(EVENTS.c.stream, EVENTS.c.position)
          .where(tuple_(EVENTS.c.stream, EVENTS.c.version).in_(bindparam("following", expanding=True)),
                 EVENTS.c.position <= bindparam("checkpoint")))
_FIRST_EVENT = (select(EVENTS.c.position).where(EVENTS.c.stream == bindparam("stream"),
                                                EVENTS.c.position <= bindparam("checkpoint")).limit(1))


def damaged(model: ReadModel, key: str, why: str) -> DamagedReadModel:
    return DamagedReadModel(f"the read model of {model.singular} {key!r} does not match the log ({why}); {REPLAY}")


def _checked_further(model: ReadModel) -> bool:
    return model.logged or model.checks is not None


def row_columns(name: str) -> list:
    """The columns `checked_states` needs of a row of the model named `name`, in its order."""
    model = by_name(name)
    assert model.table is not None
    columns = [model.table.c[model.key[0]], model.table.c.state, model.table.c.row_hash]
    if _checked_further(model):
        columns.append(model.table.c.last_position)
    return columns


def checked_states(conn: Connection, name: str, rows: Sequence[Sequence[Any]], checkpoint: int) -> list[Any]:
    """The states of `rows` (selected with `row_columns(name)`), each checked as the module docstring says."""
    return checked_rows(conn, [(name, row) for row in rows], checkpoint)


def state_of(name: str, row: Sequence[Any]) -> Any:
    """A row's state, checked against its own hash and key (the checks that need no read)."""
    model = by_name(name)
    key, text, row_hash = row[0], row[1], row[2]
    if sha256_hex(text) != row_hash:
        raise damaged(model, key, "its state does not hash to its row_hash")
    state = load_state(text)
    if state.get(model.key[0]) != key:
        raise damaged(model, key, "its state is another subject's")
    return state


def checked_rows(conn: Connection, rows: Sequence[tuple[str, Sequence[Any]]], checkpoint: int) -> list[Any]:
    """The states of (model name, row) pairs of any models, each checked as the module docstring says; the rows
    of all the models checked against their own streams share their two reads."""
    states = [state_of(name, row) for name, row in rows]
    logged = [(by_name(name), row[0], row[3], state) for (name, row), state in zip(rows, states)
              if by_name(name).logged]
    for start in range(0, len(logged), CHUNK):
        _check_against_log(conn, logged[start:start + CHUNK], checkpoint)
    further: dict[str, list[tuple[str, int, dict]]] = {}
    for (name, row), state in zip(rows, states):
        if by_name(name).checks is not None:
            further.setdefault(name, []).append((row[0], row[3], state))
    for name, found in further.items():
        by_name(name).checks(conn, found, checkpoint)  # type: ignore[misc]
    return states


def _check_against_log(conn: Connection, rows: list[tuple[ReadModel, str, int, dict]], checkpoint: int) -> None:
    """(model, key, last position, state) rows against their own streams, in one read of their events and one
    of any later ones."""
    found = {position: (stream, version) for position, stream, version in conn.execute(
        _VERSIONS_AT, {"positions": sorted({position for _, _, position, _ in rows})})}
    following, model_of = [], {}
    for model, key, position, state in rows:
        prefix = model.stream_prefix
        stream, version = found.get(position, (None, None))
        if stream != f"{prefix}{key}" or position > checkpoint:
            raise damaged(model, key, f"position {position} is not an event of stream {prefix}{key} "
                                      f"at or before the checkpoint {checkpoint}")
        version_key = model.stream_version
        if version_key is not None and state.get(version_key) != version:
            raise damaged(model, key, f"its stream is at version {version} at position {position}, "
                                      f"the row says {state.get(version_key)}")
        following.append((stream, version + 1))
        model_of[stream] = model
    later = conn.execute(_LATER, {"following": following, "checkpoint": checkpoint}).first()
    if later is not None:
        model = model_of[later[0]]
        raise damaged(model, later[0][len(model.stream_prefix or ""):], f"its stream has an event at position "
                                                                         f"{later[1]} that the row does not fold")


def check_absent(conn: Connection, name: str, key: str, checkpoint: int) -> None:
    """Refuse a missing row whose subject has events at or before the checkpoint (the row was deleted)."""
    model = by_name(name)
    if model.absent is not None:
        model.absent(conn, key)
        return
    if model.stream_prefix is None:
        return
    position = conn.execute(_FIRST_EVENT, {"stream": model.stream_prefix + key, "checkpoint": checkpoint}).scalar()
    if position is not None:
        raise damaged(model, key, f"it has no row, but its stream has an event at position {position}")
