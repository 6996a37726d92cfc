"""The store's conformance suite on Postgres, and what only Postgres's side of it can show: the append
connection each thread keeps, and what happens when the server drops it or a pooled one."""
from __future__ import annotations

import gc
import threading
import time

import psycopg
import pytest
from sqlalchemy.engine import make_url

from registry.events.database import PG_PING_AFTER_IDLE_S, make_engine, upgrade
from registry.events.errors import StoreError
from registry.events.store import EventStore

from limits import HANG_GUARD_S
from store_conformance import StoreConformance
from store_helpers import frame_event

pytestmark = pytest.mark.postgres


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _drop_connections(url: str) -> int:
    """Terminate every other connection to the database (the server dropping them); how many there were."""
    with psycopg.connect(_libpq(url), autocommit=True) as admin:
        return admin.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                             " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]


class _DroppedAtCommit(EventStore):
    """Its server connection is terminated just before the commit is sent."""

    def _before_commit(self):
        pid = self.recorder.writer().connection.info.backend_pid
        with psycopg.connect(_libpq(self.engine.url.render_as_string(hide_password=False)), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + HANG_GUARD_S
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                assert time.monotonic() < deadline, "the backend outlived pg_terminate_backend"
                time.sleep(0.01)


class TestPostgresStore(StoreConformance):
    @pytest.fixture
    def url(self, postgres_url):
        return postgres_url

    @pytest.fixture
    def migrated_url(self, migrated_postgres_url):
        return migrated_postgres_url

    # -- the kept append connection ---------------------------------------------------

    def test_an_append_outlives_the_server_dropping_its_kept_connection(self, url):
        engine = make_engine(url)
        upgrade(engine)
        store = EventStore(engine)
        store.append("s:a", [frame_event("a")], actor="t")
        assert _drop_connections(url) >= 1
        # The kept connection fails in its first round trip, before anything is sent to be written; it is replaced once.
        assert store.append("s:a", [frame_event("b"), frame_event("c")], actor="t") == [2, 3]
        assert [e.version for e in store.read_stream("s:a")] == [1, 2, 3]
        assert store.verify().intact
        engine.dispose()

    def test_a_pooled_connection_the_server_dropped_while_idle_is_replaced_on_checkout(self, url):
        """A connection idle in the pool over PG_PING_AFTER_IDLE_S is pinged on checkout and replaced when the
        server has dropped it (one used more recently is not pinged: docs/serve.md). Needs a second: the idle
        time itself."""
        engine = make_engine(url)
        upgrade(engine)
        store = EventStore(engine)
        store.append("s:a", [frame_event("a")], actor="t")
        assert len(store.read_stream("s:a")) == 1
        assert _drop_connections(url) >= 1
        time.sleep(PG_PING_AFTER_IDLE_S + 0.2)
        assert len(store.read_stream("s:a")) == 1
        engine.dispose()

    def test_append_connections_return_to_the_pool_with_ordinary_transactions(self, url):
        """Appends run their connection in autocommit; a reader that gets it next must not."""
        engine = make_engine(url)
        upgrade(engine)
        store = EventStore(engine)
        workers = [threading.Thread(target=store.append, args=(f"s:{i}", [frame_event(str(i))]), kwargs={"actor": "t"})
                   for i in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(HANG_GUARD_S)
        gc.collect()  # the finished threads' append connections go back to the pool
        for _ in range(engine.pool.size() + 1):
            with engine.connect() as conn:
                assert conn.connection.driver_connection.autocommit is False
        assert store.verify().count == 3  # reads through a server-side cursor, which needs a transaction
        engine.dispose()

    def test_a_connection_lost_at_commit_is_reported_as_unknown_and_a_resend_lands_once(self, url):
        engine = make_engine(url)
        upgrade(engine)
        with pytest.raises(StoreError, match="lost while committing, so the batch may or may not be in the log"):
            _DroppedAtCommit(engine).append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t")
        store = EventStore(engine)
        assert store.append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t") == [1]
        assert store.append("s:a", [frame_event("a")], idempotency_key="run-1", actor="t") == [1]
        assert store.verify().count == 1
        engine.dispose()


def test_a_speed_record_written_by_another_catch_up_between_reads_is_loaded_not_refused(migrated_postgres_url):
    """A catch-up meets a record with no row; before it checks the record's head, another process's catch-up
    commits the row and head together. The row is loaded: a refusal here said 'deleted' of a row that stood."""
    from sqlalchemy import create_engine, event, insert

    from registry.projections.catchup import ReadModels
    from registry.projections.read_models.speed_records import RECORD_HEADS, SPEED_RECORDS
    from registry.projections.writes import Change

    engine, other = make_engine(migrated_postgres_url), create_engine(migrated_postgres_url)
    committed = []

    @event.listens_for(engine, "after_cursor_execute")
    def _another_catch_up(_conn, _cursor, statement, *_):
        if "projection_speed_records" in statement and not committed:
            committed.append(True)
            with other.begin() as conn:
                conn.execute(insert(SPEED_RECORDS).values(record="r", workload="wan", payload_sha256="0" * 64,
                                                          last_position=1, state="{}", row_hash="0" * 64))
                conn.execute(insert(RECORD_HEADS).values(record="r", workload="wan", last_position=1))

    assert ReadModels(EventStore(engine))._load_lazy("records", "r", Change()) == {}
    engine.dispose()
    other.dispose()
