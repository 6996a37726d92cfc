"""What a catch-up or a rebuild writes, driven from the read models' declarations: one executemany per table.

Two kinds of write, each one prepared statement per table executed with
every row at once (SQLite's and Postgres's drivers run it as one
executemany):

- a rebuild (`reset`, a catch-up onto an empty read side, a catch-up that
  finds other declaration versions at the checkpoint) empties every table and
  inserts every row of a fold of the whole log;
- a catch-up from a checkpoint writes what its events changed: the rows of
  the states they touched (an upsert: `INSERT ... ON CONFLICT (key) DO
  UPDATE`), the derived rows that came and went (`Change.derived_before`
  against the rows now), and each side table's difference (counts added to,
  heads replaced).

The write runs inside the catch-up's transaction, after the checkpoint moved
on condition (catchup.py), so a catch-up that lost the race writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any, Iterable

from sqlalchemy import Connection, Table, delete, insert, tuple_

from .read_models import DECLARATIONS, ReadModel, RegistryState, SideTable
from .read_models.declaration import Keyed


@dataclass
class Change:
    """What a catch-up folded, as its writes need it: the keys each own-rows model touched and which of them had
    rows, and the derived rows and side-table rows of the states as they were loaded (before the fold)."""

    touched: dict[str, set[str]] = field(default_factory=lambda: {m.name: set() for m in DECLARATIONS if m.own_rows})
    existing: dict[str, set[str]] = field(default_factory=lambda: {m.name: set() for m in DECLARATIONS if m.own_rows})
    derived_before: dict[str, Keyed] = field(default_factory=dict)
    sides_before: dict[str, Keyed] = field(default_factory=dict)

    def loaded(self, model: ReadModel, state: dict[str, Any]) -> None:
        """Note a state read from its row, before the fold changes it: its derived and side-table rows."""
        own = self.sides_before
        for side in model.side_tables:
            if side.combine == "add":
                _add(own.setdefault(side.table.name, {}), side.rows([state]), side)
        for derived in _children(model):
            rows = derived.derive(state)  # type: ignore[misc]
            self.derived_before.setdefault(derived.name, {}).update(rows)
            for side in derived.side_tables:
                if side.combine == "add":
                    _add(own.setdefault(side.table.name, {}), side.rows(rows.values()), side)


def _children(model: ReadModel) -> list[ReadModel]:
    return [derived for derived in DECLARATIONS if derived.parent == model.name]


def _add(total: Keyed, more: Keyed, side: SideTable) -> None:
    """Sum `more`'s count columns into `total`, key by key."""
    for key, row in more.items():
        found = total.get(key)
        if found is None:
            total[key] = dict(row)
        else:
            for column, value in row.items():
                if column not in side.key:
                    found[column] += value


def rebuild_rows(conn: Connection, state: RegistryState) -> None:
    """Empty every read-model table but the checkpoint, then insert every row of `state` (a fold of the log)."""
    for model in DECLARATIONS:
        for table in _tables(model):
            conn.execute(delete(table))
    for model in DECLARATIONS:
        if not model.own_rows:
            continue
        states = list(state.states(model).values())
        _insert(conn, model.table, [model.row(value) for value in states])  # type: ignore[arg-type]
        _insert_sides(conn, model, states)
        for derived in _children(model):
            rows: Keyed = {}
            for value in states:
                rows.update(derived.derive(value))  # type: ignore[misc]
            _insert(conn, derived.table, [rows[key] for key in sorted(rows)])  # type: ignore[arg-type]
            _insert_sides(conn, derived, rows.values())


def _tables(model: ReadModel) -> list[Table]:
    return [*(() if model.table is None else (model.table,)), *(side.table for side in model.side_tables)]


def _insert(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    if rows:
        conn.execute(insert(table), rows)


def _insert_sides(conn: Connection, model: ReadModel, items: Iterable[dict[str, Any]]) -> None:
    items = list(items)
    for side in model.side_tables:
        rows = side.rows(items)
        _insert(conn, side.table, [rows[key] for key in sorted(rows)])


def write_change(conn: Connection, state: RegistryState, change: Change) -> None:
    """The rows a catch-up's fold changed, each table in one statement (the module docstring)."""
    for model in DECLARATIONS:
        if not model.own_rows:
            continue
        states = state.states(model)
        now = [states[key] for key in sorted(change.touched[model.name])]
        _upsert(conn, model.table, model.key, [model.row(value) for value in now])  # type: ignore[arg-type]
        _write_sides(conn, model, now, change)
        for derived in _children(model):
            rows: Keyed = {}
            for value in now:
                rows.update(derived.derive(value))  # type: ignore[misc]
            before = change.derived_before.get(derived.name, {})
            gone = sorted(set(before) - set(rows))
            if gone:
                table = derived.table
                assert table is not None
                conn.execute(delete(table).where(tuple_(*(table.c[column] for column in derived.key)).in_(gone)))
            _upsert(conn, derived.table, derived.key,  # type: ignore[arg-type]
                    [rows[key] for key in sorted(rows) if before.get(key) != rows[key]])
            _write_sides(conn, derived, rows.values(), change)


def _write_sides(conn: Connection, model: ReadModel, items: Iterable[dict[str, Any]], change: Change) -> None:
    items = list(items)
    for side in model.side_tables:
        now = side.rows(items)
        if side.combine == "set":
            _upsert(conn, side.table, side.key, [now[key] for key in sorted(now)])
            continue
        before = change.sides_before.get(side.table.name, {})
        deltas, fell = [], []
        for key in sorted(set(now) | set(before)):
            row = {column: value for column, value in zip(side.key, key)}
            counts = {column: now.get(key, {}).get(column, 0) - before.get(key, {}).get(column, 0)
                      for column in side.table.columns.keys() if column not in side.key}
            if any(counts.values()):
                deltas.append({**row, **counts})
            if any(delta < 0 for delta in counts.values()):
                fell.append(key)
        _upsert(conn, side.table, side.key, deltas, adding=True)
        if fell:  # a count that fell to nothing is no row, as a fold of the log writes none
            table = side.table
            conn.execute(delete(table).where(tuple_(*(table.c[column] for column in side.key)).in_(fell),
                                             *(table.c[column] == 0 for column in table.columns.keys()
                                               if column not in side.key)))


def _upsert(conn: Connection, table: Table, key: tuple[str, ...], rows: list[dict[str, Any]],
            adding: bool = False) -> None:
    if rows:
        conn.execute(_upsert_statement(conn.dialect.name, table, key, adding), rows)


@cache
def _upsert_statement(dialect: str, table: Table, key: tuple[str, ...], adding: bool):
    """`INSERT ... ON CONFLICT (key) DO UPDATE` of every other column, built once per table: replacing each,
    or with `adding`, adding the given value to the stored one (a side table of counts). The dialect's module
    is imported for the backend in use only (a read on SQLite never loads the Postgres dialect)."""
    statement: Any
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgres_insert

        statement = postgres_insert(table)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        statement = sqlite_insert(table)
    others = [column for column in table.columns.keys() if column not in key]
    if not others:  # every column is the key (the payload index): a row already there is the row
        return statement.on_conflict_do_nothing(index_elements=list(key))
    values = {column: (table.c[column] + statement.excluded[column]) if adding else statement.excluded[column]
              for column in others}
    return statement.on_conflict_do_update(index_elements=list(key), set_=values)
