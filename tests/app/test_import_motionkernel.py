"""`registry import motionkernel`: a campaign tree becomes events with its origin, judged by the gate.

The fixtures under tests/fixtures/motionkernel are our own documents shaped
like MotionKernel's public examples (the two LTX dispatch measurements carry
the public runs); malformed documents are written per test.
"""
import hashlib
import json
import os
import shutil
import sqlite3

import pytest

from registry.evidence.motionkernel import MotionKernelError, classify, plan_import
from motionkernel_helpers import run_import, tree  # noqa: F401 - tree: the fixture
from paths import MOTIONKERNEL

FIXTURES = MOTIONKERNEL
LTX_CONTRACT = """\
workload: ltx-t2v-480p
parity: {policy: byte_equal}
fidelity: {tier: exact}
speed: {min_speedup: 1.01, runs_per_arm: 15, protocol: sequential, decision: point, max_cv: 0.03}
"""
LTX_1030 = "dispatch/sm100-1030.measurement.json"


def event_count(cli) -> int:
    with sqlite3.connect(cli.url.removeprefix("sqlite:///")) as conn:
        return conn.execute("SELECT count(*) FROM events").fetchone()[0]


def events(cli) -> list[dict]:
    with sqlite3.connect(cli.url.removeprefix("sqlite:///")) as conn:
        rows = conn.execute("SELECT type, stream, payload FROM events ORDER BY position").fetchall()
    return [{"type": t, "stream": s, "payload": json.loads(p)} for t, s, p in rows]


def ltx_artifact(summary) -> str:
    return next(d["artifact"] for d in summary["documents"] if d["path"].endswith(LTX_1030.split("/")[1]))


def test_every_kind_is_read_and_counted(registry_cli, tree):
    result, summary = run_import(registry_cli, tree)
    assert result.exit_code == 0
    assert summary["scanned"] == 8 and summary["imported"] == 8 and summary["unreadable"] == 0
    assert summary["per_kind"] == {
        "artifact_manifest": {"imported": 1}, "attention_campaign": {"imported": 1},
        "dispatch_measurement": {"imported": 3}, "fidelity_verdict": {"imported": 1}, "support_run": {"imported": 2},
    }


def test_every_imported_event_records_its_origin(registry_cli, tree):
    run_import(registry_cli, tree)
    imported = [e for e in events(registry_cli) if e["type"] != "WorkloadDeclared"]
    assert imported
    for event in imported:
        origin = event["payload"]["origin"]
        assert origin["system"] == "motionkernel"
        data = (tree / origin["path"]).read_bytes()
        assert origin["sha256"] == hashlib.sha256(data).hexdigest()
    dispatch = [e for e in imported if (e["payload"]["origin"] or {}).get("path") == LTX_1030]
    assert {e["type"] for e in dispatch} >= {"ExecutionObserved", "BenchmarkMeasured", "ParityMeasured", "ExternalOutcome"}
    assert all(e["payload"]["origin"]["schema"] == "motionkernel.dispatch-measurement"
               and e["payload"]["origin"]["schema_version"] == 1 for e in dispatch)


def test_the_registry_computes_the_speedup_from_the_raw_runs(registry_cli, tree):
    _, summary = run_import(registry_cli, tree / LTX_1030)
    doc = json.loads((tree / LTX_1030).read_text())
    benchmark = next(e["payload"]["item"] for e in events(registry_cli) if e["type"] == "BenchmarkMeasured")
    assert benchmark["baseline_s"] == doc["native"]["runs"] and benchmark["candidate_s"] == doc["candidate"]["runs"]
    assert benchmark["protocol"] == "sequential" and benchmark["arch"] == "sm100"
    runs = sorted(doc["native"]["runs"]), sorted(doc["candidate"]["runs"])
    assert benchmark["derived"]["speedup"] == pytest.approx(runs[0][7] / runs[1][7], rel=1e-12)
    assert "speedup_median" not in json.dumps(benchmark)  # the document's own figure is never evidence


def test_reimport_appends_nothing_and_a_moved_document_is_the_same(registry_cli, tree):
    run_import(registry_cli, tree)
    before = event_count(registry_cli)
    _, again = run_import(registry_cli, tree)
    assert again["imported"] == 0 and again["already_present"] == 8
    moved = tree / "elsewhere"
    moved.mkdir()
    shutil.move(tree / LTX_1030, moved / "renamed.json")
    _, after_move = run_import(registry_cli, moved)
    assert after_move["already_present"] == 1 and after_move["imported"] == 0
    assert event_count(registry_cli) == before


def test_a_changed_document_is_a_new_import(registry_cli, tree):
    _, first = run_import(registry_cli, tree / LTX_1030)
    doc = json.loads((tree / LTX_1030).read_text())
    doc["candidate"]["runs"][0] = 3.0001
    (tree / LTX_1030).write_text(json.dumps(doc))
    _, second = run_import(registry_cli, tree / LTX_1030)
    assert second["imported"] == 1
    assert ltx_artifact(second) == ltx_artifact(first)  # same artifact, a second measurement of it


def test_under_a_cv_ceiling_both_ltx_measurements_hold_naming_the_variation(registry_cli, tree):
    _, summary = run_import(registry_cli, tree / "dispatch")
    contract = registry_cli.tmp / "ltx.yaml"
    contract.write_text(LTX_CONTRACT)
    assert registry_cli("workload", "declare", str(contract)).exit_code == 0
    report = json.loads(registry_cli("report", "--format", "json").stdout)
    ltx = [row for row in report["imported"] if row["workload"] == "ltx-t2v-480p"]
    assert sorted(row["origin"]["path"] for row in ltx) == ["sm100-1030.measurement.json", "sm100-1040.measurement.json"]
    for row in ltx:
        assert row["registry"]["decision"] == "held" and row["registry"]["rule"] == "speed.max_cv"
        assert "baseline CV" in row["registry"]["reason"] and "max_cv 0.03" in row["registry"]["reason"]
        # MotionKernel recorded both as passing (speedup over its 1.01 gate): a disagreement, listed.
        assert row["recorded"]["decision"] == "pass" and row["agree"] is False
    promote = registry_cli("promote", ltx_artifact(summary))
    assert promote.exit_code == 3 and "speed.max_cv" in promote.output


def test_an_artifact_of_an_undeclared_workload_holds_until_one_is_declared(registry_cli, tree):
    _, summary = run_import(registry_cli, tree / LTX_1030)
    result = registry_cli("promote", ltx_artifact(summary))
    assert result.exit_code == 3
    assert "ltx-t2v-480p has no declared contract" in result.output
    assert not [e for e in events(registry_cli) if e["type"] == "VerdictRendered"]
    shown = registry_cli("show", ltx_artifact(summary))
    assert "held: workload ltx-t2v-480p has no declared contract" in shown.output
    assert json.loads(registry_cli("show", ltx_artifact(summary), "--json").stdout)["workload_declared"] is False
    report = json.loads(registry_cli("report", "--format", "json").stdout)
    assert {row["registry"]["rule"] for row in report["imported"]} == {"contract.missing"}


def test_summaries_are_records_the_gate_never_reads(registry_cli, tree):
    _, summary = run_import(registry_cli, tree / "artifacts")
    artifact = summary["documents"][0]["artifact"]
    shown = json.loads(registry_cli("show", artifact, "--json").stdout)
    assert shown["evidence"] == {}  # a recorded promotion is not evidence
    assert shown["external"][0]["outcome"] == "promoted"
    assert shown["external"][0]["origin"]["path"] == "fused-modln-sm90/artifact.json"
    history = registry_cli("history", f"artifact:{artifact}")
    assert "ExternalOutcome" in history.output


@pytest.mark.parametrize("name, text, reason", [
    ("nan.json", '{"schema": "motionkernel.dispatch-measurement", "native": {"runs": [NaN]}}', "NaN is not a number"),
    ("version.json", '{"schema": "motionkernel.support-run", "schema_version": 9}', "schema_version: 9"),
    ("schema.json", '{"schema": "motionkernel.campaign-ledger", "schema_version": 1}', "not a MotionKernel schema"),
    ("broken.json", '{"schema": "motionkernel.support-run", ', "invalid JSON"),
    ("dupe.json", '{"schema": "motionkernel.support-run", "schema": "x"}', "duplicate key 'schema'"),
    ("latin1.json", b'{"schema": "motionkernel.support-run", "family": "\xe9"}', "not UTF-8"),
])
def test_bad_documents_are_counted_with_a_reason_and_the_rest_proceeds(registry_cli, tree, name, text, reason):
    bad = tree / "bad" / name
    bad.parent.mkdir()
    bad.write_bytes(text if isinstance(text, bytes) else text.encode())
    result, summary = run_import(registry_cli, tree)
    assert result.exit_code == 0
    assert summary["imported"] == 8 and summary["unreadable"] == 1
    [refused] = [d for d in summary["documents"] if d["status"] == "unreadable"]
    assert refused["path"] == f"bad/{name}" and reason in refused["reason"]
    assert "\n" not in refused["reason"]


def _dispatch(**changes):
    doc = json.loads((FIXTURES / LTX_1030).read_text())
    for path, value in changes.items():
        target = doc
        *parents, leaf = path.split(".")
        for key in parents:
            target = target[key]
        if value is KeyError:
            del target[leaf]
        else:
            target[leaf] = value
    return doc


@pytest.mark.parametrize("changes, reason", [
    ({"native.runs": [3.1, -2.0]}, "native.runs[1]: -2.0 is not a positive finite time"),
    ({"candidate.runs": []}, "candidate.runs: expected a non-empty list"),
    ({"candidate": KeyError}, "candidate: missing"),
    ({"arch": "hopper"}, "arch: 'hopper' is not a GPU architecture"),
    ({"candidate_calls": -1}, "candidate_calls: expected a whole number"),
    ({"status": "failed"}, "status: 'failed'"),
    ({"schema_version": 3}, "schedule: a paired (schema_version 3) measurement needs"),
])
def test_malformed_dispatch_measurements_name_the_field(changes, reason):
    with pytest.raises(MotionKernelError) as caught:
        plan_import(_dispatch(**changes))
    assert reason in str(caught.value) and "\n" not in str(caught.value)


def test_a_nan_hidden_past_the_parser_is_refused():
    # A NaN that reached the document as a float (not as a JSON token) is still no time.
    with pytest.raises(MotionKernelError, match="not a positive finite time"):
        plan_import(_dispatch(**{"native.runs": [float("nan")] * 15}))


def test_a_paired_schema_3_measurement_becomes_paired_evidence(registry_cli, tree):
    run_import(registry_cli, tree / "dispatch" / "sm90-paired.measurement.json")
    benchmark = next(e["payload"]["item"] for e in events(registry_cli) if e["type"] == "BenchmarkMeasured")
    assert benchmark["protocol"] == "paired" and benchmark["schedule"][:2] == ["BC", "CB"]
    assert benchmark["derived"]["interleaved"] is True


def test_check_imports_nothing_and_fails_on_an_unreadable_claim(registry_cli, tree):
    result, summary = run_import(registry_cli, tree, check=True)
    assert result.exit_code == 0 and summary["would_import"] == 8 and event_count(registry_cli) == 0
    (tree / "bad.json").write_text('{"schema": "motionkernel.dispatch-measurement", "schema_version": 7}')
    (tree / "notes.json").write_text('{"title": "not a campaign document"}')
    result, summary = run_import(registry_cli, tree, check=True)
    assert result.exit_code == 3
    assert summary["unreadable"] == 1 and summary["unrecognized"] == 1
    assert event_count(registry_cli) == 0
    plain = registry_cli("import", "motionkernel", str(tree), "--check")
    assert plain.exit_code == 3 and "unreadable: bad.json: schema_version: 7" in plain.output


def test_check_needs_no_database(tmp_path, tree):
    from click.testing import CliRunner

    from registry.cli.main import main

    missing = tmp_path / "absent.db"
    result = CliRunner().invoke(main, ["--db", f"sqlite:///{missing}", "import", "motionkernel", str(tree), "--check"])
    assert result.exit_code == 0 and not missing.exists()


def test_a_fifo_is_refused_without_blocking(registry_cli, tree):
    os.mkfifo(tree / "pipe.json")
    _, summary = run_import(registry_cli, tree)
    [refused] = [d for d in summary["documents"] if d["path"] == "pipe.json"]
    assert refused["status"] == "unreadable" and "a FIFO (named pipe), not a regular file" in refused["reason"]


def test_an_artifact_registered_as_something_else_refuses_that_document_only(registry_cli, tree):
    artifact = plan_import(json.loads((tree / LTX_1030).read_text())).artifact
    contract = registry_cli.tmp / "ltx.yaml"
    contract.write_text(LTX_CONTRACT)
    registry_cli("workload", "declare", str(contract))
    assert registry_cli("artifact", "register", artifact, "--workload", "ltx-t2v-480p", "--kind", "module").exit_code == 0
    before = event_count(registry_cli)
    _, summary = run_import(registry_cli, tree / "dispatch")
    refused = [d for d in summary["documents"] if d["status"] == "unreadable"]
    assert [d["path"] for d in refused] == ["sm100-1030.measurement.json", "sm100-1040.measurement.json"]
    assert all(f"artifact {artifact} is registered as a module" in d["reason"] for d in refused)
    assert summary["imported"] == 1  # the paired wan measurement, another artifact
    assert {e["stream"] for e in events(registry_cli)[before:]} == {
        f"artifact:{next(d['artifact'] for d in summary['documents'] if d['status'] == 'imported')}"}


def test_classification_is_by_content():
    assert classify({"schema": "motionkernel.dispatch-measurement"}) == "dispatch_measurement"
    assert classify({"operation": {}, "promotion": {}}) == "artifact_manifest"
    assert classify({"arms": {}, "workload_id": "w"}) == "attention_campaign"
    assert classify({"evidence": {}, "verdict": {}}) == "fidelity_verdict"
    assert classify({"evidence": {}, "verdict": {}, "extra": 1}) is None
    assert classify(["not", "an", "object"]) is None


def test_the_support_matrix_places_native_and_imported_outcomes(registry_cli, tree):
    run_import(registry_cli, tree)
    matrix = json.loads(registry_cli("report", "--matrix", "--format", "json").stdout)
    assert matrix["archs"] == ["sm90", "sm100"]
    cells = {(row["workload"], arch): cell for row in matrix["rows"] for arch, cell in row["cells"].items()}
    assert cells[("ltx-t2v-480p", "sm100")]["outcome"] == "promoted"  # the imported support run
    assert cells[("ltx-t2v-480p", "sm100")]["latest"].startswith("2026-08-02")
    assert cells[("cosmos25-t2v-2b-704p", "sm100")]["outcome"] == "no_worthwhile_candidate"
    assert cells[("cosmos25-t2v-2b-704p", "sm90")] == {"outcome": "not_attempted", "latest": None, "stale": False,
                                                       "sources": []}
    families = {row["workload"]: row["family"] for row in matrix["rows"]}
    assert families["cosmos25-t2v-2b-704p"] == "cosmos25" and families["wan-t2v-1.3b-480p"] == "wan"
    # Judged today, August's evidence is stale after 30 days; a wide window keeps it fresh.
    assert cells[("ltx-t2v-480p", "sm100")]["stale"] is True
    wide = json.loads(registry_cli("report", "--matrix", "--format", "json", "--stale-days", "100000").stdout)
    assert not any(cell["stale"] for row in wide["rows"] for cell in row["cells"].values())


def test_the_support_matrix_as_of_an_earlier_position(registry_cli, tree):
    run_import(registry_cli, tree / "support" / "cosmos25-t2v-2b-704p--sm100.json")
    position = event_count(registry_cli)
    run_import(registry_cli, tree / "support" / "ltx-t2v-480p--sm100.json")
    now = json.loads(registry_cli("report", "--matrix", "--format", "json").stdout)
    then = json.loads(registry_cli("report", "--matrix", "--format", "json", "--as-of", str(position)).stdout)
    assert {row["workload"] for row in now["rows"]} == {"cosmos25-t2v-2b-704p", "ltx-t2v-480p"}
    assert {row["workload"] for row in then["rows"]} == {"cosmos25-t2v-2b-704p"}


def test_the_support_matrix_in_csv_and_html(registry_cli, tree):
    run_import(registry_cli, tree / "support")
    csv_text = registry_cli("report", "--matrix", "--format", "csv").stdout
    assert csv_text.splitlines()[0] == "family,workload,arch,outcome,latest,stale"
    assert "ltx,ltx-t2v-480p,sm100,promoted,2026-08-02T01:42:30+00:00,true" in csv_text
    html = registry_cli("report", "--matrix", "--format", "html").stdout
    assert '<td class="promoted stale" data-arch="sm100">' in html
    full = registry_cli("report", "--format", "html").stdout
    assert 'class="matrix"' in full


def test_stale_days_must_be_a_whole_number(registry_cli):
    result = registry_cli("report", "--matrix", "--stale-days", "-1")
    assert result.exit_code == 2


@pytest.mark.parametrize("days", ["3652059", "99999999999999", "99999999999999999999"])
def test_a_stale_window_past_the_calendars_start_marks_nothing_stale(registry_cli, tree, days):
    """More days than lie between the report's moment and year 1 (or than a C int holds) is a window no
    dated evidence falls outside, not a crash."""
    run_import(registry_cli, tree / "support")
    result = registry_cli("report", "--matrix", "--format", "json", "--stale-days", days)
    assert result.exit_code == 0, result.output
    assert not any(cell["stale"] for row in json.loads(result.stdout)["rows"] for cell in row["cells"].values())


def test_the_matrix_grid_is_coloured_in_a_headless_browser(registry_cli, tree, tmp_path):
    import shutil as which_shutil
    import subprocess

    from PIL import Image

    browser = which_shutil.which("chromium") or which_shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium) so the HTML is not rendered")
    run_import(registry_cli, tree)
    page = tmp_path / "matrix.html"
    page.write_text(registry_cli("report", "--matrix", "--format", "html", "--stale-days", "100000").stdout)
    shot = tmp_path / "matrix.png"
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={shot}", "--window-size=1200,600", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    colours = {rgb for _, rgb in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)}
    assert (0xC8, 0xE6, 0xC9) in colours  # a promoted cell
    assert (0xFF, 0xF3, 0xE0) in colours  # a no_worthwhile_candidate cell


def test_a_report_carries_the_chain_head_it_speaks_for(registry_cli, tree):
    run_import(registry_cli, tree / "support")
    report = json.loads(registry_cli("report", "--format", "json").stdout)
    head = report["head"]
    assert head["position"] == event_count(registry_cli) == report["as_of"]
    expect = f"{head['position']}:{head['hash']}"
    assert registry_cli("verify", "--expect-head", expect).exit_code == 0
    earlier = json.loads(registry_cli("report", "--format", "json", "--as-of", "1").stdout)["head"]
    assert earlier["position"] == 1 and earlier["hash"] != head["hash"]
    assert expect in "".join(registry_cli("report").output.split())  # a long title wraps


@pytest.mark.parametrize("text, reason", [
    ('{"schema": "motionkernel.support-run", "n": ' + "9" * 1001 + "}", "an integer of 1001 digits"),
    ('{"schema": "motionkernel.support-run", "x": ' + "[" * 40 + "]" * 40 + "}", "nested more than 32 levels"),
    ('{"schema": "motionkernel.support-run", "family": "\\ud800"}', "lone surrogate"),
])
def test_hostile_documents_are_one_line_refusals(registry_cli, tree, text, reason):
    (tree / "hostile.json").write_text(text)
    _, summary = run_import(registry_cli, tree)
    [refused] = [d for d in summary["documents"] if d["path"] == "hostile.json"]
    assert refused["status"] == "unreadable" and reason in refused["reason"] and "\n" not in refused["reason"]
    assert summary["imported"] == 8


def test_check_passes_on_the_seed_tree_and_names_every_file_it_did_not_read(registry_cli, tree):
    """The seed's support_matrix.json (a MotionKernel summary the import does not read) is listed
    as not read, with why, in the table and in JSON; a document of a schema it reads that is broken still fails."""
    (tree / "support" / "support_matrix.json").write_text(json.dumps(
        {"schema": "motionkernel.support-matrix", "rows": []}))
    (tree / "notes.json").write_text(json.dumps({"title": "campaign notes"}))
    shown = registry_cli("import", "motionkernel", str(tree), "--check")
    assert shown.exit_code == 0, shown.output
    assert "not read: support/support_matrix.json: MotionKernel schema 'motionkernel.support-matrix'" in shown.stdout
    assert "not read: notes.json: not a MotionKernel document this import reads" in shown.stdout
    documents = {d["path"]: d for d in json.loads(registry_cli("import", "motionkernel", str(tree), "--check",
                                                               "--json").stdout)["documents"]}
    assert documents["support/support_matrix.json"]["status"] == "unrecognized"
    assert "is not one this import reads" in documents["support/support_matrix.json"]["reason"]
    (tree / "support" / "broken.json").write_text(json.dumps({"schema": "motionkernel.support-run"}))
    assert registry_cli("import", "motionkernel", str(tree), "--check").exit_code == 3
