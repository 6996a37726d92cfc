"""Replay verification: the live read models must equal a fresh fold of the log.

The read models are a cache of the fold; if a row was edited by hand, written
by a buggy catch-up or left behind by an older fold, the registry would
answer from it silently. `verify_projections` replays the log in memory up to
the live checkpoint and compares every row of every table the read models
declare (indexed columns, state JSON and its sha256; the derived rows: the
verdict history, the payload index; the side tables: counts and heads) with
the row the replay produces, naming each row that differs and which fields.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sqlalchemy import Table, select

from registry.events.store import EventStore

from .catchup import ReadModels, ReadModelsNotWritable
from .items import attach_items
from .read_models import DECLARATIONS, ReadModel, RegistryState, SideTable
from .read_models.declaration import Keyed, load_state
from .record_items import attach_state_documents
from .record_readings import fold_kept
from .snapshot import read_checkpoint, snapshot


def rebuild(store: EventStore) -> RegistryState:
    """The registry's state folded from nothing, in memory, up to the log's head, with its records' running readings
    and its evidence items (as a view as of the head answers `state()`)."""
    state = fold_kept(store, store.head_position())
    attach_items(store, state.artifacts.values())
    attach_state_documents(store, state)
    return state


@dataclass(frozen=True)
class Difference:
    # a read model's name (artifacts, verdicts, payloads, workloads, ...) or a side table's (workload_counts, ...);
    # a verdict's key: ARTIFACT@POSITION; a payload index row's: WORKLOAD/PAYLOAD/ARTIFACT
    model: str
    key: str
    problem: str  # "differs" | "missing from the live table" | "not in the replay"
    fields: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "key": self.key, "problem": self.problem, "fields": list(self.fields)}

    def line(self) -> str:
        where = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"{self.model[:-1]} {self.key}: {self.problem}{where}"


@dataclass(frozen=True)
class ReplayReport:
    position: int
    checked: dict[str, int]
    differences: list[Difference] = field(default_factory=list)
    replay_seconds: float = 0.0
    verdicts_checked: int = 0  # rows of the verdict history table compared (projection_verdicts)
    payloads_checked: int = 0  # rows of the payload index compared (projection_payloads)

    @property
    def ok(self) -> bool:
        return not self.differences

    @property
    def differing_artifacts(self) -> list[str]:
        return [d.key for d in self.differences if d.model == "artifacts"]

    def summary(self) -> str:
        """One line: what was compared at which position, and every difference."""
        checked = ", ".join(f"{count} {model}" for model, count in
                            [*self.checked.items(), ("history verdicts", self.verdicts_checked),
                             ("payload index rows", self.payloads_checked)])
        head = f"position {self.position}: {checked} compared"
        if self.ok:
            return f"{head}; all equal to the replay"
        return f"{head}; {len(self.differences)} differ: " + "; ".join(d.line() for d in self.differences)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "position": self.position, "checked": dict(self.checked),
            "verdicts_checked": self.verdicts_checked, "payloads_checked": self.payloads_checked,
            "differences": [d.to_dict() for d in self.differences],
            "differing_artifacts": self.differing_artifacts, "replay_seconds": self.replay_seconds,
        }


def verify_projections(store: EventStore) -> ReplayReport:
    """Catch the read models up, then compare every live row with a fresh in-memory replay.

    A reader that may not write the read models compares them where they
    stand: the replay runs to their checkpoint, not to the head.
    """
    try:
        ReadModels(store).catch_up()
    except ReadModelsNotWritable:
        pass  # compared where they stand: the replay below runs to their own checkpoint
    tables = _compared_tables()
    with snapshot(store.engine) as conn:
        position = read_checkpoint(conn) or 0
        live = {name: {named(tuple(row[column] for column in key)): dict(row)
                       for row in conn.execute(select(table)).mappings()}
                for name, (table, key, named, _) in tables.items()}
    started = time.perf_counter()
    replay = fold_kept(store, position)
    seconds = time.perf_counter() - started
    expected = _expected_rows(replay)
    differences = []
    for name, (_, _, _, document) in tables.items():
        differences += _compare(name, expected[name], live[name], document)
    return ReplayReport(
        position=position,
        checked={name: len(expected[name]) for name in tables if name not in ("verdicts", "payloads")},
        verdicts_checked=len(expected["verdicts"]),
        payloads_checked=len(expected["payloads"]),
        differences=differences,
        replay_seconds=seconds,
    )


def _compared_tables() -> dict[str, tuple[Table, tuple[str, ...], Callable[[tuple], str], str | None]]:
    """Each table a read model declares, by the name its differences carry: (table, its key columns, how a
    difference names a key, the JSON column compared key by key inside: `state` for own rows, `entry` for the
    verdict history)."""
    found: dict[str, tuple[Table, tuple[str, ...], Callable[[tuple], str], str | None]] = {}
    for model in DECLARATIONS:
        if model.table is not None:
            document = "state" if model.own_rows else ("entry" if "entry" in model.table.c else None)
            found[model.name] = (model.table, model.key, model.key_text, document)
        for side in model.side_tables:
            found[_side_name(side)] = (side.table, side.key, _joined, None)
    return found


def _side_name(side: SideTable) -> str:
    return side.table.name.removeprefix("projection_")


def _joined(key: tuple) -> str:
    return "/".join(str(part) for part in key)


def _expected_rows(replay: RegistryState) -> dict[str, dict[str, dict]]:
    """The rows of every compared table a fresh fold writes, by table name and key text."""
    expected: dict[str, dict[str, dict]] = {}
    for model in DECLARATIONS:
        if not model.own_rows:
            continue
        states = list(replay.states(model).values())
        rows: Keyed = {}
        for state in states:
            row = model.row(state)
            rows[model.key_of(row)] = row
        _expect(expected, model, rows, states)
        for derived in DECLARATIONS:
            if derived.parent == model.name:
                derived_rows: Keyed = {}
                for state in states:
                    derived_rows.update(derived.derive(state))  # type: ignore[misc]
                _expect(expected, derived, derived_rows, list(derived_rows.values()))
    return expected


def _expect(expected: dict[str, dict[str, dict]], model: ReadModel, rows: Keyed, items: list) -> None:
    expected[model.name] = {model.key_text(key): row for key, row in rows.items()}
    for side in model.side_tables:
        expected[_side_name(side)] = {_joined(key): row for key, row in side.rows(items).items()}


def _compare(name: str, expected: dict[str, dict], live: dict[str, dict], document: str | None) -> list[Difference]:
    found = []
    for key in sorted(expected.keys() | live.keys()):
        if key not in live:
            found.append(Difference(name, key, "missing from the live table"))
        elif key not in expected:
            found.append(Difference(name, key, "not in the replay"))
        else:
            fields = _differing_fields(expected[key], live[key], document)
            if fields:
                found.append(Difference(name, key, "differs", tuple(fields)))
    return found


def _differing_fields(expected: dict[str, Any], live: dict[str, Any], document: str | None) -> list[str]:
    """Column names that differ; for the JSON column (`document`), the top-level keys that differ inside it."""
    fields = [column for column in expected if column != document and expected[column] != live.get(column)]
    if document is not None and expected[document] != live[document]:
        try:
            live_state = load_state(live[document])
        except ValueError:
            return [*fields, f"{document} (not JSON)"]
        if not isinstance(live_state, dict):
            return [*fields, f"{document} (not an object)"]
        wanted = load_state(expected[document])
        inner = sorted(k for k in wanted.keys() | live_state.keys() if wanted.get(k) != live_state.get(k))
        fields += [f"{document}.{k}" for k in inner] or [f"{document} (formatting)"]
    return fields
