"""The MotionKernel import against hostile documents, concurrent imports and an interrupted one (docs/import.md).

Each case refuses the one document in one line and imports the rest of the
tree; concurrent imports of one tree all finish with every document
recorded once; a document is all or nothing, its registration included; and
no stored value can stop a report from rendering.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from motionkernel_helpers import run_import as checked_run_import
from motionkernel_helpers import tree  # noqa: F401 - the fixture: a private copy of the fixture tree
from store_helpers import opened
from paths import MOTIONKERNEL

FIXTURES = MOTIONKERNEL
SUPPORT = "support/ltx-t2v-480p--sm100.json"
DISPATCH = "dispatch/sm100-1030.measurement.json"
DOCUMENTS = 8  # in the fixture tree


def run_import(cli, *paths, check=False):
    result, summary = checked_run_import(cli, *paths, check=check)
    assert "Traceback" not in result.output
    return result, summary


def rows(url, sql):
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        return conn.execute(sql).fetchall()


def add(tree, relative, source, **changes):
    """A copy of fixture `source` under `relative`, with top-level fields changed."""
    document = json.loads((FIXTURES / source).read_text())
    document.update(changes)
    path = tree / "hostile" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return document


def only_that_one_refused(summary, relative, reason):
    refused = [d for d in summary["documents"] if d["status"] == "unreadable"]
    assert [d["path"] for d in refused] == [f"hostile/{relative}"], refused
    assert reason in refused[0]["reason"] and "\n" not in refused[0]["reason"], refused[0]["reason"]
    assert len(refused[0]["reason"]) < 400


# -- huge numbers -------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", [False, True])
def test_a_401_digit_run_refuses_that_document_and_the_rest_imports(registry_cli, tree, check):
    document = json.loads((FIXTURES / DISPATCH).read_text())
    document["native"]["runs"][3] = int("9" * 401)
    (tree / "hostile").mkdir()
    (tree / "hostile" / "huge.json").write_text(json.dumps(document))
    result, summary = run_import(registry_cli, tree, check=check)
    only_that_one_refused(summary, "huge.json", "native.runs[3]: an integer of 401 digits is not a positive finite time")
    assert summary["would_import" if check else "imported"] == DOCUMENTS


def test_a_huge_integer_where_a_speedup_is_read_is_no_crash(registry_cli, tree):
    """A variant: the document's own figures (never judged, only recorded) may be huge too."""
    document = json.loads((FIXTURES / DISPATCH).read_text())
    document["e2e"]["speedup_median"] = -int("9" * 401)
    document["gate"] = int("9" * 401)
    (tree / "hostile").mkdir()
    (tree / "hostile" / "huge-gate.json").write_text(json.dumps(document))
    result, summary = run_import(registry_cli, tree)
    assert result.exit_code == 0 and summary["unreadable"] == 0
    assert registry_cli("report", "--format", "json").exit_code == 0


# -- names ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workload, problem", [
    ("wan:evil", "contains ':'"),
    ("wan\nforged-row  promoted", "line break"),
    ("wan\x1b[31mred", "control"),
    ("-rf", "starts with '-'"),
    ("w" * 300, "is 300 characters long"),
])
def test_an_outcome_naming_a_hostile_workload_refuses_that_document(registry_cli, tree, workload, problem):
    add(tree, "support.json", SUPPORT, workload_id=workload)
    result, summary = run_import(registry_cli, tree)
    assert result.exit_code == 0
    only_that_one_refused(summary, "support.json", problem)
    assert summary["imported"] == DOCUMENTS
    assert not rows(registry_cli.url, "SELECT stream FROM events WHERE stream LIKE '%evil%' OR length(stream) > 200")


@pytest.mark.parametrize("field, value, problem", [
    ("family", "ltx\x1b]0;owned\x07", "control"),
    ("model_id", "Wan\nforged", "line break"),
])
def test_other_names_an_outcome_records_follow_the_rule(registry_cli, tree, field, value, problem):
    add(tree, "support.json", SUPPORT, workload_id="ltx-other", **{field: value})
    _, summary = run_import(registry_cli, tree)
    only_that_one_refused(summary, "support.json", problem)


def test_a_hostile_backend_in_an_attention_receipt_refuses_that_document(registry_cli, tree):
    """A variant: the backend a receipt names becomes an artifact's claimed backend."""
    add(tree, "sage.json", "attention/sage-ab.json", backend="SAGE\r\nATTN", workload_id="wan-other")
    _, summary = run_import(registry_cli, tree)
    only_that_one_refused(summary, "sage.json", "backend")


# -- times -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, problem", [
    ("yesterday", "not an ISO 8601 time"),
    ("2026-08-02T01:42:30", "names no UTC offset"),
    ("2026-13-45T00:00:00+00:00", "not an ISO 8601 time"),
])
def test_a_time_that_cannot_be_read_refuses_that_document(registry_cli, tree, value, problem):
    add(tree, "support.json", SUPPORT, workload_id="ltx-other", recorded_utc=value)
    _, summary = run_import(registry_cli, tree)
    only_that_one_refused(summary, "support.json", problem)
    _, checked = run_import(registry_cli, tree, check=True)
    assert [d["path"] for d in checked["documents"] if d["status"] == "unreadable"] == ["hostile/support.json"]


def test_a_bad_time_already_in_the_log_never_stops_a_report(registry_cli, tmp_path):
    """A log written before times were checked (or by another path) still reports, the value marked."""
    from registry.events.store import NewEvent
    from registry.events.types import ExternalOutcome

    registry = opened(registry_cli.url)
    try:
        for workload, when in (("ltx-bad", "yesterday"), ("ltx-good", "2026-08-02T01:42:30+00:00")):
            outcome = ExternalOutcome(workload=workload, artifact=None, arch="sm100", outcome="promoted",
                                      recorded_verdict=None, recorded_utc=when, model_id=None, family="ltx",
                                      summary={}, origin={"system": "motionkernel", "path": f"{workload}.json"})
            registry.store.append(f"outcomes:{workload}", [NewEvent(outcome.type, outcome)], actor="past")
    finally:
        registry.engine.dispose()
    for fmt in ("table", "json", "csv", "html"):
        out = tmp_path / f"report.{fmt}"
        result = registry_cli("report", "--format", fmt, "--out", str(out))
        assert result.exit_code == 0, (fmt, result.output)
        if fmt != "csv":  # the CSV report has no support matrix
            assert "yesterday" in out.read_text(), fmt
    matrix = json.loads(registry_cli("report", "--format", "json").output)["matrix"]
    cell = next(row for row in matrix["rows"] if row["workload"] == "ltx-bad")["cells"]["sm100"]
    assert cell["outcome"] == "promoted" and cell["latest"] is None and cell["unreadable_dates"] == ["yesterday"]


# -- concurrency and interruption ---------------------------------------------------------------------

def test_an_import_racing_another_over_the_same_tree_finishes_with_each_document_once(registry_cli, tree,
                                                                                        monkeypatch):
    """Another import lands between reading an artifact's row and appending to its stream: this one plans again."""
    from registry.app import imports
    from registry.app.imports import import_motionkernel

    real = imports.known_subject
    raced = []

    def another_import_meanwhile(view, artifact):
        subject = real(view, artifact)
        if not raced:
            raced.append(artifact)
            other = opened(registry_cli.url, actor="other-importer")
            try:
                assert import_motionkernel(other, [tree]).counts["imported"] == DOCUMENTS
            finally:
                other.engine.dispose()
        return subject

    monkeypatch.setattr(imports, "known_subject", another_import_meanwhile)
    result, summary = run_import(registry_cli, tree)
    assert raced and result.exit_code == 0, result.output
    assert summary["already_present"] == DOCUMENTS and summary["unreadable"] == 0
    assert_each_document_once(registry_cli.url)


def assert_each_document_once(url):
    keys = rows(url, "SELECT key FROM idempotency_keys WHERE key LIKE 'motionkernel:%'")
    assert len(keys) == DOCUMENTS
    outcomes = rows(url, "SELECT json_extract(payload, '$.origin.sha256'), count(*) FROM events "
                         "WHERE type = 'ExternalOutcome' GROUP BY 1")
    assert len(outcomes) == DOCUMENTS and all(count == 1 for _, count in outcomes)
    registered = rows(url, "SELECT stream, count(*) FROM events WHERE type = 'ArtifactRegistered' GROUP BY stream")
    assert registered and all(count == 1 for _, count in registered)


def test_three_concurrent_imports_of_one_tree_all_finish(registry_cli, tree):
    env = {**os.environ, "REGISTRY_ACTOR": "importer"}
    command = [sys.executable, "-m", "registry", "--db", registry_cli.url, "import", "motionkernel", str(tree), "--json"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(3)]
    finished = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    for status, out, err in finished:
        assert status == 0 and b"Traceback" not in err, err.decode()
        summary = json.loads(out)
        # Every run accounts for every document as recorded (by it or by another run), none refused.
        assert summary["imported"] + summary["already_present"] == DOCUMENTS, summary["documents"]
    assert_each_document_once(registry_cli.url)


def test_an_interrupted_import_leaves_no_registration_without_its_document(registry_cli, tree, monkeypatch):
    """Ctrl-C as the document's evidence is appended: nothing of that document is in the log."""
    from registry.events.store import EventStore

    real = EventStore.append_batch

    def interrupted(self, batch):
        if any(event.type == "BenchmarkMeasured" for event in batch.events):
            raise KeyboardInterrupt
        return real(self, batch)

    monkeypatch.setattr(EventStore, "append_batch", interrupted)
    registry_cli("import", "motionkernel", str(tree / DISPATCH))
    assert rows(registry_cli.url, "SELECT type FROM events WHERE stream LIKE 'artifact:%'") == []


def test_odd_values_an_earlier_import_stored_never_stop_a_report(registry_cli, tmp_path):
    """A variant: the payload schema lets through shapes the import now refuses; every report format still renders."""
    from registry.events.store import NewEvent
    from registry.events.types import ExternalOutcome

    registry = opened(registry_cli.url)
    try:
        outcome = ExternalOutcome(workload="wan\nforged-row", artifact=None, arch="hopper\x1b[31m", outcome="held",
                                  recorded_verdict={"decision": 7, "basis": ["not", "text"]},
                                  recorded_utc="2026-13-45", model_id="\x1b]0;x\x07", family="",
                                  summary={"speedup_median": -int("9" * 401)}, origin={})
        registry.store.append(f"outcomes:{outcome.workload}", [NewEvent(outcome.type, outcome)], actor="past")
    finally:
        registry.engine.dispose()
    for fmt in ("table", "json", "csv", "html"):
        result = registry_cli("report", "--format", fmt, "--out", str(tmp_path / f"report.{fmt}"))
        assert result.exit_code == 0 and "Traceback" not in result.output, (fmt, result.output)
    assert registry_cli("report", "--matrix").exit_code == 0
