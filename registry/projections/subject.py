"""One subject by its key: the rows behind `show`, evidence import, `promote`, approve, revoke and a pair batch.

An artifact (with its verdict history for `show --json`; without it for an
append or a promote, which need only the row: identity, stream version,
current verdict), a workload (its contract), a frame set, a speed record, a
bench stream. Live: one indexed row of the read models each, read in the
unit of work's snapshot (view.py) and checked as row_checks.py says; as of a
position: that subject's own stream folded, since a subject's state depends
on its stream only (a speed record, fed by many streams, folds the log).
Never the whole log, never a whole stream for a live answer.
"""
from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple, Sequence

from sqlalchemy import Connection, bindparam, func, literal, select, union_all

from registry.events.store import EventStore
from registry.formats.names import BENCH_PREFIX

from .asof import fold_log
from .fold import fold
from .log import LogEvent
from .read_models import ArtifactState, BenchStreamState, RegistryState, SpeedRecordState, WorkloadState, by_name
from .read_models.artifacts import ARTIFACTS
from .read_models.speed_records import SPEED_RECORDS, check_record_count, record_key
from .read_models.verdicts import VERDICTS, VerdictRecord
from .row_checks import check_absent, checked_rows, checked_states, row_columns, state_of


@cache
def _row_asked(name: str):
    """The statement reading one row of a model by the key bound as `key` (`row_columns`; built once a model)."""
    model = by_name(name)
    assert model.table is not None
    return select(*row_columns(name)).where(model.table.c[model.key[0]] == bindparam("key"))


@cache
def _rows_in(names: tuple[str, ...]):
    """One statement reading the rows of each model of `names` by the keys bound as `keys_<index>` (expanding),
    each row led by its model's index (built once per combination)."""
    parts = []
    for index, name in enumerate(names):
        model = by_name(name)
        assert model.table is not None
        parts.append(select(literal(index).label("asked"), *row_columns(name))
                     .where(model.table.c[model.key[0]].in_(bindparam(f"keys_{index}", expanding=True))))
    return union_all(*parts) if len(parts) > 1 else parts[0]


_IDS = select(ARTIFACTS.c.artifact).where(ARTIFACTS.c.workload == bindparam("workload"))
_RECORDS = select(*row_columns("records")).where(SPEED_RECORDS.c.workload == bindparam("workload"))
_HISTORY = select(VERDICTS).where(VERDICTS.c.artifact == bindparam("artifact")).order_by(VERDICTS.c.position)
_HISTORY_COUNT = select(func.count()).select_from(VERDICTS).where(VERDICTS.c.artifact == bindparam("artifact"))
_LATEST_HISTORY = (select(VERDICTS).where(VERDICTS.c.artifact == bindparam("artifact"))
                   .order_by(VERDICTS.c.position.desc()).limit(bindparam("latest")))


def one(conn: Connection, name: str, key: str, checkpoint: int) -> Any:
    """The subject's live row, loaded and checked (None if it has none and never had)."""
    row = conn.execute(_row_asked(name), {"key": key}).first()
    if row is None:
        check_absent(conn, name, key, checkpoint)
        return None
    return checked_states(conn, name, [row], checkpoint)[0]


def history(conn: Connection, artifact_id: str) -> list[VerdictRecord]:
    """One artifact's verdict history rows, in position order (an indexed range of the primary key)."""
    return [VerdictRecord.from_row(row) for row in conn.execute(_HISTORY, {"artifact": artifact_id})]


def latest_history(conn: Connection, artifact_id: str, latest: int) -> tuple[list[VerdictRecord], int]:
    """An artifact's latest `latest` verdict rows and how many it has in all (the history table's primary key)."""
    total = conn.execute(_HISTORY_COUNT, {"artifact": artifact_id}).scalar() or 0
    rows = conn.execute(_LATEST_HISTORY, {"artifact": artifact_id, "latest": latest})
    return [VerdictRecord.from_row(row) for row in rows], total


def artifact_ids(conn: Connection, workload: str) -> list[str]:
    """The ids of the workload's artifacts (the indexed workload column; no state decoded)."""
    return list(conn.execute(_IDS, {"workload": workload}).scalars())


def workload_records(conn: Connection, workload: str, checkpoint: int) -> list[SpeedRecordState]:
    """Every speed record of one workload, by key (an indexed range), each checked, and their number against
    their heads."""
    rows = sorted(conn.execute(_RECORDS, {"workload": workload}).all(), key=lambda row: row[0])
    found = checked_states(conn, "records", rows, checkpoint)
    check_record_count(conn, workload, len(rows))
    return found


def folded(store: EventStore, name: str, key: str, position: int) -> Any:
    """The subject as of a position: its own stream folded (a subject's state depends on it only)."""
    model = by_name(name)
    state = fold_log(store, position, stream=f"{model.stream_prefix}{key}")
    return state.states(model).get(key)


def stored_rows(conn: Connection, wanted: list[tuple[str, str]], checkpoint: int) -> list[Any]:
    """The rows of (model, key) pairs of models whose rows have the same columns (`row_columns`), in one
    statement, their log checks still to run (None for a subject that has none and never had)."""
    if not wanted:
        return []
    names = tuple(dict.fromkeys(name for name, _ in wanted))
    keys = {f"keys_{index}": sorted({key for asked, key in wanted if asked == name})
            for index, name in enumerate(names)}
    found = {(names[row[0]], row[1]): row[1:] for row in conn.execute(_rows_in(names), keys)}
    for name, key in wanted:
        if (name, key) not in found:
            check_absent(conn, name, key, checkpoint)
    return [found.get(pair) for pair in wanted]


class BenchSubject(NamedTuple):
    """What a benchmark session's append reads, from one snapshot: the artifact's row (without its verdict
    history or evidence items), its workload's row, its identity's `bench:` stream row and its bytes' speed
    record row (each None where there is none), and the position they were read at."""

    artifact: ArtifactState | None
    workload: WorkloadState | None
    stream: BenchStreamState | None
    record: SpeedRecordState | None
    position: int

    def with_appended(self, position: int, event_type: str, payload: dict[str, Any]) -> BenchSubject:
        """These rows with the bench event just appended at `position` folded in (in place, by the read models'
        own fold): what the rows will say once a catch-up reaches it, if nothing else touched them in between."""
        assert self.artifact is not None
        identity = self.artifact["identity"]
        key = record_key(self.artifact["workload"], self.artifact["payload_sha256"])
        work = RegistryState(position=self.position)
        if self.stream is not None:
            work.bench_streams[identity] = self.stream
        if self.record is not None:
            work.records[key] = self.record
        # No event id: nothing read from these rows shows one.
        fold(work, [LogEvent(position, "", BENCH_PREFIX + identity, event_type, None, None, None, None, payload)])
        return self._replace(stream=work.bench_streams.get(identity), record=work.records.get(key),
                             position=position)


def bench_rows(conn: Connection, ids: Sequence[str], checkpoint: int) -> dict[str, BenchSubject]:
    """`BenchSubject` of several artifacts (by NFC id), live: the artifacts' rows in one statement, then their
    workloads', bench streams' and speed records' in one more, all checked together."""
    stored = dict(zip(ids, stored_rows(conn, [("artifacts", artifact_id) for artifact_id in ids], checkpoint)))
    wanted: dict[str, tuple[tuple[str, str | None], ...]] = {}
    for artifact_id, row in stored.items():
        if row is not None:
            artifact = state_of("artifacts", row)  # its keys name the other rows; checked with them below
            payload = artifact["payload_sha256"]
            wanted[artifact_id] = (
                ("workloads", artifact["workload"]), ("bench_streams", artifact["identity"]),
                ("records", None if payload is None else record_key(artifact["workload"], payload)))
    asked = list(dict.fromkeys((name, key) for pairs in wanted.values() for name, key in pairs if key is not None))
    rows: dict[tuple[str, str], Any] = {("artifacts", artifact_id): row for artifact_id, row in stored.items()}
    rows.update(zip(asked, stored_rows(conn, asked, checkpoint)))
    present = [(pair, row) for pair, row in rows.items() if row is not None]
    states = dict(zip((pair for pair, _ in present), checked_rows(conn, [(pair[0], row) for pair, row in present],
                                                                   checkpoint)))
    found = {}
    for artifact_id in ids:
        if artifact_id not in wanted:
            found[artifact_id] = BenchSubject(None, None, None, None, checkpoint)
            continue
        workload, stream, record = (None if key is None else states.get((name, key)) for name, key in wanted[artifact_id])
        found[artifact_id] = BenchSubject(states.get(("artifacts", artifact_id)), workload, stream, record,
                                          checkpoint)
    return found
