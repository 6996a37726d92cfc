"""Printing: rich tables for people, JSON for programs, one-line errors.

Every name a table shows comes from the log (artifact ids, workloads, actors,
failure stages), and the log cannot change: a name must therefore never be
read as rich markup, or a database holding `[/bad]` could not be shown again.
Tables here build every title, header and cell as a plain `Text`, which rich
prints literally; `say` and `emit_json` never interpret markup at all.
"""
from __future__ import annotations

import errno
import io
import json
import sys
from typing import Any, Iterable, Sequence

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Width of tables that go to a pipe or a file, where there is no terminal to measure.
PLAIN_WIDTH = 160

TableSpec = tuple[str | None, Sequence[str], Iterable[Sequence[Any]]]


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False, default=str))


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


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print one table on standard output (the terminal's width there, else PLAIN_WIDTH)."""
    console = Console()
    _Console(width=console.width if console.is_terminal else PLAIN_WIDTH, soft_wrap=False).print(
        _rich_table(title, columns, rows))


def tables_text(tables: Iterable[TableSpec]) -> str:
    """Tables as plain text (no colour, PLAIN_WIDTH wide), for a file."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=PLAIN_WIDTH, soft_wrap=False, color_system=None, force_terminal=False)
    for spec in tables:
        console.print(_rich_table(*spec))
    return buffer.getvalue()


def newline_terminated(text: str) -> str:
    """A rendered document as written to a file or standard output: its last line ends with a newline."""
    return text if text.endswith("\n") else text + "\n"


def say(text: str) -> None:
    click.echo(text)


def fail(message: str) -> None:
    """One line on stderr, exit status 1 (refused or invalid input)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def short(payload: Any, width: int = 80) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
