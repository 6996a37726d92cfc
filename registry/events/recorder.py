"""The recorder: the one interface to the events table, implemented once per backend.

The shape is the `eventsourcing` library's: an event store validates and
encodes events and hands them to a recorder, which alone holds SQL for the
table (registry/events/sqlite.py, registry/events/postgres.py). `Recorder`
declares what every backend does and implements what they share: the
writer connection each thread keeps, and the reads written in SQLAlchemy
Core, which compile to either backend. A backend supplies its append (the
writer lock, the head read, the insert) and the page read that replays the
log, each in its own SQL at driver level, and says which driver errors mean
a conflict and which a failed database call.

`AppendBatch` is what a recorder appends: validated, encoded events, and
`ChainedBatch` what they become once the writer lock has placed them at the
log's head (ids, versions, hashes), column by column.
"""
from __future__ import annotations

import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import Connection, Engine, bindparam, event, select
from sqlalchemy.exc import DBAPIError

from registry.formats.errors import first_line

from .canonical import strict_json_loads
from .database import statement_reads
from .chain import GENESIS_HASH, UnplacedBatch, link_batch, unplaced_bodies
from .errors import ConcurrencyError, IdempotencyConflict, StoreError
from .ids import positional_event_ids
from .schema import EVENTS

if TYPE_CHECKING:
    from .types import EventPayload

# One page of the log as the projections read it: position, event_id, stream, type, schema_version,
# payload text, recorded_at (as the driver returns it).
LogRow = tuple[int, str, str, str, int, str, Any]


@cache
def payload_models():
    """The payload models' module, imported on first use: pydantic only where payloads are validated
    (see catalogue.py). Cached, because a function-level import statement costs about 2 us an event."""
    from . import types

    return types


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)


# A stream's version, built once (a server asks it of a token's stream on every request; app/tokens.py).
_MAX_VERSION = (select(EVENTS.c.version).where(EVENTS.c.stream == bindparam("stream"))
                .order_by(EVENTS.c.version.desc()).limit(1))


@dataclass(frozen=True)
class StoredEvent:
    """One row of the log, its payload decoded."""

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
        return payload_models().read_payload(self.type, self.schema_version, self.payload)

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "event_id": self.event_id,
            "stream": self.stream,
            "version": self.version,
            "type": self.type,
            "schema_version": self.schema_version,
            "payload": self.payload,
            "recorded_at": utc(self.recorded_at).isoformat(),
            "actor": self.actor,
            "idempotency_key": self.idempotency_key,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


@dataclass(slots=True)
class AppendBatch:
    """One append's validated events, and what they become at the log's head (`chained`).

    `prepared` holds each event's (type, schema version, canonical payload).
    Not frozen: a frozen dataclass's __init__ sets each field through
    object.__setattr__, four times slower than this one's (0.7 against 0.2 us).
    """

    stream: str
    prepared: list[tuple[str, int, str]]
    expected_version: int | None
    idempotency_key: str | None
    digest: str | None
    actor: str
    unplaced: UnplacedBatch = field(init=False)

    def __post_init__(self) -> None:
        # Each event's hashed body, but for what the lock decides: quoted before the lock is taken.
        self.unplaced = unplaced_bodies(self.actor, self.stream, self.prepared)

    def earlier_positions(self, found: tuple | None) -> list[int] | None:
        """Where this keyed batch landed before, if it did; other content under its key is refused."""
        if found is None:
            return None
        digest, first_position, count = found
        if digest != self.digest:
            raise IdempotencyConflict(f"idempotency key {self.idempotency_key!r} was already used for different content")
        return list(range(first_position, first_position + count))

    def chained(self, current: int | None, position: int | None, prev_hash: str | None, recorded: str,
                stamp: Any) -> ChainedBatch:
        """The batch placed after the stream's `current` version and the log's head (position, hash), chained.

        `recorded` is the append's time as the chain text, `stamp` the same time as the row stores it.
        """
        current, position, prev_hash = current or 0, position or 0, prev_hash or GENESIS_HASH
        if self.expected_version is not None and self.expected_version != current:
            raise ConcurrencyError(f"stream {self.stream} is at version {current}, not the expected {self.expected_version}")
        count = len(self.prepared)
        event_ids = positional_event_ids(position + 1, count)
        hashes = link_batch(prev_hash, self.unplaced, first_position=position + 1, first_version=current + 1,
                            event_ids=event_ids, recorded_at=recorded, idempotency_key=self.idempotency_key)
        event_types, schema_versions, payloads = zip(*self.prepared)  # unquoted, as the rows store them
        return ChainedBatch(range(position + 1, position + 1 + count), event_ids,
                            range(current + 1, current + 1 + count), event_types, schema_versions, payloads,
                            [prev_hash] + hashes[:-1], hashes, self.stream, stamp, self.actor, self.idempotency_key)

    def remembered(self, chained: ChainedBatch) -> tuple:
        """The idempotency_keys row for this batch once it is written as `chained`."""
        return self.idempotency_key, self.stream, chained.positions[0], len(chained.positions), self.digest


@dataclass(slots=True)
class ChainedBatch:
    """A batch placed at the log's head and chained: the columns that vary by event, and what the batch shares.

    The rows are these columns zipped, in C; the first row alone carries the
    idempotency key, and each row's prev_hash is the hash of the row before.
    A backend inserts whichever form costs it least: what each row alone
    holds, with the rest bound once (SQLite), or every column as an array
    (Postgres).
    """

    positions: range
    event_ids: list[str]
    versions: range
    types: tuple[str, ...]
    schema_versions: tuple[int, ...]
    payloads: tuple[str, ...]
    prev_hashes: list[str]
    hashes: list[str]
    stream: str
    recorded_at: Any
    actor: str
    idempotency_key: str | None

    def columns(self) -> list[list]:
        """The twelve columns in the table's order."""
        count = len(self.positions)
        return [list(self.positions), self.event_ids, [self.stream] * count, list(self.versions), list(self.types),
                list(self.schema_versions), list(self.payloads), [self.recorded_at] * count, [self.actor] * count,
                [self.idempotency_key] + [None] * (count - 1), self.prev_hashes, self.hashes]

    def rows(self) -> list[tuple]:
        """The rows in the table's column order."""
        return list(zip(*self.columns()))


class Appended(NamedTuple):
    """Where one batch of a group append is in the log: its positions, and whether this append wrote them (False:
    its key answered it with where the same batch landed before)."""

    positions: list[int]
    new: bool


# What one batch of a group append came to.
Placed = Appended | StoreError


def place_group(batches: list[AppendBatch], earlier: dict[str, tuple], versions: dict[str, int | None],
                head: tuple[int | None, str | None], recorded: str,
                stamp: Any) -> tuple[list[Placed], list[tuple[AppendBatch, ChainedBatch]]]:
    """Place `batches` in order after the log's `head` (position, hash), under the writer lock.

    `earlier` maps each key found in the log to its (digest, first position,
    count) and `versions` each stream to its version, as read under the lock;
    both are updated as batches are placed, so a key given twice in one group
    lands once (the second copy answers the first's positions) and each
    batch's expected version is checked against the batches before it. A
    batch refused (ConcurrencyError, IdempotencyConflict) is left out; when it
    named an expected version, so is every later batch of its stream that its
    key does not answer (ConcurrencyError): they were checked against it. Returns each batch's outcome, and the batches to
    insert with their chained form, in order.
    """
    position, prev_hash = head
    outcomes: list[Placed] = []
    placed: list[tuple[AppendBatch, ChainedBatch]] = []
    refused: set[str] = set()
    for batch in batches:
        try:
            landed = batch.earlier_positions(earlier.get(batch.idempotency_key)) if batch.idempotency_key else None
            if landed is not None:
                outcomes.append(Appended(landed, False))
                continue
            if batch.stream in refused:
                raise ConcurrencyError(f"stream {batch.stream}: an earlier batch of this append was refused")
            chained = batch.chained(versions.get(batch.stream), position, prev_hash, recorded, stamp)
        except (ConcurrencyError, IdempotencyConflict) as exc:
            if batch.expected_version is not None:
                refused.add(batch.stream)
            outcomes.append(exc)
            continue
        position, prev_hash = chained.positions[-1], chained.hashes[-1]
        versions[batch.stream] = chained.versions[-1]
        if batch.idempotency_key is not None:
            earlier[batch.idempotency_key] = (batch.digest, chained.positions[0], len(chained.positions))
        outcomes.append(Appended(list(chained.positions), True))
        placed.append((batch, chained))
    return outcomes, placed


@dataclass
class Writer:
    """A thread's append connection: the pool's checkout, its driver connection and a cursor."""

    checkout: Any
    connection: Any
    cursor: Any
    pid: int
    thread: threading.Thread  # the thread it serves: once that has ended, the connection goes back (_ended_given_back)
    served: bool = False  # has committed an append (a fresh connection that fails is not stale)
    closed: bool = False  # discarded when its engine was disposed: its thread checks out another if it appends


BeforeCommit = Callable[[], None]

# Every thread's append connection, by engine: a server's request threads and its pair writer keep one each, for
# as long as they live, so disposing of the engine (closing its registry) closes them too, rather than leaving
# them for the garbage collector to close at some later moment (on SQLite that moment checkpoints the WAL).
_WRITERS: weakref.WeakKeyDictionary[Engine, dict[int, Writer]] = weakref.WeakKeyDictionary()
_WRITERS_GUARD = threading.Lock()


def _kept(engine: Engine, writer: Writer) -> None:
    with _WRITERS_GUARD:
        kept = _WRITERS.get(engine)
        if kept is None:
            kept = _WRITERS[engine] = {}
            event.listen(engine, "engine_disposed", _writers_disposed)
        kept[id(writer)] = writer


def _ended_given_back(engine: Engine) -> None:
    """Give back to the pool the append connections of this process's threads that have ended. A thread keeps
    its connection while it lives, but a server's request threads come and go (anyio ends a worker thread idle
    for 10 s and starts another when requests come): kept for ever, each ended thread's connection stays checked
    out until the pool has none left and every request waits for one."""
    with _WRITERS_GUARD:
        kept = _WRITERS.get(engine, {})
        ended = [writer for writer in kept.values()
                 if writer.pid == os.getpid() and not writer.closed and not writer.thread.is_alive()]
        for writer in ended:
            del kept[id(writer)]
            writer.closed = True
    for writer in ended:
        writer.checkout.close()


def _forgotten(engine: Engine, writer: Writer) -> None:
    with _WRITERS_GUARD:
        _WRITERS.get(engine, {}).pop(id(writer), None)


def _writers_disposed(engine: Engine) -> None:
    """The engine was disposed of: every append connection this process's threads keep on it is closed (a
    forked child's copy of its parent's is never touched); a thread that appends afterwards checks out a new one."""
    with _WRITERS_GUARD:
        writers = list(_WRITERS.pop(engine, {}).values())
    for writer in writers:
        if writer.pid == os.getpid() and not writer.closed:
            writer.closed = True
            writer.checkout.invalidate()


class Recorder(ABC):
    """The events table of one database: appends under the writer lock, reads, the chain's rows."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime]):
        """`clock` is the writer's clock; a backend whose server stamps appends itself ignores it."""
        self.engine = engine
        self.clock = clock
        self._writer = threading.local()
        self._inherited: list[Writer] = []

    # -- what each backend supplies ------------------------------------------

    @property
    @abstractmethod
    def integrity_errors(self) -> tuple[type[BaseException], ...]:
        """The driver's errors for a row that violates a unique index (another writer got there first)."""

    @property
    @abstractmethod
    def database_errors(self) -> tuple[type[BaseException], ...]:
        """The base of all the driver's errors."""

    @abstractmethod
    def _insert(self, batches: list[AppendBatch], before_commit: BeforeCommit) -> list[Placed]:
        """Append `batches` in one transaction under the log's writer lock; each one's positions or refusal.

        Holding the lock: read where each keyed batch landed before, each
        stream's version and the head; stamp the time (never earlier than the
        head's); place the batches in order (`place_group`); insert the rows
        of those placed and remember their keys; call `before_commit`;
        commit (or roll back when none was placed).
        """

    @abstractmethod
    def _log_page_sql(self, by_stream: bool) -> str:
        """A driver-level SELECT of LogRow columns with position > ? and position <= ? (and stream = ?),
        in position order, LIMIT ?."""

    @abstractmethod
    def _log_rows_at(self, cursor: Any, positions: list[int]) -> list[LogRow]:
        """The LogRows at `positions` (ascending, distinct) that the log holds, in position order: one driver-level
        SELECT by primary key, whatever the number of positions."""

    def _prepare_writer(self, connection: Any) -> None:
        """Set up a driver connection this thread is about to keep for appends (nothing by default)."""

    def _prepare_reader(self, connection: Any) -> None:
        """Set up a driver connection for reads of a page a statement (nothing by default)."""

    # -- writing -------------------------------------------------------------

    def insert(self, batches: list[AppendBatch], before_commit: BeforeCommit) -> list[Placed]:
        """Append `batches` in one transaction (`_insert`); a unique-index violation is a ConcurrencyError, any
        other driver error a StoreError, for all of them (nothing written)."""
        streams = ", ".join(dict.fromkeys(batch.stream for batch in batches))
        try:
            return self._insert(batches, before_commit)
        except self.integrity_errors as exc:
            raise ConcurrencyError(f"append to {streams} conflicted with another writer: {exc}") from None
        except self.database_errors as exc:
            # A refused privilege, a lock timeout, a lost connection: the batch rolled back.
            self.drop_writer(failed=True)
            raise StoreError(f"append to {streams} failed, nothing written: {first_line(exc)}") from None

    def writer(self) -> Writer:
        """This thread's append connection, checked out of the engine's pool once and kept.

        A pool checkout, its liveness ping and its reset on return cost about
        as much as the rest of a one-event append (on Postgres, three of its
        round trips), so the connection and a cursor stay with the thread.
        """
        writer = getattr(self._writer, "current", None)
        if writer is not None and writer.closed:
            writer = None
        if writer is not None and writer.pid != os.getpid():
            # A forked child's copy of its parent's connection shares the parent's socket: it is
            # never used or closed here, and stays referenced so the pool never cleans it up here.
            self._inherited.append(writer)
            writer = None
        if writer is None:
            _ended_given_back(self.engine)
            checkout = self.engine.raw_connection()
            connection = checkout.driver_connection
            self._prepare_writer(connection)
            writer = self._writer.current = Writer(checkout, connection, connection.cursor(), os.getpid(),
                                                   threading.current_thread())
            _kept(self.engine, writer)
        return writer

    def drop_writer(self, *, failed: bool = False) -> None:
        """Give this thread's append connection back to the pool, or discard it after a failure."""
        writer = getattr(self._writer, "current", None)
        self._writer.current = None
        if writer is None or writer.pid != os.getpid() or writer.closed:
            return
        _forgotten(self.engine, writer)
        if failed:
            writer.checkout.invalidate()
        else:
            writer.checkout.close()

    # -- reading -------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A read connection, each statement its own read (statement_reads); a driver error (Postgres refusing a
        NUL in a name, say) becomes a StoreError."""
        try:
            with statement_reads(self.engine) as conn:
                yield conn
        except DBAPIError as exc:
            raise StoreError(f"could not read the log: {first_line(exc.orig)}") from None

    def _select(self, statement) -> list[StoredEvent]:
        with self._reading() as conn:
            return [_stored(row) for row in conn.execute(statement).mappings()]

    def select_stream(self, stream: str, *, up_to_position: int | None = None, after_version: int = 0,
                      limit: int | None = None) -> list[StoredEvent]:
        """A stream's events in version order (its unique index's order), up to a position if given;
        a page of them with `after_version` and `limit`."""
        statement = select(EVENTS).where(EVENTS.c.stream == stream, EVENTS.c.version > after_version)
        return self._select_up_to(statement, up_to_position, EVENTS.c.version, limit)

    def select_events(self, *, after_position: int = 0, up_to_position: int | None = None,
                      limit: int | None = None) -> list[StoredEvent]:
        """Events after `after_position` up to `up_to_position`, in position order."""
        statement = select(EVENTS).where(EVENTS.c.position > after_position)
        return self._select_up_to(statement, up_to_position, EVENTS.c.position, limit)

    def _select_up_to(self, statement, up_to_position: int | None, order, limit: int | None) -> list[StoredEvent]:
        """`statement`'s events up to a position if given, in `order`, at most `limit` of them."""
        if up_to_position is not None:
            statement = statement.where(EVENTS.c.position <= up_to_position)
        statement = statement.order_by(order)
        return self._select(statement if limit is None else statement.limit(limit))

    def select_event(self, position: int) -> StoredEvent | None:
        found = self._select(select(EVENTS).where(EVENTS.c.position == position))
        return found[0] if found else None

    def max_version(self, stream: str) -> int:
        with self._reading() as conn:
            found = conn.execute(_MAX_VERSION, {"stream": stream}).scalar()
        return found or 0

    def max_position(self) -> int:
        with self._reading() as conn:
            found = conn.execute(select(EVENTS.c.position).order_by(EVENTS.c.position.desc()).limit(1)).scalar()
        return found or 0

    def first_position_after(self, moment: datetime) -> int | None:
        """The first position recorded later than `moment`, or None."""
        with self._reading() as conn:
            return conn.execute(
                select(EVENTS.c.position).where(EVENTS.c.recorded_at > utc(moment)).order_by(EVENTS.c.position).limit(1)
            ).scalar()

    def select_streams(self, prefix: str) -> list[str]:
        with self._reading() as conn:
            found = conn.execute(
                select(EVENTS.c.stream).where(EVENTS.c.stream.startswith(prefix, autoescape=True)).distinct()
            ).scalars()
            return sorted(found)

    def chain_rows(self) -> Iterator[Any]:
        """Every row of the log in position order, as mappings, streamed from one read."""
        try:
            with self.engine.connect() as conn:
                result = conn.execution_options(yield_per=5000).execute(select(EVENTS).order_by(EVENTS.c.position))
                yield from result.mappings()
        except DBAPIError as exc:
            raise StoreError(f"could not read the log: {exc.orig}") from None

    def log_pages(self, *, after: int, up_to: int, stream: str | None, page: int) -> Iterator[list[LogRow]]:
        """The log's rows with after < position <= up_to (of one stream if given), a page at a time.

        At driver level on one connection; each page is its own short read,
        and the fixed upper bound makes the pages one consistent slice, since
        positions commit in order.
        """
        sql = self._log_page_sql(stream is not None)
        raw = self.engine.raw_connection()
        self._prepare_reader(raw.driver_connection)
        try:
            cursor = raw.cursor()
            at = after
            while at < up_to:
                params = (at, up_to, stream, page) if stream is not None else (at, up_to, page)
                try:
                    cursor.execute(sql, params)
                    rows = cursor.fetchall()
                except self.database_errors as exc:  # e.g. Postgres refusing a NUL in a stream name
                    raise StoreError(f"could not read the log: {first_line(exc)}") from None
                raw.rollback()  # end the read; the next page starts a fresh one
                if rows:
                    yield rows
                if len(rows) < page:
                    return
                at = rows[-1][0]
        finally:
            raw.close()

    def log_rows_at(self, positions: Iterable[int], *, page: int, on: Connection | None = None) -> Iterator[list[LogRow]]:
        """The log's rows at `positions` (those it holds; each once), in position order, `page` positions a read.

        What a read model references by position (an evidence item) is read
        here, by primary key, on one connection; each page is its own short read.
        `on` is a caller's read transaction (a unit of work's snapshot) to read
        every page in instead: the rows the caller's read models reference, in
        the same snapshot, with no second connection opened beside it.
        """
        ordered = sorted(set(positions))
        if on is not None:
            cursor = on.connection.driver_connection.cursor()
            try:
                yield from self._rows_at_pages(cursor, ordered, page, end_read=lambda: None)
            finally:
                cursor.close()
            return
        raw = self.engine.raw_connection()
        self._prepare_reader(raw.driver_connection)
        try:
            yield from self._rows_at_pages(raw.cursor(), ordered, page, end_read=raw.rollback)
        finally:
            raw.close()

    def _rows_at_pages(self, cursor: Any, ordered: list[int], page: int,
                       end_read: Callable[[], None]) -> Iterator[list[LogRow]]:
        for start in range(0, len(ordered), page):
            try:
                rows = self._log_rows_at(cursor, ordered[start:start + page])
            except self.database_errors as exc:
                raise StoreError(f"could not read the log: {first_line(exc)}") from None
            end_read()  # a page of its own connection's reads ends there; the next starts a fresh one
            if rows:
                yield rows

    def close(self) -> None:
        """Release this thread's append connection (the engine's pool keeps the rest; disposing of the engine
        closes every other thread's: `_writers_disposed`)."""
        self.drop_writer()


def _stored(row) -> StoredEvent:
    return StoredEvent(
        position=row["position"],
        event_id=row["event_id"],
        stream=row["stream"],
        version=row["version"],
        type=row["type"],
        schema_version=row["schema_version"],
        payload=strict_json_loads(row["payload"]),
        recorded_at=utc(row["recorded_at"]),
        actor=row["actor"],
        idempotency_key=row["idempotency_key"],
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )
