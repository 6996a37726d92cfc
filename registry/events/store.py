"""The append-only event store over SQLAlchemy (SQLite by default, Postgres too).

One class serves both backends. An append takes the log's single writer
lock (SQLite's `BEGIN IMMEDIATE`, a transaction-scoped advisory lock on
Postgres) and, holding it, reads the head, assigns the next positions and
links the hash chain, so positions commit in order and a reader tailing by
position never skips an event that commits late. The lock holder also
stamps the time: never earlier than the head event's, so times follow
positions and "as of a time" names a prefix of the log (SQLite: the later of
the store's clock and the head's time; Postgres: the server's clock, read in
the same statement as the head). Appends run at driver level on a connection
each thread keeps; on Postgres they are pipelined into two round trips.
Reads go through SQLAlchemy.
"""
from __future__ import annotations

import os
import random
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import DBAPIError

from .canonical import CanonicalError, canonical_json, is_unicode_text, sha256_hex, strict_json_loads
from .chain import GENESIS_HASH, ChainReport, link, placed_body, timestamp_text, unplaced_body, walk_chain
from .errors import ConcurrencyError, IdempotencyConflict, PayloadError, StoreError
from .schema import EVENTS

if TYPE_CHECKING:
    from .types import EventPayload

# Any 64-bit constant identifies the append lock among Postgres advisory locks.
APPEND_LOCK_KEY = 0x7265676973747279  # "registry"


@dataclass(frozen=True)
class NewEvent:
    """An event to append: a type name and its payload (typed or a plain dict)."""

    type: str
    payload: EventPayload | dict[str, Any]


@dataclass(frozen=True)
class StoredEvent:
    position: int
    event_id: str
    stream: str
    version: int
    type: str
    schema_version: int
    payload: dict[str, Any]
    recorded_at: datetime
    actor: str
    idempotency_key: str | None
    prev_hash: str
    hash: str

    def typed(self) -> EventPayload:
        """The payload as its current-schema model (upcast if it is older)."""
        return _payload_models().read_payload(self.type, self.schema_version, self.payload)

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "event_id": self.event_id,
            "stream": self.stream,
            "version": self.version,
            "type": self.type,
            "schema_version": self.schema_version,
            "payload": self.payload,
            "recorded_at": _utc(self.recorded_at).isoformat(),
            "actor": self.actor,
            "idempotency_key": self.idempotency_key,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


def positional_event_id(position: int) -> str:
    """A new event id: an RFC 9562 version-8 UUID whose first 48 bits are the log position.

    The other 74 free bits are random, so two registries' events at the same
    position still differ. Ids stay opaque, unique (positions are) and sort in
    log order, and finding an event by id is a primary-key lookup, so the log
    keeps no second unique index that every append would have to write. The
    noise needs no cryptographic source (uniqueness comes from the position);
    `random` is reseeded in a forked child, so workers never share a sequence.
    """
    if not 0 < position < 1 << 48:
        raise StoreError(f"position {position} does not fit an event id")
    noise = random.getrandbits(74)
    value = (position << 80) | (0x8 << 76) | ((noise >> 62) << 64) | (0b10 << 62) | (noise & ((1 << 62) - 1))
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def position_of_event_id(event_id: str) -> int | None:
    """The log position a registry event id carries, or None for any other string."""
    try:
        parsed = uuid.UUID(event_id)
    except (ValueError, TypeError, AttributeError):
        return None
    return parsed.int >> 80 if parsed.version == 8 else None


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


def system_clock() -> datetime:
    """The machine's time, in UTC: what stamps SQLite appends unless a store is given another clock."""
    return datetime.now(timezone.utc)


def _sqlite_text(recorded: str) -> str:
    """A chain time text as SQLite stores times: SQLAlchemy's layout, its digits with a space for the T, no zone."""
    return f"{recorded[:10]} {recorded[11:26]}"


@cache
def _payload_models():
    """The payload models' module, imported on first use: pydantic only where payloads are validated
    (see catalogue.py). Cached, because a function-level import statement costs about 2 us an event."""
    from . import types

    return types


def _prepare(event: NewEvent) -> tuple[str, int, str]:
    """Validate one new event; return its type, schema version and canonical payload."""
    models = _payload_models()
    payload = event.payload
    if isinstance(payload, models.EventPayload):
        if payload.type != event.type:
            raise PayloadError(f"payload of type {payload.type} given for event type {event.type}")
        typed = payload
    else:
        typed = models.validate_payload(event.type, payload)
    # The validated fields themselves: strict models of plain JSON types hold
    # nothing a dump would convert, and skipping the dump is a tenth of an append.
    try:
        return event.type, typed.schema_version, canonical_json(typed.__dict__)
    except CanonicalError as exc:
        raise PayloadError(f"invalid {event.type} payload: {exc}") from None


def _batch_digest(stream: str, prepared: Sequence[tuple[str, int, str]]) -> str:
    return sha256_hex(canonical_json({"stream": stream, "events": [list(p) for p in prepared]}))


_APPEND_SQL = {
    "idempotency": "SELECT digest, first_position, count FROM idempotency_keys WHERE key = ?",
    # The stream's version, and the head's position, hash and time. The head is read
    # as one row (a primary-key descent); an empty log gives no row.
    "state": (
        "SELECT (SELECT max(version) FROM events WHERE stream = ?), position, hash, recorded_at"
        " FROM events ORDER BY position DESC LIMIT 1"
    ),
    "insert": (
        "INSERT INTO events (position, event_id, stream, version, type, schema_version, payload,"
        " recorded_at, actor, idempotency_key, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    ),
    "remember": "INSERT INTO idempotency_keys (key, stream, first_position, count, digest) VALUES (?, ?, ?, ?, ?)",
}

# Postgres: the same read, in one row even for an empty log, with the append's time from the
# server's clock, taken after the lock was granted and never earlier than the head's.
_PG_STATE = (
    "SELECT (SELECT max(version) FROM events WHERE stream = %s), head.position, head.hash,"
    " GREATEST(clock_timestamp(), head.recorded_at)"
    " FROM (SELECT 1) AS one LEFT JOIN (SELECT position, hash, recorded_at FROM events"
    " ORDER BY position DESC LIMIT 1) AS head ON true"
)

# A Postgres batch of several events: one statement over column arrays, sent in binary (%b).
_PG_INSERT_ARRAYS = (
    "INSERT INTO events (position, event_id, stream, version, type, schema_version, payload, recorded_at, actor,"
    " idempotency_key, prev_hash, hash) SELECT * FROM unnest(%b::bigint[], %b::varchar[], %b::varchar[],"
    " %b::integer[], %b::varchar[], %b::integer[], %b::text[], %b::timestamptz[], %b::varchar[], %b::varchar[],"
    " %b::varchar[], %b::varchar[])"
)


def _driver_errors(dialect: str) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """The driver's unique-violation error, and the base of all its errors."""
    if dialect == "postgresql":
        import psycopg

        return (psycopg.errors.UniqueViolation,), (psycopg.Error,)
    import sqlite3

    return (sqlite3.IntegrityError,), (sqlite3.Error,)


@dataclass(slots=True)
class _Batch:
    """One append's validated events, and the rows they become at the log's head.

    Not frozen: a frozen dataclass's __init__ sets each field through
    object.__setattr__, four times slower than this one's (0.7 against 0.2 us).
    """

    stream: str
    prepared: list[tuple[str, int, str]]
    expected_version: int | None
    idempotency_key: str | None
    digest: str | None
    actor: str
    unplaced: list[tuple[str, str, str]] = field(init=False)

    def __post_init__(self) -> None:
        # Each event's hashed body, but for what the lock decides: encoded before the lock is taken.
        self.unplaced = [unplaced_body(actor=self.actor, stream=self.stream, type=event_type,
                                       schema_version=schema_version, payload=payload)
                         for event_type, schema_version, payload in self.prepared]

    def earlier_positions(self, found: tuple | None) -> list[int] | None:
        """Where this keyed batch landed before, if it did; other content under its key is refused."""
        if found is None:
            return None
        digest, first_position, count = found
        if digest != self.digest:
            raise IdempotencyConflict(f"idempotency key {self.idempotency_key!r} was already used for different content")
        return list(range(first_position, first_position + count))

    def chained_rows(self, current: int | None, position: int | None, prev_hash: str | None, recorded: str,
                     stamp: Any) -> list[tuple]:
        """The batch's rows after the stream's `current` version and the log's head (position, hash).

        `recorded` is the append's time as the chain text, `stamp` the same time as the row stores it.
        """
        current, position, prev_hash = current or 0, position or 0, prev_hash or GENESIS_HASH
        if self.expected_version is not None and self.expected_version != current:
            raise ConcurrencyError(f"stream {self.stream} is at version {current}, not the expected {self.expected_version}")
        stream, actor = self.stream, self.actor
        rows = []
        for index, ((event_type, schema_version, payload), unplaced) in enumerate(zip(self.prepared, self.unplaced)):
            position += 1
            version = current + index + 1
            event_id = positional_event_id(position)
            key = self.idempotency_key if index == 0 else None
            prev_hash, previous = link(prev_hash, placed_body(
                unplaced, position=position, event_id=event_id, version=version, recorded_at=recorded,
                idempotency_key=key,
            )), prev_hash
            rows.append((position, event_id, stream, version, event_type, schema_version, payload, stamp, actor, key,
                         previous, prev_hash))
        return rows

    def remembered(self, rows: list[tuple]) -> tuple:
        """The idempotency_keys row for this batch once it is written as `rows`."""
        return self.idempotency_key, self.stream, rows[0][0], len(rows), self.digest


@dataclass
class _Writer:
    """A thread's append connection: the pool's checkout, its driver connection and a cursor."""

    checkout: Any
    connection: Any
    cursor: Any
    pid: int
    served: bool = False  # has committed an append (a fresh connection that fails is not stale)


class EventStore:
    """Append and read events; verify the chain. Backend-neutral over an Engine."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = system_clock):
        """`clock` stamps appends on SQLite (never earlier than the head's time); Postgres uses its own clock.

        Tests give a store a skewed clock to play a writer whose machine's time is off.
        """
        self.engine = engine
        self.clock = clock
        self.dialect = engine.dialect.name
        mark = "%s" if self.dialect == "postgresql" else "?"
        self._sql = {key: statement.replace("?", mark) for key, statement in _APPEND_SQL.items()}
        if self.dialect == "postgresql":
            self._sql["state"] = _PG_STATE
        self._integrity_errors, self._database_errors = _driver_errors(self.dialect)
        self._writer = threading.local()
        self._inherited: list[_Writer] = []

    # -- writing -------------------------------------------------------------

    def append(
        self,
        stream: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
        actor: str,
    ) -> list[int]:
        """Append a batch atomically; return its positions.

        `expected_version` is the stream's version the writer last saw (0 for a
        new stream) or None to skip the check. A repeated `idempotency_key`
        with the same content returns the original positions and writes
        nothing; with different content it raises IdempotencyConflict.
        """
        if not events:
            raise StoreError("append needs at least one event")
        if not stream or len(stream) > 200:
            raise StoreError("stream name must be 1 to 200 characters")
        if not actor:
            raise StoreError("an actor is required")
        # Checked here so both backends refuse alike: SQLite would store what Postgres's
        # VARCHAR(200) columns refuse, and Postgres text cannot hold a NUL at all.
        if len(actor) > 200:
            raise StoreError("actor must be at most 200 characters")
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= 200:
            raise StoreError("idempotency key must be 1 to 200 characters")
        if "\x00" in stream or "\x00" in actor or (idempotency_key is not None and "\x00" in idempotency_key):
            raise StoreError("stream, actor and idempotency key must not contain NUL characters")
        for label, text in (("stream", stream), ("actor", actor), ("idempotency key", idempotency_key or "")):
            if not is_unicode_text(text):
                raise StoreError(f"{label} {text!r} holds a lone surrogate (U+D800 to U+DFFF), "
                                 "which is not valid Unicode")
        prepared = [_prepare(event) for event in events]
        digest = _batch_digest(stream, prepared) if idempotency_key is not None else None
        batch = _Batch(stream, prepared, expected_version, idempotency_key, digest, actor)
        try:
            return self._append_sqlite(batch) if self.dialect == "sqlite" else self._append_postgres(batch)
        except self._integrity_errors as exc:
            raise ConcurrencyError(f"append to {stream} conflicted with another writer: {exc}") from None
        except self._database_errors as exc:
            # A refused privilege, a lock timeout, a lost connection: the batch rolled back.
            self._drop_writer_connection(failed=True)
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(f"append to {stream} failed, nothing written: {first_line}") from None

    def _append_sqlite(self, batch: _Batch) -> list[int]:
        """BEGIN IMMEDIATE takes SQLite's one writer lock; the reads and the insert follow inside it."""
        writer = self._writer_connection()
        cursor, sql = writer.cursor, self._sql
        try:
            cursor.execute("BEGIN IMMEDIATE")
            earlier = None
            if batch.idempotency_key is not None:
                cursor.execute(sql["idempotency"], (batch.idempotency_key,))
                earlier = batch.earlier_positions(cursor.fetchone())
            if earlier is not None:
                writer.connection.rollback()
                return earlier
            cursor.execute(sql["state"], (batch.stream,))
            current, position, prev_hash, previous_time = cursor.fetchone() or (None, None, None, None)
            rows = batch.chained_rows(current, position, prev_hash, *self._sqlite_time(previous_time))
            if len(rows) == 1:
                cursor.execute(sql["insert"], rows[0])
            else:
                cursor.executemany(sql["insert"], rows)
            if batch.idempotency_key is not None:
                cursor.execute(sql["remember"], batch.remembered(rows))
            self._before_commit()
        except BaseException:
            writer.connection.rollback()
            raise
        writer.connection.commit()
        return [row[0] for row in rows]

    def _sqlite_time(self, previous: str | None) -> tuple[str, str]:
        """This append's time as chain text and as stored: the clock's, or the head's (`previous`) when later.

        SQLite stores times as text in SQLAlchemy's layout (the chain text's
        digits, a space for the T, no zone), so two such texts compare as
        their times do; a head in any other layout is parsed first.
        """
        recorded = timestamp_text(self.clock())
        stamp = _sqlite_text(recorded)
        if previous is None:
            return recorded, stamp
        if len(previous) != len(stamp) or previous[10] != " ":
            try:
                previous = _sqlite_text(timestamp_text(datetime.fromisoformat(previous)))
            except (TypeError, ValueError):
                raise StoreError(f"the log's last event has an unreadable time {previous!r}; run `registry verify`") from None
        if previous <= stamp:
            return recorded, stamp
        return f"{previous[:10]}T{previous[11:]}+00:00", previous

    def _append_postgres(self, batch: _Batch) -> list[int]:
        """Two round trips, each one pipeline: begin, lock and read; then the rows and the commit.

        The lock is its own statement ahead of the reads, so under READ
        COMMITTED their snapshot is taken once the lock is granted and sees
        every batch committed before it. A kept connection that the server
        dropped since its last append fails in the first round trip, before
        anything is written, and is replaced once.
        """
        writer = self._writer_connection()
        try:
            earlier, state = self._lock_and_read(writer, batch)
        except self._database_errors:
            if not (writer.served and writer.connection.broken):
                raise
            self._drop_writer_connection(failed=True)
            writer = self._writer_connection()
            earlier, state = self._lock_and_read(writer, batch)
        connection, cursor, sql = writer.connection, writer.cursor, self._sql
        try:
            if earlier is not None:
                connection.rollback()
                return earlier
            current, position, prev_hash, now = state
            rows = batch.chained_rows(current, position, prev_hash, timestamp_text(now), now)
            self._before_commit()
            with connection.pipeline():
                if len(rows) == 1:
                    cursor.execute(sql["insert"], rows[0])
                else:
                    cursor.execute(_PG_INSERT_ARRAYS, [list(column) for column in zip(*rows)])
                if batch.idempotency_key is not None:
                    cursor.execute(sql["remember"], batch.remembered(rows))
                cursor.execute("COMMIT")
        except self._database_errors as exc:
            if not connection.broken:
                connection.rollback()
                raise
            # The COMMIT may have reached the server before the connection went: never say "nothing written".
            self._drop_writer_connection(failed=True)
            raise StoreError(
                f"append to {batch.stream}: the connection was lost while committing, so the batch may or may not "
                f"be in the log; resend it with the same idempotency key ({str(exc).splitlines()[0]})"
            ) from None
        except BaseException:
            if not connection.broken:
                connection.rollback()
            raise
        writer.served = True
        return [row[0] for row in rows]

    def _lock_and_read(self, writer: _Writer, batch: _Batch) -> tuple[list[int] | None, tuple]:
        """Begin, take the append lock, and read where a keyed batch landed before and the log's state."""
        connection, cursor, sql = writer.connection, writer.cursor, self._sql
        lookup, state = connection.cursor(), connection.cursor()
        try:
            with connection.pipeline():
                cursor.execute("BEGIN")
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))
                if batch.idempotency_key is not None:
                    lookup.execute(sql["idempotency"], (batch.idempotency_key,))
                state.execute(sql["state"], (batch.stream,))
            found = lookup.fetchone() if batch.idempotency_key is not None else None
            return batch.earlier_positions(found), state.fetchone()
        except BaseException:
            if not connection.broken:
                connection.rollback()
            raise

    def _before_commit(self) -> None:
        """Runs inside an append's transaction, lock held and positions assigned, just before the commit.

        On SQLite the rows are inserted by then; on Postgres they travel with
        the COMMIT in the next round trip. It does nothing; the crash and
        concurrency proofs override it to hold an append open there, or to be
        killed there.
        """

    def _writer_connection(self) -> _Writer:
        """This thread's append connection, checked out of the engine's pool once and kept.

        A pool checkout, its liveness ping and its reset on return cost about
        as much as the rest of a one-event append (on Postgres, three of its
        round trips), so the connection and a cursor stay with the thread.
        """
        writer = getattr(self._writer, "current", None)
        if writer is not None and writer.pid != os.getpid():
            # A forked child's copy of its parent's connection shares the parent's socket: it is
            # never used or closed here, and stays referenced so the pool never cleans it up here.
            self._inherited.append(writer)
            writer = None
        if writer is None:
            checkout = self.engine.raw_connection()
            connection = checkout.driver_connection
            if self.dialect == "postgresql":
                # Appends send their own BEGIN inside their first pipeline; psycopg's implicit
                # one would cost a round trip. The engine restores this when the pool takes it back.
                connection.autocommit = True
            writer = self._writer.current = _Writer(checkout, connection, connection.cursor(), os.getpid())
        return writer

    def _drop_writer_connection(self, *, failed: bool = False) -> None:
        """Give this thread's append connection back to the pool, or discard it after a failure."""
        writer = getattr(self._writer, "current", None)
        self._writer.current = None
        if writer is None or writer.pid != os.getpid():
            return
        if failed:
            writer.checkout.invalidate()
        else:
            writer.checkout.close()

    def close(self) -> None:
        """Release this thread's append connection (the engine's pool keeps the rest)."""
        self._drop_writer_connection()

    # -- reading -------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A read connection; a driver error (Postgres refusing a NUL in a name, say) becomes a StoreError."""
        try:
            with self.engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            first_line = str(exc.orig).splitlines()[0] if str(exc.orig) else type(exc.orig).__name__
            raise StoreError(f"could not read the log: {first_line}") from None

    def _rows(self, statement) -> Iterator[StoredEvent]:
        with self._reading() as conn:
            for row in conn.execute(statement).mappings():
                yield self._stored(row)

    @staticmethod
    def _stored(row) -> StoredEvent:
        return StoredEvent(
            position=row["position"],
            event_id=row["event_id"],
            stream=row["stream"],
            version=row["version"],
            type=row["type"],
            schema_version=row["schema_version"],
            payload=strict_json_loads(row["payload"]),
            recorded_at=_utc(row["recorded_at"]),
            actor=row["actor"],
            idempotency_key=row["idempotency_key"],
            prev_hash=row["prev_hash"],
            hash=row["hash"],
        )

    def read_stream(self, stream: str, *, up_to_position: int | None = None) -> list[StoredEvent]:
        statement = select(EVENTS).where(EVENTS.c.stream == stream)
        if up_to_position is not None:
            statement = statement.where(EVENTS.c.position <= up_to_position)
        return list(self._rows(statement.order_by(EVENTS.c.version)))

    def iter_stream(self, stream: str, *, up_to_position: int | None = None, page: int = 1000) -> Iterator[StoredEvent]:
        """A stream's events in version order, read in pages along the (stream, version) index.

        Memory stays flat however long the stream is. Give `up_to_position`
        for one consistent answer: each page is its own read, and the stream
        may grow between them.
        """
        after = 0
        while True:
            statement = select(EVENTS).where(EVENTS.c.stream == stream, EVENTS.c.version > after)
            if up_to_position is not None:
                statement = statement.where(EVENTS.c.position <= up_to_position)
            batch = list(self._rows(statement.order_by(EVENTS.c.version).limit(page)))
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].version

    def read_all(
        self, *, after_position: int = 0, up_to_position: int | None = None, limit: int | None = None
    ) -> list[StoredEvent]:
        statement = select(EVENTS).where(EVENTS.c.position > after_position)
        if up_to_position is not None:
            statement = statement.where(EVENTS.c.position <= up_to_position)
        statement = statement.order_by(EVENTS.c.position)
        if limit is not None:
            statement = statement.limit(limit)
        return list(self._rows(statement))

    def iter_all(self, *, after_position: int = 0, up_to_position: int | None = None, page: int = 5000) -> Iterator[StoredEvent]:
        """Every event in position order, read in pages so memory stays flat."""
        cursor = after_position
        while True:
            batch = self.read_all(after_position=cursor, up_to_position=up_to_position, limit=page)
            yield from batch
            if len(batch) < page:
                return
            cursor = batch[-1].position

    def get(self, event_id: str) -> StoredEvent | None:
        """The event with this id, found through the log position its id carries."""
        position = position_of_event_id(event_id)
        if position is None:
            return None
        found = list(self._rows(select(EVENTS).where(EVENTS.c.position == position)))
        return found[0] if found and found[0].event_id == event_id else None

    def stream_version(self, stream: str) -> int:
        with self._reading() as conn:
            found = conn.execute(
                select(EVENTS.c.version).where(EVENTS.c.stream == stream).order_by(EVENTS.c.version.desc()).limit(1)
            ).scalar()
        return found or 0

    def head_position(self) -> int:
        with self._reading() as conn:
            found = conn.execute(select(EVENTS.c.position).order_by(EVENTS.c.position.desc()).limit(1)).scalar()
        return found or 0

    def position_at(self, moment: datetime) -> int:
        """The end of the log's prefix recorded at or before `moment`: the position before the first later event.

        Appends stamp times that never go backwards, so this is the last
        position recorded at or before `moment` (0 if none). On a log whose
        times do go backwards somewhere (written before times were ordered, or
        tampered with; `verify` names the place) it still never takes in an
        event stamped after `moment`.
        """
        with self._reading() as conn:
            later = conn.execute(
                select(EVENTS.c.position)
                .where(EVENTS.c.recorded_at > _utc(moment))
                .order_by(EVENTS.c.position)
                .limit(1)
            ).scalar()
        return self.head_position() if later is None else later - 1

    def streams(self, prefix: str) -> list[str]:
        with self._reading() as conn:
            found = conn.execute(
                select(EVENTS.c.stream).where(EVENTS.c.stream.startswith(prefix, autoescape=True)).distinct()
            ).scalars()
            return sorted(found)

    def verify(self, expect_head: tuple[int, str] | None = None) -> ChainReport:
        """Walk the whole log in position order and check every link and that times never go backwards.

        `expect_head` is a (position, hash) known from before (a lock file, a
        noted `verify`): the log must still hold it, which is how a cut-off
        tail is seen, since the chain alone cannot see it.
        """

        def rows():
            with self.engine.connect() as conn:
                result = conn.execution_options(yield_per=5000).execute(select(EVENTS).order_by(EVENTS.c.position))
                for row in result.mappings():
                    yield row

        try:
            return walk_chain(rows(), expect_head=expect_head)
        except DBAPIError as exc:
            raise StoreError(f"could not read the log: {exc.orig}") from None
