"""What a read model declares once: `ReadModel` and `SideTable`, and the row codec every declaration shares.

A read model is declared in one module of this package: its table and key,
its row type (a `TypedDict`), the event types it folds with their handlers,
the side tables kept beside its rows and the checks a read makes of them,
and a version. Everything else is driven from the list of declarations
(`DECLARATIONS` in this package): the fold's dispatch (fold.py), the row
codec (below), the catch-up's routing of events to rows and its writes
(catchup.py), the row checks (row_checks.py) and `replay --verify`
(verify.py). The checkpoint records every declaration's version, and a
catch-up that finds other versions there folds the whole log again by
itself, so a change to what a model folds needs a new version, never a
migration (docs/projections.md, "Declared read models").

Three ways a model's rows are kept:

- its own table, one row per state, keyed by `key` (artifacts, workloads,
  frame sets, outcomes, bench streams, speed records): the row holds the
  state as canonical JSON with its sha256 (`row_hash`) and, for indexed
  listing, the table's other columns, each the state's value of its name;
- rows derived from a parent model's states (`parent`, `derive`: the
  verdict history, the payload index), written as the difference between
  the rows a catch-up loaded and the rows its fold leaves;
- inside a parent model's rows (`table` None: the monitors, in each
  artifact's state), versioned on their own.

A side table holds, for each key, an aggregate of a model's rows (how many
artifact rows a workload has, where each speed record stands): `combine`
says whether a change adds to it (counts) or replaces it (heads).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from sqlalchemy import Column, Connection, String, Table, Text

from registry.events.canonical import canonical_json, sha256_hex, strict_json_loads
from registry.formats.errors import first_line
from registry.events.schema import METADATA

from ..errors import ProjectionError
from ..log import LogEvent

# A handler folds one event into the state (updated in place). The state is RegistryState; each model module
# names the part of it its handlers touch as a Protocol, so no model module imports the state's module.
Handler = Callable[[Any, LogEvent], None]
# Rows keyed by their primary key's values, in the table's key order.
Keyed = dict[tuple, dict[str, Any]]


@dataclass(frozen=True)
class SideTable:
    """A table kept beside a model's rows, in the same transaction, that reads check the rows against.

    `rows` gives the side table's rows for some of the model's states (or
    derived rows), keyed by the side table's key. With `combine` "add",
    each row's other columns are counts: a catch-up adds the difference
    between the rows it leaves and the rows it loaded. With "set", a
    catch-up writes the rows of what it touched.
    """

    table: Table
    key: tuple[str, ...]
    rows: Callable[[Iterable[dict[str, Any]]], Keyed]
    combine: Literal["add", "set"]


@dataclass(frozen=True)
class ReadModel:
    """One read model, declared once (the module docstring says what drives what from it)."""

    name: str  # its attribute of RegistryState, its key in the checkpoint's versions and in replay differences
    version: int  # raised whenever what the model folds, or how its rows are written, changes
    row_type: type  # the TypedDict of one row's state (or, for derived rows, of one entry)
    folds: Mapping[str, Handler]  # event type -> handler; dispatch runs a type's handlers in declaration order
    singular: str  # how a refusal names one row: "artifact", "speed record", ...
    table: Table | None = None
    key: tuple[str, ...] = ()
    # Own rows: the part of the state that is not stored in the row (kept in a derived model's table instead).
    stored: Callable[[dict[str, Any]], dict[str, Any]] = lambda state: state
    # The stream prefix whose events name this model's rows: a catch-up loads those rows before folding them.
    stream_prefix: str | None = None
    # Whether a read checks each row against its own stream: its `last_position` an event of it, none later.
    logged: bool = False
    # A model's own checks of the rows a read found, as (key, last_position, state), against the log or its side
    # tables; and of a key a read found no row for (which may have been deleted).
    checks: Callable[[Connection, Sequence[tuple[str, int, dict]], int], None] | None = None
    absent: Callable[[Connection, str], None] | None = None
    # The state key holding its stream's version at `last_position` (row checks hold it to the log), if any.
    stream_version: str | None = None
    # Rows no stream names (a speed record, fed by many streams): loaded when the fold first meets the key.
    lazy: bool = False
    # Derived rows: the model whose states they are computed from, and how.
    parent: str | None = None
    derive: Callable[[dict[str, Any]], Keyed] | None = None
    side_tables: tuple[SideTable, ...] = field(default=())
    # How a replay difference names one row by its key values.
    key_text: Callable[[tuple], str] = lambda key: "/".join(str(part) for part in key)

    @property
    def own_rows(self) -> bool:
        return self.table is not None and self.parent is None

    @cached_property
    def indexed(self) -> tuple[str, ...]:
        """An own-rows table's key and indexed columns: each holds the state's value of the same name."""
        assert self.table is not None
        return tuple(name for name in self.table.columns.keys() if name not in ("state", "row_hash"))

    def row(self, state: dict[str, Any]) -> dict[str, Any]:
        """The row of an own-rows model's state: its key, indexed columns, state text and hash."""
        text = canonical_json(self.stored(state))
        return {**{name: state[name] for name in self.indexed}, "state": text, "row_hash": sha256_hex(text)}

    def key_of(self, row: Mapping[str, Any]) -> tuple:
        return tuple(row[column] for column in self.key)


def state_table(name: str, key: str, *columns: Column, key_length: int = 200) -> Table:
    """An own-rows table: its key, the indexed columns, and the folded state with its hash.

    These tables are derived: every row is a fold of the event log up to the
    checkpoint's position, so they carry no immutability triggers and can be
    emptied and rebuilt at any time (`ReadModels.reset`).
    """
    return Table(
        name, METADATA,
        Column(key, String(key_length), primary_key=True),
        *columns,
        Column("state", Text, nullable=False),
        Column("row_hash", String(64), nullable=False),
    )


def load_state(text: str) -> dict[str, Any]:
    """A row's state; a row that is not a JSON object is refused in one line (the read models are derived)."""
    try:
        state = strict_json_loads(text)
    except ValueError as exc:
        raise ProjectionError(f"a read-model row is not JSON ({first_line(exc)}); "
                              "`registry replay` rebuilds the read models from the log") from None
    if not isinstance(state, dict):
        raise ProjectionError("a read-model row is not a JSON object; `registry replay` rebuilds the read models "
                              "from the log")
    return state


def same_subject(event: LogEvent, named: Any, expected: str) -> None:
    """Refuse an event whose payload names another subject than its stream's."""
    if named != expected:
        raise ProjectionError(
            f"event at position {event.position} ({event.type}) in stream {event.stream} names {named!r}"
        )


def counted(key: tuple[str, ...], column: str, keys: Iterable[tuple]) -> Keyed:
    """Rows counting how often each key occurs: a side table of counts (`combine` "add")."""
    found: Keyed = {}
    for value in keys:
        row = found.get(value)
        if row is None:
            found[value] = {**dict(zip(key, value)), column: 1}
        else:
            row[column] += 1
    return found
