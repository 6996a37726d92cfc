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

Each failure is one line (`DamagedReadModel`, a ProjectionError) naming
`registry replay`, which rebuilds every row from the log.
"""
from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import Connection, bindparam, func, select, tuple_

from registry.events.canonical import sha256_hex
from registry.events.schema import EVENTS
from registry.formats.names import ARTIFACT_PREFIX, FRAMESET_PREFIX, WORKLOAD_PREFIX

from .fold import BENCH_PREFIX
from .rows import MODELS, load_state
from .schema import RECORD_HEADS, WORKLOAD_COUNTS
from .state import ProjectionError

# Rows checked against the log per pair of reads (bound parameters stay far below every backend's limit).
CHUNK = 500
REPLAY = "`registry replay` rebuilds the read models from the log"
# The subject each model's rows fold, by the stream its events are filed under; outcomes are not decided on.
STREAM_PREFIX = {"artifacts": ARTIFACT_PREFIX, "workloads": WORKLOAD_PREFIX, "framesets": FRAMESET_PREFIX,
                 "bench_streams": BENCH_PREFIX}
# The models whose rows are checked against their own stream, and the state key naming the stream's version.
LOGGED = {"artifacts": "stream_version", "workloads": None, "bench_streams": "version"}
_SINGULAR = {"artifacts": "artifact", "workloads": "workload", "framesets": "frame set", "outcomes": "outcomes",
             "bench_streams": "benchmark stream", "records": "speed record"}


# The checks' statements, built once with their values bound (building a Core statement costs more CPU than
# running one of these).
_VERSIONS_AT = (select(EVENTS.c.position, EVENTS.c.stream, EVENTS.c.version)
                .where(EVENTS.c.position.in_(bindparam("positions", expanding=True))))
_LATER = (select(EVENTS.c.stream, EVENTS.c.position)
          .where(tuple_(EVENTS.c.stream, EVENTS.c.version).in_(bindparam("following", expanding=True)),
                 EVENTS.c.position <= bindparam("checkpoint")))
_HEADS = (select(RECORD_HEADS.c.record, RECORD_HEADS.c.last_position)
          .where(RECORD_HEADS.c.record.in_(bindparam("records", expanding=True))))
_EVENTS_AT = (select(EVENTS.c.position, EVENTS.c.stream, EVENTS.c.event_id)
              .where(EVENTS.c.position.in_(bindparam("positions", expanding=True))))


class DamagedReadModel(ProjectionError):
    """A read-model row that does not match its hash or its log: refused, never decided on."""


def damaged(model: str, key: str, why: str) -> DamagedReadModel:
    return DamagedReadModel(f"the read model of {_SINGULAR[model]} {key!r} does not match the log ({why}); {REPLAY}")


def row_columns(model: str) -> list:
    """The columns `checked_states` needs of a `model` row, in its order."""
    table, key, _ = MODELS[model]
    columns = [table.c[key], table.c.state, table.c.row_hash]
    if model in LOGGED or model == "records":
        columns.append(table.c.last_position)
    return columns


def checked_states(conn: Connection, model: str, rows: Sequence[Sequence[Any]], checkpoint: int) -> list[dict]:
    """The states of `rows` (selected with `row_columns(model)`), each checked as the module docstring says."""
    return checked_rows(conn, [(model, row) for row in rows], checkpoint)


def state_of(model: str, row: Sequence[Any]) -> dict:
    """A row's state, checked against its own hash and key (the checks that need no read)."""
    key, text, row_hash = row[0], row[1], row[2]
    if sha256_hex(text) != row_hash:
        raise damaged(model, key, "its state does not hash to its row_hash")
    state = load_state(text)
    if state.get(MODELS[model][1]) != key:
        raise damaged(model, key, "its state is another subject's")
    return state


def checked_rows(conn: Connection, rows: Sequence[tuple[str, Sequence[Any]]], checkpoint: int) -> list[dict]:
    """The states of (model, row) pairs of any models, each checked as the module docstring says; the rows of
    all the models checked against their own streams share their two reads."""
    states = [state_of(model, row) for model, row in rows]
    logged = [(model, row[0], row[3], state) for (model, row), state in zip(rows, states) if model in LOGGED]
    for start in range(0, len(logged), CHUNK):
        _check_against_log(conn, logged[start:start + CHUNK], checkpoint)
    records = [(row[0], row[3], state) for (model, row), state in zip(rows, states) if model == "records"]
    for start in range(0, len(records), CHUNK):
        _check_records(conn, "records", records[start:start + CHUNK], checkpoint)
    return states


def _check_against_log(conn: Connection, rows: list[tuple[str, str, int, dict]], checkpoint: int) -> None:
    """(model, key, last position, state) rows against their own streams, in one read of their events and one
    of any later ones."""
    found = {position: (stream, version) for position, stream, version in conn.execute(
        _VERSIONS_AT, {"positions": sorted({position for _, _, position, _ in rows})})}
    following, model_of = [], {}
    for model, key, position, state in rows:
        prefix = STREAM_PREFIX[model]
        stream, version = found.get(position, (None, None))
        if stream != prefix + key or position > checkpoint:
            raise damaged(model, key, f"position {position} is not an event of stream {prefix + key} "
                                      f"at or before the checkpoint {checkpoint}")
        version_key = LOGGED[model]
        if version_key is not None and state.get(version_key) != version:
            raise damaged(model, key, f"its stream is at version {version} at position {position}, "
                                      f"the row says {state.get(version_key)}")
        following.append((stream, version + 1))
        model_of[stream] = model
    later = conn.execute(_LATER, {"following": following, "checkpoint": checkpoint}).first()
    if later is not None:
        model = model_of[later[0]]
        raise damaged(model, later[0][len(STREAM_PREFIX[model]):], f"its stream has an event at position "
                                                                  f"{later[1]} that the row does not fold")


def _check_records(conn: Connection, model: str, rows: list[tuple[str, int, dict]], checkpoint: int) -> None:
    """Speed-record rows against their heads and their entries against the log (the module docstring)."""
    heads = dict(conn.execute(_HEADS, {"records": [key for key, _, _ in rows]}).all())
    wanted = {}
    for key, position, state in rows:
        if heads.get(key) != position or state.get("last_position") != position or position > checkpoint:
            raise damaged("records", key, f"it stands at position {position}, its head at {heads.get(key)}, "
                                          f"the checkpoint at {checkpoint}")
        entries = state.get("entries")
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise damaged("records", key, "its entries are not a list of entries")
        previous = 0
        for entry in entries:
            stream = (BENCH_PREFIX + str(entry.get("identity")) if entry.get("source") == "session"
                      else ARTIFACT_PREFIX + str(entry.get("artifact")))
            at = entry.get("position")
            if not isinstance(at, int) or not previous < at <= position:
                raise damaged("records", key, f"an entry at position {at} is not after the one before it "
                                              f"({previous}) and at or before the row's last position {position}")
            previous = at
            wanted[at] = (key, stream, entry.get("event_id"))
        sessions = state.get("sessions")
        if not isinstance(sessions, dict) or not all(isinstance(session, dict) for session in sessions.values()):
            raise damaged("records", key, "its sessions are not a mapping of sessions")
        for session in sessions.values():  # each opened by an event of its identity's stream (its id unkept)
            at = session.get("opened_position")
            if not isinstance(at, int) or at > position or at in wanted:
                raise damaged("records", key, f"a session opened at position {at} is not at or before the row's "
                                              f"last position {position}, apart from its entries")
            wanted[at] = (key, BENCH_PREFIX + str(session.get("identity")), None)
    found = {}
    positions = sorted(wanted)
    for start in range(0, len(positions), CHUNK):
        found.update((row[0], (row[1], row[2])) for row in conn.execute(
            _EVENTS_AT, {"positions": positions[start:start + CHUNK]}))
    for position, (key, stream, event_id) in wanted.items():
        at = found.get(position, (None, None))
        if at[0] != stream or event_id not in (None, at[1]):
            raise damaged("records", key, f"its entry at position {position} is not event {event_id or 'opening'} "
                                          f"of stream {stream}")


def check_workload_count(conn: Connection, workload: str, found: int) -> None:
    """Refuse a listing of a workload's artifact rows that finds another number than its count kept beside them."""
    counted = conn.execute(select(WORKLOAD_COUNTS.c.artifacts).where(WORKLOAD_COUNTS.c.workload == workload)).scalar()
    if (counted or 0) != found:
        raise DamagedReadModel(f"the read model of workload {workload!r} holds {found} artifact rows where "
                               f"{counted or 0} are counted; {REPLAY}")


def check_record_count(conn: Connection, workload: str, found: int) -> None:
    """Refuse a listing of a workload's speed records that finds another number than it has heads."""
    heads = conn.execute(select(func.count()).select_from(RECORD_HEADS)
                         .where(RECORD_HEADS.c.workload == workload)).scalar()
    if heads != found:
        raise DamagedReadModel(f"the read model of workload {workload!r} holds {found} speed records where "
                               f"{heads} stand; {REPLAY}")


def check_absent(conn: Connection, model: str, key: str, checkpoint: int) -> None:
    """Refuse a missing row whose subject has events at or before the checkpoint (the row was deleted)."""
    if model == "records":
        head = conn.execute(select(RECORD_HEADS.c.last_position).where(RECORD_HEADS.c.record == key)).scalar()
        if head is not None:
            raise damaged(model, key, f"it has no row, but its head stands at position {head}")
        return
    prefix = STREAM_PREFIX.get(model)
    if prefix is None:
        return
    position = conn.execute(select(EVENTS.c.position).where(EVENTS.c.stream == prefix + key,
                                                           EVENTS.c.position <= checkpoint).limit(1)).scalar()
    if position is not None:
        raise damaged(model, key, f"it has no row, but its stream has an event at position {position}")
