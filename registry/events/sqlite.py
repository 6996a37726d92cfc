"""The SQLite recorder: appends under `BEGIN IMMEDIATE`, SQLite's one writer lock.

The transaction takes the lock before its first read, so the keyed-batch
lookup, the head read and the insert all happen under it: positions commit in
order. The writer's clock stamps the append, never earlier than the head's
time. Statements run at driver level (Python's sqlite3) on the connection the
thread keeps.
"""
from __future__ import annotations

import sqlite3
from datetime import datetime
from functools import cache
import itertools
import json

from .chain import timestamp_text
from .errors import StoreError
from .recorder import AppendBatch, BeforeCommit, ChainedBatch, LogRow, Placed, Recorder, place_group

_IDEMPOTENCY = "SELECT digest, first_position, count FROM idempotency_keys WHERE key = ?"
_VERSION = "SELECT max(version) FROM events WHERE stream = ?"
# The head's position, hash and time, read as one row (a primary-key descent); an empty log gives no row.
_HEAD = "SELECT position, hash, recorded_at FROM events ORDER BY position DESC LIMIT 1"
_COLUMNS = ("INSERT INTO events (position, event_id, stream, version, type, schema_version, payload, recorded_at,"
            " actor, idempotency_key, prev_hash, hash) VALUES ")
# A batch is inserted as multi-row INSERTs of up to this many rows. SQLite copies every value it binds, so
# each row binds only what it alone holds: its id, type, schema version, payload and hash. The first position
# and version are bound once (row i adds i to them), as are the stream, time, actor and key (rows after the
# first hold NULL for the key) and the head's hash; each later row's prev_hash is the row before's hash
# parameter. 5 x 190 + 7 = 957 parameters, under the 999 that the oldest SQLite builds allow.
_ROWS_PER_INSERT = 190
_REMEMBER = "INSERT INTO idempotency_keys (key, stream, first_position, count, digest) VALUES (?, ?, ?, ?, ?)"
_LOG_COLUMNS = "SELECT position, event_id, stream, type, schema_version, payload, recorded_at FROM events"
_LOG_PAGE = f"{_LOG_COLUMNS} WHERE position > ? AND position <= ? ORDER BY position LIMIT ?"
_LOG_STREAM_PAGE = f"{_LOG_COLUMNS} WHERE position > ? AND position <= ? AND stream = ? ORDER BY position LIMIT ?"
# Positions travel as one JSON array, so a read of any number of them binds one parameter.
_LOG_AT = f"{_LOG_COLUMNS} WHERE position IN (SELECT value FROM json_each(?)) ORDER BY position"


@cache
def _insert_rows(count: int) -> str:
    """An INSERT of `count` rows (see _ROWS_PER_INSERT); at most that many distinct statements are ever made.

    Row i binds ?5i+1 to ?5i+5 (event_id, type, schema_version, payload,
    hash); after them come the first position, the first version, the
    previous hash, the stream, the time, the actor and the first row's key.
    """
    shared = 5 * count
    position, version, head_hash, stream, recorded_at, actor, key = (f"?{shared + offset}" for offset in range(1, 8))
    rows = []
    for row in range(count):
        first = 5 * row
        event_id, type_, schema_version, payload, hash_ = (f"?{first + offset}" for offset in range(1, 6))
        prev_hash = head_hash if row == 0 else f"?{first}"  # the row before's hash parameter
        rows.append(f"({position} + {row}, {event_id}, {stream}, {version} + {row}, {type_}, {schema_version},"
                    f" {payload}, {recorded_at}, {actor}, {key if row == 0 else 'NULL'}, {prev_hash}, {hash_})")
    return _COLUMNS + ", ".join(rows)


def stored_time_text(recorded: str) -> str:
    """A chain time text as SQLite stores times: SQLAlchemy's layout, its digits with a space for the T, no zone."""
    return f"{recorded[:10]} {recorded[11:26]}"


class SqliteRecorder(Recorder):
    integrity_errors = (sqlite3.IntegrityError,)
    database_errors = (sqlite3.Error,)

    def _log_page_sql(self, by_stream: bool) -> str:
        return _LOG_STREAM_PAGE if by_stream else _LOG_PAGE

    def _log_rows_at(self, cursor: sqlite3.Cursor, positions: list[int]) -> list[LogRow]:
        cursor.execute(_LOG_AT, (json.dumps(positions),))
        return cursor.fetchall()

    def _insert(self, batches: list[AppendBatch], before_commit: BeforeCommit) -> list[Placed]:
        writer = self.writer()
        cursor = writer.cursor
        try:
            cursor.execute("BEGIN IMMEDIATE")
            earlier = {}
            for key in dict.fromkeys(batch.idempotency_key for batch in batches if batch.idempotency_key is not None):
                found = cursor.execute(_IDEMPOTENCY, (key,)).fetchone()
                if found is not None:
                    earlier[key] = found
            versions = {stream: cursor.execute(_VERSION, (stream,)).fetchone()[0]
                        for stream in dict.fromkeys(batch.stream for batch in batches)}
            position, prev_hash, previous_time = cursor.execute(_HEAD).fetchone() or (None, None, None)
            outcomes, placed = place_group(batches, earlier, versions, (position, prev_hash),
                                           *self._time(previous_time))
            for batch, chained in placed:
                self._insert_chained(cursor, chained)
                if batch.idempotency_key is not None:
                    cursor.execute(_REMEMBER, batch.remembered(chained))
            if placed:
                before_commit()
        except BaseException:
            writer.connection.rollback()
            raise
        if placed:
            writer.connection.commit()
        else:
            writer.connection.rollback()
        return outcomes

    @staticmethod
    def _insert_chained(cursor: sqlite3.Cursor, chained: ChainedBatch) -> None:
        total, key = len(chained.positions), chained.idempotency_key
        for start in range(0, total, _ROWS_PER_INSERT):
            stop = min(start + _ROWS_PER_INSERT, total)
            params = list(itertools.chain.from_iterable(zip(
                chained.event_ids[start:stop], chained.types[start:stop], chained.schema_versions[start:stop],
                chained.payloads[start:stop], chained.hashes[start:stop])))
            params += (chained.positions[start], chained.versions[start], chained.prev_hashes[start],
                       chained.stream, chained.recorded_at, chained.actor, key)
            cursor.execute(_insert_rows(stop - start), params)
            key = None  # the key is the batch's first row's only

    def _time(self, previous: str | None) -> tuple[str, str]:
        """This append's time as chain text and as stored: the clock's, or the head's (`previous`) when later.

        SQLite stores times as text in SQLAlchemy's layout (the chain text's
        digits, a space for the T, no zone), so two such texts compare as
        their times do; a head in any other layout is parsed first.
        """
        recorded = timestamp_text(self.clock())
        stamp = stored_time_text(recorded)
        if previous is None:
            return recorded, stamp
        if len(previous) != len(stamp) or previous[10] != " ":
            try:
                previous = stored_time_text(timestamp_text(datetime.fromisoformat(previous)))
            except (TypeError, ValueError):
                raise StoreError(f"the log's last event has an unreadable time {previous!r}; run `registry verify`") from None
        if previous <= stamp:
            return recorded, stamp
        return f"{previous[:10]}T{previous[11:]}+00:00", previous
