"""Persisted read models, caught up from their checkpoint before every read.

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
writer commits.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from sqlalchemy import Connection, bindparam, delete, func, insert, select, tuple_, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from registry.formats.errors import UserError
from registry.events.errors import StoreError
from registry.events.schema import EVENTS
from registry.events.store import EventStore

from registry.formats.names import ARTIFACT_PREFIX, FRAMESET_PREFIX, WORKLOAD_PREFIX

from .collector import collector_paused
from .fold import OUTCOMES_PREFIX, fold
from .log import PAGE, read_log
from .payload_index import IndexRow, all_index_rows, as_mapping, index_rows, payload_key
from .rows import MODELS, load_state
from .schema import ARTIFACTS, CHECKPOINT, PAYLOADS, VERDICTS
from .state import ProjectionError, RegistryState
from .verdict_history import HISTORY_KEY, VerdictRecord, records_of, with_history

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


CHECKPOINT_NAME = "log"
# How many times a catch-up may lose its race without the checkpoint moving at all (which
# no correct competitor causes); losing to a checkpoint that moved forward is progress, not a failure.
MAX_ATTEMPTS = 8
LOAD_CHUNK = 500


class _LostRace(Exception):
    """The checkpoint moved under a catch-up: roll its writes back and fold again."""


STREAM_MODEL = {ARTIFACT_PREFIX: "artifacts", WORKLOAD_PREFIX: "workloads", FRAMESET_PREFIX: "framesets",
                OUTCOMES_PREFIX: "outcomes"}


@contextmanager
def snapshot(engine) -> Iterator[Connection]:
    """One read transaction that sees a single committed state of every table.

    SQLite's WAL readers already see one snapshot per transaction; Postgres
    needs REPEATABLE READ for that (READ COMMITTED re-snapshots per statement).
    """
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


@contextmanager
def reading(engine) -> Iterator[Connection]:
    """One snapshot for a lookup by a caller's key; a driver refusal (Postgres and a NUL) is one line."""
    try:
        with snapshot(engine) as conn:
            yield conn
    except DBAPIError as exc:
        first_line = str(exc.orig).splitlines()[0] if str(exc.orig) else type(exc.orig).__name__
        raise StoreError(f"could not read the projections: {first_line}") from None


def read_checkpoint(conn: Connection) -> int | None:
    return conn.execute(select(CHECKPOINT.c.position).where(CHECKPOINT.c.name == CHECKPOINT_NAME)).scalar()


def read_live(conn: Connection, history: bool = True) -> RegistryState:
    """Every live row, as a RegistryState at the checkpoint (call inside `snapshot`).

    Without `history` the artifacts carry no `verdicts` and the history table is not read.
    """
    state = RegistryState(position=read_checkpoint(conn) or 0)
    for model, (table, key, _) in MODELS.items():
        target = getattr(state, model)
        for row in conn.execute(select(table.c[key], table.c.state)):
            target[row[0]] = load_state(row[1])
    if not history:
        return state
    records: dict[str, list[VerdictRecord]] = {name: [] for name in state.artifacts}
    for row in conn.execute(select(VERDICTS)):
        records.setdefault(row.artifact, []).append(VerdictRecord.from_row(row))
    for name, artifact in state.artifacts.items():
        with_history(artifact, records[name])
    return state


def read_history(conn: Connection, artifact_id: str) -> list[VerdictRecord]:
    """One artifact's verdict history rows, in position order (an indexed range of the primary key)."""
    rows = conn.execute(select(VERDICTS).where(VERDICTS.c.artifact == artifact_id).order_by(VERDICTS.c.position))
    return [VerdictRecord.from_row(row) for row in rows]


def check_position(store: EventStore, as_of: Any) -> int:
    """An as-of position must be a position the log has reached."""
    if isinstance(as_of, bool) or not isinstance(as_of, int) or as_of < 0:
        raise UserError(f"as-of position must be a non-negative integer, got {as_of!r}")
    head = store.head_position()
    if as_of > head:
        raise UserError(f"as-of position {as_of} is beyond the log's head {head}")
    return as_of


def fold_log(store: EventStore, up_to: int, stream: str | None = None) -> RegistryState:
    """A fresh fold of the log (or one stream of it) up to and including `up_to`, in memory."""
    with collector_paused():
        state = fold(RegistryState(), read_log(store.engine, after=0, up_to=up_to, stream=stream))
    state.position = up_to
    return state


class Projections:
    """The registry's read side: live read models, and as-of answers folded from the log."""

    def __init__(self, store: EventStore):
        self.store = store
        self.engine = store.engine
        # The log position the last live answer was read at (None before one, or after an as-of answer).
        self.served_position: int | None = None

    # -- keeping the read models current -----------------------------------------

    def catch_up(self) -> int:
        """Fold events up to the head seen at the start into the read models; return where they now stand.

        The head is fixed once, at the start: events appended while this
        catch-up works are left to the next read, so writers that keep
        appending can never keep a read from finishing. When another catch-up
        moves the checkpoint first, this one folds again from there, still
        only up to its fixed head, and stops as soon as the checkpoint has
        reached it. The answer is the log as of at least that head; the
        position returned may be later, when another catch-up went further.
        """
        with self.engine.connect() as conn:
            checkpoint = read_checkpoint(conn)
            head = conn.execute(select(func.max(EVENTS.c.position))).scalar() or 0
        if (checkpoint or 0) > head:
            raise ProjectionError(
                f"projection checkpoint {checkpoint} is ahead of the log's head {head}: "
                "the read models belong to another log (rebuild them with Projections.reset)"
            )
        stalls = 0
        while (checkpoint or 0) < head:
            if self._advance(checkpoint, head):
                return head
            with self.engine.connect() as conn:
                moved = read_checkpoint(conn)
            if moved == checkpoint:
                stalls += 1
                if stalls >= MAX_ATTEMPTS:
                    raise ProjectionError(f"could not catch up to position {head}: the checkpoint refused "
                                          f"{MAX_ATTEMPTS} updates without moving")
            checkpoint = moved
        return checkpoint or 0

    def reset(self) -> int:
        """Replace every read-model row with a fresh fold of the whole log; return its position.

        The fold runs outside the write transaction and is exact up to the head
        it read; events appended meanwhile are left for the next catch-up.
        """
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
            first_line = str(exc.orig).splitlines()[0] if str(exc.orig) else type(exc.orig).__name__
            raise ReadModelsNotWritable(f"the read models cannot be updated: this connection may only read "
                                        f"({first_line})") from None

    def _advance(self, checkpoint: int | None, head: int) -> bool:
        """Fold (checkpoint, head] into the rows it touches and commit them; False if we lost a race."""
        start = checkpoint or 0
        work = RegistryState(position=start)
        existing: dict[str, set[str]] = {model: set() for model in MODELS}
        touched: dict[str, set[str]] = {model: set() for model in MODELS}
        indexed: set[IndexRow] = set()  # the payload index rows of the artifact rows loaded, as they stand
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
                    moved = conn.execute(
                        update(CHECKPOINT)
                        .where(CHECKPOINT.c.name == CHECKPOINT_NAME, CHECKPOINT.c.position == checkpoint)
                        .values(position=head)
                    )
                    if moved.rowcount != 1:
                        raise _LostRace
                self._write_rows(conn, work, existing, touched, indexed)
        except (_LostRace, IntegrityError):
            return False  # another catch-up moved or created the checkpoint first; all rolled back
        return True

    def _fold_batch(self, work: RegistryState, batch: list, existing: dict[str, set[str]],
                    touched: dict[str, set[str]], indexed: set[IndexRow]) -> None:
        wanted: dict[str, set[str]] = {model: set() for model in MODELS}
        for event in batch:
            for prefix, model in STREAM_MODEL.items():
                if event.stream.startswith(prefix):
                    wanted[model].add(event.stream[len(prefix):])
                    break
        self._load(work, wanted, touched, existing, indexed)
        for model, keys in wanted.items():
            touched[model] |= keys
        fold(work, batch)

    def _load(self, work: RegistryState, wanted: dict[str, set[str]], touched: dict[str, set[str]],
              existing: dict[str, set[str]], indexed: set[IndexRow]) -> None:
        """Load the live rows of keys this catch-up has not met yet into the working state.

        A loaded artifact's payload index rows are those of its row's state
        (`replay --verify` holds the table to that), noted in `indexed` before
        the fold changes the state.
        """
        with self.engine.connect() as conn:
            for model, keys in wanted.items():
                table, key, _ = MODELS[model]
                missing = sorted(keys - touched[model])
                for index in range(0, len(missing), LOAD_CHUNK):
                    chunk = missing[index:index + LOAD_CHUNK]
                    for row in conn.execute(select(table.c[key], table.c.state).where(table.c[key].in_(chunk))):
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
                conn.execute(update(table).where(table.c[key] == bindparam("key_")), changed)
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

    # -- reading ----------------------------------------------------------------------

    def _fold_to(self, as_of: int | None) -> int | None:
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

    def state(self, as_of: int | None = None, *, history: bool = True) -> RegistryState:
        """The whole registry: live tables after a catch-up, or the log folded up to `as_of`.

        `history=False` leaves out the artifacts' verdict histories where they
        are read from the live tables (a report needs none), so reading the
        registry costs its artifacts, not every verdict they ever had.
        """
        as_of = self._fold_to(as_of)
        if as_of is not None:
            return fold_log(self.store, check_position(self.store, as_of))
        with snapshot(self.engine) as conn:
            state = read_live(conn, history)
        self.served_position = state.position
        return state

    def artifact(self, artifact_id: str, as_of: int | None = None) -> dict[str, Any] | None:
        """The artifact's state with its whole verdict history (`verdicts`)."""
        return self._one("artifacts", ARTIFACT_PREFIX, artifact_id, as_of, history=True)

    def current_artifact(self, artifact_id: str) -> dict[str, Any] | None:
        """The artifact's state now, without reading its verdict history: what an append or a promote needs.

        Its `stream_version` is the version of the stream's event at
        `last_position`, so an append that expects it fails (ConcurrencyError)
        when anything reached the stream after this state was read.
        """
        return self._one("artifacts", ARTIFACT_PREFIX, artifact_id, None, history=False)

    def workload(self, workload_id: str, as_of: int | None = None) -> dict[str, Any] | None:
        return self._one("workloads", WORKLOAD_PREFIX, workload_id, as_of)

    def frameset(self, name: str, as_of: int | None = None) -> dict[str, Any] | None:
        return self._one("framesets", FRAMESET_PREFIX, name, as_of)

    def artifacts(self, workload: str | None = None, as_of: int | None = None) -> list[dict[str, Any]]:
        """Artifacts (of one workload if given), sorted by artifact id."""
        as_of = self._fold_to(as_of)
        if as_of is not None:
            found = self.state(as_of).artifacts.values()
        else:
            statement = select(ARTIFACTS.c.artifact, ARTIFACTS.c.state)
            verdicts = select(VERDICTS)
            if workload is not None:
                statement = statement.where(ARTIFACTS.c.workload == workload)
                verdicts = verdicts.where(VERDICTS.c.artifact.in_(
                    select(ARTIFACTS.c.artifact).where(ARTIFACTS.c.workload == workload)))
            with reading(self.engine) as conn:
                self.served_position = read_checkpoint(conn) or 0
                rows = conn.execute(statement).all()
                history: dict[str, list[VerdictRecord]] = {name: [] for name, _ in rows}
                for row in conn.execute(verdicts):
                    history.setdefault(row.artifact, []).append(VerdictRecord.from_row(row))
            found = [with_history(load_state(text), history[name]) for name, text in rows]
        chosen = [a for a in found if workload is None or a["workload"] == workload]
        return sorted(chosen, key=lambda a: a["artifact"])

    def workload_artifacts(self, workload: str) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]]]:
        """(position, the workload, its artifacts without verdict history) now, read at one position.

        Read in one snapshot of the live tables (an indexed lookup by
        workload), so the position names exactly the log prefix the answer
        reflects; a connection that may not write the read models folds the
        log to its head instead.
        """
        as_of = self._fold_to(None)
        if as_of is not None:
            state = fold_log(self.store, as_of)
            chosen = [state.artifacts[key] for key in sorted(state.artifacts)
                      if state.artifacts[key]["workload"] == workload]
            return as_of, state.workloads.get(workload), chosen
        workloads = MODELS["workloads"][0]
        with reading(self.engine) as conn:
            position = read_checkpoint(conn) or 0
            declared = conn.execute(select(workloads.c.state).where(workloads.c.workload == workload)).scalar()
            texts = conn.execute(select(ARTIFACTS.c.state).where(ARTIFACTS.c.workload == workload)
                                 .order_by(ARTIFACTS.c.artifact)).scalars().all()
        self.served_position = position
        return position, None if declared is None else load_state(declared), [load_state(text) for text in texts]

    def artifacts_sharing_payload(self, workload: str, payload_sha256: str) -> list[dict[str, Any]]:
        """The current states (no verdict history) of the artifacts of `workload` that ever registered
        `payload_sha256`, under any of their identities, sorted by artifact id (and perhaps a few whose
        registered value only shares its index key: see payload_index.py; they count nothing for it).

        An indexed range of the payload index (payload_index.py) joined to the
        artifact rows, so it costs the artifacts that share the bytes, not
        the workload's size. A connection that may not write the read models
        folds the log to its head instead.
        """
        as_of = self._fold_to(None)
        if as_of is not None:
            state = fold_log(self.store, as_of)
            return [state.artifacts[key] for key in sorted(state.artifacts)
                    if (workload, payload_key(payload_sha256), key) in index_rows(state.artifacts[key])]
        statement = (select(ARTIFACTS.c.state)
                     .join(PAYLOADS, PAYLOADS.c.artifact == ARTIFACTS.c.artifact)
                     .where(PAYLOADS.c.workload == workload, PAYLOADS.c.payload_sha256 == payload_key(payload_sha256),
                            ARTIFACTS.c.workload == workload)
                     .order_by(ARTIFACTS.c.artifact))
        with reading(self.engine) as conn:
            position = read_checkpoint(conn) or 0
            texts = conn.execute(statement).scalars().all()
        self.served_position = position
        return [load_state(text) for text in texts]

    def workloads(self, as_of: int | None = None) -> list[dict[str, Any]]:
        """Workloads sorted by id."""
        as_of = self._fold_to(as_of)
        if as_of is not None:
            found = list(self.state(as_of).workloads.values())
        else:
            with snapshot(self.engine) as conn:
                self.served_position = read_checkpoint(conn) or 0
                found = [load_state(text) for text in conn.execute(select(MODELS["workloads"][0].c.state)).scalars()]
        return sorted(found, key=lambda w: w["workload"])

    def _one(self, model: str, prefix: str, key: str, as_of: int | None,
             history: bool = True) -> dict[str, Any] | None:
        as_of = self._fold_to(as_of)
        if as_of is not None:
            # A subject's state depends on its own stream only, so fold just that stream.
            state = fold_log(self.store, check_position(self.store, as_of), stream=prefix + key)
            return getattr(state, model).get(key)
        table, column, _ = MODELS[model]
        with reading(self.engine) as conn:
            self.served_position = read_checkpoint(conn) or 0
            text = conn.execute(select(table.c.state).where(table.c[column] == key)).scalar()
            records = read_history(conn, key) if text is not None and model == "artifacts" and history else None
        if text is None:
            return None
        state = load_state(text)
        return state if records is None else with_history(state, records)
