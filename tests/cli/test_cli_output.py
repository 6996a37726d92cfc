"""What the reading commands print: names literally, --json and --out everywhere, --as-of 0, a closed pipe,
and a demo that touches no registry it did not create. All through click's runner on real SQLite files."""
from __future__ import annotations

import gc
import html
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from registry.cli.main import main

from store_helpers import frame_event, opened

MANIFEST = """
workload: {workload}
sampling: {{height: 64, width: 64, frames: 4, steps: 2, seed: 7, dtype: float32}}
speed:
  min_speedup: 1.1
  runs_per_arm: 4
  protocol: paired
  decision: point
"""


def invoke(url: str, *args: str, actor: str = "tester", **kwargs):
    return CliRunner().invoke(main, ["--db", url, "--actor", actor, *args], **kwargs)


def declare(url: str, tmp: Path, workload: str) -> None:
    manifest = tmp / "workload.yaml"
    manifest.write_text(MANIFEST.format(workload=json.dumps(workload)), encoding="utf-8")
    result = invoke(url, "workload", "declare", str(manifest))
    assert result.exit_code == 0, result.output


def record_failure(url: str, tmp: Path, artifact: str, stage: str, actor: str) -> None:
    """Register `artifact`, record a failed stage for it, and let the gate hold it."""
    assert invoke(url, "artifact", "register", artifact, "--workload", WORKLOAD_OF[artifact], "--kind", "module",
                  actor=actor).exit_code == 0
    document = tmp / "failure.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": artifact,
                                    "evidence": [{"kind": "failure", "stage": stage, "error": "boom"}]}))
    result = invoke(url, "evidence", "import", str(document), actor=actor)
    assert result.exit_code == 0, result.output
    assert invoke(url, "promote", artifact, actor=actor).exit_code == 3


WORKLOAD_OF: dict[str, str] = {}

# Characters that mean something to rich markup, matplotlib mathtext, HTML or a shell, and some letters;
# a name starts with a letter or digit (docs/names.md).
HOSTILE = "[]/\\$<>&\"'=#@*_`~!%^(){}|?.,;+-abcXYZ019é"
names = st.builds(lambda first, rest: first + rest, st.sampled_from("aZ7é"),
                  st.text(alphabet=HOSTILE, min_size=0, max_size=11))


@pytest.fixture(scope="module")
def registry_url(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('names') / 'registry.db'}"
    assert invoke(url, "init").exit_code == 0
    return url


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(artifact=names, workload=names, actor=names, stage=names)
@example(artifact="a[/bad]", workload="[/w]", actor="x[/x]", stage="[/s]")
@example(artifact="a[red]x", workload="$x^2$", actor="a[bold]a", stage="[link=x]s")
@example(artifact="a$\\undefined{$", workload="$\\undefined{$", actor="b", stage="s")
def test_names_from_the_log_print_literally(registry_url, tmp_path, artifact, workload, actor, stage):
    if artifact in WORKLOAD_OF or f"w{workload}" in WORKLOAD_OF.values():
        return  # each example needs its own artifact and workload
    workload = f"w{workload}"
    WORKLOAD_OF[artifact] = workload
    declare(registry_url, tmp_path, workload)
    record_failure(registry_url, tmp_path, artifact, stage, actor)

    history = invoke(registry_url, "history", artifact)
    assert history.exit_code == 0, history.output
    assert artifact in history.output and actor in history.output and f"{stage} failed" in history.output
    shown = invoke(registry_url, "show", artifact)
    assert shown.exit_code == 0, shown.output
    assert f"{artifact}: HELD" in shown.output and f"open failure at {stage}" in shown.output
    assert workload in shown.output
    table = invoke(registry_url, "report", "--workload", workload)
    assert table.exit_code == 0, table.output
    assert artifact in table.output and workload in table.output
    page = invoke(registry_url, "report", "--workload", workload, "--format", "html")
    assert page.exit_code == 0, page.output
    assert html.escape(artifact) in page.output and html.escape(workload) in page.output
    assert "<script" not in page.output


def test_report_takes_json_and_writes_every_format_to_out(registry_cli):
    declare(registry_cli.url, registry_cli.tmp, "wl")
    WORKLOAD_OF["held-one"] = "wl"
    record_failure(registry_cli.url, registry_cli.tmp, "held-one", "compile", "tester")
    as_json = registry_cli("report", "--json")
    assert as_json.exit_code == 0, as_json.output
    assert as_json.output.endswith("}\n")
    assert json.loads(as_json.output)["caught"]["held"][0]["artifacts"] == ["held-one"]
    assert registry_cli("report", "--json", "--format", "csv").exit_code == 2
    for fmt, marker in (("table", "held-one"), ("json", '"held-one"'), ("csv", "caught,"), ("html", "<html")):
        target = registry_cli.tmp / f"report.{fmt}"
        written = registry_cli("report", "--format", fmt, "--out", str(target))
        assert written.exit_code == 0, written.output
        assert written.output == f"report written to {target}\n"
        text = target.read_text(encoding="utf-8")
        assert marker in text and text.endswith("\n"), fmt
    for fmt in ("csv", "html"):
        assert registry_cli("report", "--format", fmt).output.endswith("\n")


def test_as_of_position_0_is_named(registry_cli):
    opened(registry_cli.url).store.append("artifact:k1", [frame_event("a")], actor="tester")
    shown = registry_cli("show", "k1", "--as-of", "0")
    assert shown.exit_code == 1 and "as of position 0" in shown.output
    history = registry_cli("history", "k1", "--as-of", "0")
    assert history.exit_code == 1 and "up to position 0" in history.output


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["table", "json"])
def test_a_closed_pipe_ends_history_quietly(tmp_path, extra):
    """`registry history X | head -1` once head has gone: no error, exit 0, as other command-line tools do."""
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    assert invoke(url, "init").exit_code == 0
    opened(url).store.append("artifact:k1", [frame_event("a"), frame_event("b")], actor="tester")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        finished = subprocess.run(
            [sys.executable, "-c", "from registry.cli.main import main; main()", "--db", url, "history", "k1", *extra],
            stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert (finished.returncode, finished.stderr.decode()) == (0, "")


def _sqlite_with_events(path: Path) -> None:
    url = f"sqlite:///{path}"
    assert invoke(url, "init").exit_code == 0
    registry = opened(url)
    registry.store.append("artifact:k1", [frame_event("a"), frame_event("b")], actor="tester")
    registry.engine.dispose()
    gc.collect()  # closes the runner's connections too, so nothing but the demo could change the files now


def test_demo_never_deletes_a_registry_it_did_not_create(tmp_path, monkeypatch):
    prod = tmp_path / "prod.db"
    _sqlite_with_events(prod)
    monkeypatch.chdir(tmp_path)
    # REGISTRY_DATABASE_URL is not the demo's: it uses demo.db here, which another registry occupies.
    _sqlite_with_events(tmp_path / "demo.db")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    result = CliRunner().invoke(main, ["demo", "--fresh"], env={"REGISTRY_DATABASE_URL": f"sqlite:///{prod}"})
    assert result.exit_code == 1
    assert "demo.db was not created by `registry demo`" in result.output and "prod.db" not in result.output
    # Named explicitly, with or without --fresh, it is refused too.
    for args in (["--db", f"sqlite:///{prod}", "demo", "--fresh"], ["--db", f"sqlite:///{prod}", "demo"]):
        refused = CliRunner().invoke(main, args)
        assert refused.exit_code == 1 and "prod.db was not created by `registry demo`" in refused.output
    refused = CliRunner().invoke(main, ["--db", "postgresql://u@localhost/prod", "demo", "--fresh"])
    assert refused.exit_code == 1 and "only on an SQLite file of its own" in refused.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_fresh_deletes_only_the_database_the_demo_created(tmp_path):
    from registry.app.demo_registry import is_demo_database, open_demo_registry

    path = tmp_path / "mine.db"
    registry, url = open_demo_registry(f"sqlite:///{path}", actor="tester", fresh=False)
    with registry:
        registry.store.append("artifact:k1", [frame_event("a")], actor="tester")
    assert is_demo_database(path)
    again, _ = open_demo_registry(url, actor="tester", fresh=False)
    with again:
        assert again.store.head_position() == 1
    fresh, _ = open_demo_registry(url, actor="tester", fresh=True)
    with fresh:
        assert fresh.store.head_position() == 0 and is_demo_database(path)


def test_a_closed_pipe_keeps_a_commands_own_exit_status(tmp_path):
    """`registry promote X | true`: the verdict's exit 3 stands, and nothing is said about the pipe."""
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    assert invoke(url, "init").exit_code == 0
    declare(url, tmp_path, "wl")
    assert invoke(url, "artifact", "register", "k1", "--workload", "wl", "--kind", "module").exit_code == 0
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        finished = subprocess.run(
            [sys.executable, "-c", "from registry.cli.main import main; main()", "--db", url, "--actor", "t",
             "promote", "k1"], stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert (finished.returncode, finished.stderr.decode()) == (3, "")


def test_make_clean_removes_demo_db_only_when_the_demo_made_it(tmp_path):
    """`make clean` deletes ./demo.db through remove_if_demo: a registry someone else named demo.db stays."""
    from registry.app.demo_registry import open_demo_registry, remove_if_demo

    theirs = tmp_path / "theirs" / "demo.db"
    theirs.parent.mkdir()
    assert invoke(f"sqlite:///{theirs}", "init").exit_code == 0
    before = theirs.read_bytes()
    assert remove_if_demo(theirs) is False and theirs.read_bytes() == before
    ours = tmp_path / "ours" / "demo.db"
    ours.parent.mkdir()
    registry, _ = open_demo_registry(f"sqlite:///{ours}", actor="tester", fresh=False)
    registry.engine.dispose()
    assert remove_if_demo(ours) is True and not ours.exists()
    assert remove_if_demo(tmp_path / "absent.db") is False


# --json always answers.

def _json_commands():
    """(path, command) of every command that takes --json, subcommands of groups included."""
    from registry.cli.main import main

    def walk(group, path):
        for name in group.list_commands(None):
            command = group.get_command(None, name)
            if isinstance(command, click.Group):
                yield from walk(command, (*path, name))
            if any("--json" in getattr(param, "opts", ()) for param in command.params):
                yield (*path, name), command

    return list(walk(main, ()))


def _placeholder_arguments(command) -> list[str]:
    """Every required argument and option given the value `nope`: the command must refuse (or answer) in JSON."""
    values = []
    for param in command.params:
        if not param.required:
            continue
        if isinstance(param, click.Argument):
            values += ["nope"] * (1 if param.nargs == 1 else 2)
        else:
            values += [param.opts[0], "nope"]
    return values


# demo would run a whole campaign: an odd --runs is its refusal. `kernels build` would compile every built-in
# kernel for both targets (56 cubins, what tests/kernels/test_kernel_build.py builds and reads the JSON of): one
# operation for one target answers the same document.
_EXTRA = {("demo",): ["--runs", "3"], ("kernels", "build"): ["--op", "rms_norm", "--arch", "sm_90a"]}


@pytest.mark.parametrize("path, command", _json_commands(), ids=lambda value: " ".join(value)
                         if isinstance(value, tuple) else "")
def test_every_command_given_json_prints_one_json_document_whatever_the_outcome(registry_cli, path, command,
                                                                                 monkeypatch):
    # Relative names such as `keys init nope` are written in the scratch folder, never in the checkout.
    monkeypatch.chdir(registry_cli.tmp)
    result = registry_cli(*path, *_placeholder_arguments(command), *_EXTRA.get(path, []), "--json")
    assert result.exit_code != 70, result.stderr
    document = json.loads(result.stdout)  # exactly one document, whatever the exit status
    if result.exit_code == 1:
        assert document["error"] == result.stderr.strip().removeprefix("error: ")


def test_nothing_to_ship_and_refusals_answer_in_json(registry_cli):
    manifest = registry_cli.tmp / "wan.yaml"
    manifest.write_text("workload: wan\n")
    assert registry_cli("workload", "declare", str(manifest)).exit_code == 0
    out = registry_cli.tmp / "x.lock"
    locked = registry_cli("lock", "--workload", "wan", "--out", str(out), "--unsigned", "--json")
    assert locked.exit_code == 3 and json.loads(locked.stdout)["artifacts"] == [] and not out.exists()
    assert json.loads(locked.stdout)["written"] is False
    refused = registry_cli("show", "nope", "--json")
    assert refused.exit_code == 1 and "unknown artifact" in json.loads(refused.stdout)["error"]
    usage = registry_cli("lock", "--workload", "wan", "--unsigned", "--key", "k", "--out", str(out), "--json")
    assert usage.exit_code == 2 and json.loads(usage.stdout)["exit_status"] == 2
