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
from .recorder import AppendBatch, BeforeCommit, LogRow, Recorder, Writer

# Any 64-bit constant identifies the append lock among Postgres advisory locks.
APPEND_LOCK_KEY = 0x7265676973747279  # "registry"

_LOCK = "SELECT pg_advisory_xact_lock(%s)"
_IDEMPOTENCY = "SELECT digest, first_position, count FROM idempotency_keys WHERE key = %s"
# The stream's version and the head's position and hash, in one row even for an empty log, with the
# append's time from the server's clock, taken after the lock was granted and never earlier than the head's.
_STATE = (
    "SELECT (SELECT max(version) FROM events WHERE stream = %s), head.position, head.hash,"
    " GREATEST(clock_timestamp(), head.recorded_at)"
    " FROM (SELECT 1) AS one LEFT JOIN (SELECT position, hash, recorded_at FROM events"
    " ORDER BY position DESC LIMIT 1) AS head ON true"
)
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

    def _insert(self, batch: AppendBatch, before_commit: BeforeCommit) -> list[int]:
        """Two round trips, each one pipeline: begin, lock and read; then the rows and the commit.

        A kept connection that the server dropped since its last append fails
        in the first round trip, before anything is written, and is replaced once.
        """
        writer = self.writer()
        try:
            earlier, state = self._lock_and_read(writer, batch)
        except self.database_errors:
            if not (writer.served and writer.connection.broken):
                raise
            self.drop_writer(failed=True)
            writer = self.writer()
            earlier, state = self._lock_and_read(writer, batch)
        connection, cursor = writer.connection, writer.cursor
        try:
            if earlier is not None:
                connection.rollback()
                return earlier
            current, position, prev_hash, now = state
            chained = batch.chained(current, position, prev_hash, timestamp_text(now), now)
            before_commit()
            with connection.pipeline():
                if len(chained.positions) == 1:
                    cursor.execute(_INSERT, chained.rows()[0])
                else:
                    cursor.execute(_INSERT_ARRAYS, chained.columns())
                if batch.idempotency_key is not None:
                    cursor.execute(_REMEMBER, batch.remembered(chained))
                cursor.execute("COMMIT")
        except self.database_errors as exc:
            if not connection.broken:
                connection.rollback()
                raise
            # The COMMIT may have reached the server before the connection went: never say "nothing written".
            self.drop_writer(failed=True)
            raise StoreError(
                f"append to {batch.stream}: the connection was lost while committing, so the batch may or may not "
                f"be in the log; resend it with the same idempotency key ({first_line(exc)})"
            ) from None
        except BaseException:
            if not connection.broken:
                connection.rollback()
            raise
        writer.served = True
        return list(chained.positions)

    @staticmethod
    def _lock_and_read(writer: Writer, batch: AppendBatch) -> tuple[list[int] | None, tuple]:
        """Begin, take the append lock, and read where a keyed batch landed before and the log's state."""
        connection, cursor = writer.connection, writer.cursor
        lookup, state = connection.cursor(), connection.cursor()
        try:
            with connection.pipeline():
                cursor.execute("BEGIN")
                cursor.execute(_LOCK, (APPEND_LOCK_KEY,))
                if batch.idempotency_key is not None:
                    lookup.execute(_IDEMPOTENCY, (batch.idempotency_key,))
                state.execute(_STATE, (batch.stream,))
            found = lookup.fetchone() if batch.idempotency_key is not None else None
            return batch.earlier_positions(found), state.fetchone()
        except BaseException:
            if not connection.broken:
                connection.rollback()
            raise
