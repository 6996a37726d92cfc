"""The event store's conformance suite: every case runs on SQLite and on Postgres."""
from __future__ import annotations

import gc
import math
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from registry.events.canonical import canonical_json
from registry.events.chain import event_hash
from registry.events.database import make_engine, upgrade
from registry.events.errors import ConcurrencyError, IdempotencyConflict, PayloadError, StoreError, UnknownEventType
from registry.events.store import (
    APPEND_LOCK_KEY,
    EVENTS,
    EventStore,
    NewEvent,
    position_of_event_id,
    positional_event_id,
)
from registry.events.types import UPCASTERS, FrameSetRegistered

from limits import HANG_GUARD_S
from store_helpers import drop_immutability, frame_event, raw


@pytest.fixture
def store(backend_url):
    engine = make_engine(backend_url)
    upgrade(engine)
    yield EventStore(engine)
    engine.dispose()


def test_append_assigns_positions_versions_and_chain(store):
    assert store.append("s:a", [frame_event("a"), frame_event("b")], expected_version=0, actor="t") == [1, 2]
    assert store.append("s:b", [frame_event("c")], expected_version=0, actor="t") == [3]
    assert store.append("s:a", [frame_event("d")], expected_version=2, actor="t") == [4]
    events = store.read_all()
    assert [e.position for e in events] == [1, 2, 3, 4]
    assert [(e.stream, e.version) for e in events] == [("s:a", 1), ("s:a", 2), ("s:b", 1), ("s:a", 3)]
    assert events[1].prev_hash == events[0].hash and events[3].prev_hash == events[2].hash
    assert all(e.recorded_at.tzinfo is not None for e in events)
    assert isinstance(events[0].typed(), FrameSetRegistered)
    report = store.verify()
    assert report.intact and report.count == 4 and report.head_hash == events[-1].hash


def test_wrong_expected_version_raises_and_writes_nothing(store):
    store.append("s:a", [frame_event()], expected_version=0, actor="t")
    with pytest.raises(ConcurrencyError, match="at version 1, not the expected 0"):
        store.append("s:a", [frame_event(), frame_event()], expected_version=0, actor="t")
    assert store.head_position() == 1 and store.stream_version("s:a") == 1


def test_batch_is_atomic_when_one_event_is_invalid(store):
    bad = NewEvent("FrameSetRegistered", {"name": "x", "seed": 1})
    with pytest.raises(PayloadError, match="frames"):
        store.append("s:a", [frame_event(), bad], expected_version=0, actor="t")
    assert store.head_position() == 0


def test_idempotent_retry_returns_original_positions(store):
    first = store.append("s:a", [frame_event("a"), frame_event("b")], idempotency_key="run-1", actor="t")
    store.append("s:b", [frame_event("c")], actor="t")
    again = store.append("s:a", [frame_event("a"), frame_event("b")], idempotency_key="run-1", actor="t")
    assert again == first == [1, 2]
    assert store.head_position() == 3


def test_idempotency_key_with_other_content_is_refused(store):
    store.append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t")
    with pytest.raises(IdempotencyConflict, match="run-1"):
        store.append("s:a", [frame_event("other")], idempotency_key="run-1", actor="t")
    assert store.head_position() == 1


@pytest.mark.parametrize(
    "event, error",
    [
        (NewEvent("NoSuchEvent", {}), UnknownEventType),
        (NewEvent("FrameSetRegistered", {"name": "f", "seed": "one"}), PayloadError),
        (NewEvent("FrameSetRegistered", "not an object"), PayloadError),
        (NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                       "contract": {"x": math.nan}}), PayloadError),
        (NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                       "contract": {"x": [math.inf]}}), PayloadError),
    ],
)
def test_bad_payloads_are_refused_and_nothing_is_written(store, event, error):
    with pytest.raises(error):
        store.append("s:a", [event], actor="t")
    assert store.head_position() == 0


def test_database_refuses_update_and_delete(store):
    store.append("s:a", [frame_event()], idempotency_key="k", actor="t")
    for statement in ("UPDATE events SET actor = 'mallory'", "DELETE FROM events", "DELETE FROM idempotency_keys"):
        with pytest.raises(DBAPIError, match="events are immutable"):
            raw(store.engine, statement)
    assert store.read_all()[0].actor == "t"


def _three_events(store):
    for name in "abc":
        store.append(f"s:{name}", [frame_event(name)], actor="t")
    assert store.verify().intact


def test_chain_detects_an_edit(store):
    _three_events(store)
    drop_immutability(store.engine)
    raw(store.engine, "UPDATE events SET payload = replace(payload, '\"seed\":1', '\"seed\":2') WHERE position = 2")
    report = store.verify()
    assert report.broken_at == 2 and "content" in report.problem


def test_chain_detects_a_delete(store):
    _three_events(store)
    drop_immutability(store.engine)
    raw(store.engine, "DELETE FROM events WHERE position = 2")
    assert store.verify().broken_at == 3


def test_chain_detects_a_reorder(store):
    _three_events(store)
    drop_immutability(store.engine)
    raw(
        store.engine,
        "UPDATE events SET position = 100 WHERE position = 2",
        "UPDATE events SET position = 2 WHERE position = 3",
        "UPDATE events SET position = 3 WHERE position = 100",
    )
    assert store.verify().broken_at == 2


def test_chain_detects_an_injected_row(store):
    _three_events(store)
    drop_immutability(store.engine)
    first = store.read_all()[0]
    forged = dict(position=2, event_id="00000000-0000-0000-0000-000000000000", stream="s:x", version=1,
                  type="FrameSetRegistered", schema_version=1, payload=canonical_json({"forged": True}),
                  recorded_at=first.recorded_at, actor="mallory", idempotency_key=None)
    raw(
        store.engine,
        "UPDATE events SET position = position + 10 WHERE position >= 2",
        "UPDATE events SET position = position - 9 WHERE position >= 12",
    )
    with store.engine.begin() as conn:
        conn.execute(insert(EVENTS), {**forged, "prev_hash": first.hash, "hash": event_hash(first.hash, **forged)})
    # The forged row links correctly to row 1; the row after it cannot.
    assert store.verify().broken_at == 3


def test_as_of_reads_and_stream_listing(store):
    store.append("artifact:a", [frame_event("a")], actor="t")
    store.append("artifact:b", [frame_event("b")], actor="t")
    store.append("workload:w", [frame_event("w")], actor="t")
    assert store.streams("artifact:") == ["artifact:a", "artifact:b"]
    assert [e.position for e in store.read_all(up_to_position=2)] == [1, 2]
    assert [e.position for e in store.iter_all(page=2)] == [1, 2, 3]
    moment = store.read_all()[1].recorded_at
    assert store.position_at(moment) >= 2
    assert store.get(store.read_all()[0].event_id).position == 1


# -- time: stamped under the append lock, never going backwards --------------------------

def _clock(offset: timedelta):
    """A writer's clock that is `offset` away from the machine's."""
    return lambda: datetime.now(timezone.utc) + offset


def test_a_skewed_clock_cannot_make_as_of_take_in_a_later_event(store):
    """The issue's case: a writer an hour ahead, then an honest one; as of half an hour ahead, nothing is later.

    On SQLite the store's clock stamps the event (never earlier than the
    head's time); on Postgres the server's clock does, whatever the writer's.
    """
    ahead = EventStore(store.engine, clock=_clock(timedelta(hours=1)))
    ahead.append("s:a", [frame_event("a")], actor="ahead")
    store.append("s:b", [frame_event("b")], actor="honest")
    ahead.close()
    events = store.read_all()
    assert [e.recorded_at for e in events] == sorted(e.recorded_at for e in events)
    moment = datetime.now(timezone.utc) + timedelta(minutes=30)
    position = store.position_at(moment)
    assert all(e.recorded_at <= moment for e in store.read_all(up_to_position=position))
    if store.dialect == "postgresql":
        assert position == 2 and all(e.recorded_at < moment for e in events)  # the writer's clock was not used


def _linked_rows(store, times: list[datetime]) -> None:
    """Insert events stamped `times`, chained correctly, as a writer that chose its own times would have."""
    prev = "0" * 64
    with store.engine.begin() as conn:
        for position, moment in enumerate(times, start=1):
            row = dict(position=position, event_id=positional_event_id(position), stream=f"s:{position}", version=1,
                       type="FrameSetRegistered", schema_version=1, payload=canonical_json(frame_event().payload),
                       recorded_at=moment, actor="t", idempotency_key=None)
            link = event_hash(prev, **row)
            conn.execute(insert(EVENTS), {**row, "prev_hash": prev, "hash": link})
            prev = link


def test_a_head_stamped_in_the_future_is_never_passed_backwards(store):
    """A head recorded far ahead (by an older writer, a clock far off): the next event is stamped no earlier."""
    future = datetime.now(timezone.utc) + timedelta(days=1)
    _linked_rows(store, [future])
    store.append("s:new", [frame_event("new")], actor="t")
    first, second = store.read_all()
    assert second.recorded_at >= first.recorded_at == future
    assert store.verify().intact
    assert store.position_at(future - timedelta(seconds=1)) == 0


def test_a_sqlite_head_time_in_another_layout_is_read_as_a_time(sqlite_url):
    """A head time SQLite holds without microseconds (written by another tool) still orders the next append."""
    engine = make_engine(sqlite_url)
    upgrade(engine)
    store = EventStore(engine)
    future = datetime(2126, 1, 1, 12, 0, tzinfo=timezone.utc)
    _linked_rows(store, [future])
    raw(engine, "DROP TRIGGER events_no_update", "UPDATE events SET recorded_at = '2126-01-01 12:00:00'")
    store.append("s:new", [frame_event("new")], actor="t")
    assert [e.recorded_at for e in store.read_all()] == [future, future]
    assert store.verify().intact
    engine.dispose()


def test_as_of_a_time_is_a_prefix_even_where_times_go_backwards(store):
    """A log whose times go backwards (written before they were ordered): verify names the place, and
    as-of a time never takes in an event stamped after it."""
    start = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
    _linked_rows(store, [start + timedelta(seconds=s) for s in (0, 5, 2, 7)])
    report = store.verify()
    assert (report.broken_at, report.count) == (3, 2) and "time goes backwards" in report.problem
    assert store.position_at(start + timedelta(seconds=3)) == 1  # position 2 (at 0:05) is later than 0:03
    assert store.position_at(start + timedelta(seconds=6)) == 3
    assert store.position_at(start + timedelta(seconds=7)) == 4
    assert store.position_at(start - timedelta(seconds=1)) == 0


# -- the log's end: a cut-off tail is seen only against a head known from before ----------

def test_a_cut_off_tail_is_seen_only_against_the_expected_head(store):
    _three_events(store)
    noted = store.verify()
    assert (noted.head_position, noted.head_hash) == (3, store.read_all()[-1].hash)
    drop_immutability(store.engine)
    raw(store.engine, "DELETE FROM events WHERE position = 3")
    assert store.verify().intact  # the chain alone cannot see it
    report = store.verify(expect_head=(noted.head_position, noted.head_hash))
    assert report.broken_at == 3 and "ends at position 2, before the expected head at position 3" in report.problem
    second = store.read_all()[-1]
    assert store.verify(expect_head=(2, second.hash)).intact  # an older head the log still holds
    assert store.verify(expect_head=(0, "0" * 64)).intact
    wrong = store.verify(expect_head=(2, "f" * 64))
    assert wrong.broken_at == 2 and "not the expected head" in wrong.problem


# -- text that is not Unicode: refused while validating, before the append lock ---------

def _lone_surrogate(where: str) -> dict:
    event = {"payload": NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                                      "contract": {"note": ["ok", "bad \udc80 byte"]}}),
             "key": NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                                  "contract": {"\ud800": 1}}),
             "field": frame_event("name \udfff")}.get(where, frame_event())
    arguments = {"stream": "s:a", "actor": "t", "idempotency_key": None}
    if where in arguments:
        arguments[where] = "x\ud83d"
    return {"events": [event], **arguments}


@pytest.mark.parametrize("where, message", [
    ("payload", r"contract\.note\[1\]: text holds a lone surrogate"),
    ("key", r"contract\.\\ud800: the key holds a lone surrogate"),
    ("field", r"name: Input should be a valid string, unable to parse raw data as a unicode string"),
    ("stream", r"stream 'x\\ud83d' holds a lone surrogate"),
    ("actor", r"actor 'x\\ud83d' holds a lone surrogate"),
    ("idempotency_key", r"idempotency key 'x\\ud83d' holds a lone surrogate"),
])
def test_a_lone_surrogate_is_refused_before_the_append_lock(store, where, message):
    """Refused while another writer holds the append lock: the check never waits for the lock
    (inside it, the append would wait out the lock timeout and fail otherwise)."""
    arguments = _lone_surrogate(where)
    with store.engine.connect() as holder:
        holder = holder.execution_options(registry_append=True)  # SQLite: BEGIN IMMEDIATE, the writer lock
        with holder.begin():
            if store.dialect == "postgresql":
                holder.exec_driver_sql(f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})")
            with pytest.raises(StoreError, match=message) as refused:
                store.append(arguments.pop("stream"), arguments.pop("events"), **arguments)
    assert "\n" not in str(refused.value)
    str(refused.value).encode("utf-8")  # the message itself can be printed
    assert store.head_position() == 0


# Text, or text around a lone surrogate (JSON's \\udXXX escapes can spell one; st.text never draws them).
any_text = st.text(max_size=6) | st.tuples(st.text(max_size=3), st.integers(0xD800, 0xDFFF).map(chr),
                                           st.text(max_size=3)).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)


def _holds_surrogate(value) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    return isinstance(value, list) and any(_holds_surrogate(v) for v in value)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(contract=st.dictionaries(any_text, json_values, max_size=3), actor=st.sampled_from(["t", "t\udcff"]))
def test_any_text_is_stored_or_refused_in_one_line_with_nothing_written(sqlite_url, contract, actor):
    """Text with a lone surrogate anywhere (a key, a nested value, the actor) is refused in one line that can be
    printed, with nothing written; any other text is stored and reads back as it was."""
    engine = make_engine(sqlite_url)
    upgrade(engine)
    store = EventStore(engine)
    head = store.head_position()
    event = NewEvent("WorkloadDeclared", {"workload": "w", "contract_version": 1, "contract_hash": "a" * 64,
                                          "contract": contract})
    if _holds_surrogate(contract) or _holds_surrogate(actor):
        with pytest.raises(StoreError, match="lone surrogate") as refused:
            store.append("s:w", [event], actor=actor)
        message = str(refused.value)
        assert "\n" not in message and message.encode("utf-8")
        assert store.head_position() == head
    else:
        [position] = store.append("s:w", [event], actor=actor)
        assert store.read_all(after_position=position - 1)[0].payload["contract"] == contract
    store.close()
    engine.dispose()


def test_old_schema_versions_are_upcast_on_read(store, monkeypatch):
    """An event written under schema 0 (field `count` instead of `frames`) still reads."""
    monkeypatch.setitem(UPCASTERS, ("FrameSetRegistered", 0), lambda d: {**{k: v for k, v in d.items() if k != "count"}, "frames": d["count"]})
    old = {"name": "old", "seed": 3, "count": 4, "height": 16, "width": 16, "channels": 3, "dtype": "uint8", "sha256": "cd" * 32}
    row = dict(position=1, event_id="11111111-1111-1111-1111-111111111111", stream="s:old", version=1,
               type="FrameSetRegistered", schema_version=0, payload=canonical_json(old),
               recorded_at=datetime.now(timezone.utc), actor="t", idempotency_key=None)
    with store.engine.begin() as conn:
        conn.execute(insert(EVENTS), {**row, "prev_hash": "0" * 64, "hash": event_hash("0" * 64, **row)})
    typed = store.read_all()[0].typed()
    assert typed.frames == 4 and typed.name == "old"
    assert store.verify().intact


def test_event_ids_carry_their_position(store):
    positions = store.append("s:a", [frame_event("a"), frame_event("b")], actor="t")
    events = store.read_all()
    assert [position_of_event_id(e.event_id) for e in events] == positions
    assert all(uuid.UUID(e.event_id).version == 8 for e in events)
    assert store.get(events[1].event_id).position == 2
    # An id that names a real position but is not that event's id finds nothing.
    impostor = str(uuid.UUID(int=uuid.UUID(events[1].event_id).int ^ 1))
    assert store.get(impostor) is None and store.get("not-an-id") is None
    assert store.get(str(uuid.uuid4())) is None


@given(st.integers(1, 2**48 - 1))
def test_positional_ids_are_rfc9562_version_8(position):
    event_id = positional_event_id(position)
    parsed = uuid.UUID(event_id)
    assert str(parsed) == event_id
    assert parsed.version == 8 and parsed.variant == uuid.RFC_4122
    assert position_of_event_id(event_id) == position
    assert positional_event_id(position) != event_id  # the free bits are random


# -- the kept append connection (Postgres) --------------------------------------------

def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.mark.postgres
def test_an_append_outlives_the_server_dropping_its_kept_connection(postgres_url):
    engine = make_engine(postgres_url)
    upgrade(engine)
    store = EventStore(engine)
    store.append("s:a", [frame_event("a")], actor="t")
    with psycopg.connect(_libpq(postgres_url), autocommit=True) as admin:
        dropped = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
    assert dropped >= 1
    # The kept connection fails in its first round trip, before anything is sent to be written; it is replaced once.
    assert store.append("s:a", [frame_event("b"), frame_event("c")], actor="t") == [2, 3]
    assert [e.version for e in store.read_stream("s:a")] == [1, 2, 3]
    assert store.verify().intact
    engine.dispose()


@pytest.mark.postgres
def test_append_connections_return_to_the_pool_with_ordinary_transactions(postgres_url):
    """Appends run their connection in autocommit; a reader that gets it next must not."""
    engine = make_engine(postgres_url)
    upgrade(engine)
    store = EventStore(engine)
    workers = [threading.Thread(target=store.append, args=(f"s:{i}", [frame_event(str(i))]), kwargs={"actor": "t"})
               for i in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    gc.collect()  # the finished threads' append connections go back to the pool
    for _ in range(engine.pool.size() + 1):
        with engine.connect() as conn:
            assert conn.connection.driver_connection.autocommit is False
    assert store.verify().count == 3  # reads through a server-side cursor, which needs a transaction
    engine.dispose()


class _DroppedAtCommit(EventStore):
    """Its server connection is terminated just before the commit is sent."""

    def _before_commit(self):
        pid = self._writer.current.connection.info.backend_pid
        with psycopg.connect(_libpq(self.engine.url.render_as_string(hide_password=False)), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + HANG_GUARD_S
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                assert time.monotonic() < deadline, "the backend outlived pg_terminate_backend"
                time.sleep(0.01)


@pytest.mark.postgres
def test_a_connection_lost_at_commit_is_reported_as_unknown_and_a_resend_lands_once(postgres_url):
    engine = make_engine(postgres_url)
    upgrade(engine)
    with pytest.raises(StoreError, match="lost while committing, so the batch may or may not be in the log"):
        _DroppedAtCommit(engine).append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t")
    store = EventStore(engine)
    assert store.append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t") == [1]
    assert store.append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t") == [1]
    assert store.verify().count == 1
    engine.dispose()
