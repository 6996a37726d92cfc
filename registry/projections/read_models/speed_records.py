"""The speed records read model: one row per payload within a workload (`projection_speed_records`).

A speed record (docs/gate.md, "The speed record") holds every session batch
and every complete benchmark document of one payload's bytes in one
workload, under any artifact id or claim, in recorded order: its pairs count
as one stream, so neither a new session, a new name, a new claim nor a
retried document starts afresh. A record is fed by many streams (the
artifacts' benchmark documents, the identities' bench streams), so no stream
names its row: a catch-up loads it when the fold first meets its key
(`lazy`). A session's batch is stored whole; a document's entry is stored as
a reference to its event, whose arms a question attaches from the log by
position (record_items.py), as evidence items are. An artifact without a
payload has no record and borrows none: its sessions live in its bench
stream's row only.

Each entry also moves the record's `digest` on: the sha256 of the digest
before it and the entry's event id (the first entry's, of its event id
alone), so the digest at the head names every entry in recorded order. A
verdict decided on the record cites its key, head position, entry count and
this digest instead of listing every entry's event (docs/gate.md, "The speed
record"), and `replay --verify` compares it with a fresh fold's.

Side table: `projection_record_heads`, where each record stands (its row's
`last_position`), written beside it; a read checks the row against it
(`check_records`), and a listing of a workload's records against their
number (`check_record_count`), so a deleted or moved-back row is a refusal,
never a record with fewer pairs.
"""
# No `from __future__ import annotations`: TypedDict reads NotRequired[...] only from evaluated annotations.
from typing import Any, Callable, Literal, NotRequired, Protocol, Sequence, TypedDict

from sqlalchemy import BigInteger, Column, Connection, String, Table, bindparam, func, select

from registry.events.canonical import sha256_hex
from registry.events.schema import EVENTS, METADATA
from registry.formats.names import ARTIFACT_PREFIX, BENCH_PREFIX

from ..errors import REPLAY, DamagedReadModel
from ..log import LogEvent
from .bench_streams import BenchStreamState
from .declaration import ReadModel, SideTable, state_table
from .payload_index import payload_key

VERSION = 3
# Positions checked against the log per read (bound parameters stay far below every backend's limit).
CHUNK = 500


class BenchSession(TypedDict):
    """One benchmark session of a speed record, as opened, and the pairs it has recorded."""

    artifact: str
    identity: str
    device: str
    timer: str
    arch: str | None
    opened_position: int
    pairs: int


class RecordEntry(TypedDict):
    """One contribution to a speed record, in recorded order: a session's batch of pairs or a complete benchmark
    document, with its raw arms (the gate derives everything from them, registry/gate/record.py).

    A session's batch is stored whole; a document's entry is stored as a
    reference (source, position, event_id, artifact, identity, session) and
    its arms and names are attached from the log by position when a question
    reads the record (record_items.py), as evidence items are.
    """

    source: Literal["session", "document"]
    position: int
    event_id: str
    artifact: str
    identity: str | None
    session: str | None
    protocol: NotRequired[Literal["paired", "sequential"] | None]  # None: a stored item not shaped as a benchmark
    schedule: NotRequired[list[str] | None]
    baseline_s: NotRequired[list[float]]
    candidate_s: NotRequired[list[float]]
    timer: NotRequired[str]
    device: NotRequired[str]
    arch: NotRequired[str | None]


class KeptReading(TypedDict):
    """A record's running reading as its row keeps it (registry/projections/record_readings.py): the entries read
    into it (up to `through`), what any record shows of them, and the confident rule's state (None when the
    contract in force at the record's last position does not decide by that rule)."""

    through: int
    pairs: int
    devices: list[str]
    archs: list[str]
    timers: list[str]
    rule: dict[str, Any] | None


class SpeedRecordState(TypedDict):
    """The speed record of one payload within a workload (docs/gate.md, "The speed record"): every session
    batch and complete benchmark document of those bytes, under any artifact id or claim, in recorded order."""

    record: str
    workload: str
    payload_sha256: str
    sessions: dict[str, BenchSession]
    entries: list[RecordEntry]
    documents: int
    last_position: int
    digest: str  # of every entry's event id in recorded order (`next_digest`); empty before the first entry
    reading: NotRequired[KeptReading]  # kept by the catch-up once it has folded the record's entries


class Records(Protocol):
    """What this model's handlers fold into (RegistryState): the records, and what they are fed by."""

    artifacts: dict[str, Any]
    bench_streams: dict[str, BenchStreamState]
    records: dict[str, SpeedRecordState]
    load_row: Callable[[str, str], Any] | None


SPEED_RECORDS = state_table(
    "projection_speed_records", "record",
    Column("workload", String(200), nullable=False, index=True),
    Column("payload_sha256", String(64), nullable=False),
    Column("last_position", BigInteger, nullable=False),
    key_length=300,
)
RECORD_HEADS = Table(
    "projection_record_heads", METADATA,
    Column("record", String(300), primary_key=True),
    Column("workload", String(200), nullable=False, index=True),
    Column("last_position", BigInteger, nullable=False),
)


def record_key(workload: str, payload_sha256: Any) -> str:
    """The speed record's key: one record per payload within a workload (docs/gate.md, "The speed record").

    The payload part is the payload index's key for the value (the digest itself, else a digest of it), so a
    registered value that is not a digest (a log written by other means) still keys a row either backend stores.
    """
    return f"{workload}:{payload_key(payload_sha256)}"


def _record(state: Records, workload: str, payload_sha256: Any, position: int) -> SpeedRecordState:
    """The record of these bytes in this workload: folded already, else its stored row, else a new one."""
    payload_sha256 = payload_key(payload_sha256)
    key = record_key(workload, payload_sha256)
    found = state.records.get(key)
    if found is None and state.load_row is not None:
        found = state.load_row("records", key)
    if found is None:
        found = {"record": key, "workload": workload, "payload_sha256": payload_sha256, "sessions": {},
                 "entries": [], "documents": 0, "last_position": position, "digest": ""}
    state.records[key] = found
    found["last_position"] = position
    return found


def next_digest(digest: str, event_id: str) -> str:
    """The record's digest once an entry of `event_id` joins it: a chain, so it names every entry in order."""
    return sha256_hex(digest + event_id)


def _entry(record: SpeedRecordState, entry: RecordEntry) -> None:
    record["entries"].append(entry)
    record["digest"] = next_digest(record["digest"], entry["event_id"])


def _session(state: Records, event: LogEvent) -> None:
    """A benchmark session opened: its identity's stream (bench_streams.py) notes which record it feeds."""
    payload = event.payload
    if payload["payload_sha256"] is None:
        return
    record = _record(state, payload["workload"], payload["payload_sha256"], event.position)
    state.bench_streams[payload["identity"]]["record"] = record["record"]
    record["sessions"][payload["session"]] = {
        "artifact": payload["artifact"], "identity": payload["identity"], "device": payload["device"],
        "timer": payload["timer"], "arch": payload.get("arch"), "opened_position": event.position, "pairs": 0}


def _pairs(state: Records, event: LogEvent) -> None:
    """A batch of pairs: appended to its session's speed record, in recorded order."""
    payload = event.payload
    feeds = state.bench_streams[payload["identity"]]["record"]
    if feeds is None:
        return
    workload, payload_sha256 = feeds.split(":", 1)
    record = _record(state, workload, payload_sha256, event.position)
    session = record["sessions"][payload["session"]]
    session["pairs"] += len(payload["baseline_s"])
    _entry(record, {
        "source": "session", "position": event.position, "event_id": event.event_id,
        "artifact": payload["artifact"], "identity": payload["identity"], "session": payload["session"],
        "protocol": "paired", "schedule": None, "baseline_s": payload["baseline_s"],
        "candidate_s": payload["candidate_s"], "timer": session["timer"], "device": session["device"],
        "arch": session["arch"]})


def _document(state: Records, event: LogEvent) -> None:
    """A complete benchmark item joins the speed record of the bytes it measured (none without a payload).

    The entry references its event, as an evidence entry does: the fold
    decodes no evidence payload, and a question that reads the record
    attaches the document's arms from the log by position (record_items.py).
    """
    if event.scope is None:
        return
    artifact = state.artifacts[event.stream[len(ARTIFACT_PREFIX):]]
    record = _record(state, artifact["workload"], event.scope, event.position)
    record["documents"] += 1
    _entry(record, {"source": "document", "position": event.position, "event_id": event.event_id,
                    "artifact": artifact["artifact"], "identity": event.identity, "session": None})


# -- checks ----------------------------------------------------------------------------------------------------

_HEADS = (select(RECORD_HEADS.c.record, RECORD_HEADS.c.last_position)
          .where(RECORD_HEADS.c.record.in_(bindparam("records", expanding=True))))
_EVENTS_AT = (select(EVENTS.c.position, EVENTS.c.stream, EVENTS.c.event_id)
              .where(EVENTS.c.position.in_(bindparam("positions", expanding=True))))


def damaged(key: str, why: str) -> DamagedReadModel:
    return DamagedReadModel(f"the read model of speed record {key!r} does not match the log ({why}); {REPLAY}")


def check_records(conn: Connection, rows: Sequence[tuple[str, int, dict]], checkpoint: int) -> None:
    """(key, last position, state) rows against their heads, and each row's head against the log: a record must
    stand where its head says, its entries run in log order up to the row's last position, its latest entry must be
    the event it names in its own stream, and each session it lists opened by an event of its identity's stream at
    a position no entry holds.

    Of the entries only the latest is looked up in the log, not every one: a read of a record holding tens of
    thousands of entries costs what a read of one costs (a row moved back or forward names another latest event;
    `replay --verify` compares every entry and the digest with a fresh fold, and a document entry's event is read
    by position whenever its arms are attached, record_items.py).
    """
    for start in range(0, len(rows), CHUNK):
        _check_records(conn, rows[start:start + CHUNK], checkpoint)


def _check_records(conn: Connection, rows: Sequence[tuple[str, int, dict]], checkpoint: int) -> None:
    heads = dict(conn.execute(_HEADS, {"records": [key for key, _, _ in rows]}).all())
    wanted: dict[int, tuple[str, str, str | None]] = {}
    for key, position, state in rows:
        if heads.get(key) != position or state.get("last_position") != position or position > checkpoint:
            raise damaged(key, f"it stands at position {position}, its head at {heads.get(key)}, "
                               f"the checkpoint at {checkpoint}")
        entries = state.get("entries")
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise damaged(key, "its entries are not a list of entries")
        previous = 0
        for entry in entries:
            at = entry.get("position")
            if not isinstance(at, int) or not previous < at <= position:
                raise damaged(key, f"an entry at position {at} is not after the one before it "
                                   f"({previous}) and at or before the row's last position {position}")
            previous = at
        kept = state.get("reading")
        through = kept.get("through") if isinstance(kept, dict) else kept
        if "reading" in state and through != previous:  # kept up to its latest entry by the catch-up that folded it
            raise damaged(key, f"its running reading stands at position {through}, its latest entry at {previous}")
        if entries:
            latest = entries[-1]
            stream = (BENCH_PREFIX + str(latest.get("identity")) if latest.get("source") == "session"
                      else ARTIFACT_PREFIX + str(latest.get("artifact")))
            wanted[latest["position"]] = (key, stream, latest.get("event_id"))
        sessions = state.get("sessions")
        if not isinstance(sessions, dict) or not all(isinstance(session, dict) for session in sessions.values()):
            raise damaged(key, "its sessions are not a mapping of sessions")
        held = {entry["position"] for entry in entries}
        for session in sessions.values():  # each opened by an event of its identity's stream (its id unkept)
            at = session.get("opened_position")
            if not isinstance(at, int) or at > position or at in held or at in wanted:
                raise damaged(key, f"a session opened at position {at} is not at or before the row's "
                                   f"last position {position}, apart from its entries")
            wanted[at] = (key, BENCH_PREFIX + str(session.get("identity")), None)
    found: dict[int, tuple[str, str]] = {}
    positions = sorted(wanted)
    for start in range(0, len(positions), CHUNK):
        found.update((row[0], (row[1], row[2])) for row in conn.execute(
            _EVENTS_AT, {"positions": positions[start:start + CHUNK]}))
    for position, (key, stream, event_id) in wanted.items():
        at = found.get(position, (None, None))
        if at[0] != stream or event_id not in (None, at[1]):
            raise damaged(key, f"its entry at position {position} is not event {event_id or 'opening'} "
                               f"of stream {stream}")


def check_record_count(conn: Connection, workload: str, found: int) -> None:
    """Refuse a listing of a workload's speed records that finds another number than it has heads."""
    heads = conn.execute(select(func.count()).select_from(RECORD_HEADS)
                         .where(RECORD_HEADS.c.workload == workload)).scalar()
    if heads != found:
        raise DamagedReadModel(f"the read model of workload {workload!r} holds {found} speed records where "
                               f"{heads} stand; {REPLAY}")


def check_absent(conn: Connection, key: str) -> None:
    """Refuse a record with no row whose head stands (the row was deleted, and is not begun again)."""
    head = conn.execute(select(RECORD_HEADS.c.last_position).where(RECORD_HEADS.c.record == key)).scalar()
    if head is not None:
        raise damaged(key, f"it has no row, but its head stands at position {head}")


def _heads(states) -> dict[tuple, dict[str, Any]]:
    return {(state["record"],): {"record": state["record"], "workload": state["workload"],
                                 "last_position": state["last_position"]} for state in states}


DECLARATION = ReadModel(
    name="records", version=VERSION, row_type=SpeedRecordState, singular="speed record",
    folds={"BenchmarkSessionOpened": _session, "BenchmarkPairsRecorded": _pairs, "BenchmarkMeasured": _document},
    table=SPEED_RECORDS, key=("record",),
    lazy=True, checks=check_records, absent=check_absent,
    side_tables=(SideTable(RECORD_HEADS, ("record",), _heads, "set"),),
)
