"""Keeping the read models current: catch-up from the checkpoint, reset, and the rows they load and write.

Strategy (docs/projections.md): a read first folds any events recorded
after the checkpoint into the rows they touch and commits those rows together
with the new checkpoint, so every answer reflects the whole log at the moment
it was asked, with no background process to run or to fall behind.

Concurrency is optimistic: events are read and folded outside any write
transaction; the write transaction then moves the checkpoint only if it
still holds the position the fold started from (`UPDATE ... WHERE position =
old`). A catch-up that lost the race rolls back everything it would have
written and starts again from the new checkpoint, so two catch-ups can never
both apply the same events. On SQLite the write transaction begins with
`BEGIN IMMEDIATE` (the writer lock up front); on Postgres the UPDATE takes
the checkpoint row's lock and re-checks its WHERE clause after any concurrent
writer commits. Threads of one process take turns instead of racing
(`_folding`): one that waited mostly finds its head folded already.

The questions (one module each: subject.py, shipping.py, attempts.py,
whole_registry.py) read through `ReadModels.position_to_fold`, which catches
up or says which log prefix to fold instead.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import Counter
from contextlib import contextmanager
from functools import cache
from typing import Iterator

from sqlalchemy import (Connection, Engine, Integer, bindparam, column, delete, func, insert, select, text, tuple_,
                        update)
from sqlalchemy.exc import DBAPIError, IntegrityError

from registry.events.database import statement_reads
from registry.events.errors import StoreError
from registry.formats.errors import first_line
from registry.events.schema import EVENTS
from registry.events.store import EventStore

from registry.formats.names import ARTIFACT_PREFIX, FRAMESET_PREFIX, WORKLOAD_PREFIX

from .asof import fold_log
from .collector import collector_paused
from .fold import BENCH_PREFIX, OUTCOMES_PREFIX, fold
from .log import PAGE, read_log
from .payload_index import IndexRow, all_index_rows, as_mapping, count_deltas, index_rows
from .row_checks import check_absent
from .rows import MODELS, load_state, record_head
from .schema import (CHECKPOINT, PAYLOAD_COUNTS, PAYLOADS, READ_MODEL_TABLES, RECORD_HEADS, VERDICTS,
                     WORKLOAD_COUNTS)
from .snapshot import CHECKPOINT_NAME, read_checkpoint, snapshot
from .state import ProjectionError, RegistryState
from .verdict_history import HISTORY_KEY, records_of

# SQLSTATE 42501: insufficient_privilege (a role that may only read).
_PRIVILEGE_SQLSTATE = "42501"
# SQLite's primary result code for a write to a database opened read-only (extended codes keep it in the low byte).
_SQLITE_READONLY = 8


class ReadModelsNotWritable(StoreError):
    """This connection may only read, so the read models cannot be caught up or rebuilt through it."""


def _write_refused(exc: DBAPIError) -> bool:
    """Whether the database refused a write because this connection may only read.

    A Postgres role without the privilege, or a SQLite registry opened
    read-only (a read-only file or folder, a mode=ro URL).
    """
    if getattr(exc.orig, "sqlstate", None) == _PRIVILEGE_SQLSTATE:
        return True
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == _SQLITE_READONLY


# How many times a catch-up may lose its race without the checkpoint moving at all (which
# no correct competitor causes); losing to a checkpoint that moved forward is progress, not a failure.
MAX_ATTEMPTS = 8
LOAD_CHUNK = 500


class _LostRace(Exception):
    """The checkpoint moved under a catch-up: roll its writes back and fold again."""


# The tables the catalogue lists, one plain statement a backend: SQLAlchemy's reflection built and compiled its own
# query on every catch-up (about a millisecond of CPU a pair batch on the server).
_TABLE_NAMES = {
    "postgresql": "SELECT c.relname AS name FROM pg_catalog.pg_class c WHERE c.relkind IN ('r', 'p') "
                  "AND c.relpersistence != 't' AND pg_catalog.pg_table_is_visible(c.oid)",
    "sqlite": "SELECT name FROM sqlite_master WHERE type = 'table'",
}


# The read-model tables the catalogue lists, counted inside the statement that reads the checkpoint and the head
# (`_checkpoint_and_head`): a catch-up's first round trip checks that none was dropped; `missing_tables` names one.
_TABLE_COUNT = {
    dialect: text(f"SELECT count(*) AS tables FROM ({listing}) AS listed WHERE listed.name IN "
                  f"({', '.join(repr(name) for name in READ_MODEL_TABLES)})").columns(column("tables", Integer))
    for dialect, listing in _TABLE_NAMES.items()
}


def missing_tables(conn: Connection) -> list[str]:
    """The read-model tables the database lacks (one catalogue read; a dropped table is never caught up)."""
    present = set(conn.exec_driver_sql(_TABLE_NAMES[conn.dialect.name]).scalars())
    return [name for name in READ_MODEL_TABLES if name not in present]


def create_missing_tables(engine) -> list[str]:
    """Create each read-model table the database lacks (dropped by hand); the names created, in order.

    The tables are derived, so one that is missing is made empty here and
    then filled by a fold of the whole log (`reset`): never by a catch-up
    from a checkpoint that no longer describes it.
    """
    from registry.events.schema import METADATA

    with engine.connect() as conn:
        missing = missing_tables(conn)
    if missing:
        with engine.begin() as conn:
            METADATA.create_all(conn, tables=[METADATA.tables[name] for name in missing])
    return missing


STREAM_MODEL = {ARTIFACT_PREFIX: "artifacts", WORKLOAD_PREFIX: "workloads", FRAMESET_PREFIX: "framesets",
                OUTCOMES_PREFIX: "outcomes", BENCH_PREFIX: "bench_streams"}
# Read models whose rows no stream names: a speed record is fed by artifact and bench streams alike, so the
# fold asks for its row when it meets it (RegistryState.load_record).
LAZY_MODELS = ("records",)


_FOLDING: "weakref.WeakKeyDictionary[Engine, tuple[int, threading.Lock]]" = weakref.WeakKeyDictionary()
_FOLDING_GUARD = threading.Lock()


def _folding(engine: Engine) -> threading.Lock:
    """The lock under which this process's threads catch one database's read models up, one at a time.

    Threads of one process (the server's) that fold at once all race for the
    checkpoint and all but one fold again: under load nearly every catch-up
    lost once. Taking turns, a thread that waited finds the checkpoint already
    past the head it wanted, most often, and folds nothing. Other processes
    still race as the module docstring says. A forked child makes its own
    (a parent's thread may have held the parent's at the fork).
    """
    with _FOLDING_GUARD:
        pid, lock = _FOLDING.get(engine, (None, None))
        if pid != os.getpid():
            pid, lock = _FOLDING[engine] = (os.getpid(), threading.Lock())
        return lock


@cache
def _rows_of(model: str):
    """The statement reading a model's (key, state) rows of the keys bound as `keys` (built once a model)."""
    table, key, _ = MODELS[model]
    return select(table.c[key], table.c.state).where(table.c[key].in_(bindparam("keys", expanding=True)))


@cache
def _row_update(model: str):
    """The statement updating a model's rows by the key bound as `key_` (built once a model)."""
    table, key, _ = MODELS[model]
    return update(table).where(table.c[key] == bindparam("key_"))


_MOVE_RECORD_HEAD = (update(RECORD_HEADS).where(RECORD_HEADS.c.record == bindparam("record_"))
                     .values(last_position=bindparam("at")))
_WHERE_WE_STAND = {dialect: select(
    select(CHECKPOINT.c.position).where(CHECKPOINT.c.name == CHECKPOINT_NAME).scalar_subquery(),
    select(func.max(EVENTS.c.position)).scalar_subquery(),
    count.scalar_subquery()) for dialect, count in _TABLE_COUNT.items()}
_MOVE_CHECKPOINT = (update(CHECKPOINT).where(CHECKPOINT.c.name == CHECKPOINT_NAME,
                                             CHECKPOINT.c.position == bindparam("was"))
                    .values(position=bindparam("now")))


def _checkpoint_and_head(conn: Connection) -> tuple[int | None, int]:
    """The checkpoint (None before the first catch-up) and the log's head (0 when empty), in one statement that
    also counts the read-model tables; ProjectionError naming a missing (dropped) one."""
    try:
        checkpoint, head, tables = conn.execute(_WHERE_WE_STAND[conn.dialect.name]).one()
    except DBAPIError:
        missing = missing_tables(conn)  # the checkpoint's own table dropped fails the statement
        if not missing:
            raise
    else:
        missing = missing_tables(conn) if tables != len(READ_MODEL_TABLES) else []
    if missing:
        raise ProjectionError(f"the read-model table {missing[0]} is missing; `registry replay` creates it "
                              "again and rebuilds the read models from the log")
    return checkpoint, head or 0


class ReadModels:
    """The live read models of one store: caught up before a read, rebuilt by `reset`."""

    def __init__(self, store: EventStore):
        self.store = store
        self.engine = store.engine
        # The log position the last live answer was read at (None before one, or after an as-of answer).
        self.served_position: int | None = None

    def catch_up(self) -> int:
        """Fold events up to the head seen at the start into the read models; return where they now stand.

        The head is fixed at the start: events appended while this catch-up
        works are left to the next read, so writers that keep appending can
        never keep a read from finishing. A thread that had to wait for
        another of this process to finish folding reads the head once more
        when its turn comes and fixes it there: the events appended during
        the wait are folded in the same pass, so the threads queued behind it
        find theirs folded (under a server's load one fold serves many
        requests). When another catch-up moves the checkpoint first, this one
        folds again from there, still only up to its fixed head, and stops as
        soon as the checkpoint has reached it. The answer is the log as of at
        least that head; the position returned may be later, when another
        catch-up went further.
        """
        with statement_reads(self.engine) as conn:
            checkpoint, head = _checkpoint_and_head(conn)
        if (checkpoint or 0) > head:
            raise ProjectionError(
                f"projection checkpoint {checkpoint} is ahead of the log's head {head}: "
                "the read models belong to another log (rebuild them with Projections.reset)"
            )
        if (checkpoint or 0) >= head:
            return checkpoint or 0
        lock = _folding(self.engine)
        if not lock.acquire(blocking=False):
            lock.acquire()
            with statement_reads(self.engine) as conn:
                # The thread waited for most likely folded past `head`; what was appended meanwhile is folded now.
                checkpoint, head = _checkpoint_and_head(conn)
        try:
            stalls = 0
            while (checkpoint or 0) < head:
                if self._advance(checkpoint, head):
                    return head
                with statement_reads(self.engine) as conn:
                    moved = read_checkpoint(conn)
                if moved == checkpoint:
                    stalls += 1
                    if stalls >= MAX_ATTEMPTS:
                        raise ProjectionError(f"could not catch up to position {head}: the checkpoint refused "
                                              f"{MAX_ATTEMPTS} updates without moving")
                checkpoint = moved
        finally:
            lock.release()
        return checkpoint or 0

    def reset(self) -> int:
        """Replace every read-model row with a fresh fold of the whole log; return its position.

        A read-model table that is missing (dropped) is created first. The fold
        runs outside the write transaction and is exact up to the head it
        read; events appended meanwhile are left for the next catch-up.
        """
        create_missing_tables(self.engine)
        for _ in range(MAX_ATTEMPTS):
            head = self.store.head_position()
            state = fold_log(self.store, head)
            try:
                with self._writer() as conn:
                    # The checkpoint first: on Postgres this waits for a catch-up in flight.
                    conn.execute(CHECKPOINT.delete())
                    for table, _, _ in MODELS.values():
                        conn.execute(table.delete())
                    conn.execute(VERDICTS.delete())
                    conn.execute(PAYLOADS.delete())
                    conn.execute(PAYLOAD_COUNTS.delete())
                    conn.execute(WORKLOAD_COUNTS.delete())
                    conn.execute(RECORD_HEADS.delete())
                    conn.execute(insert(CHECKPOINT).values(name=CHECKPOINT_NAME, position=head))
                    for model, (table, _, to_row) in MODELS.items():
                        rows = [to_row(value) for value in getattr(state, model).values()]
                        if rows:
                            conn.execute(insert(table), rows)
                    history = [record.to_row() for value in state.artifacts.values() for record in records_of(value)]
                    if history:
                        conn.execute(insert(VERDICTS), history)
                    indexed = sorted(all_index_rows(state.artifacts.values()))
                    if indexed:
                        conn.execute(insert(PAYLOADS), [as_mapping(row) for row in indexed])
                        conn.execute(insert(PAYLOAD_COUNTS), [
                            {"workload": workload, "payload_sha256": payload, "artifacts": count}
                            for (workload, payload), count in sorted(count_deltas((), indexed).items())])
                    counts = Counter(value["workload"] for value in state.artifacts.values())
                    if counts:
                        conn.execute(insert(WORKLOAD_COUNTS), [{"workload": workload, "artifacts": count}
                                                               for workload, count in sorted(counts.items())])
                    if state.records:
                        conn.execute(insert(RECORD_HEADS), [record_head(value) for value in state.records.values()])
            except IntegrityError:
                continue  # a concurrent catch-up inserted a row first: fold again
            return head
        raise ProjectionError(f"could not reset the read models after {MAX_ATTEMPTS} attempts")

    @contextmanager
    def _writer(self) -> Iterator[Connection]:
        """A write transaction on the read models; a refusal to a connection that may only read is one line."""
        try:
            with self.engine.connect() as conn:
                conn = conn.execution_options(registry_append=True)  # SQLite: BEGIN IMMEDIATE
                with conn.begin():
                    yield conn
        except DBAPIError as exc:
            if not _write_refused(exc):
                raise
            cause = first_line(exc.orig)
            raise ReadModelsNotWritable(f"the read models cannot be updated: this connection may only read "
                                        f"({cause})") from None

    def _advance(self, checkpoint: int | None, head: int) -> bool:
        """Fold (checkpoint, head] into the rows it touches and commit them; False if we lost a race."""
        start = checkpoint or 0
        work = RegistryState(position=start)
        existing: dict[str, set[str]] = {model: set() for model in MODELS}
        touched: dict[str, set[str]] = {model: set() for model in MODELS}
        indexed: set[IndexRow] = set()  # the payload index rows of the artifact rows loaded, as they stand
        work.load_record = lambda key: self._load_lazy("records", key, existing)
        batch = []
        with collector_paused():
            for event in read_log(self.engine, after=start, up_to=head):
                batch.append(event)
                if len(batch) == PAGE:
                    self._fold_batch(work, batch, existing, touched, indexed)
                    batch = []
            self._fold_batch(work, batch, existing, touched, indexed)
        try:
            with self._writer() as conn:
                if checkpoint is None:
                    conn.execute(insert(CHECKPOINT).values(name=CHECKPOINT_NAME, position=head))
                else:
                    moved = conn.execute(_MOVE_CHECKPOINT, {"was": checkpoint, "now": head})
                    if moved.rowcount != 1:
                        raise _LostRace
                self._write_rows(conn, work, existing, touched, indexed)
        except (_LostRace, IntegrityError):
            return False  # another catch-up moved or created the checkpoint first; all rolled back
        return True

    def _fold_batch(self, work: RegistryState, batch: list, existing: dict[str, set[str]],
                    touched: dict[str, set[str]], indexed: set[IndexRow]) -> None:
        wanted: dict[str, set[str]] = {model: set() for model in MODELS if model not in LAZY_MODELS}
        for event in batch:
            for prefix, model in STREAM_MODEL.items():
                if event.stream.startswith(prefix):
                    wanted[model].add(event.stream[len(prefix):])
                    break
        self._load(work, wanted, touched, existing, indexed)
        for model, keys in wanted.items():
            touched[model] |= keys
        fold(work, batch)
        for model in LAZY_MODELS:
            touched[model] |= set(getattr(work, model))

    def _load_lazy(self, model: str, key: str, existing: dict[str, set[str]]) -> dict | None:
        """One stored row of a lazily loaded model, when the fold first meets its key (None: no row yet; a row
        missing while its head stands was deleted, and is refused rather than begun again from this event)."""
        table, column, _ = MODELS[model]
        query = select(table.c.state).where(table.c[column] == key)
        with statement_reads(self.engine) as conn:
            text = conn.execute(query).scalar()
        if text is None:
            # Read again with the head in one snapshot: another process's catch-up commits a row and its head
            # together, so a row missing where its head stands was deleted, not written since the read above.
            with snapshot(self.engine) as conn:
                text = conn.execute(query).scalar()
                if text is None:
                    check_absent(conn, model, key, read_checkpoint(conn) or 0)  # a row deleted is not folded onto
        if text is None:
            return None
        existing[model].add(key)
        return load_state(text)

    def _load(self, work: RegistryState, wanted: dict[str, set[str]], touched: dict[str, set[str]],
              existing: dict[str, set[str]], indexed: set[IndexRow]) -> None:
        """Load the live rows of keys this catch-up has not met yet into the working state.

        A loaded artifact's payload index rows are those of its row's state
        (`replay --verify` holds the table to that), noted in `indexed` before
        the fold changes the state.
        """
        with statement_reads(self.engine) as conn:
            for model, keys in wanted.items():
                self._load_rows(conn, work, model, keys - touched[model], existing, indexed)
            # The speed records the batch's bench streams feed, in the same read rather than one read each
            # when the fold meets them (the lazy load then finds them loaded).
            records = {work.bench_streams[identity]["record"] for identity in wanted.get("bench_streams", ())
                       if identity in work.bench_streams}
            self._load_rows(conn, work, "records", records - {None} - touched["records"] - set(work.records),
                            existing, indexed)

    @staticmethod
    def _load_rows(conn: Connection, work: RegistryState, model: str, keys: set[str], existing: dict[str, set[str]],
                   indexed: set[IndexRow]) -> None:
        table, key, _ = MODELS[model]
        missing = sorted(keys)
        for index in range(0, len(missing), LOAD_CHUNK):
            chunk = missing[index:index + LOAD_CHUNK]
            for row in conn.execute(_rows_of(model), {"keys": chunk}):
                state = load_state(row[1])
                if model == "artifacts":
                    state[HISTORY_KEY] = []  # the stored history stays; verdicts folded now are added to it
                    indexed |= index_rows(state)
                getattr(work, model)[row[0]] = state
                existing[model].add(row[0])

    @staticmethod
    def _write_rows(conn: Connection, work: RegistryState, existing: dict[str, set[str]],
                    touched: dict[str, set[str]], indexed: set[IndexRow]) -> None:
        for model, (table, key, to_row) in MODELS.items():
            states = getattr(work, model)
            rows = [to_row(states[name]) for name in sorted(touched[model])]
            fresh = [row for row in rows if row[key] not in existing[model]]
            changed = [{**row, "key_": row[key]} for row in rows if row[key] in existing[model]]
            if fresh:
                conn.execute(insert(table), fresh)
            if changed:
                conn.execute(_row_update(model), changed)
        # Loaded rows start with an empty history, so every verdict in it was folded by this catch-up.
        history = [record.to_row() for name in sorted(touched["artifacts"])
                   for record in records_of(work.artifacts[name])]
        if history:
            conn.execute(insert(VERDICTS), history)
        # The index rows of the touched artifacts now, against those of their rows as loaded: a new payload
        # adds a row; a row goes only if an artifact's workload changed, which a registration never does.
        now = all_index_rows(work.artifacts[name] for name in touched["artifacts"])
        gone = sorted(indexed - now)
        if gone:
            conn.execute(delete(PAYLOADS).where(
                tuple_(PAYLOADS.c.workload, PAYLOADS.c.payload_sha256, PAYLOADS.c.artifact).in_(gone)))
        added = sorted(now - indexed)
        if added:
            conn.execute(insert(PAYLOADS), [as_mapping(row) for row in added])
        for (workload, payload), delta in sorted(count_deltas(gone, added).items()):
            key = (PAYLOAD_COUNTS.c.workload == workload, PAYLOAD_COUNTS.c.payload_sha256 == payload)
            moved = conn.execute(update(PAYLOAD_COUNTS).where(*key)
                                 .values(artifacts=PAYLOAD_COUNTS.c.artifacts + delta))
            if moved.rowcount == 0:
                conn.execute(insert(PAYLOAD_COUNTS).values(workload=workload, payload_sha256=payload,
                                                           artifacts=delta))
        # A workload's artifact rows only ever grow (an artifact never changes workload): count the new ones.
        born = Counter(work.artifacts[name]["workload"] for name in touched["artifacts"]
                       if name not in existing["artifacts"])
        for workload, delta in sorted(born.items()):
            moved = conn.execute(update(WORKLOAD_COUNTS).where(WORKLOAD_COUNTS.c.workload == workload)
                                 .values(artifacts=WORKLOAD_COUNTS.c.artifacts + delta))
            if moved.rowcount == 0:
                conn.execute(insert(WORKLOAD_COUNTS).values(workload=workload, artifacts=delta))
        for name in sorted(touched["records"]):
            head = record_head(work.records[name])
            if name not in existing["records"]:
                conn.execute(insert(RECORD_HEADS).values(**head))
            else:
                conn.execute(_MOVE_RECORD_HEAD, {"record_": name, "at": head["last_position"]})

    def position_to_fold(self, as_of: int | None) -> int | None:
        """None when the live tables are current; else the position to fold the log up to.

        A connection that may read but not write the read models (the Postgres
        `registry_reader` role, a read-only SQLite registry) cannot catch them
        up, so it answers from the log itself: slower, never stale.
        """
        self.served_position = None
        if as_of is not None:
            return as_of
        try:
            self.catch_up()
        except ReadModelsNotWritable:
            return self.store.head_position()
        return None
