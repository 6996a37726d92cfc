"""Printing: rich tables for people, JSON for programs, one-line errors.

`say` and `emit_json` never interpret markup at all. Tables are drawn by
`rich_tables`, imported only when a table is printed: rich costs a read
command's start-up a tenth of a second, and `--json` never needs it.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import click

from registry.formats.errors import UserError, first_line

if TYPE_CHECKING:
    from .rich_tables import TableSpec


def json_text(value: Any) -> str:
    """The JSON every command prints: indented, sorted keys, no NaN."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False, default=str)


def emit_json(value: Any) -> None:
    click.echo(json_text(value))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print one table on standard output (the terminal's width there, else rich_tables.PLAIN_WIDTH)."""
    from .rich_tables import print_table  # rich only when a table is drawn (see the module docstring)

    print_table(title, columns, rows)


def tables_text(tables: Iterable[TableSpec]) -> str:
    """Tables as plain text (no colour, rich_tables.PLAIN_WIDTH wide), for a file."""
    from .rich_tables import render_tables  # rich only when a table is drawn (see the module docstring)

    return render_tables(tables)


def newline_terminated(text: str) -> str:
    """A rendered document as written to a file or standard output: its last line ends with a newline."""
    return text if text.endswith("\n") else text + "\n"


# Context.meta is shared by a command's context and its group's (registry.cli.main reads it).
EXIT_STATUS_KEY = "registry.exit_status"


def exit_status_ahead(status: int) -> None:
    """Record the status the command will exit with, before it prints its result.

    A reader that closes the pipe early ends the command at its next write;
    the command then exits with this status (0 when none was recorded), so a
    closed pipe can never turn "not promoted" or "chain broken" into success.
    """
    click.get_current_context().meta[EXIT_STATUS_KEY] = status


def say(text: str) -> None:
    click.echo(text)


def fail(message: str) -> None:
    """One line on stderr, exit status 1 (refused or invalid input)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


BUG_REPORT = "this is a bug in the registry, not a problem with your input: please report it with the text above"


def crash_report(exc: BaseException) -> None:
    """A defect, shown as one: the traceback, then a line asking for a bug report (on stderr)."""
    import traceback

    text = "".join(traceback.format_exception(exc))
    click.echo(f"{text.rstrip()}\ninternal error: {type(exc).__name__}: {first_line(exc)}"
               f"\n{BUG_REPORT}", err=True)


# The first bytes of every SQLite database file (https://www.sqlite.org/fileformat.html, 1.3).
SQLITE_HEADER = b"SQLite format 3\x00"


def output_path(path: str, force: bool, option: str = "--out") -> Path:
    """Where a command may write a file: never over a registry, over any other existing file only with --force.

    "No command deletes or overwrites a registry": an existing SQLite
    database (a registry, or the very one being read) is refused even with
    --force, as is anything that is not a regular file; any other existing
    file is refused unless --force is given. One line, nothing written.
    """
    target = Path(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{option} {path}: exists and is not a regular file; name a new file")
    with open(target, "rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if header == SQLITE_HEADER:
        raise UserError(f"{option} {path}: is an SQLite database (a registry?), and no command overwrites one; "
                        "name another file")
    if not force:
        raise UserError(f"{option} {path}: exists; give --force to replace it")
    return target


def short(payload: Any, width: int = 80) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
