"""`registry demo --sequential`: each candidate timed in a benchmark session, stopped as soon as decided."""
from __future__ import annotations

import json

from click.testing import CliRunner

from registry.app import open_registry
from registry.cli.main import main

RUNS = 6


def test_the_sequential_demo_decides_with_sessions_and_reports_pairs_saved(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    result = CliRunner().invoke(main, ["--db", url, "demo", "--sequential", "--runs", str(RUNS), "--warmup", "0",
                                       "--out", str(tmp_path / "out"), "--check", "--json"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.output)
    assert outcome["problems"] == []
    rows = {row["artifact"]: row for row in outcome["rows"]}
    for name in ("sdpa-attention", "step-cache"):
        row = rows[name]
        assert (row["decision"], row["rule"]) in {("promoted", "speed.passed"), ("rejected", "speed.below_gate"),
                                                  ("held", "speed.undecided")}
        decided = row["rule"] != "speed.undecided"
        assert 5 <= row["pairs"] <= RUNS
        assert row["pairs_saved"] == (RUNS - row["pairs"] if decided else 0)
    assert rows["lossy-skip"]["rule"] == "fidelity.failed" and rows["flash-claimed-fallback"]["decision"] == "quarantined"
    store = open_registry(url).store
    assert not [e for e in store.read_all() if e.type == "BenchmarkMeasured" and e.payload["artifact"] in rows
                and e.payload["artifact"] != "modln-triton"]  # sessions, not complete benchmark items
    opened = [e for e in store.read_all() if e.type == "BenchmarkSessionOpened"]
    assert sorted(e.payload["artifact"] for e in opened) == sorted(set(rows) - {"modln-triton"})
    for verdict in (e for e in store.read_all() if e.type == "VerdictRendered"):
        for event_id in verdict.payload["verdict"]["evidence_ids"]:
            assert store.get(event_id).position < verdict.position
    assert store.verify().intact
