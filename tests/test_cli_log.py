"""The log commands through click's runner, and once through a real process."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from registry.app import open_registry
from registry.cli.main import main

from store_helpers import drop_immutability, frame_event, raw

CHECKOUT = Path(__file__).resolve().parents[1]


@pytest.fixture
def runner():
    return CliRunner()


def run(runner, url, *args):
    return runner.invoke(main, ["--db", url, "--actor", "tester", *args], catch_exceptions=False)


def test_init_history_verify(runner, sqlite_url):
    assert run(runner, sqlite_url, "init").exit_code == 0
    registry = open_registry(sqlite_url, actor="tester")
    registry.store.append("artifact:k1", [frame_event("a"), frame_event("b")], actor="tester")
    shown = run(runner, sqlite_url, "history", "k1")
    assert shown.exit_code == 0 and "FrameSetRegistered" in shown.output and "tester" in shown.output
    records = json.loads(run(runner, sqlite_url, "history", "artifact:k1", "--json").output)
    assert [r["version"] for r in records] == [1, 2] and records[0]["payload"]["name"] == "a"
    verified = json.loads(run(runner, sqlite_url, "verify", "--json").output)
    assert verified == {"intact": True, "count": 2, "head": {"position": 2, "hash": records[1]["hash"]},
                        "head_hash": records[1]["hash"], "expected_head": None, "broken_at": None, "problem": None}


def test_verify_exits_1_at_the_first_break(runner, sqlite_url):
    run(runner, sqlite_url, "init")
    registry = open_registry(sqlite_url, actor="tester")
    for name in "abc":
        registry.store.append(f"artifact:{name}", [frame_event(name)], actor="tester")
    drop_immutability(registry.engine)
    raw(registry.engine, "UPDATE events SET actor = 'mallory' WHERE position = 2")
    result = run(runner, sqlite_url, "verify")
    assert result.exit_code == 1 and "position 2" in result.output


def test_db_current_and_upgrade(runner, sqlite_url):
    assert run(runner, sqlite_url, "init").exit_code == 0
    assert run(runner, sqlite_url, "db", "upgrade").exit_code == 0
    current = json.loads(run(runner, sqlite_url, "db", "current", "--json").output)
    assert current["current"] == current["head"]


def test_missing_database_is_refused_without_creating_it(runner, tmp_path):
    url = f"sqlite:///{tmp_path / 'nowhere.db'}"
    result = run(runner, url, "verify")
    assert result.exit_code == 1 and "registry init" in result.output
    assert not (tmp_path / "nowhere.db").exists()


def test_a_file_that_is_not_a_database(runner, tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    result = run(runner, f"sqlite:///{path}", "history", "x")
    assert result.exit_code == 1 and "not a usable database" in result.output
    assert path.read_bytes() == b"this is not sqlite" * 100


def test_a_newer_schema_is_refused_by_every_command(runner, sqlite_url):
    run(runner, sqlite_url, "init")
    raw(open_registry(sqlite_url).engine, "UPDATE alembic_version SET version_num = 'ffff'")
    for args in (["verify"], ["history", "x"], ["init"]):
        result = run(runner, sqlite_url, *args)
        assert result.exit_code == 1 and "newer than this registry" in result.output


def test_usage_error_exits_2(runner, sqlite_url):
    assert run(runner, sqlite_url, "history").exit_code == 2


def test_real_process_with_environment_url(tmp_path):
    env = {**os.environ, "REGISTRY_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}", "REGISTRY_ACTOR": "proc"}
    # The checkout under test (cwd first on sys.path), not whatever `registry` script is installed.
    registry = [sys.executable, "-m", "registry"]
    init = subprocess.run([*registry, "init"], env=env, capture_output=True, text=True, cwd=CHECKOUT)
    assert init.returncode == 0, init.stderr
    verified = subprocess.run([*registry, "verify", "--json"], env=env, capture_output=True, text=True, cwd=CHECKOUT)
    assert verified.returncode == 0 and json.loads(verified.stdout)["count"] == 0
    missing = subprocess.run([*registry, "history", "nothing"], env=env, capture_output=True, text=True, cwd=CHECKOUT)
    assert missing.returncode == 1 and missing.stderr.strip() == "error: no events in stream artifact:nothing"
