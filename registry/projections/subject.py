"""One subject's state, by its key: the question behind `show`, evidence import, `promote`, approve and revoke.

An artifact (with its verdict history for `show --json`; without it for an
append or a promote, which need only the row: identity, stream version,
current verdict), a workload (its contract), a frame set. Now: one indexed
row of the live read models, caught up first; as of a position: that
subject's own stream folded, since a subject's state depends on its stream
only. Never the whole log, never a whole stream for a live answer. An
artifact's evidence items are then read from the log by the positions its
state names (items.py).
"""
from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple, Sequence

from sqlalchemy import Connection, bindparam, func, literal, select, union_all

from registry.formats.names import ARTIFACT_PREFIX, FRAMESET_PREFIX, WORKLOAD_PREFIX, normalized_name

from .asof import check_position, fold_log
from .catchup import ReadModels
from .items import attach_items
from .record_items import attach_documents
from .fold import BENCH_PREFIX, record_key
from .read_models import ArtifactState, BenchStreamState, FrameSetState, SpeedRecordState, WorkloadState
from .row_checks import check_absent, check_record_count, checked_rows, checked_states, row_columns, state_of
from .rows import MODELS
from .schema import ARTIFACTS, VERDICTS
from .snapshot import read_checkpoint, reading
from .verdict_history import VerdictRecord, with_history


def read_history(conn: Connection, artifact_id: str) -> list[VerdictRecord]:
    """One artifact's verdict history rows, in position order (an indexed range of the primary key)."""
    rows = conn.execute(select(VERDICTS).where(VERDICTS.c.artifact == artifact_id).order_by(VERDICTS.c.position))
    return [VerdictRecord.from_row(row) for row in rows]


@cache
def _row_asked(model: str):
    """The statement reading one row of `model` by the key bound as `key` (`row_columns`; built once a model)."""
    table, column, _ = MODELS[model]
    return select(*row_columns(model)).where(table.c[column] == bindparam("key"))


@cache
def _rows_in(models: tuple[str, ...]):
    """One statement reading the rows of each model of `models` by the keys bound as `keys_<index>` (expanding),
    each row led by its model's index (built once per combination)."""
    parts = [select(literal(index).label("asked"), *row_columns(model))
             .where(MODELS[model][0].c[MODELS[model][1]].in_(bindparam(f"keys_{index}", expanding=True)))
             for index, model in enumerate(models)]
    return union_all(*parts) if len(parts) > 1 else parts[0]


def _stored_rows(conn: Connection, wanted: list[tuple[str, str]], checkpoint: int) -> list[Any]:
    """The rows of (model, key) pairs of models whose rows have the same columns (`row_columns`), in one
    statement, as `SubjectReads._stored_row` reads each (None for a subject that has none and never had)."""
    if not wanted:
        return []
    models = tuple(dict.fromkeys(model for model, _ in wanted))
    keys = {f"keys_{index}": sorted({key for asked, key in wanted if asked == model})
            for index, model in enumerate(models)}
    found = {(models[row[0]], row[1]): row[1:] for row in conn.execute(_rows_in(models), keys)}
    for model, key in wanted:
        if (model, key) not in found:
            check_absent(conn, model, key, checkpoint)
    return [found.get(pair) for pair in wanted]


class BenchSubject(NamedTuple):
    """What a benchmark session's append reads, from one snapshot: the artifact's row (without its verdict
    history or evidence items), its workload's row, its identity's `bench:` stream row and its bytes' speed
    record row (each None where there is none), and the checkpoint they were read at."""

    artifact: ArtifactState | None
    workload: WorkloadState | None
    stream: BenchStreamState | None
    record: SpeedRecordState | None
    position: int

    def with_appended(self, position: int, event_type: str, payload: dict[str, Any]) -> "BenchSubject":
        """These rows with the bench event just appended at `position` folded in (in place, by the read models'
        own fold): what the rows will say once a catch-up reaches it, if nothing else touched them in between."""
        from .fold import fold
        from .log import LogEvent
        from .state import RegistryState

        identity, record = self.artifact["identity"], self.record
        key = record_key(self.artifact["workload"], self.artifact["payload_sha256"])
        work = RegistryState(position=self.position)
        if self.stream is not None:
            work.bench_streams[identity] = self.stream
        if record is not None:
            work.records[key] = record
        # No event id: nothing read from these rows shows one.
        fold(work, [LogEvent(position, "", BENCH_PREFIX + identity, event_type, None, None, None, None, payload)])
        return self._replace(stream=work.bench_streams.get(identity), record=work.records.get(key),
                             position=position)


class SubjectReads(ReadModels):
    """One subject by its key, from the live row or its own stream folded."""

    def artifact(self, artifact_id: str, as_of: int | None = None) -> ArtifactState | None:
        """The artifact's state with its whole verdict history (`verdicts`)."""
        return self._one("artifacts", ARTIFACT_PREFIX, artifact_id, as_of, history=True)

    def current_artifact(self, artifact_id: str) -> ArtifactState | None:
        """The artifact's state now, without reading its verdict history: what an append or a promote needs.

        Its `stream_version` is the version of the stream's event at
        `last_position`, so an append that expects it fails (ConcurrencyError)
        when anything reached the stream after this state was read.
        """
        return self._one("artifacts", ARTIFACT_PREFIX, artifact_id, None, history=False)

    def workload(self, workload_id: str, as_of: int | None = None) -> WorkloadState | None:
        """The workload's state: its current contract and every version it had."""
        return self._one("workloads", WORKLOAD_PREFIX, workload_id, as_of)

    def frameset(self, name: str, as_of: int | None = None) -> FrameSetState | None:
        """The frame set as registered."""
        return self._one("framesets", FRAMESET_PREFIX, name, as_of)

    def speed_record(self, workload: str, payload_sha256: str, as_of: int | None = None) -> SpeedRecordState | None:
        """The speed record of a payload within a workload (docs/gate.md, "The speed record"): one row.

        As of a position, the log up to it is folded (a record is fed by many
        streams: artifact streams' documents and bench streams' batches).
        """
        key = record_key(workload, payload_sha256)
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            found = fold_log(self.store, check_position(self.store, as_of)).records.get(key)
        else:
            with reading(self.engine) as conn:
                found = self._row(conn, "records", key)
        if found is not None:
            attach_documents(self.store, [found])
        return found

    def workload_speed_records(self, workload: str) -> list[SpeedRecordState]:
        """Every speed record of one workload now, by key (an indexed range), with its documents attached."""
        self.position_to_fold(None)
        table = MODELS["records"][0]
        with reading(self.engine) as conn:
            checkpoint = self.served_position = read_checkpoint(conn) or 0
            rows = conn.execute(select(*row_columns("records")).where(table.c.workload == workload)
                                .order_by(table.c.record)).all()
            found = checked_states(conn, "records", rows, checkpoint)
            check_record_count(conn, workload, len(rows))
        attach_documents(self.store, found)
        return found

    def bench_stream(self, identity: str) -> BenchStreamState | None:
        """An identity's benchmark-session stream now: the record it feeds, its version, its batch keys."""
        as_of = self.position_to_fold(None)
        if as_of is not None:
            return fold_log(self.store, as_of, stream=BENCH_PREFIX + identity).bench_streams.get(identity)
        with reading(self.engine) as conn:
            return self._row(conn, "bench_streams", identity)

    def bench_subject(self, artifact_id: str) -> BenchSubject:
        """Everything a benchmark append checks, after one catch-up and in one snapshot (`BenchSubject`).

        A pair batch costs one catch-up and four indexed rows, each checked as
        row_checks.py says, however long the artifact's, the workload's or the
        bench stream is. A connection that cannot catch the read models up
        folds each subject's own stream instead (slower, never stale).
        """
        return self.bench_subjects([artifact_id])[normalized_name(artifact_id)]

    def bench_subjects(self, artifact_ids: Sequence[str]) -> dict[str, BenchSubject]:
        """`bench_subject` of several artifacts (by NFC id) from one catch-up and one snapshot: the artifacts' rows
        in one statement, then their workloads', bench streams' and speed records' in one more, all checked
        together (a group of pair batches, app/bench.py)."""
        ids = list(dict.fromkeys(normalized_name(artifact_id) for artifact_id in artifact_ids))
        as_of = self.position_to_fold(None)
        if as_of is not None:
            return {artifact_id: self._folded_bench_subject(artifact_id, as_of) for artifact_id in ids}
        with reading(self.engine) as conn:
            position = self.served_position = read_checkpoint(conn) or 0
            stored = dict(zip(ids, _stored_rows(conn, [("artifacts", artifact_id) for artifact_id in ids], position)))
            wanted: dict[str, tuple[tuple[str, str | None], ...]] = {}
            for artifact_id, row in stored.items():
                if row is not None:
                    artifact = state_of("artifacts", row)  # its keys name the other rows; checked with them below
                    payload = artifact["payload_sha256"]
                    wanted[artifact_id] = (
                        ("workloads", artifact["workload"]), ("bench_streams", artifact["identity"]),
                        ("records", None if payload is None else record_key(artifact["workload"], payload)))
            asked = list(dict.fromkeys(pair for pairs in wanted.values() for pair in pairs if pair[1] is not None))
            rows = {**{("artifacts", artifact_id): row for artifact_id, row in stored.items()},
                    **dict(zip(asked, _stored_rows(conn, asked, position)))}
            present = [(pair, row) for pair, row in rows.items() if row is not None]
            states = dict(zip((pair for pair, _ in present),
                              checked_rows(conn, [(pair[0], row) for pair, row in present], position)))
        records = [states[pair] for pairs in wanted.values() for pair in pairs[2:] if pair in states]
        if records:
            attach_documents(self.store, list({id(record): record for record in records}.values()))
        return {artifact_id: BenchSubject(states.get(("artifacts", artifact_id)),
                                          *(states.get(pair) for pair in wanted.get(artifact_id, ())),
                                          position) if artifact_id in wanted
                else BenchSubject(None, None, None, None, position) for artifact_id in ids}

    def _folded_bench_subject(self, artifact_id: str, as_of: int) -> BenchSubject:
        """`bench_subject` as of a position: each subject's own stream folded (a connection that may only read)."""
        artifact = self._folded("artifacts", ARTIFACT_PREFIX, artifact_id, as_of)
        if artifact is None:
            return BenchSubject(None, None, None, None, as_of)
        payload = artifact["payload_sha256"]
        return BenchSubject(artifact, self.workload(artifact["workload"], as_of),
                            self.bench_stream(artifact["identity"]),
                            None if payload is None else self.speed_record(artifact["workload"], payload, as_of),
                            as_of)

    def shown_artifact(self, artifact_id: str, latest: int,
                       as_of: int | None = None) -> tuple[ArtifactState | None, int]:
        """The artifact's state with only its `latest` verdicts (in position order), and how many it has in all.

        What `show` prints: its memory and output stay bounded however many
        verdicts the artifact had (`history` lists every one). Live, it reads
        the row, the last `latest` history rows and their count, by the
        history table's primary key.
        """
        artifact_id = normalized_name(artifact_id)
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            state = self._folded("artifacts", ARTIFACT_PREFIX, artifact_id, as_of)
            if state is None:
                return None, 0
            every = state["verdicts"]
            state["verdicts"] = every[max(0, len(every) - latest):]
            attach_items(self.store, [state])
            return state, len(every)
        with reading(self.engine) as conn:
            state = self._row(conn, "artifacts", artifact_id)
            if state is None:
                return None, 0
            total = conn.execute(select(func.count()).select_from(VERDICTS)
                                 .where(VERDICTS.c.artifact == artifact_id)).scalar()
            rows = conn.execute(select(VERDICTS).where(VERDICTS.c.artifact == artifact_id)
                                .order_by(VERDICTS.c.position.desc()).limit(latest))
            records = [VerdictRecord.from_row(row) for row in rows]
        attach_items(self.store, [state])
        return with_history(state, records), total

    def artifact_ids(self, workload_id: str) -> list[str]:
        """The ids of the workload's artifacts now (the indexed workload column; no state decoded)."""
        self.position_to_fold(None)
        with reading(self.engine) as conn:
            return list(conn.execute(select(ARTIFACTS.c.artifact).where(ARTIFACTS.c.workload == workload_id)).scalars())

    def _one(self, model: str, prefix: str, key: str, as_of: int | None, history: bool = True) -> Any:
        """The state of `key` (NFC, as names are stored) in `model` (its declared type is the caller's)."""
        key = normalized_name(key)
        as_of = self.position_to_fold(as_of)
        if as_of is not None:
            state = self._folded(model, prefix, key, as_of)
        else:
            with reading(self.engine) as conn:
                state = self._row(conn, model, key)
                records = read_history(conn, key) if state is not None and model == "artifacts" and history else None
            if records is not None:
                state = with_history(state, records)
        if state is not None and model == "artifacts":
            attach_items(self.store, [state])
        return state

    def _folded(self, model: str, prefix: str, key: str, as_of: int) -> Any:
        """The subject as of a position: its own stream folded (a subject's state depends on it only)."""
        state = fold_log(self.store, check_position(self.store, as_of), stream=prefix + key)
        return getattr(state, model).get(key)

    def _row(self, conn: Connection, model: str, key: str, checkpoint: int | None = None) -> Any:
        """The subject's live row, loaded (None if it has none); notes the checkpoint it was read at.

        `checkpoint` is the one this snapshot (`conn`) already read, if it did.
        """
        if checkpoint is None:
            checkpoint = self.served_position = read_checkpoint(conn) or 0
        row = self._stored_row(conn, model, key, checkpoint)
        return None if row is None else checked_states(conn, model, [row], checkpoint)[0]

    @staticmethod
    def _stored_row(conn: Connection, model: str, key: str, checkpoint: int) -> Any:
        """The subject's row as stored, its log checks still to run (None if it has none and never had)."""
        row = conn.execute(_row_asked(model), {"key": key}).first()
        if row is None:
            check_absent(conn, model, key, checkpoint)
        return row
