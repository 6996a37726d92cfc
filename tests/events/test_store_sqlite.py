"""The store's conformance suite on SQLite, and what only SQLite's side of it can show."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from registry.events.database import make_engine, upgrade
from registry.events.store import EventStore

from store_conformance import StoreConformance, linked_rows
from store_helpers import frame_event, raw


class TestSqliteStore(StoreConformance):
    @pytest.fixture
    def url(self, sqlite_url):
        return sqlite_url

    @pytest.fixture
    def migrated_url(self, migrated_sqlite_url):
        return migrated_sqlite_url

    def test_a_sqlite_head_time_in_another_layout_is_read_as_a_time(self, url):
        """A head time SQLite holds without microseconds (written by another tool) still orders the next append."""
        engine = make_engine(url)
        upgrade(engine)
        store = EventStore(engine)
        future = datetime(2126, 1, 1, 12, 0, tzinfo=timezone.utc)
        linked_rows(store, [future])
        raw(engine, "DROP TRIGGER events_no_update", "UPDATE events SET recorded_at = '2126-01-01 12:00:00'")
        store.append("s:new", [frame_event("new")], actor="t")
        assert [e.recorded_at for e in store.read_all()] == [future, future]
        assert store.verify().intact
        engine.dispose()
