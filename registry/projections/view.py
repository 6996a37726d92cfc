"""One unit of work on a registry: one catch-up, one snapshot, typed answers, and appends that say what they did.

`with registry.view() as view:` (app/context.py) catches the read models up
once and opens one read transaction (SQLite's WAL snapshot, Postgres's
REPEATABLE READ) that every answer of the unit of work reads, so the
answers agree with each other and with the position they stand at
(`view.position`). Every use case reads through one: `promote` reads the
artifact, the artifacts sharing its bytes, the workload with its contract
and the speed record of its bytes in one catch-up, where it used to make
five.

A view as of an earlier position (`view(as_of=N)`), or over a connection
that may not write the read models (a Postgres reader role, a read-only
SQLite file), folds the log instead: a subject's own stream for a question
about one subject, the whole log for a question about all of them (folded
once per view), never the live tables.

`view.append` appends one batch through the store and says what the store
did (`Appended`: its positions, and whether this call wrote them or an
idempotency key answered it with an earlier batch), never by reading the
log's head before the append, which a concurrent writer makes wrong.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from registry.events.errors import StoreError
from registry.events.store import Append, Appended, EventStore, NewEvent
from registry.formats.errors import first_line
from registry.formats.names import normalized_name

from . import attempts, latest, shipping, subject, whole_registry
from .asof import check_position, fold_log
from .catchup import ReadModels
from .items import attach_items
from .read_models import (
    ArtifactState, FrameSetState, RegistryState, SpeedRecordState, WorkloadState,
)
from .read_models.speed_records import record_key
from .read_models.verdicts import HISTORY_KEY, with_history
from .record_items import attach_documents, attach_state_documents
from .snapshot import read_checkpoint, snapshot
from .speed_reading import RecordReading, read_speed_record
from .subject import BenchSubject

if TYPE_CHECKING:
    from registry.contracts import Contract


@dataclass(frozen=True)
class DeclaredContract:
    """A workload's contract: the manifest rebuilt and checked again, its version and its hash; `appended` says
    whether a declaration wrote it (False for one read)."""

    contract: Contract
    version: int
    content_hash: str
    appended: bool = False


class View:
    """One unit of work on the read side (the module docstring): enter it to read, leave it to close."""

    def __init__(self, store: EventStore, *, actor: str | None = None, as_of: int | None = None):
        self.store = store
        self.actor = actor
        self._as_of = as_of
        self._conn: Connection | None = None
        self._closing: Any = None
        self._folded: RegistryState | None = None
        self.position = 0

    # -- the unit of work ------------------------------------------------------------------------------------

    def __enter__(self) -> View:
        if self._as_of is not None:
            self.position = check_position(self.store, self._as_of)
            self._live = False
            return self
        folded_at = ReadModels(self.store).position_to_fold(None)
        if folded_at is not None:  # a connection that may only read: the log folded, never stale
            self.position, self._live = folded_at, False
            return self
        self._closing = snapshot(self.store.engine)
        self._conn = self._closing.__enter__()
        self._live = True
        try:
            with self._reads() as conn:
                self.position = read_checkpoint(conn) or 0
        except BaseException:  # noqa: BLE001 - a view that could not open closes its snapshot, then says why
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        closing, self._closing, self._conn = self._closing, None, None
        if closing is not None:
            closing.__exit__(*exc_info)

    @property
    def live(self) -> bool:
        """Whether the answers are read from the live read models (else from the log folded up to `position`)."""
        return self._live

    @contextmanager
    def _reads(self) -> Iterator[Connection]:
        """The view's snapshot for one answer; a driver refusal of a caller's key (Postgres and a NUL) is one line."""
        assert self._conn is not None, "a view answers inside its `with` block"
        try:
            yield self._conn
        except DBAPIError as exc:
            raise StoreError(f"could not read the projections: {first_line(exc.orig)}") from None

    def _whole(self) -> RegistryState:
        """The log folded up to the view's position, once per view (a folded view's answers about many subjects)."""
        if self._folded is None:
            self._folded = fold_log(self.store, self.position)
        return self._folded

    def _subject(self, name: str, key: str) -> Any:
        """One subject's state: its checked row, or its own stream folded."""
        if self._live:
            with self._reads() as conn:
                return subject.one(conn, name, key, self.position)
        return subject.folded(self.store, name, key, self.position)

    # -- one subject -----------------------------------------------------------------------------------------

    def artifact(self, artifact_id: str, *, history: bool = False, items: bool = True) -> ArtifactState | None:
        """The artifact's state, with its evidence items (unless `items` is False) and, asked for, its whole
        verdict history (`verdicts`); without it, what an append or a promote needs: its `stream_version` is the
        version of the stream's event at `last_position`, so an append that expects it fails
        (ConcurrencyError) when anything reached the stream since."""
        key = normalized_name(artifact_id)
        state = self._subject("artifacts", key)
        if state is not None and self._live and history:
            with self._reads() as conn:
                with_history(state, subject.history(conn, key))
        elif state is not None and not history:
            state.pop(HISTORY_KEY, None)
        if state is not None and items:
            attach_items(self.store, [state], self._conn)
        return state

    def shown_artifact(self, artifact_id: str, latest: int) -> tuple[ArtifactState | None, int]:
        """The artifact's state with only its `latest` verdicts (in position order), and how many it has in all:
        what `show` prints, bounded however many verdicts came before (`history` lists every one)."""
        key = normalized_name(artifact_id)
        state = self._subject("artifacts", key)
        if state is None:
            return None, 0
        if self._live:
            with self._reads() as conn:
                records, total = subject.latest_history(conn, key, latest)
            with_history(state, records)
        else:
            every = state[HISTORY_KEY]
            total = len(every)
            state[HISTORY_KEY] = every[max(0, total - latest):]
        attach_items(self.store, [state], self._conn)
        return state, total

    def workload(self, workload_id: str) -> WorkloadState | None:
        """The workload's state: its current contract and every version it had."""
        return self._subject("workloads", normalized_name(workload_id))

    def contract(self, workload_id: str) -> DeclaredContract | None:
        """The workload's current contract, rebuilt from its row and checked again (None if undeclared)."""
        from registry.contracts import Contract

        declared = self.workload(workload_id)
        if declared is None:
            return None
        return DeclaredContract(Contract.from_stored(declared["contract"]), declared["contract_version"],
                                declared["contract_hash"])

    def frameset(self, name: str) -> FrameSetState | None:
        """The frame set as registered."""
        return self._subject("framesets", normalized_name(name))

    def speed_record(self, artifact: ArtifactState, workload: WorkloadState | None = None, *,
                     documents: bool = False) -> RecordReading:
        """The speed record of the artifact's bytes within its workload, read under the workload's contract
        (speed_reading.py): one row, with its running reading kept under the current contract, else its documents
        attached. `workload` is its workload's row when the caller read it already; `documents` attaches them
        whatever the row keeps (a record read under a contract not declared: `what-if`)."""
        payload = artifact["payload_sha256"]
        if workload is None:
            workload = self.workload(artifact["workload"])
        row = None if payload is None else self.record(record_key(artifact["workload"], payload))
        read = read_speed_record(row, workload, payload)
        if row is not None and (documents or read.kept is None):  # no running reading that answers: every one read
            attach_documents(self.store, [row], on=self._conn)
        return read

    def record(self, key: str) -> SpeedRecordState | None:
        """The speed record of `key` (`workload:payload`) as its row holds it: entries by reference, unread."""
        if self._live:
            return self._subject("records", key)
        return self._whole().records.get(key)

    def sharing_payload(self, workload: str, payload_sha256: str | None,
                        asking: str | None = None) -> list[ArtifactState]:
        """The artifacts of `workload` that ever registered these bytes (attempts.py), sorted by id, `asking` (an
        artifact that registered them) among them; none for no payload, which has nothing to match by."""
        if payload_sha256 is None:
            return []
        if self._live:
            with self._reads() as conn:
                return attempts.sharing_rows(conn, workload, payload_sha256, asking, self.position)
        return attempts.sharing_folded(self._whole(), workload, payload_sha256)

    def bench_subjects(self, artifact_ids: Sequence[str]) -> dict[str, BenchSubject]:
        """What a benchmark session's append checks, for several artifacts (by NFC id): each one's row, its
        workload's, its identity's bench stream's and its bytes' speed record's, with its running reading kept
        under the current contract, else its documents attached."""
        ids = list(dict.fromkeys(normalized_name(artifact_id) for artifact_id in artifact_ids))
        if self._live:
            with self._reads() as conn:
                found = subject.bench_rows(conn, ids, self.position)
        else:
            found = {artifact_id: self._folded_bench_subject(artifact_id) for artifact_id in ids}
        records = [rows.record for rows in found.values() if rows.record is not None and read_speed_record(
            rows.record, rows.workload, rows.record["payload_sha256"]).kept is None]
        if records:
            attach_documents(self.store, list({id(record): record for record in records}.values()), on=self._conn)
        return found

    def _folded_bench_subject(self, artifact_id: str) -> BenchSubject:
        whole = self._whole()
        artifact = whole.artifacts.get(artifact_id)
        if artifact is None:
            return BenchSubject(None, None, None, None, self.position)
        payload = artifact["payload_sha256"]
        return BenchSubject(artifact, whole.workloads.get(artifact["workload"]),
                            whole.bench_streams.get(artifact["identity"]),
                            None if payload is None else whole.records.get(record_key(artifact["workload"], payload)),
                            self.position)

    # -- a workload ------------------------------------------------------------------------------------------

    def workload_artifacts(self, workload_id: str) -> tuple[WorkloadState | None, list[ArtifactState]]:
        """The workload and its artifacts (without verdict history or evidence items), at the view's position:
        what `resolve` and `lock` match against (shipping.py)."""
        if self._live:
            with self._reads() as conn:
                return shipping.workload_rows(conn, workload_id, self.position)
        return shipping.of_workload(self._whole(), workload_id)

    def artifact_ids(self, workload_id: str) -> list[str]:
        """The ids of the workload's artifacts (no state checked or decoded: a registration's look-alike check)."""
        if self._live:
            with self._reads() as conn:
                return subject.artifact_ids(conn, workload_id)
        return [name for name, state in sorted(self._whole().artifacts.items()) if state["workload"] == workload_id]

    def workload_speed_records(self, workload_id: str) -> list[SpeedRecordState]:
        """Every speed record of one workload, by key, with its documents attached."""
        if self._live:
            with self._reads() as conn:
                found = subject.workload_records(conn, workload_id, self.position)
        else:
            found = [record for _, record in sorted(self._whole().records.items())
                     if record["workload"] == workload_id]
        attach_documents(self.store, found, on=self._conn)
        return found

    # -- the registry as a whole -----------------------------------------------------------------------------

    def state(self, *, history: bool = True, items: bool = True) -> RegistryState:
        """The whole registry. `history=False` leaves out the artifacts' verdict histories where they are read
        from the live tables (a report needs none); `items=False` leaves the evidence entries and the speed
        records' documents as references, for a caller that shows no evidence (`replay`'s count)."""
        if self._live:
            with self._reads() as conn:
                found = whole_registry.read_live(conn, self.position, history)
        else:
            found = fold_log(self.store, self.position)
        if items:
            attach_items(self.store, found.artifacts.values(), self._conn)
            attach_state_documents(self.store, found, self._conn)
        return found

    def latest(self, most_artifacts: int, most_records: int, seen: Mapping[str, latest.SeenRecord] | None = None,
               *, decode: bool = True) -> latest.LatestPage:
        """The artifacts and the promoted artifacts that moved last (at most `most_artifacts` each, evidence items
        attached) and the speed records that moved last (at most `most_records`, documents attached), with how
        many of each there are in all (latest.py): a page whose cost its size bounds, not the registry's. A live
        read leaves undecoded the records `seen` names whose rows have not changed (`LatestPage.unchanged`), and
        without `decode` names the others (`LatestPage.moved`: each read with `record_of`, in this view)."""
        if self._live:
            with self._reads() as conn:
                page = latest.read_live(conn, self.position, most_artifacts, most_records, seen, decode)
        else:
            page = latest.of_folded(self._whole(), most_artifacts, most_records)
        attach_items(self.store, list({artifact["artifact"]: artifact for artifact in page.artifacts + page.promoted}.values()), self._conn)
        attach_documents(self.store, page.records, on=self._conn)
        return page

    def record_of(self, key: str) -> SpeedRecordState:
        """A speed record a live page named without reading it (`LatestPage.moved`), read from the same snapshot
        and checked as a page's rows are, its documents attached."""
        with self._reads() as conn:
            record = latest.read_record(conn, key, self.position)
        attach_documents(self.store, [record], on=self._conn)
        return record

    def artifacts(self, workload: str | None = None) -> list[ArtifactState]:
        """Artifacts (of one workload if given), sorted by artifact id, each with its verdict history and items."""
        if self._live:
            with self._reads() as conn:
                found = whole_registry.live_artifacts(conn, workload)
        else:
            found = [state for _, state in sorted(self._whole().artifacts.items())
                     if workload is None or state["workload"] == workload]
        attach_items(self.store, found, self._conn)
        return found

    def workloads(self) -> list[WorkloadState]:
        """Workloads sorted by id."""
        if self._live:
            with self._reads() as conn:
                return whole_registry.live_workloads(conn)
        return [state for _, state in sorted(self._whole().workloads.items())]

    # -- appending -------------------------------------------------------------------------------------------

    def append(self, stream: str, events: Sequence[NewEvent], *, expected_version: int | None = None,
               idempotency_key: str | None = None) -> Appended:
        """Append one batch as the view's actor; where it landed, and whether this call wrote it (`new`) or its
        idempotency key answered it with the same batch recorded before. A refusal raises (StoreError)."""
        assert self.actor is not None, "a view appends as an actor (Registry.view)"
        return self.store.append_batch(Append(stream, events, self.actor, expected_version, idempotency_key))
