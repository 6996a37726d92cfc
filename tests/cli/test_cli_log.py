"""The log commands through click's runner, and once through a real process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from registry.cli.main import main

from store_helpers import drop_immutability, frame_event, opened, raw
from paths import ROOT

CHECKOUT = ROOT


@pytest.fixture
def runner():
    return CliRunner()


def run(runner, url, *args):
    return runner.invoke(main, ["--db", url, "--actor", "tester", *args], catch_exceptions=False)


def test_init_history_verify(runner, sqlite_url):
    assert run(runner, sqlite_url, "init").exit_code == 0
    registry = opened(sqlite_url, actor="tester")
    registry.store.append("artifact:k1", [frame_event("a"), frame_event("b")], actor="tester")
    shown = run(runner, sqlite_url, "history", "k1")
    assert shown.exit_code == 0 and "FrameSetRegistered" in shown.output and "tester" in shown.output
    records = json.loads(run(runner, sqlite_url, "history", "artifact:k1", "--json").output)
    assert [r["version"] for r in records] == [1, 2] and records[0]["payload"]["name"] == "a"
    verified = json.loads(run(runner, sqlite_url, "verify", "--json").output)
    assert verified == {"intact": True, "count": 2, "head": {"position": 2, "hash": records[1]["hash"]},
                        "head_hash": records[1]["hash"], "expected_head": None, "broken_at": None, "problem": None}


def test_verify_exits_3_at_the_first_break(runner, sqlite_url):
    run(runner, sqlite_url, "init")
    registry = opened(sqlite_url, actor="tester")
    for name in "abc":
        registry.store.append(f"artifact:{name}", [frame_event(name)], actor="tester")
    drop_immutability(registry.engine)
    raw(registry.engine, "UPDATE events SET actor = 'mallory' WHERE position = 2")
    result = run(runner, sqlite_url, "verify")
    assert result.exit_code == 3 and "position 2" in result.output


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
    raw(opened(sqlite_url).engine, "UPDATE alembic_version SET version_num = 'ffff'")
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


CONTRACT = """workload: wan
fidelity: {tier: perceptual, min_ssim: 0.98, frame_set: wan-8, seed: 1024}
speed: {min_speedup: 1.1, runs_per_arm: 2, protocol: paired, decision: point}
"""


def test_history_shows_a_redeclared_contract_as_what_changed_across_pages(runner, sqlite_url, tmp_path, monkeypatch):
    """Each redeclaration, old -> new per field by dotted path, also when the one before is on another page."""
    import registry.app.history

    monkeypatch.setattr(registry.app.history, "HISTORY_PAGE", 1)  # every event on a page of its own
    run(runner, sqlite_url, "init")
    declared = tmp_path / "wan.yaml"
    for text in (CONTRACT, CONTRACT.replace("0.98", "0.99").replace("runs_per_arm: 2", "runs_per_arm: 4"),
                 CONTRACT.replace("0.98", "0.99").replace("runs_per_arm: 2", "runs_per_arm: 4")
                 + "tags: [nightly]\n"):
        declared.write_text(text)
        assert run(runner, sqlite_url, "workload", "declare", str(declared)).exit_code == 0
    shown = run(runner, sqlite_url, "history", "workload:wan")
    assert shown.exit_code == 0, shown.output
    assert "contract v2: fidelity.min_ssim 0.98 -> 0.99; speed.runs_per_arm 2 -> 4" in shown.output
    assert 'contract v3: tags [] -> ["nightly"]' in shown.output
    records = json.loads(run(runner, sqlite_url, "history", "workload:wan", "--json").output)
    assert [r["payload"]["contract"]["fidelity"]["min_ssim"] for r in records] == [0.98, 0.99, 0.99]
    assert records[2]["payload"]["contract"]["speed"] == {
        "ceiling_share": None, "max_cv": None, "max_peak_memory_regression": None, "min_speedup": 1.1,
        "protocol": "paired", "require_conclusive": False, "runs_per_arm": 4}  # whole, not a summary
