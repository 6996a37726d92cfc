"""Printing: rich tables for people, JSON for programs, one-line errors."""
from __future__ import annotations

import json
import sys
from typing import Any, Iterable, Sequence

import click
from rich.console import Console
from rich.table import Table


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False, default=str))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    out = Table(title=title, show_lines=False, header_style="bold")
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*("" if cell is None else str(cell) for cell in row))
    console = Console()
    Console(width=console.width if console.is_terminal else 160, soft_wrap=False).print(out)


def say(text: str) -> None:
    click.echo(text)


def fail(message: str) -> None:
    """One line on stderr, exit status 1 (refused or invalid input)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def short(payload: Any, width: int = 80) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"
