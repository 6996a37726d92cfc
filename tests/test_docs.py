"""Every CLI command has help and is documented, as sqlite-utils checks its own CLI reference.

The click group in registry/cli/main.py is walked, so a command added
without a docstring, an option without help, or a command no page names
fails here rather than reaching a user as a bare usage line. A command
counts as documented when README.md or a page of docs/ shows it as typed:
`registry` (with any global options) followed by its full path.
"""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from registry.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def commands(command: click.Command = main, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command and subcommand below `command`, by its path of names."""
    found = [(path, command)] if path else []
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            found += commands(command.commands[name], (*path, name))
    return found


COMMANDS = commands()
IDS = [" ".join(path) for path, _ in COMMANDS]


def test_the_walk_finds_the_commands_and_their_subcommands():
    assert {"promote", "evidence import", "lock verify", "db roles"} <= set(IDS)


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_every_command_has_help(path, command):
    assert (command.help or "").strip(), f"registry {' '.join(path)} has no help text (give it a docstring)"
    undocumented = [param.name for param in command.params
                    if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()]
    assert undocumented == [], f"registry {' '.join(path)}: options without help"


@pytest.mark.parametrize("path, command", COMMANDS, ids=IDS)
def test_every_command_is_documented(path, command):
    text = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    typed = re.compile(r"registry(?: --?[a-z-]+(?:[ =]\S+)?)* " + re.escape(" ".join(path)) + r"(?![\w-])")
    assert typed.search(text), f"`registry {' '.join(path)}` is named in neither README.md nor docs/*.md"
