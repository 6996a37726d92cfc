"""The registry's latest page: the artifacts and speed records that moved last, a given number of each, and how
many there are in all: what the live view shows (serve/live.py), read every few seconds while a server runs.

A whole-registry read (whole_registry.py) costs every row, and a speed
record's row holds every batch of its pairs: read whole every few seconds
while artifacts keep arriving, it holds memory, and takes time, in
proportion to everything ever measured. A page costs its size instead,
however large the registry grows. Live: the `most` artifact rows that moved
last (by `last_position`, a column stored before the state, so the rows not
taken are never decoded), the promoted artifacts that moved last (their
monitors carry the page's alerts) up to the same number, and the records
that moved last chosen on their small heads table and then read by key; each
row checked as a row a decision rests on is (row_checks.py), and the totals
counted from the side tables and an index. A record is the page's largest
row (every batch of its pairs), so a reader that kept what it drew of a
record names it (`SeenRecord`): while the record's row still hashes to what
the reader saw, under the same workload row, the row is checked by its hash
and its head and not decoded (`LatestPage.unchanged`), so a read decodes
only the records that moved since the reader's last, however full the page;
and a reader that asks may take those by key (`LatestPage.moved`) and read
and decode them one at a time (`View.record_of`), so that what it holds at
once is one record, however many moved. The workloads are read whole: an
administrator declares each one. As of a position, or over a connection that
may only read, the log is folded (view.py) and the same page taken from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sqlalchemy import Connection, func, select

from registry.events.canonical import sha256_hex

from .read_models import ArtifactState, RegistryState, SpeedRecordState, WorkloadState
from .read_models.artifacts import ARTIFACTS, WORKLOAD_COUNTS
from .read_models.speed_records import RECORD_HEADS, SPEED_RECORDS, damaged
from .row_checks import checked_states, row_columns
from .whole_registry import live_workloads

PROMOTED = "promoted"


@dataclass(frozen=True)
class SeenRecord:
    """What a reader saw of a speed record's row when it last read it: the row's hash, and the workload row it
    read the record under (its name and last position: a contract declared since reads the same row anew)."""

    row_hash: str
    workload: str
    workload_position: int


@dataclass
class LatestPage:
    """The latest page at `position`: artifacts and promoted artifacts newest first, records newest first, each
    list at most the page's size, beside how many there are in all. Of the page's records, those the reader saw
    unchanged are in `unchanged` (record -> last position), checked and not decoded, and the rest in `records`
    (or, asked for undecoded, their keys in `moved`, newest first, each for the reader to read in the same
    snapshot); `row_hashes` has every live record row's hash (none from a folded log), for the reader to name next
    time."""

    position: int
    workloads: dict[str, WorkloadState]
    artifacts: list[ArtifactState]
    artifacts_in_all: dict[str, int]  # by workload
    promoted: list[ArtifactState]
    promoted_in_all: int
    records: list[SpeedRecordState]
    records_in_all: int
    unchanged: dict[str, int] = field(default_factory=dict)
    row_hashes: dict[str, str] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)


def read_live(conn: Connection, position: int, most_artifacts: int, most_records: int,
              seen: Mapping[str, SeenRecord] | None = None, decode: bool = True) -> LatestPage:
    """The page from the live tables in the view's snapshot, each row checked; a record in `seen` whose row and
    workload row are still what the reader saw is checked by its hash and head and left undecoded. Without
    `decode`, the other records are not kept either, only named (`moved`), for the caller to read one at a time
    (`read_record`)."""
    newest = select(*row_columns("artifacts")).order_by(ARTIFACTS.c.last_position.desc())
    artifacts = checked_states(conn, "artifacts", conn.execute(newest.limit(most_artifacts)).all(), position)
    listed = {artifact["artifact"]: artifact for artifact in artifacts}
    promoted = [listed.get(artifact["artifact"], artifact) for artifact in checked_states(conn, "artifacts", conn.execute(
        newest.where(ARTIFACTS.c.decision == PROMOTED).limit(most_artifacts)).all(), position)]
    promoted_in_all = conn.execute(select(func.count()).select_from(ARTIFACTS)
                                   .where(ARTIFACTS.c.decision == PROMOTED)).scalar_one()
    workloads = {workload["workload"]: workload for workload in live_workloads(conn)}
    heads = dict(conn.execute(select(RECORD_HEADS.c.record, RECORD_HEADS.c.last_position)
                              .order_by(RECORD_HEADS.c.last_position.desc()).limit(most_records)).all())
    changed: list[Sequence[Any]] = []
    moved: list[tuple[int, str]] = []
    unchanged: dict[str, int] = {}
    row_hashes: dict[str, str] = {}
    for row in conn.execute(select(*row_columns("records")).where(SPEED_RECORDS.c.record.in_(list(heads)))):
        key, _, row_hash, last_position = row
        row_hashes[key] = row_hash
        if _unchanged((seen or {}).get(key), row_hash, workloads):
            _check_unchanged(row, heads, position)
            unchanged[key] = last_position
        elif decode:
            changed.append(row)
        else:
            moved.append((last_position, key))
    records = sorted(checked_states(conn, "records", changed, position) if decode else [],
                     key=lambda record: -record["last_position"])
    records_in_all = conn.execute(select(func.count()).select_from(RECORD_HEADS)).scalar_one()
    counts = {row.workload: row.artifacts for row in conn.execute(select(WORKLOAD_COUNTS))}
    return LatestPage(position, workloads, artifacts, counts, promoted, promoted_in_all, records, records_in_all,
                      unchanged, row_hashes, [key for _, key in sorted(moved, reverse=True)])


def read_record(conn: Connection, key: str, position: int) -> SpeedRecordState:
    """One record of a page read with its records named (`moved`), from the same snapshot, checked as a page's
    rows are."""
    rows = conn.execute(select(*row_columns("records")).where(SPEED_RECORDS.c.record == key)).all()
    if not rows:
        raise damaged(key, "its row is gone from the snapshot that listed it")
    [record] = checked_states(conn, "records", rows, position)
    return record


def _unchanged(seen: SeenRecord | None, row_hash: str, workloads: Mapping[str, Any]) -> bool:
    """Whether a record's row is the one the reader saw, under the workload row it saw."""
    if seen is None or seen.row_hash != row_hash:
        return False
    workload = workloads.get(seen.workload)
    return workload is not None and workload.get("last_position") == seen.workload_position


def _check_unchanged(row: Sequence[Any], heads: Mapping[str, int], checkpoint: int) -> None:
    """A record row the reader saw, checked without decoding it: its state still hashes to its row_hash (the hash
    of a state already decoded and checked in full, its key and its entries against the log, which never
    changes) and it stands where its head says, at or before the checkpoint."""
    key, text, row_hash, last_position = row
    if sha256_hex(text) != row_hash:
        raise damaged(key, "its state does not hash to its row_hash")
    if heads.get(key) != last_position or last_position > checkpoint:
        raise damaged(key, f"it stands at position {last_position}, its head at {heads.get(key)}, "
                           f"the checkpoint at {checkpoint}")


def of_folded(state: RegistryState, most_artifacts: int, most_records: int) -> LatestPage:
    """The same page taken from a folded registry (a view as of a position, or one that may only read)."""
    newest = sorted(state.artifacts.values(), key=lambda artifact: -artifact["last_position"])
    promoted = [artifact for artifact in newest if artifact["decision"] == PROMOTED]
    counts: dict[str, int] = {}
    for artifact in newest:
        counts[artifact["workload"]] = counts.get(artifact["workload"], 0) + 1
    records = sorted(state.records.values(), key=lambda record: -record["last_position"])
    return LatestPage(state.position, dict(state.workloads), newest[:most_artifacts], counts,
                      promoted[:most_artifacts], len(promoted), records[:most_records], len(records))
