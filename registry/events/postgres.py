"""The Postgres recorder: appends under a transaction-scoped advisory lock, pipelined into two round trips.

The lock is its own statement ahead of the reads, so under READ COMMITTED
their snapshot is taken once the lock is granted and sees every batch
committed before it; positions therefore commit in order. The server's clock
stamps the append, read in the same statement as the head and never earlier
than the head's time. psycopg is imported when a recorder is made, not with
this module: reading commands on SQLite never load it.
"""
from __future__ import annotations

from functools import cache
from typing import Any

from registry.formats.errors import first_line

from .chain import timestamp_text
from .errors import StoreError
from .recorder import AppendBatch, BeforeCommit, LogRow, Placed, Recorder, Writer, place_group

# Any 64-bit constant identifies the append lock among Postgres advisory locks.
APPEND_LOCK_KEY = 0x7265676973747279  # "registry"

_LOCK = "SELECT pg_advisory_xact_lock(%s)"
# Where each keyed batch of an append landed before, if it did: one statement for all their keys.
_EARLIER = "SELECT key, digest, first_position, count FROM idempotency_keys WHERE key = ANY(%s::varchar[])"
# Each stream's version (in the order asked, NULL for a new stream) and the head's position and hash, in one row
# even for an empty log, with the append's time from the server's clock, taken after the lock was granted and
# never earlier than the head's.
_STATE = (
    "SELECT (SELECT array_agg((SELECT max(version) FROM events WHERE events.stream = asked.stream) ORDER BY asked.n)"
    " FROM unnest(%s::varchar[]) WITH ORDINALITY AS asked(stream, n)), head.position, head.hash,"
    " GREATEST(clock_timestamp(), head.recorded_at)"
    " FROM (SELECT 1) AS one LEFT JOIN (SELECT position, hash, recorded_at FROM events"
    " ORDER BY position DESC LIMIT 1) AS head ON true"
)
# A group of one batch (every lone append): the same row for its one stream and, when keyed, its one key, by plain
# equality. The statements over arrays above cost a lone append about a third of its rate (unnest, WITH ORDINALITY
# and the correlated array_agg are planned and run for one element); group commit keeps them for groups.
_STATE_ONE = (
    "SELECT (SELECT max(version) FROM events WHERE stream = %s), head.position, head.hash,"
    " GREATEST(clock_timestamp(), head.recorded_at)"
    " FROM (SELECT 1) AS one LEFT JOIN (SELECT position, hash, recorded_at FROM events"
    " ORDER BY position DESC LIMIT 1) AS head ON true"
)
_EARLIER_ONE = "SELECT key, digest, first_position, count FROM idempotency_keys WHERE key = %s"
_INSERT = (
    "INSERT INTO events (position, event_id, stream, version, type, schema_version, payload,"
    " recorded_at, actor, idempotency_key, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
# A batch of several events: one statement over column arrays, sent in binary (%b).
_INSERT_ARRAYS = (
    "INSERT INTO events (position, event_id, stream, version, type, schema_version, payload, recorded_at, actor,"
    " idempotency_key, prev_hash, hash) SELECT * FROM unnest(%b::bigint[], %b::varchar[], %b::varchar[],"
    " %b::integer[], %b::varchar[], %b::integer[], %b::text[], %b::timestamptz[], %b::varchar[], %b::varchar[],"
    " %b::varchar[], %b::varchar[])"
)
_REMEMBER = "INSERT INTO idempotency_keys (key, stream, first_position, count, digest) VALUES (%s, %s, %s, %s, %s)"
_LOG_COLUMNS = "SELECT position, event_id, stream, type, schema_version, payload, recorded_at FROM events"
_LOG_PAGE = f"{_LOG_COLUMNS} WHERE position > %s AND position <= %s ORDER BY position LIMIT %s"
_LOG_STREAM_PAGE = f"{_LOG_COLUMNS} WHERE position > %s AND position <= %s AND stream = %s ORDER BY position LIMIT %s"
# Positions travel as one array, so a read of any number of them binds one parameter.
_LOG_AT = f"{_LOG_COLUMNS} WHERE position = ANY(%s::bigint[]) ORDER BY position"


@cache
def _psycopg():
    import psycopg

    return psycopg


class PostgresRecorder(Recorder):
    @property
    def integrity_errors(self) -> tuple[type[BaseException], ...]:
        return (_psycopg().errors.UniqueViolation,)

    @property
    def database_errors(self) -> tuple[type[BaseException], ...]:
        return (_psycopg().Error,)

    def _log_page_sql(self, by_stream: bool) -> str:
        return _LOG_STREAM_PAGE if by_stream else _LOG_PAGE

    def _log_rows_at(self, cursor: Any, positions: list[int]) -> list[LogRow]:
        cursor.execute(_LOG_AT, (positions,))
        return cursor.fetchall()

    def _prepare_writer(self, connection: Any) -> None:
        # Appends send their own BEGIN inside their first pipeline; psycopg's implicit
        # one would cost a round trip. The engine restores this when the pool takes it back.
        connection.autocommit = True

    def _prepare_reader(self, connection: Any) -> None:
        # Each page is one statement and its own read (database.statement_reads): no BEGIN and ROLLBACK round
        # trips. The engine restores this too.
        connection.autocommit = True

    def _insert(self, batches: list[AppendBatch], before_commit: BeforeCommit) -> list[Placed]:
        """Two round trips, each one pipeline: begin, lock and read; then the rows and the commit.

        A kept connection that the server dropped since its last append fails
        in the first round trip, before anything is written, and is replaced once.
        """
        writer = self.writer()
        try:
            earlier, state = self._lock_and_read(writer, batches)
        except self.database_errors:
            if not (writer.served and writer.connection.broken):
                raise
            self.drop_writer(failed=True)
            writer = self.writer()
            earlier, state = self._lock_and_read(writer, batches)
        connection, cursor = writer.connection, writer.cursor
        try:
            versions, position, prev_hash, now = state
            outcomes, placed = place_group(batches, earlier, dict(zip((batch.stream for batch in batches), versions)),
                                           (position, prev_hash), timestamp_text(now), now)
            if not placed:
                connection.rollback()
                return outcomes
            before_commit()
            remembered = [batch.remembered(chained) for batch, chained in placed if batch.idempotency_key is not None]
            with connection.pipeline():
                if len(placed) == 1 and len(placed[0][1].positions) == 1:
                    cursor.execute(_INSERT, placed[0][1].rows()[0])
                else:
                    cursor.execute(_INSERT_ARRAYS, [sum(column, []) for column in
                                                    zip(*(chained.columns() for _, chained in placed))])
                if len(remembered) == 1:
                    cursor.execute(_REMEMBER, remembered[0])
                elif remembered:
                    cursor.executemany(_REMEMBER, remembered)
                cursor.execute("COMMIT")
        except self.database_errors as exc:
            if not connection.broken:
                connection.rollback()
                raise
            # The COMMIT may have reached the server before the connection went: never say "nothing written".
            self.drop_writer(failed=True)
            streams = ", ".join(dict.fromkeys(batch.stream for batch in batches))
            raise StoreError(
                f"append to {streams}: the connection was lost while committing, so the batch may or may not "
                f"be in the log; resend it with the same idempotency key ({first_line(exc)})"
            ) from None
        except BaseException:
            if not connection.broken:
                connection.rollback()
            raise
        writer.served = True
        return outcomes

    @staticmethod
    def _lock_and_read(writer: Writer, batches: list[AppendBatch]) -> tuple[dict[str, tuple], tuple]:
        """Begin, take the append lock, and read where keyed batches landed before and the log's state."""
        connection, cursor = writer.connection, writer.cursor
        lookup, state = connection.cursor(), connection.cursor()
        keys = [batch.idempotency_key for batch in batches if batch.idempotency_key is not None]
        alone = len(batches) == 1
        try:
            with connection.pipeline():
                cursor.execute("BEGIN")
                cursor.execute(_LOCK, (APPEND_LOCK_KEY,))
                if keys:
                    lookup.execute(*((_EARLIER_ONE, (keys[0],)) if alone else (_EARLIER, (keys,))))
                state.execute(*((_STATE_ONE, (batches[0].stream,)) if alone else
                                (_STATE, ([batch.stream for batch in batches],))))
            earlier = {key: found for key, *found in lookup.fetchall()} if keys else {}
            version, *head = state.fetchone()
            return earlier, ([version] if alone else version, *head)
        except BaseException:
            if not connection.broken:
                connection.rollback()
            raise
