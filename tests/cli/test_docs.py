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

import click
import pytest

from registry.cli.main import main
from paths import ROOT, TESTS

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
    """Beyond the generated reference (docs/cli.md), which names every command by construction."""
    text = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS if document.name != "cli.md")
    typed = re.compile(r"registry(?: --?[a-z-]+(?:[ =]\S+)?)* " + re.escape(" ".join(path)) + r"(?![\w-])")
    assert typed.search(text), f"`registry {' '.join(path)}` is named in neither README.md nor docs/*.md"


PACKAGES = sorted(path.name for path in (ROOT / "registry").iterdir() if (path / "__init__.py").exists())


def _tests_by_row() -> dict[str, tuple[str, list[str]]]:
    """docs/architecture.md "Where the tests are": {row label: (its folder, the test files it names)}."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Where the tests are", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return {label.strip(): (folder.strip().strip("`"), re.findall(r"`(test_[a-z0-9_]+\.py)`", files))
            for label, folder, files in rows[1:]}


def test_every_package_has_a_row_of_tests():
    labels = set(_tests_by_row())
    assert [package for package in PACKAGES if f"`{package}/`" not in labels] == []


def test_every_test_file_sits_in_one_row_and_in_its_folder():
    rows = _tests_by_row().values()
    named = [f"{folder}{name}" for folder, files in rows for name in files]
    on_disk = sorted(str(path.relative_to(ROOT)) for path in TESTS.rglob("test_*.py"))
    assert sorted(set(named) - set(on_disk)) == []
    assert sorted({name for name in named if named.count(name) > 1}) == []
    assert sorted(set(on_disk) - set(named)) == []


def test_no_test_file_imports_another():
    """What several files share is a helper in tests/support/; a test module imported as a library would run its
    tests' module-level set-up in every file that imports it, and hide which file owns a test."""
    tests = {path.stem for path in TESTS.rglob("test_*.py")}
    found = [f"{path.relative_to(ROOT)}: {line.strip()}" for path in sorted(TESTS.rglob("*.py"))
             for line in path.read_text(encoding="utf-8").splitlines()
             if (match := re.match(r"\s*(?:from|import) (test_\w+)", line)) and match.group(1) in tests]
    assert found == []


def test_the_command_reference_is_what_the_commands_print():
    from registry.cli.reference import PAGE, reference

    assert PAGE.read_text(encoding="utf-8") == reference(), \
        "docs/cli.md is stale: `python -m registry.cli.reference` writes it from the commands"


def command_lines() -> list[tuple[str, str]]:
    """(document, line) for every `registry ...` line in a code block of README.md and docs/ (a `$ ` prompt
    and a line continued with `\\` taken as typed; what follows a shell's `&&`, `;`, `>` or `#` left off, and a `|`, in `variants`)."""
    found = []
    for document in DOCUMENTS:
        for block in re.findall(r"```[^\n]*\n(.*?)```", document.read_text(encoding="utf-8"), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip().removeprefix("$ ")
                if re.match(r"(\.venv/bin/)?registry(\s|$)", line) and not re.match(r"\S+ \S+:\s", line):
                    found.append((document.name, re.split(r"\s(?:&&|;|>|#)\s", line)[0]))
    return found


def variants(line: str) -> list[str]:
    """A synopsis line as the lines it stands for: without its optional `[...]` parts, and with each in (the
    first of ` | ` alternatives, `...` repeats left off)."""
    optional = re.compile(r"\[([^\[\]]*)\]")
    bare = optional.sub(" ", line)
    full = optional.sub(lambda found: " " + found.group(1).split(" | ")[0] + " ", line)
    return list(dict.fromkeys(re.sub(r"\s\.\.\.(?=\s|$)", " ", text).split(" | ")[0] for text in (bare, full)))


def parsed(line: str, monkeypatch) -> list[str]:
    """The command path a line names, as click parses it; a usage error raises click.UsageError. The files a
    line names are a reader's, so whether they exist here is not checked."""
    import shlex

    monkeypatch.setattr(click.Path, "convert", lambda self, value, param, ctx: value)
    args = shlex.split(line)[1:]
    context = main.make_context("registry", args)
    path = []
    while isinstance(context.command, click.Group) and unparsed(context):
        name, command, rest = context.command.resolve_command(context, unparsed(context))
        path.append(name)
        context = command.make_context(name, rest, parent=context)
    return path


def unparsed(context: click.Context) -> list[str]:
    """What a group's context left for its subcommand (click 8 keeps the command's name apart, and warns that
    click 9 will not)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return [*context.protected_args, *context.args]


LINES = command_lines()


@pytest.mark.parametrize("document, line", LINES, ids=[f"{document}: {line}" for document, line in LINES])
def test_every_command_line_in_the_docs_parses(document, line, monkeypatch):
    """Each is parsed by click itself, as the program would parse it: a renamed option or command, a missing
    argument or a wrong number of them in a documented command is a usage error here (a synopsis line's
    optional parts both left out and given; a line of a program's output, `registry ssim: ...`, is none)."""
    for typed in variants(line):
        try:
            path = parsed(typed, monkeypatch)
        except click.UsageError as exc:
            pytest.fail(f"{document}: `{typed}`: {exc.format_message()}")
        assert path, f"{document}: `{typed}` names no command"


# The commands a newcomer meets first (README.md's path: a registry, a contract, a candidate, its evidence, the
# decision, what it says, what ships): each one's help shows it typed.
FIRST_MET = ("init", "workload declare", "artifact register", "evidence import", "promote", "show", "history",
             "report", "resolve", "lock")


@pytest.mark.parametrize("path", FIRST_MET)
def test_the_first_commands_met_show_an_example_that_parses(path, monkeypatch):
    from registry.cli.reference import help_text

    command = dict((" ".join(found), command) for found, command in COMMANDS)[path]
    text = help_text(tuple(path.split()), command)
    assert "Example:" in text, f"registry {path} --help shows no example"
    examples = [line.strip() for line in text.split("Example:", 1)[1].split("Options:", 1)[0].splitlines()
                if line.strip().startswith("registry ")]
    assert examples, f"registry {path} --help shows no command line under Example:"
    for line in examples:
        assert parsed(line, monkeypatch) == path.split(), line


def test_every_test_file_a_document_or_the_code_names_exists():
    """A test file named by its path (`tests/<folder>/test_x.py`) in the docs, the code, the benchmarks or the scripts
    is a file of the suite: moving a test moves what names it."""
    named = [(str(path.relative_to(ROOT)), found) for folder in ("docs", "registry", "benchmarks", "scripts", "examples")
             for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".md", ".py", ".sh")
             for found in re.findall(r"(?<![\w/])tests/[\w/]+\.py", path.read_text(encoding="utf-8"))]
    named += [("README.md", found) for found in re.findall(r"(?<![\w/])tests/[\w/]+\.py", (ROOT / "README.md").read_text())]
    assert [(where, found) for where, found in named if not (ROOT / found).is_file()] == []
