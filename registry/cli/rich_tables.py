"""Tables drawn with rich, for people.

Every name a table shows comes from the log (artifact ids, workloads, actors,
failure stages), and the log cannot change: a name must therefore never be
read as rich markup, or a database holding `[/bad]` could not be shown again.
Every title, header and cell is built here as a plain `Text`, which rich
prints literally.
"""
from __future__ import annotations

import errno
import io
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

# A titled table: (title or None, column names, rows); registry/cli/output.py hands these on.
TableSpec = tuple[str | None, Sequence[str], Iterable[Sequence[Any]]]

# Width of tables that go to a pipe or a file, where there is no terminal to measure.
PLAIN_WIDTH = 160


class _Console(Console):
    """A rich console that leaves a closed pipe to the command line's one handler (registry.cli.main)."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def _literal(value: Any) -> Text:
    return Text("" if value is None else str(value))


def _rich_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    out = Table(title=None if title is None else _literal(title), show_lines=False, header_style="bold")
    for column in columns:
        out.add_column(_literal(column), overflow="fold")
    for row in rows:
        out.add_row(*(_literal(cell) for cell in row))
    return out


def print_table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print one table on standard output (the terminal's width there, else PLAIN_WIDTH)."""
    console = Console()
    _Console(width=console.width if console.is_terminal else PLAIN_WIDTH, soft_wrap=False).print(
        _rich_table(title, columns, rows))


def render_tables(tables: Iterable[TableSpec]) -> str:
    """Tables as plain text (no colour, PLAIN_WIDTH wide), for a file."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=PLAIN_WIDTH, soft_wrap=False, color_system=None, force_terminal=False)
    for spec in tables:
        console.print(_rich_table(*spec))
    return buffer.getvalue()
