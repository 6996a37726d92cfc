"""The event store's backend conformance suite: one contract, run by every backend's test class.

`StoreConformance` holds the store's contract: appends and positions,
optimistic concurrency, idempotency keys, all-or-nothing batches, the hash
chain, times that never go backwards, reads by stream and by position, and the
database's refusal of updates and deletes. A backend's test module subclasses
it and provides `url`, a fresh empty database of that backend
(tests/events/test_store_sqlite.py, tests/events/test_store_postgres.py); checks that only
one backend can make live there beside its class.
"""
from __future__ import annotations

import math
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import insert
from sqlalchemy.exc import DBAPIError

from registry.events.canonical import canonical_json
from registry.events.chain import event_hash
from registry.events.database import make_engine
from registry.events.errors import ConcurrencyError, IdempotencyConflict, PayloadError, StoreError, UnknownEventType
from registry.events.store import (
    APPEND_LOCK_KEY,
    EVENTS,
    Append,
    EventStore,
    NewEvent,
    position_of_event_id,
    positional_event_id,
)
from registry.events.types import UPCASTERS, FrameSetRegistered

from store_helpers import drop_immutability, frame_event, raw


def _three_events(store):
    for name in "abc":
        store.append(f"s:{name}", [frame_event(name)], actor="t")
    assert store.verify().intact


def _clock(offset: timedelta):
    """A writer's clock that is `offset` away from the machine's."""
    return lambda: datetime.now(timezone.utc) + offset


def linked_rows(store, times: list[datetime]) -> None:
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


class StoreConformance:
    """The store's contract. Subclasses provide the `url` fixture, a fresh, empty database of their backend, and
    `migrated_url`, a fresh registry of their backend at the schema head (copied from the worker's template)."""

    @pytest.fixture
    def url(self) -> str:
        raise NotImplementedError("a backend's test class provides `url`")

    @pytest.fixture
    def migrated_url(self) -> str:
        raise NotImplementedError("a backend's test class provides `migrated_url`")

    @pytest.fixture
    def store(self, migrated_url):
        engine = make_engine(migrated_url)
        yield EventStore(engine)
        engine.dispose()

    def test_append_assigns_positions_versions_and_chain(self, store):
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


    def test_wrong_expected_version_raises_and_writes_nothing(self, store):
        store.append("s:a", [frame_event()], expected_version=0, actor="t")
        with pytest.raises(ConcurrencyError, match="at version 1, not the expected 0"):
            store.append("s:a", [frame_event(), frame_event()], expected_version=0, actor="t")
        assert store.head_position() == 1 and store.stream_version("s:a") == 1


    def test_batch_is_atomic_when_one_event_is_invalid(self, store):
        bad = NewEvent("FrameSetRegistered", {"name": "x", "seed": 1})
        with pytest.raises(PayloadError, match="frames"):
            store.append("s:a", [frame_event(), bad], expected_version=0, actor="t")
        assert store.head_position() == 0


    def test_idempotent_retry_returns_original_positions(self, store):
        first = store.append("s:a", [frame_event("a"), frame_event("b")], idempotency_key="run-1", actor="t")
        store.append("s:b", [frame_event("c")], actor="t")
        again = store.append("s:a", [frame_event("a"), frame_event("b")], idempotency_key="run-1", actor="t")
        assert again == first == [1, 2]
        assert store.head_position() == 3


    def test_idempotency_key_with_other_content_is_refused(self, store):
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
    def test_bad_payloads_are_refused_and_nothing_is_written(self, store, event, error):
        with pytest.raises(error):
            store.append("s:a", [event], actor="t")
        assert store.head_position() == 0


    def test_database_refuses_update_and_delete(self, store):
        store.append("s:a", [frame_event()], idempotency_key="k", actor="t")
        for statement in ("UPDATE events SET actor = 'mallory'", "DELETE FROM events", "DELETE FROM idempotency_keys"):
            with pytest.raises(DBAPIError, match="events are immutable"):
                raw(store.engine, statement)
        assert store.read_all()[0].actor == "t"


    def test_chain_detects_an_edit(self, store):
        _three_events(store)
        drop_immutability(store.engine)
        raw(store.engine, "UPDATE events SET payload = replace(payload, '\"seed\":1', '\"seed\":2') WHERE position = 2")
        report = store.verify()
        assert report.broken_at == 2 and "content" in report.problem


    def test_chain_detects_a_delete(self, store):
        _three_events(store)
        drop_immutability(store.engine)
        raw(store.engine, "DELETE FROM events WHERE position = 2")
        assert store.verify().broken_at == 3


    def test_chain_detects_a_reorder(self, store):
        _three_events(store)
        drop_immutability(store.engine)
        raw(
            store.engine,
            "UPDATE events SET position = 100 WHERE position = 2",
            "UPDATE events SET position = 2 WHERE position = 3",
            "UPDATE events SET position = 3 WHERE position = 100",
        )
        assert store.verify().broken_at == 2


    def test_chain_detects_an_injected_row(self, store):
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


    def test_as_of_reads_and_stream_listing(self, store):
        store.append("artifact:a", [frame_event("a")], actor="t")
        store.append("artifact:b", [frame_event("b")], actor="t")
        store.append("workload:w", [frame_event("w")], actor="t")
        assert store.streams("artifact:") == ["artifact:a", "artifact:b"]
        assert [e.position for e in store.read_all(up_to_position=2)] == [1, 2]
        assert [e.position for e in store.iter_all(page=2)] == [1, 2, 3]
        moment = store.read_all()[1].recorded_at
        assert store.position_at(moment) >= 2
        assert store.get(store.read_all()[0].event_id).position == 1


    def test_a_skewed_clock_cannot_make_as_of_take_in_a_later_event(self, store):
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


    def test_a_head_stamped_in_the_future_is_never_passed_backwards(self, store):
        """A head recorded far ahead (by an older writer, a clock far off): the next event is stamped no earlier."""
        future = datetime.now(timezone.utc) + timedelta(days=1)
        linked_rows(store, [future])
        store.append("s:new", [frame_event("new")], actor="t")
        first, second = store.read_all()
        assert second.recorded_at >= first.recorded_at == future
        assert store.verify().intact
        assert store.position_at(future - timedelta(seconds=1)) == 0


    def test_as_of_a_time_is_a_prefix_even_where_times_go_backwards(self, store):
        """A log whose times go backwards (written before they were ordered): verify names the place, and
        as-of a time never takes in an event stamped after it."""
        start = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)
        linked_rows(store, [start + timedelta(seconds=s) for s in (0, 5, 2, 7)])
        report = store.verify()
        assert (report.broken_at, report.count) == (3, 2) and "time goes backwards" in report.problem
        assert store.position_at(start + timedelta(seconds=3)) == 1  # position 2 (at 0:05) is later than 0:03
        assert store.position_at(start + timedelta(seconds=6)) == 3
        assert store.position_at(start + timedelta(seconds=7)) == 4
        assert store.position_at(start - timedelta(seconds=1)) == 0


    def test_a_cut_off_tail_is_seen_only_against_the_expected_head(self, store):
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


    @pytest.mark.parametrize("where, message", [
        ("payload", r"contract\.note\[1\]: text holds a lone surrogate"),
        ("key", r"contract\.\\ud800: the key holds a lone surrogate"),
        ("field", r"name: Input should be a valid string, unable to parse raw data as a unicode string"),
        ("stream", r"stream 'x\\ud83d' holds a lone surrogate"),
        ("actor", r"actor 'x\\ud83d' holds a lone surrogate"),
        ("idempotency_key", r"idempotency key 'x\\ud83d' holds a lone surrogate"),
    ])
    def test_a_lone_surrogate_is_refused_before_the_append_lock(self, store, where, message):
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

    def test_old_schema_versions_are_upcast_on_read(self, store, monkeypatch):
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


    def test_event_ids_carry_their_position(self, store):
        positions = store.append("s:a", [frame_event("a"), frame_event("b")], actor="t")
        events = store.read_all()
        assert [position_of_event_id(e.event_id) for e in events] == positions
        assert all(uuid.UUID(e.event_id).version == 8 for e in events)
        assert store.get(events[1].event_id).position == 2
        # An id that names a real position but is not that event's id finds nothing.
        impostor = str(uuid.UUID(int=uuid.UUID(events[1].event_id).int ^ 1))
        assert store.get(impostor) is None and store.get("not-an-id") is None
        assert store.get(str(uuid.uuid4())) is None

    # -- added with the suite: reads by stream and position, refusals alike on every backend --

    def test_reads_by_stream_and_up_to_a_position(self, store):
        store.append("s:a", [frame_event("a1"), frame_event("a2")], actor="t")
        store.append("s:b", [frame_event("b1")], actor="t")
        store.append("s:a", [frame_event("a3")], expected_version=2, actor="t")
        assert [(e.position, e.version) for e in store.read_stream("s:a")] == [(1, 1), (2, 2), (4, 3)]
        assert [e.position for e in store.read_stream("s:a", up_to_position=3)] == [1, 2]
        assert store.read_stream("s:none") == [] and store.stream_version("s:none") == 0
        assert [e.position for e in store.read_all(after_position=1, up_to_position=3)] == [2, 3]
        assert [e.position for e in store.read_all(after_position=1, limit=2)] == [2, 3]
        assert [e.position for e in store.iter_all(after_position=1, up_to_position=4, page=1)] == [2, 3, 4]
        assert store.stream_version("s:a") == 3 and store.head_position() == 4

    def test_log_pages_hold_the_stored_rows_in_position_order(self, store):
        for index in range(5):
            store.append(f"s:{index % 2}", [frame_event(str(index))], actor="t")
        events = store.read_all()
        pages = list(store.log_pages(after=0, up_to=5, page=2))
        assert [len(page) for page in pages] == [2, 2, 1]
        rows = [row for page in pages for row in page]
        assert [row[:5] for row in rows] == [(e.position, e.event_id, e.stream, e.type, e.schema_version)
                                             for e in events]
        assert [row[5] for row in rows] == [canonical_json(e.payload) for e in events]
        by_stream = [row[0] for page in store.log_pages(after=1, up_to=4, stream="s:0", page=1) for row in page]
        assert by_stream == [3]
        assert list(store.log_pages(after=5, up_to=5, page=2)) == []

    def test_rows_at_positions_are_the_stored_rows_each_once_in_position_order(self, store):
        for index in range(6):
            store.append(f"s:{index % 2}", [frame_event(str(index))], actor="t")
        by_position = {row[0]: row for page in store.log_pages(after=0, up_to=6, page=10) for row in page}
        pages = list(store.log_rows_at([5, 2, 9, 2, 3, 0, 6], page=2))
        # pages of two positions asked for: (0, 2), (3, 5), (6, 9); the log holds no 0 or 9
        assert [[row[0] for row in page] for page in pages] == [[2], [3, 5], [6]]
        assert [row for page in pages for row in page] == [by_position[p] for p in (2, 3, 5, 6)]
        assert list(store.log_rows_at([], page=2)) == []
        assert [len(page) for page in store.log_rows_at(range(1, 7), page=1_000)] == [6]

    def test_stream_listing_takes_a_prefix_literally(self, store):
        for stream in ("a_b:1", "axb:1", "a%:1", "a_b:2"):
            store.append(stream, [frame_event(stream)], actor="t")
        assert store.streams("a_b:") == ["a_b:1", "a_b:2"]
        assert store.streams("a%") == ["a%:1"]
        assert store.streams("none") == []

    @pytest.mark.parametrize("arguments, message", [
        ({"stream": ""}, "stream name must be 1 to 200 characters"),
        ({"stream": "s" * 201}, "stream name must be 1 to 200 characters"),
        ({"actor": ""}, "an actor is required"),
        ({"actor": "a" * 201}, "actor must be at most 200 characters"),
        ({"idempotency_key": ""}, "idempotency key must be 1 to 200 characters"),
        ({"stream": "s:\x00"}, "must not contain NUL characters"),
        ({"actor": "t\x00"}, "must not contain NUL characters"),
        ({"idempotency_key": "k\x00"}, "must not contain NUL characters"),
    ])
    def test_names_either_backend_would_refuse_are_refused_by_both(self, store, arguments, message):
        call = {"stream": "s:a", "actor": "t", "idempotency_key": None, **arguments}
        with pytest.raises(StoreError, match=message):
            store.append(call.pop("stream"), [frame_event()], **call)
        with pytest.raises(StoreError, match="at least one event"):
            store.append("s:a", [], actor="t")
        assert store.head_position() == 0

    def test_a_conflicting_keyed_batch_leaves_its_key_free(self, store):
        store.append("s:a", [frame_event("a")], actor="t")
        with pytest.raises(ConcurrencyError):
            store.append("s:a", [frame_event("b")], expected_version=0, idempotency_key="run-1", actor="t")
        assert store.append("s:a", [frame_event("b")], expected_version=1, idempotency_key="run-1", actor="t") == [2]
        assert store.append("s:a", [frame_event("b")], expected_version=1, idempotency_key="run-1", actor="t") == [2]
        assert store.head_position() == 2

    def test_the_same_batch_under_its_key_in_another_stream_is_refused(self, store):
        store.append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t")
        with pytest.raises(IdempotencyConflict, match="run-1"):
            store.append("s:b", [frame_event("a")], idempotency_key="run-1", actor="t")
        assert store.head_position() == 1

    def test_a_key_is_kept_on_its_batchs_first_event_only(self, store):
        store.append("s:a", [frame_event("a"), frame_event("b")], idempotency_key="run-1", actor="t")
        assert [e.idempotency_key for e in store.read_all()] == ["run-1", None]
        assert store.verify().intact

    def test_the_database_refuses_changes_to_the_idempotency_record(self, store):
        store.append("s:a", [frame_event()], idempotency_key="k", actor="t")
        with pytest.raises(DBAPIError, match="immutable"):
            raw(store.engine, "UPDATE idempotency_keys SET count = 5")
        assert store.append("s:a", [frame_event()], idempotency_key="k", actor="t") == [1]

    def test_a_batch_larger_than_one_insert_statement_lands_whole_and_chained(self, store):
        events = [frame_event(str(index)) for index in range(203)]
        assert store.append("s:big", events, expected_version=0, actor="t") == list(range(1, 204))
        assert store.append("s:big", [frame_event("after")], expected_version=203, actor="t") == [204]
        stored = store.read_stream("s:big")
        assert [e.version for e in stored] == list(range(1, 205))
        assert [e.payload["name"] for e in stored[:3]] == ["0", "1", "2"]
        assert store.verify().count == 204

    def test_a_keyed_batch_larger_than_one_insert_statement_keeps_its_key_on_its_first_event(self, store):
        events = [frame_event(str(index)) for index in range(250)]
        assert store.append("s:big", events, idempotency_key="big", actor="t") == list(range(1, 251))
        stored = store.read_all()
        assert [e.idempotency_key for e in stored] == ["big"] + [None] * 249
        assert [(e.stream, e.actor, e.payload["name"]) for e in stored] == [("s:big", "t", str(i)) for i in range(250)]
        assert len({e.recorded_at for e in stored}) == 1
        assert [e.prev_hash for e in stored[1:]] == [e.hash for e in stored[:-1]]
        assert store.append("s:big", events, idempotency_key="big", actor="t") == list(range(1, 251))
        assert store.verify().count == 250

    def test_a_group_append_decides_each_batch_after_the_ones_before_it_in_one_transaction(self, store):
        store.append("s:b", [frame_event("b0")], actor="t")
        store.append("s:c", [frame_event("c0")], idempotency_key="old", actor="t")
        group = [Append("s:a", [frame_event("a1"), frame_event("a2")], "t", 0, "k"),
                 Append("s:a", [frame_event("a1"), frame_event("a2")], "u", None, "k"),  # its key answers it
                 Append("s:a", [frame_event("a3")], "t", 2, "k2"),
                 Append("s:a", [frame_event("other")], "t", None, "k"),  # other content under a used key
                 Append("s:b", [frame_event("b1")], "t", 0),  # b is at version 1
                 Append("s:b", [frame_event("b2")], "t", 2),  # written against the batch refused before it
                 Append("s:c", [frame_event("c0")], "t", None, "old"),  # landed in an earlier transaction
                 Append("", [frame_event()], "t"),
                 Append("s:d", [frame_event("d1")], "w", 0)]
        outcomes = store.append_group(group)
        assert outcomes[:3] == [([3, 4], True), ([3, 4], False), ([5], True)]
        assert outcomes[6] == ([2], False) and outcomes[8] == ([6], True)
        assert isinstance(outcomes[3], IdempotencyConflict) and "different content" in str(outcomes[3])
        assert isinstance(outcomes[4], ConcurrencyError) and "version 1, not the expected 0" in str(outcomes[4])
        assert isinstance(outcomes[5], ConcurrencyError) and "earlier batch of this append" in str(outcomes[5])
        assert type(outcomes[7]) is StoreError and "1 to 200 characters" in str(outcomes[7])
        stored = store.read_all()
        assert [(e.stream, e.version, e.payload["name"], e.actor) for e in stored[2:]] == [
            ("s:a", 1, "a1", "t"), ("s:a", 2, "a2", "t"), ("s:a", 3, "a3", "t"), ("s:d", 1, "d1", "w")]
        assert len({e.recorded_at for e in stored[2:]}) == 1 and store.verify().count == 6
        assert store.append_group([Append("s:b", [frame_event("b1")], "t", 0)])[0].args == outcomes[4].args
        assert store.verify().count == 6

    def test_a_batch_that_fails_before_its_commit_leaves_nothing(self, store):
        class FailsBeforeCommit(EventStore):
            def _before_commit(self):
                raise RuntimeError("stopped inside the append lock")

        store.append("s:a", [frame_event("first")], actor="t")
        failing = FailsBeforeCommit(store.engine)
        with pytest.raises(RuntimeError, match="inside the append lock"):
            failing.append("s:a", [frame_event(str(index)) for index in range(170)], idempotency_key="k", actor="t")
        failing.close()
        assert store.head_position() == 1 and store.stream_version("s:a") == 1
        assert store.append("s:a", [frame_event("next")], expected_version=1, idempotency_key="k", actor="t") == [2]
        assert store.verify().intact
