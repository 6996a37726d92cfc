"""The command reference (docs/cli.md), generated from every command's `--help`: what a user reads is what runs.

`python -m registry.cli.reference` writes it; tests/cli/test_docs.py fails when
the page in the tree is not what this writes, so a changed command cannot
leave its reference behind (as sqlite-utils generates its CLI reference).
Each command's help is rendered as click renders it for `--help`, at a fixed
width, so the page is the same on every terminal.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .main import main

WIDTH = 100
PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
PREAMBLE = """# Command reference

Every command of `registry`, with its `--help` as the program prints it.
This page is generated from the commands themselves
(`python -m registry.cli.reference` rewrites it; tests/cli/test_docs.py fails
when it is stale), so edit a command's docstring and options, never this
page. The exit statuses every command shares are in
[architecture.md](architecture.md), "Exit codes".
"""


def commands(command: click.Command = main, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and subcommand below `command`, by its path of names, in the order help lists them."""
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name in command.list_commands(click.Context(command)):
            sub = command.get_command(click.Context(command), name)
            if sub is not None and not sub.hidden:
                found += commands(sub, (*path, name))
    return found


def help_text(path: tuple[str, ...], command: click.Command) -> str:
    """What `registry PATH --help` prints, at WIDTH columns."""
    parent = None
    context = click.Context(main, info_name="registry", terminal_width=WIDTH, max_content_width=WIDTH,
                            **main.context_settings)
    for index, name in enumerate(path):
        parent = context
        group = parent.command
        assert isinstance(group, click.Group)
        sub = group.get_command(parent, name)
        assert sub is not None
        context = click.Context(sub, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH)
    return command.get_help(context)


def reference() -> str:
    """The whole page."""
    sections = [PREAMBLE]
    for path, command in commands():
        title = " ".join(("registry", *path))
        sections.append(f"## `{title}`\n\n```\n{help_text(path, command).rstrip()}\n```\n")
    return "\n".join(sections)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else PAGE
    target.write_text(reference(), encoding="utf-8")
