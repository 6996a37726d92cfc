"""Nothing hangs, nothing crashes, nothing is lost: aliases, closed stdout, damaged read models, --out.

And a bug never passes for a refusal: refusals are registry.formats.errors.UserError
(one line, exit 1); anything else is a crash report asking for a bug report.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from cli_helpers import one_line_refusal

MANIFEST = """\
workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired}
"""


@pytest.fixture
def cli(registry_cli):
    (registry_cli.tmp / "wan.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "wan.yaml")).exit_code == 0
    assert registry_cli("artifact", "register", "cache", "--workload", "wan", "--kind", "step_cache").exit_code == 0
    return registry_cli


def events(url):
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


# -- YAML aliases ----------------------------------------------------------------------------------------

def alias_bomb(levels: int = 6) -> str:
    """A few hundred bytes standing for 9**levels values."""
    lines = ["workload: wan", "a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("command", ["workload declare", "what-if"])
def test_a_manifest_of_nested_aliases_is_refused_before_expansion(cli, command):
    bomb = cli.tmp / "bomb.yaml"
    bomb.write_text(alias_bomb())
    assert len(bomb.read_bytes()) < 600
    before = events(cli.url)
    output = one_line_refusal(cli(*command.split(), str(bomb)))
    assert "alias (*a0)" in output and "line 3" in output and events(cli.url) == before


def test_a_merge_key_is_an_alias_too(cli):
    """A variant: `<<: *base` expands by reference like any alias."""
    merged = cli.tmp / "merged.yaml"
    merged.write_text("base: &base {min_speedup: 1.1, runs_per_arm: 2, protocol: paired}\n"
                      + MANIFEST.replace("speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired}",
                                         "speed: {<<: *base}"))
    assert "alias (*base)" in one_line_refusal(cli("workload", "declare", str(merged)))


# -- a closed standard output ------------------------------------------------------------------------------

def closed_stdout(url, *args):
    """Run the CLI in a process whose standard output is closed (`>&-`)."""
    command = " ".join(f"'{part}'" for part in (sys.executable, "-m", "registry", "--db", url, *args))
    return subprocess.run(["sh", "-c", f"exec {command} >&-"], stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "REGISTRY_ACTOR": "tester"}, timeout=300)


def test_with_stdout_closed_each_command_exits_with_the_status_it_decided(cli):
    document = cli.tmp / "evidence.json"
    document.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "cache",
                                    "evidence": [{"kind": "execution", "candidate_calls": 3, "fallbacks": 0}]}))
    before = events(cli.url)
    for args, status in ((("evidence", "import", str(document)), 0), (("promote", "cache"), 3),
                         (("show", "cache"), 0), (("verify",), 0), (("history", "cache"), 0), (("report",), 0),
                         (("show", "nothing-here"), 1)):
        ran = closed_stdout(cli.url, *args)
        assert ran.returncode == status, (args, ran.stderr)
        assert "Traceback" not in ran.stderr, (args, ran.stderr)
    assert events(cli.url) == before + 2  # the evidence and the verdict, each once


# -- damaged read models ------------------------------------------------------------------------------------

def damage(url, sql):
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        conn.execute(sql)


@pytest.mark.parametrize("row", [
    "CAST(X'7B22FF' AS TEXT)",  # invalid UTF-8
    "'{\"artifact\": 1'",  # UTF-8, not JSON
    "'[1, 2]'",  # JSON, not an object
])
def test_a_damaged_read_model_row_is_refused_in_one_line_and_replay_rebuilds_it(cli, row):
    assert cli("show", "cache").exit_code == 0  # the read models are caught up
    damage(cli.url, f"UPDATE projection_artifacts SET state = {row} WHERE artifact = 'cache'")
    for args in (("replay", "--verify"), ("report",), ("show", "cache")):
        result = cli(*args)
        # The replay check names a row it can read as a difference (3); one it cannot read at all is refused (1).
        assert result.exit_code in ((1, 3) if args == ("replay", "--verify") else (1,)), (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
    assert cli("replay").exit_code == 0
    assert json.loads(cli("show", "cache", "--json").output)["decision"] == "registered"
    assert cli("replay", "--verify").exit_code == 0


def test_a_sqlite_file_holding_only_alembic_version_is_refused_in_one_line(tmp_path, registry_cli):
    path = tmp_path / "only.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('0005')")
    from click.testing import CliRunner

    from registry.cli.main import main

    for args in (("replay", "--verify"), ("report",), ("show", "x"), ("replay",)):
        result = CliRunner().invoke(main, ["--db", f"sqlite:///{path}", *args])
        one_line_refusal(result)


# -- --out never overwrites a registry --------------------------------------------------------------------

def test_report_out_refuses_the_registry_it_reads_and_any_registry(cli, tmp_path):
    database = cli.url.removeprefix("sqlite:///")
    before = open(database, "rb").read()
    for args in (("report", "--format", "html", "--out", database),
                 ("report", "--format", "html", "--out", database, "--force")):
        assert "SQLite database" in one_line_refusal(cli(*args))
    assert open(database, "rb").read() == before and cli("verify").exit_code == 0


def test_an_existing_file_is_replaced_only_with_force(cli, tmp_path):
    target = tmp_path / "report.json"
    target.write_text("keep me")
    assert "--force" in one_line_refusal(cli("report", "--format", "json", "--out", str(target)))
    assert target.read_text() == "keep me"
    assert cli("report", "--format", "json", "--out", str(target), "--force").exit_code == 0
    assert json.loads(target.read_text())


def test_lock_out_refuses_another_registry(cli, tmp_path):
    """`lock --out other.db`: another registry, refused before anything is exported."""
    other = tmp_path / "other.db"
    from click.testing import CliRunner

    from registry.cli.main import main

    assert CliRunner().invoke(main, ["--db", f"sqlite:///{other}", "init"]).exit_code == 0
    before = other.read_bytes()
    output = one_line_refusal(cli("lock", "--workload", "wan", "--out", str(other)))
    assert "SQLite database" in output and other.read_bytes() == before


def test_evaluate_emit_refuses_a_registry_before_measuring(cli):
    """A variant: --emit names a file to write as --out does; the check comes before the kernel runs."""
    database = cli.url.removeprefix("sqlite:///")
    before = open(database, "rb").read()
    assert "SQLite database" in one_line_refusal(cli("evaluate", "cache", "--emit", database, "--force"))
    assert open(database, "rb").read() == before


def test_out_refuses_a_fifo_without_opening_it(cli, tmp_path):
    """A variant: a FIFO named as --out would block the writer; it is no regular file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file" in one_line_refusal(cli("report", "--out", str(fifo), "--force"))


# -- a bug is not a refusal -----------------------------------------------------------------------------------

def test_a_defect_raising_valueerror_is_a_crash_report_not_a_refusal(cli, monkeypatch):
    import registry.app.decisions as decisions

    def broken(registry, artifact):
        return int("not a number")  # a defect: a ValueError nobody meant as a refusal

    monkeypatch.setattr(decisions, "promote", broken)
    result = cli("promote", "cache")
    assert result.exit_code == 70
    assert "Traceback" in result.output and "please report it" in result.output
    assert "ValueError: invalid literal for int()" in result.output


def test_every_refusal_error_is_a_user_error():
    from registry.bundles.manifest import BundleError
    from registry.contracts.errors import ContractError
    from registry.formats.documents import DocumentError
    from registry.formats.errors import UserError
    from registry.formats.evidence.errors import EvidenceError
    from registry.evidence.frames import FrameError
    from registry.evidence.motionkernel import MotionKernelError
    from registry.kernels.ops import EntryError
    from registry.projections import ProjectionError

    for error in (BundleError, ContractError, DocumentError, EvidenceError, FrameError, MotionKernelError,
                  EntryError, ProjectionError):
        assert issubclass(error, UserError) and issubclass(error, ValueError), error


def test_a_refusal_stays_one_line_and_exit_1(cli):
    output = one_line_refusal(cli("show", "nothing-here"))
    assert output.startswith("error: unknown artifact")
