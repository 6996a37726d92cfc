"""The event store: the one door to the events table.

Appends validate and encode each event (typed payload, canonical JSON, the
event's part of the hash chain) before the log's writer lock is taken, and
hand the batch to the recorder of the database's backend
(registry/events/recorder.py), which places it at the head, links the chain
and stamps the time while holding the lock (the `eventsourcing` library's
split between an event store and its recorders). Every read of the log,
including the projections' replay (`log_pages`), goes through the store too.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from sqlalchemy import Connection, Engine

from .canonical import CanonicalError, canonical_json, is_unicode_text, sha256_hex
from .chain import ChainReport, walk_chain
from .errors import PayloadError, StoreError
from .ids import position_of_event_id, positional_event_id
from .plain_payloads import WRITTEN_FORMS
from .postgres import APPEND_LOCK_KEY
from .recorder import Appended, AppendBatch, LogRow, Recorder, StoredEvent, payload_models
from .schema import EVENTS

if TYPE_CHECKING:
    from .types import EventPayload

# Names other modules import from here: the store is where callers look for them.
__all__ = [
    "APPEND_LOCK_KEY", "EVENTS", "Append", "Appended", "EventStore", "LogRow", "NewEvent", "StoredEvent", "check_names",
    "position_of_event_id",
    "positional_event_id", "system_clock",
]


@dataclass(frozen=True)
class NewEvent:
    """An event to append: a type name and its payload (typed or a plain dict)."""

    type: str
    payload: EventPayload | dict[str, Any]


@dataclass(frozen=True)
class Append:
    """One batch of a group append (`EventStore.append_group`): what `EventStore.append` takes."""

    stream: str
    events: Sequence[NewEvent]
    actor: str
    expected_version: int | None = None
    idempotency_key: str | None = None


def system_clock() -> datetime:
    """The machine's time, in UTC: what stamps SQLite appends unless a store is given another clock."""
    return datetime.now(timezone.utc)


def _prepare(event: NewEvent) -> tuple[str, int, str]:
    """Validate one new event by its model; return its type, schema version and canonical payload."""
    models = payload_models()
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


def _prepare_batch(events: Sequence[NewEvent]) -> list[tuple[str, int, str]]:
    """Each event's type, schema version and canonical payload, validated.

    A payload given as a dict, of a type whose model has a compiled plain
    form (plain_payloads.py, written down in plain_forms.json so that no model
    is imported for it), is checked and encoded by that form; whatever it
    does not accept, and every payload given as a model (validated when it
    was built), goes through `_prepare` and the model.
    """
    prepared = []
    for event in events:
        payload = event.payload
        plain = WRITTEN_FORMS[event.type] if type(payload) is dict else None
        text = None if plain is None else plain.encode(payload)
        prepared.append(_prepare(event) if text is None else (event.type, plain.schema_version, text))
    return prepared


def _batch_digest(stream: str, prepared: Sequence[tuple[str, int, str]]) -> str:
    return sha256_hex(canonical_json({"stream": stream, "events": [list(p) for p in prepared]}))


def check_names(stream: str, actor: str, idempotency_key: str | None) -> None:
    """Refuse a stream, actor or key either backend would refuse, so both refuse alike, before any lock."""
    if not stream or len(stream) > 200:
        raise StoreError("stream name must be 1 to 200 characters")
    if not actor:
        raise StoreError("an actor is required")
    # SQLite would store what Postgres's VARCHAR(200) columns refuse, and Postgres text cannot hold a NUL at all.
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



def recorder_for(engine: Engine, *, clock: Callable[[], datetime]) -> Recorder:
    """The recorder for the engine's backend; each backend's module is imported only when used.

    It lives here, not beside the recorders' base class, so that base class never imports its own subclasses.
    """
    if engine.dialect.name == "postgresql":
        from .postgres import PostgresRecorder

        return PostgresRecorder(engine, clock=clock)
    if engine.dialect.name == "sqlite":
        from .sqlite import SqliteRecorder

        return SqliteRecorder(engine, clock=clock)
    raise StoreError(f"no recorder for the {engine.dialect.name} backend")

class EventStore:
    """Append and read events; verify the chain. The same on every backend; the recorder holds the SQL."""

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = system_clock):
        """`clock` stamps appends on SQLite (never earlier than the head's time); Postgres uses its own clock.

        Tests give a store a skewed clock to play a writer whose machine's time is off.
        """
        self.engine = engine
        self.clock = clock
        self.dialect = engine.dialect.name
        self.recorder = recorder_for(engine, clock=clock)

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
        return self.append_batch(Append(stream, events, actor, expected_version, idempotency_key)).positions

    def append_batch(self, append: Append) -> Appended:
        """Append one batch as `append` does; where it is in the log and whether this call wrote it (`new`
        False: its idempotency key answered it with the same batch recorded before), from what the recorder did
        under the writer lock, never from a read of the log's head before the append (which a concurrent writer
        makes wrong). A refusal raises (StoreError)."""
        placed, = self.append_group([append])
        if isinstance(placed, StoreError):
            raise placed
        return placed

    def append_group(self, appends: Sequence[Append]) -> list[Appended | StoreError]:
        """Append several batches, in order, in one transaction under one writer lock; each one's positions
        (`Appended`: new, or where its key landed before) or the StoreError that refused it (nothing of it
        written).

        Each batch is what `append` takes and is decided as `append` would
        decide it after the batches before it: a key given twice lands once,
        an expected version counts the group's earlier batches of its stream,
        and a batch refused (its names, its payloads, its version, its key)
        leaves the others alone; but when it named an expected version, its
        stream's later batches were written against it and are refused with it
        (ConcurrencyError) unless their key answers them. A failure of the
        database itself raises, for all of them.
        """
        outcomes: list[Appended | StoreError | None] = []
        batches: list[AppendBatch] = []
        for append in appends:
            try:
                if not append.events:
                    raise StoreError("append needs at least one event")
                check_names(append.stream, append.actor, append.idempotency_key)
                prepared = _prepare_batch(append.events)
            except StoreError as exc:
                outcomes.append(exc)
                continue
            digest = _batch_digest(append.stream, prepared) if append.idempotency_key is not None else None
            batches.append(AppendBatch(append.stream, prepared, append.expected_version, append.idempotency_key,
                                       digest, append.actor))
            outcomes.append(None)
        placed = iter(self.recorder.insert(batches, self._before_commit) if batches else ())
        return [next(placed) if outcome is None else outcome for outcome in outcomes]

    def _before_commit(self) -> None:
        """Runs inside an append's transaction, lock held and positions assigned, just before the commit.

        On SQLite the rows are inserted by then; on Postgres they travel with
        the COMMIT in the next round trip. It does nothing; the crash and
        concurrency proofs override it to hold an append open there, or to be
        killed there.
        """

    def close(self) -> None:
        """Give every thread's append connection back to the engine's pool (the registry then disposes of it)."""
        self.recorder.close()

    # -- reading -------------------------------------------------------------

    def read_stream(self, stream: str, *, up_to_position: int | None = None) -> list[StoredEvent]:
        return self.recorder.select_stream(stream, up_to_position=up_to_position)

    def iter_stream(self, stream: str, *, up_to_position: int | None = None, page: int = 1000) -> Iterator[StoredEvent]:
        """A stream's events in version order, read in pages along the (stream, version) index.

        Memory stays flat however long the stream is. Give `up_to_position`
        for one consistent answer: each page is its own read, and the stream
        may grow between them.
        """
        after = 0
        while True:
            batch = self.recorder.select_stream(stream, up_to_position=up_to_position, after_version=after, limit=page)
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].version

    def read_all(
        self, *, after_position: int = 0, up_to_position: int | None = None, limit: int | None = None
    ) -> list[StoredEvent]:
        return self.recorder.select_events(after_position=after_position, up_to_position=up_to_position, limit=limit)

    def iter_all(self, *, after_position: int = 0, up_to_position: int | None = None, page: int = 5000) -> Iterator[StoredEvent]:
        """Every event in position order, read in pages so memory stays flat."""
        cursor = after_position
        while True:
            batch = self.read_all(after_position=cursor, up_to_position=up_to_position, limit=page)
            yield from batch
            if len(batch) < page:
                return
            cursor = batch[-1].position

    def log_pages(self, *, after: int, up_to: int, stream: str | None = None, page: int) -> Iterator[list[LogRow]]:
        """The rows a replay folds, after < position <= up_to (of one stream if given), a page at a time.

        Each row is (position, event_id, stream, type, schema_version, payload
        text, recorded_at as the driver returns it): the payload is left as
        text, for the reader to decode only what it needs
        (registry/projections/log.py).
        """
        return self.recorder.log_pages(after=after, up_to=up_to, stream=stream, page=page)

    def log_rows_at(self, positions: Iterable[int], *, page: int, on: Connection | None = None) -> Iterator[list[LogRow]]:
        """The rows at `positions` that the log holds (each once), in position order, as `log_pages` gives them,
        read by primary key `page` positions at a time: what the read models reference by position. `on`: a
        caller's read transaction to read them in (recorder.py)."""
        return self.recorder.log_rows_at(positions, page=page, on=on)

    def get(self, event_id: str) -> StoredEvent | None:
        """The event with this id, found through the log position its id carries."""
        position = position_of_event_id(event_id)
        if position is None:
            return None
        found = self.recorder.select_event(position)
        return found if found is not None and found.event_id == event_id else None

    def stream_version(self, stream: str) -> int:
        return self.recorder.max_version(stream)

    def head_position(self) -> int:
        return self.recorder.max_position()

    def position_at(self, moment: datetime) -> int:
        """The end of the log's prefix recorded at or before `moment`: the position before the first later event.

        Appends stamp times that never go backwards, so this is the last
        position recorded at or before `moment` (0 if none). On a log whose
        times do go backwards somewhere (written before times were ordered, or
        tampered with; `verify` names the place) it still never takes in an
        event stamped after `moment`.
        """
        later = self.recorder.first_position_after(moment)
        return self.head_position() if later is None else later - 1

    def streams(self, prefix: str) -> list[str]:
        return self.recorder.select_streams(prefix)

    def verify(self, expect_head: tuple[int, str] | None = None) -> ChainReport:
        """Walk the whole log in position order and check every link and that times never go backwards.

        `expect_head` is a (position, hash) known from before (a lock file, a
        noted `verify`): the log must still hold it, which is how a cut-off
        tail is seen, since the chain alone cannot see it.
        """
        return walk_chain(self.recorder.chain_rows(), expect_head=expect_head)
