"""Printing: rich tables for people, JSON for programs, one-line errors.

`say` and `emit_json` never interpret markup at all. Tables are drawn by
`rich_tables`, imported only when a table is printed: rich costs a read
command's start-up a tenth of a second, and `--json` never needs it.
"""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import click

from registry.formats.errors import first_line
from registry.formats.output_files import check_output as output_path, write_output  # noqa: F401 (for the commands)

if TYPE_CHECKING:
    from .rich_tables import TableSpec


def json_text(value: Any) -> str:
    """The JSON every command prints: indented, sorted keys, no NaN."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False, default=str)


# Context.meta key set once a command printed its JSON document (registry.cli.main answers otherwise).
JSON_EMITTED_KEY = "registry.json_emitted"


def emit_json(value: Any) -> None:
    click.echo(json_text(value))
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[JSON_EMITTED_KEY] = True


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

# The exit statuses, one meaning each across every command (docs/architecture.md, "Exit codes"; 2 is click's usage
# error, 70 a defect: registry/cli/main.py).
EXIT_REFUSED = 1  # the input or the request is refused: one line on stderr, nothing written
EXIT_NO = 3  # the command ran and its answer is no: not promoted, nothing qualifies, a check found a problem
EXIT_FAILURE_RECORDED = 4  # a measurement failed, and the failure was recorded as evidence


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
    """One line on stderr, exit status EXIT_REFUSED (refused or invalid input)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_REFUSED)


BUG_REPORT = "this is a bug in the registry, not a problem with your input: please report it with the text above"


def crash_report(exc: BaseException) -> None:
    """A defect, shown as one: the traceback, then a line asking for a bug report (on stderr)."""
    import traceback

    text = "".join(traceback.format_exception(exc))
    click.echo(f"{text.rstrip()}\ninternal error: {type(exc).__name__}: {first_line(exc)}"
               f"\n{BUG_REPORT}", err=True)


def short(payload: Any, width: int = 80) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
