"""Alembic owns the schema: models and migrations agree, and the chain of revisions walks both ways."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from alembic import command
from sqlalchemy import inspect

from registry.events.database import SCHEMA_HEAD, alembic_config, current_revision, head_revision, upgrade
from registry.events.errors import NotARegistry

from store_helpers import made_engine, raw
from paths import ROOT



def test_alembic_check_finds_nothing_to_generate(backend_url):
    made_engine(backend_url)
    upgrade(made_engine(backend_url))
    env = {"REGISTRY_DATABASE_URL": backend_url, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "No new upgrade operations detected" in result.stdout + result.stderr


def test_schema_head_constant_matches_the_migrations():
    assert SCHEMA_HEAD == head_revision()


def test_upgrade_downgrade_upgrade(backend_url):
    engine = made_engine(backend_url)
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    config = alembic_config(backend_url)
    command.downgrade(config, "base")
    assert current_revision(engine) is None
    assert "events" not in inspect(engine).get_table_names()
    command.upgrade(config, "head")
    assert current_revision(engine) == head_revision()
    assert "events" in inspect(engine).get_table_names()


def test_a_newer_schema_is_refused(backend_url):
    engine = made_engine(backend_url)
    upgrade(engine)
    raw(engine, "UPDATE alembic_version SET version_num = 'ffffffffffff'")
    with pytest.raises(NotARegistry, match="newer than this registry"):
        upgrade(engine)


def test_a_foreign_database_is_not_initialised(backend_url):
    engine = made_engine(backend_url)
    raw(engine, "CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    with pytest.raises(NotARegistry, match="not a registry"):
        upgrade(engine)
    assert set(inspect(engine).get_table_names()) == {"customers"}


def test_rows_written_by_an_earlier_fold_are_folded_again_by_the_upgrade(backend_url):
    """Revisions 0007 (rows without evidence items), 0008 (speed records, each contract version's speed block)
    and 0011 (monitors with their baseline-wait term and counts) change what a fresh fold writes; the upgrade
    empties the read models, the next read folds them again, replay verification finds every row equal, and
    the answers are the same (items read from the log; the monitor read as before the waits existed)."""
    from sqlalchemy import update

    from registry.events.store import EventStore
    from read_side import Reads
    from registry.projections import rebuild, verify_projections
    from registry.projections.read_models import by_name
    from registry.projections.read_models.artifacts import ARTIFACTS
    from registry.projections.read_models.monitors import monitor_summary

    artifact_row = by_name("artifacts").row
    from scripted_history import build_history

    engine = made_engine(backend_url)
    upgrade(engine)
    store = EventStore(engine)
    history = build_history(store)
    history.add("cache_batch", "artifact:step-cache", "PairsRemeasured", {  # a batch from before the waits
        "artifact": "step-cache", "identity": "1" * 64, "payload_sha256": None, "verdict_event_id": "v",
        "batch": "b", "baseline_s": [2.0, 2.0], "candidate_s": [1.0, 1.0], "threshold": 1.1, "alpha": 0.001,
        "reference": "gate", "contract_version": 1, "device": "d", "software": {"torch": "2.13.0"}})
    Reads(store).catch_up()
    answered = rebuild(store)
    with engine.begin() as conn:  # the cache's monitor as the 0010 fold wrote it: no term, no counts
        state = answered.artifacts["step-cache"]
        old = {**state, "monitors": {key: {name: value for name, value in monitor.items()
                                           if name not in ("baseline_wait_share", "left_out", "contended_batches")}
                                     for key, monitor in state["monitors"].items()}}
        conn.execute(update(ARTIFACTS).where(ARTIFACTS.c.artifact == "step-cache").values(artifact_row(old)))
    assert verify_projections(store).differing_artifacts == ["step-cache"]
    command.downgrade(alembic_config(backend_url), "0010")
    upgrade(engine)
    assert verify_projections(store).ok
    summary = monitor_summary({**Reads(store).artifact("step-cache"), "identity": "1" * 64})
    assert (summary["pairs"], summary["left_out"], summary["baseline_wait_share"]) == (2, 0, None)
    with engine.begin() as conn:  # the rows as the 0006 fold wrote them: each entry with its item
        for name, state in answered.artifacts.items():
            conn.execute(update(ARTIFACTS).where(ARTIFACTS.c.artifact == name).values(artifact_row(state)))
    before = verify_projections(store)
    assert sorted(before.differing_artifacts) == ["fa3-approx", "rms-fused", "sage-attn"]
    command.downgrade(alembic_config(backend_url), "0007")
    upgrade(engine)
    assert current_revision(engine) == head_revision()
    after = verify_projections(store)
    assert after.ok, after.summary()
    assert Reads(store).state() == answered
    engine.dispose()


OLD_REGISTRY = ROOT / "tests" / "fixtures" / "registry_7b22681"
# What `show --json` said then and must say now: every field the fold of that time kept, by the rules of that time
# that still hold (tests/fixtures/registry_7b22681/make_fixture.py drives only those).
SHOWN = ("artifact", "workload", "kind", "backend", "op", "entry", "payload_sha256", "identity", "identity_changed",
         "registered_position", "last_position", "decision", "decided_by", "tier", "rule", "reasons", "margins",
         "tightest_margin", "speedup", "speedup_ci", "verdict", "verdict_event_id", "verdict_position",
         "contract_version", "contract_hash", "human", "open_failures", "benchmark_attempts", "evidence_counts",
         "contract_note", "workload_declared")


def as_then(now, then):
    """`now` with only what `then` holds: the keys of each object at every depth, the items of each list."""
    if isinstance(then, dict) and isinstance(now, dict):
        return {key: as_then(now.get(key), value) for key, value in then.items()}
    if isinstance(then, list) and isinstance(now, list) and len(now) == len(then):
        return [as_then(found, value) for found, value in zip(now, then)]
    return now


def test_a_registry_written_by_the_code_at_7b22681_upgrades_and_reads_as_before(tmp_path):
    """The registry the code at commit 7b22681 wrote (schema 0005, rows folded by that code, no versions at its
    checkpoint) upgrades with `registry db upgrade`; its next read folds the log again by itself (no migration
    empties anything now), the chain and every row verify, and `show`, `report` and `resolve` answer what that
    code answered (answers.json)."""
    import sqlite3

    from click.testing import CliRunner

    from registry.cli.main import main

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.executescript("\n".join(json.loads((OLD_REGISTRY / "registry.json").read_text())))
    then = json.loads((OLD_REGISTRY / "answers.json").read_text())
    runner = CliRunner()

    def cli(*args):
        result = runner.invoke(main, ["--db", f"sqlite:///{path}", "--actor", "reader", *args])
        assert result.exit_code in (0, 3), result.output
        return result

    refused = runner.invoke(main, ["--db", f"sqlite:///{path}", "show", "sage"])
    assert refused.exit_code == 1 and "registry db upgrade" in refused.output
    cli("db", "upgrade")
    assert json.loads(cli("verify", "--json").output)["intact"]
    for name, shown in then["show"].items():
        now = json.loads(cli("show", name, "--json").output)
        if now["identity_changed"] is not None:  # it says now whether earlier claims returned (they did not)
            assert now["identity_changed"].pop("returned") is False
        assert {key: now[key] for key in SHOWN} == {key: shown[key] for key in SHOWN}, name
        assert {kind: entry["event_id"] for kind, entry in now["evidence"].items()} == \
            {kind: entry["event_id"] for kind, entry in shown["evidence"].items()}
        assert [(v["position"], v["event_id"], v["decision"]) for v in now["verdicts"]] == \
            [(v["position"], v["event_id"], v["decision"]) for v in shown["verdicts"]]
    report = json.loads(cli("report", "--format", "json").output)
    assert report["totals"] == then["report"]["totals"]
    for section in ("leaderboard", "caught", "waiting"):  # every field of that time as it was (rows gained more)
        assert as_then(report[section], then["report"][section]) == then["report"][section], section
    resolved = json.loads(cli("resolve", "--workload", "op", "--arch", "sm90", "--json").output)
    assert (resolved["match"] or {}).get("artifact") == (then["resolve"]["match"] or {}).get("artifact")
    assert json.loads(cli("replay", "--verify", "--json").output)["ok"]
