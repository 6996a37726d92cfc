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

The checkpoint also records the versions of the read models' declarations
(read_models/): a catch-up that finds other versions there, or no
checkpoint at all, folds the whole log and rewrites every row in its
transaction, as `reset` does (a rebuild). Which rows an event touches, which
are loaded lazily, and what is written (writes.py) come from the
declarations.

A unit of work (view.py) reads through `ReadModels.position_to_fold`,
which catches up or says which log prefix to fold instead.
"""
from __future__ import annotations

import os
import threading
import weakref
from contextlib import contextmanager
from functools import cache
from typing import Any, Iterator

from sqlalchemy import Connection, Engine, Integer, bindparam, column, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from registry.events.database import statement_reads
from registry.events.errors import StoreError
from registry.events.schema import EVENTS, METADATA
from registry.events.store import EventStore
from registry.formats.errors import first_line

from .collector import collector_paused
from .errors import ProjectionError
from .fold import fold
from .log import PAGE, read_log
from . import read_models
from .read_models import CHECKPOINT, DECLARATIONS, READ_MODEL_TABLES, RegistryState, by_name
from .read_models.declaration import load_state
from .record_readings import fold_kept, keep_readings
from .row_checks import check_absent
from .snapshot import CHECKPOINT_NAME, read_checkpoint, snapshot
from .writes import Change, rebuild_rows, write_change

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
    with engine.connect() as conn:
        missing = missing_tables(conn)
    if missing:
        with engine.begin() as conn:
            METADATA.create_all(conn, tables=[METADATA.tables[name] for name in missing])
    return missing



# Which own-rows model an event's stream names, by the stream's prefix; the models no stream names are loaded
# when the fold first meets one of their keys (RegistryState.load_row).
STREAM_MODEL = {model.stream_prefix: model.name for model in DECLARATIONS
                if model.own_rows and model.stream_prefix is not None and not model.lazy}
LAZY_MODELS = tuple(model.name for model in DECLARATIONS if model.lazy)


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
        found = _FOLDING.get(engine)
        if found is None or found[0] != os.getpid():
            found = _FOLDING[engine] = (os.getpid(), threading.Lock())
        return found[1]


@cache
def _rows_of(name: str):
    """The statement reading a model's (key, state) rows of the keys bound as `keys` (built once a model)."""
    model = by_name(name)
    table, key = model.table, model.key[0]
    assert table is not None
    return select(table.c[key], table.c.state).where(table.c[key].in_(bindparam("keys", expanding=True)))


_WHERE_WE_STAND = {dialect: select(
    select(CHECKPOINT.c.position).where(CHECKPOINT.c.name == CHECKPOINT_NAME).scalar_subquery(),
    select(func.max(EVENTS.c.position)).scalar_subquery(),
    count.scalar_subquery(),
    select(CHECKPOINT.c.versions).where(CHECKPOINT.c.name == CHECKPOINT_NAME).scalar_subquery(),
) for dialect, count in _TABLE_COUNT.items()}
_MOVE_CHECKPOINT = (update(CHECKPOINT).where(CHECKPOINT.c.name == CHECKPOINT_NAME,
                                             CHECKPOINT.c.position == bindparam("was"))
                    .values(position=bindparam("now"), versions=bindparam("versions")))


def _refold(checkpoint: int | None, versions: str | None) -> bool:
    """Whether read models that stand at a checkpoint were folded under other declarations than this code's."""
    return checkpoint is not None and versions != read_models.VERSIONS


def _first_checkpoint(head: int):
    return insert(CHECKPOINT).values(name=CHECKPOINT_NAME, position=head, versions=read_models.VERSIONS)


def _where_we_stand(conn: Connection) -> tuple[int | None, int, str | None]:
    """The checkpoint (None before the first catch-up), the log's head (0 when empty) and the declaration versions
    the checkpoint was folded under, in one statement that also counts the read-model tables; ProjectionError
    naming a missing (dropped) one."""
    try:
        checkpoint, head, tables, versions = conn.execute(_WHERE_WE_STAND[conn.dialect.name]).one()
    except DBAPIError:
        missing = missing_tables(conn)  # the checkpoint's own table dropped fails the statement
        if not missing:
            raise
    else:
        missing = missing_tables(conn) if tables != len(READ_MODEL_TABLES) else []
    if missing:
        raise ProjectionError(f"the read-model table {missing[0]} is missing; `registry replay` creates it "
                              "again and rebuilds the read models from the log")
    return checkpoint, head or 0, versions


class ReadModels:
    """The live read models of one store: caught up before a read, rebuilt by `reset`."""

    def __init__(self, store: EventStore):
        self.store = store
        self.engine = store.engine

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

        Read models folded under other declaration versions than this code's
        (or never folded) are rebuilt: the whole log folded, every row
        written again, in the same race for the checkpoint.
        """
        with statement_reads(self.engine) as conn:
            checkpoint, head, versions = _where_we_stand(conn)
        if (checkpoint or 0) > head:
            raise ProjectionError(
                f"projection checkpoint {checkpoint} is ahead of the log's head {head}: "
                "the read models belong to another log (rebuild them with `registry replay`)"
            )
        if (checkpoint or 0) >= head and not _refold(checkpoint, versions):
            return checkpoint or 0
        lock = _folding(self.engine)
        if not lock.acquire(blocking=False):
            lock.acquire()
            with statement_reads(self.engine) as conn:
                # The thread waited for most likely folded past `head`; what was appended meanwhile is folded now.
                checkpoint, head, versions = _where_we_stand(conn)
        try:
            stalls = 0
            while (checkpoint or 0) < head or _refold(checkpoint, versions):
                if self._advance(checkpoint, head, rebuild=checkpoint is None or _refold(checkpoint, versions)):
                    return head
                with statement_reads(self.engine) as conn:
                    moved, _, versions = _where_we_stand(conn)
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
            state = fold_kept(self.store, head)
            try:
                with self._writer() as conn:
                    # The checkpoint first: on Postgres this waits for a catch-up in flight.
                    conn.execute(CHECKPOINT.delete())
                    conn.execute(_first_checkpoint(head))
                    rebuild_rows(conn, state)
            except IntegrityError:
                continue  # a concurrent catch-up inserted the checkpoint first: fold again
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

    def _advance(self, checkpoint: int | None, head: int, rebuild: bool) -> bool:
        """Fold (checkpoint, head] into the rows it touches and commit them, or with `rebuild` fold the whole log
        up to `head` and write every row again; False if another catch-up moved the checkpoint first."""
        if rebuild:
            work = fold_kept(self.store, head)
            change = None
        else:
            work, change = self._fold_changes(checkpoint or 0, head)
        try:
            with self._writer() as conn:
                if checkpoint is None:
                    conn.execute(_first_checkpoint(head))
                else:
                    moved = conn.execute(_MOVE_CHECKPOINT, {"was": checkpoint, "now": head,
                                                            "versions": read_models.VERSIONS})
                    if moved.rowcount != 1:
                        raise _LostRace
                if change is None:
                    rebuild_rows(conn, work)
                else:
                    write_change(conn, work, change)
        except (_LostRace, IntegrityError):
            return False  # another catch-up moved or created the checkpoint first; all rolled back
        return True

    def _fold_changes(self, start: int, head: int) -> tuple[RegistryState, Change]:
        """The events (start, head] folded into the rows they touch, loaded first; what the writes need."""
        work = RegistryState(position=start)
        change = Change()
        work.load_row = lambda name, key: self._load_lazy(name, key, change)
        batch = []
        with collector_paused():
            for event in read_log(self.engine, after=start, up_to=head):
                batch.append(event)
                if len(batch) == PAGE:
                    self._fold_batch(work, batch, change)
                    batch = []
            self._fold_batch(work, batch, change)
            keep_readings(self.store, work.records.values(), lambda name: work.workloads.get(name) or self._row(
                "workloads", name))
        return work, change

    def _row(self, name: str, key: str) -> Any:
        """A stored row's state, read and nothing more (not loaded into the fold: nothing of it is written)."""
        with statement_reads(self.engine) as conn:
            row = conn.execute(_rows_of(name), {"keys": [key]}).first()
        return None if row is None else load_state(row[1])

    def _fold_batch(self, work: RegistryState, batch: list, change: Change) -> None:
        wanted: dict[str, set[str]] = {name: set() for name in STREAM_MODEL.values()}
        for event in batch:
            for prefix, name in STREAM_MODEL.items():
                if event.stream.startswith(prefix):
                    wanted[name].add(event.stream[len(prefix):])
                    break
        self._load(work, wanted, change)
        for name, keys in wanted.items():
            change.touched[name] |= keys
        fold(work, batch)
        for name in LAZY_MODELS:
            change.touched[name] |= set(getattr(work, name))

    def _load_lazy(self, name: str, key: str, change: Change) -> Any:
        """One stored row of a lazily loaded model, when the fold first meets its key (None: no row yet; a row
        missing while its side table says it stands was deleted, and is refused rather than begun again)."""
        query = _rows_of(name)
        with statement_reads(self.engine) as conn:
            row = conn.execute(query, {"keys": [key]}).first()
        if row is None:
            # Read again with the checkpoint in one snapshot: another process's catch-up commits a row and its
            # side tables together, so a row missing where its side table says it stands was deleted.
            with snapshot(self.engine) as conn:
                row = conn.execute(query, {"keys": [key]}).first()
                if row is None:
                    check_absent(conn, name, key, read_checkpoint(conn) or 0)  # a row deleted is not folded onto
        if row is None:
            return None
        return self._loaded(name, row, change)

    def _load(self, work: RegistryState, wanted: dict[str, set[str]], change: Change) -> None:
        """Load the live rows of keys this catch-up has not met yet into the working state.

        The speed records (any lazily loaded model) the batch's bench streams
        feed are read in the same read rather than one read each when the fold
        meets them (the lazy load then finds them loaded).
        """
        with statement_reads(self.engine) as conn:
            for name, keys in wanted.items():
                self._load_rows(conn, work, name, keys - change.touched[name], change)
            fed = {record for identity in wanted.get("bench_streams", ()) if identity in work.bench_streams
                   for record in (work.bench_streams[identity]["record"],) if record is not None}
            self._load_rows(conn, work, "records", fed - change.touched["records"] - set(work.records), change)

    def _load_rows(self, conn: Connection, work: RegistryState, name: str, keys: set[str], change: Change) -> None:
        missing = sorted(keys)
        target = getattr(work, name)
        for index in range(0, len(missing), LOAD_CHUNK):
            for row in conn.execute(_rows_of(name), {"keys": missing[index:index + LOAD_CHUNK]}):
                target[row[0]] = self._loaded(name, row, change)

    @staticmethod
    def _loaded(name: str, row: Any, change: Change) -> dict[str, Any]:
        state = load_state(row[1])
        change.existing[name].add(row[0])
        change.loaded(by_name(name), state)
        return state

    def position_to_fold(self, as_of: int | None) -> int | None:
        """None when the live tables are current; else the position to fold the log up to.

        A connection that may read but not write the read models (the Postgres
        `registry_reader` role, a read-only SQLite registry) cannot catch them
        up, so it answers from the log itself: slower, never stale.
        """
        if as_of is not None:
            return as_of
        try:
            self.catch_up()
        except ReadModelsNotWritable:
            return self.store.head_position()
        return None
