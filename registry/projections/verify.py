"""Replay verification: the live read models must equal a fresh fold of the log.

The read models are a cache of the fold; if a row was edited by hand, written
by a buggy catch-up or left behind by an older fold, the registry would
answer from it silently. `verify_projections` replays the log in memory up to
the live checkpoint and compares every row (indexed columns, state JSON and
its sha256; the verdict history rows; the payload index rows) with the row
the replay produces, naming each artifact, workload or frame set that
differs and which fields.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from registry.events.store import EventStore

from sqlalchemy import select

from .asof import fold_log
from .catchup import ReadModels, ReadModelsNotWritable
from .items import attach_items
from .record_items import attach_state_documents
from .payload_index import all_index_rows, index_key
from .rows import MODELS, load_state
from .schema import PAYLOADS, VERDICTS
from .snapshot import read_checkpoint, snapshot
from .state import RegistryState
from .verdict_history import records_of


def rebuild(store: EventStore) -> RegistryState:
    """The registry's state folded from nothing, in memory, up to the log's head, with its evidence items
    (as `Projections.state()` answers it)."""
    state = fold_log(store, store.head_position())
    attach_items(store, state.artifacts.values())
    attach_state_documents(store, state)
    return state


@dataclass(frozen=True)
class Difference:
    # artifacts | verdicts | payloads | workloads | framesets | outcomes
    # (a verdict's key: ARTIFACT@POSITION; a payload index row's: WORKLOAD/PAYLOAD/ARTIFACT)
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
    with snapshot(store.engine) as conn:
        position = read_checkpoint(conn) or 0
        live = {
            model: {row[key]: dict(row) for row in conn.execute(table.select()).mappings()}
            for model, (table, key, _) in MODELS.items()
        }
        live["verdicts"] = {_verdict_key(row): dict(row) for row in conn.execute(select(VERDICTS)).mappings()}
        live_index = {index_key(tuple(row)) for row in conn.execute(
            select(PAYLOADS.c.workload, PAYLOADS.c.payload_sha256, PAYLOADS.c.artifact))}
    started = time.perf_counter()
    replay = fold_log(store, position)
    seconds = time.perf_counter() - started
    differences = []
    for model, (_, _, to_row) in MODELS.items():
        expected = {key: to_row(value) for key, value in getattr(replay, model).items()}
        differences += _compare(model, expected, live[model])
    history = {_verdict_key(row): row for state in replay.artifacts.values()
               for row in (record.to_row() for record in records_of(state))}
    differences += _compare("verdicts", history, live["verdicts"], document="entry")
    index = {index_key(row) for row in all_index_rows(replay.artifacts.values())}
    differences += [Difference("payloads", key, "missing from the live table") for key in sorted(index - live_index)]
    differences += [Difference("payloads", key, "not in the replay") for key in sorted(live_index - index)]
    return ReplayReport(
        position=position,
        checked={model: len(getattr(replay, model)) for model in MODELS},
        verdicts_checked=len(history),
        payloads_checked=len(index),
        differences=differences,
        replay_seconds=seconds,
    )


def _verdict_key(row) -> str:
    return f"{row['artifact']}@{row['position']}"


def _compare(model: str, expected: dict[str, dict], live: dict[str, dict], document: str = "state") -> list[Difference]:
    found = []
    for key in sorted(expected.keys() | live.keys()):
        if key not in live:
            found.append(Difference(model, key, "missing from the live table"))
        elif key not in expected:
            found.append(Difference(model, key, "not in the replay"))
        else:
            fields = _differing_fields(expected[key], live[key], document)
            if fields:
                found.append(Difference(model, key, "differs", tuple(fields)))
    return found


def _differing_fields(expected: dict[str, Any], live: dict[str, Any], document: str = "state") -> list[str]:
    """Column names that differ; for the JSON column (`document`), the top-level keys that differ inside it."""
    fields = [column for column in expected if column != document and expected[column] != live.get(column)]
    if expected[document] != live[document]:
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
