"""Every CLI command has help and is documented, as sqlite-utils checks its own CLI reference.

The click group in registry/cli/main.py is walked, so a command added
without a docstring, an option without help, or a command no page names
fails here rather than reaching a user as a bare usage line. A command
counts as documented when README.md or a page of docs/ shows it as typed:
`registry` (with any global options) followed by its full path.

The map of tests in docs/architecture.md ("Where the tests are") is held to
the tree the same way: every package has a row, and every test file sits in
exactly one, so a reader finds a module's tests from its package's name.
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
        for name in command.list_commands(None):  # `registry`'s own are imported as they are looked up
            found += commands(command.get_command(None, name), (*path, name))
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


TESTS = ROOT / "tests"
PACKAGES = sorted(path.name for path in (ROOT / "registry").iterdir() if (path / "__init__.py").exists())


def _tests_by_row() -> dict[str, list[str]]:
    """docs/architecture.md "Where the tests are": {row label: the test files it names}."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where the tests are", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return {label.strip(): re.findall(r"`(test_[a-z0-9_]+\.py)`", files) for label, files in rows[1:]}


def test_every_package_has_a_row_of_tests():
    labels = set(_tests_by_row())
    assert [package for package in PACKAGES if f"`{package}/`" not in labels] == []


def test_every_test_file_sits_in_one_row_and_every_file_named_exists():
    named = [name for files in _tests_by_row().values() for name in files]
    on_disk = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert sorted(set(named) - set(on_disk)) == []
    assert sorted({name for name in named if named.count(name) > 1}) == []
    assert sorted(set(on_disk) - set(named)) == []
