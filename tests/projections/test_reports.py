"""Reports over the scripted history: sections, as-of reports, and the JSON, CSV and HTML renderers."""
from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
import subprocess

import pytest

from read_side import Reads
from registry.projections.report import (
    build_report,
    report_csv,
    report_json,
    report_rows,
    report_tables,
)

from limits import HANG_GUARD_S
from scripted_history import build_history, open_store
from store_helpers import opened

def report_html(*args, **kwargs) -> str:
    """The HTML renderer, imported by the tests that render (it loads matplotlib: about 0.5 CPU-s that every
    test process collecting this file would pay otherwise)."""
    from registry.projections.html_report import report_html as render

    return render(*args, **kwargs)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGE = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('reports') / 'registry.db'}")
    history = build_history(store)
    yield store, history, Reads(store)
    store.engine.dispose()


def test_report_at_head(registry):
    store, h, projections = registry
    report = build_report(projections.state())
    assert report["as_of"] == store.head_position() and report["workload"] is None
    assert report["totals"] == {"held": 1, "promoted": 1, "quarantined": 1, "registered": 1}
    assert report["caught"] == {
        "held": [{"rule": "human.revoke", "count": 1, "artifacts": ["sage-attn"]}],
        "quarantined": [{"rule": "fidelity.failed", "count": 1, "artifacts": ["fa3-approx"]}],
        "rejected": [],
    }
    assert set(report["leaderboard"]) == {"cosmos", "ltx-video", "wan-t2v"}
    [cache] = report["leaderboard"]["cosmos"]
    assert (cache["rank"], cache["artifact"], cache["decided_by"], cache["speedup"]) == (1, "step-cache", "human", 1.6)
    assert report["leaderboard"]["wan-t2v"] == [] and report["leaderboard"]["ltx-video"] == []
    # 0.03 above a 0.9 SSIM threshold is inside 10% of it
    [near] = report["near_misses"]
    assert (near["artifact"], near["metric"]) == ("step-cache", "ssim")
    assert near["relative_margin"] == pytest.approx(0.03 / 0.9)
    assert report["waiting"] == []
    assert report["workloads"]["wan-t2v"] == {"declared": True, "contract_version": 2, "tier": "perceptual",
                                              "speed_gate": 1.3}
    # ceiling_share 0.2717 -> ceiling 1/(1 - 0.2717); gate = max(1.10, 1 + 0.5 * (ceiling - 1))
    assert report["workloads"]["ltx-video"]["speed_gate"] == pytest.approx(1 + 0.5 * (1 / (1 - 0.2717) - 1))


def test_report_as_of_earlier_positions(registry):
    store, h, projections = registry
    report = build_report(projections.state(as_of=h.at["rms_verdict"]))
    assert report["as_of"] == h.at["rms_verdict"]
    [sage] = report["leaderboard"]["wan-t2v"]
    assert (sage["artifact"], sage["speedup"], sage["speedup_ci"], sage["tier"]) == (
        "sage-attn", 1.45, [1.4065, 1.4935], "perceptual")
    assert sage["tightest_margin"]["metric"] == "ssim"
    assert report["caught"]["rejected"] == [{"rule": "speed.below_gate", "count": 1, "artifacts": ["rms-fused"]}]
    assert [n["artifact"] for n in report["near_misses"]] == ["sage-attn"]

    waiting = build_report(projections.state(as_of=h.at["cache_verdict"]), workload="cosmos")
    assert [w["artifact"] for w in waiting["waiting"]] == ["step-cache"]
    assert list(waiting["leaderboard"]) == ["cosmos"] and waiting["totals"] == {"recorded": 1}


def test_unknown_workload_is_refused(registry):
    _, _, projections = registry
    with pytest.raises(ValueError, match="no workload 'nope' as of position"):
        build_report(projections.state(), workload="nope")


def test_json_and_csv_parse_back(registry):
    _, h, projections = registry
    report = build_report(projections.state(as_of=h.at["rms_verdict"]))
    assert json.loads(report_json(report)) == report

    rows = list(csv.DictReader(io.StringIO(report_csv(report))))
    assert len(rows) == len(report_rows(report))
    assert {row["section"] for row in rows} == {"leaderboard", "caught", "near_miss", "attempts", "total"}
    assert {(row["artifact"], row["count"]) for row in rows if row["section"] == "attempts"} == {
        ("rms-fused", "2"), ("sage-attn", "1")}
    [leader] = [row for row in rows if row["section"] == "leaderboard"]
    assert (leader["workload"], leader["artifact"], leader["rank"]) == ("wan-t2v", "sage-attn", "1")
    assert float(leader["speedup"]) == 1.45 and float(leader["ci_low"]) == 1.4065 and leader["metric"] == "ssim"
    [caught] = [row for row in rows if row["section"] == "caught"]
    assert (caught["decision"], caught["rule"], caught["artifact"], caught["count"]) == (
        "rejected", "speed.below_gate", "rms-fused", "1")
    assert all(row["as_of"] == str(h.at["rms_verdict"]) for row in rows)


def test_tables_for_people(registry):
    _, h, projections = registry
    tables = {title: (columns, rows) for title, columns, rows in
              report_tables(build_report(projections.state(as_of=h.at["rms_verdict"])))}
    columns, rows = tables["leaderboard: wan-t2v (promoted, fastest first)"]
    assert rows == [(1, "sage-attn", "1.4500", "[1.407, 1.494] (level not recorded)", "perceptual", "gate", "ssim 0.975 vs 0.97 (margin 0.005)",
                     1)]
    assert len(columns) == len(rows[0])
    assert tables["caught (by the rule that decided)"][1] == [("rejected", "speed.below_gate", 1, "rms-fused")]
    assert tables["waiting for a person (advisory tier, recorded)"][1] == []
    assert tables["benchmark attempts (current identity)"][1] == [("rms-fused", "rejected", 2), ("sage-attn", "promoted", 1)]


def test_final_verdicts_under_an_older_contract_are_flagged(registry):
    """sage was promoted under wan-t2v v1; once v2 is declared the report says so, until the revoke ends it."""
    _, h, projections = registry
    assert build_report(projections.state(as_of=h.at["wan_v2"] - 1))["contracts_moved"] == []
    report = build_report(projections.state(as_of=h.at["wan_v2"]))
    assert report["contracts_moved"] == [{"artifact": "sage-attn", "workload": "wan-t2v", "decision": "promoted",
                                          "decided_under": 1, "current": 2,
                                          "note": "promoted under contract v1; current v2"}]
    rows = [row for row in report_rows(report) if row["section"] == "contract_moved"]
    assert [(row["artifact"], row["note"]) for row in rows] == [("sage-attn", "promoted under contract v1; current v2")]
    assert build_report(projections.state(as_of=h.at["sage_revoke"]))["contracts_moved"] == []


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(data, validate=True) for data in IMAGE.findall(page)]


def test_html_is_self_contained_with_its_plots(registry, tmp_path):
    _, h, projections = registry
    state = projections.state(as_of=h.at["rms_verdict"])
    page = report_html(build_report(state), state)
    images = _images(page)
    # speed-vs-fidelity, and one per-frame figure for sage (the only perceptual evidence then)
    assert len(images) == 2 and all(image.startswith(PNG_SIGNATURE) and len(image) > 5000 for image in images)
    assert "sage-attn" in page and "speed.below_gate" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page) and "<script" not in page

    head = projections.state()
    page = report_html(build_report(head), head)
    assert len(_images(page)) == 2  # fa3 now; sage's evidence scope restarted at its revoke


def speed_record_report(tmp_path):
    """A registry with three speed records: decided at its first bound (a one-point record), decided later, and
    not yet bounded; the report and state the app builds for it."""
    from registry.app.bench import open_session, record_pairs
    from registry.app.reports import build
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract

    registry = opened(f"sqlite:///{tmp_path / 'records.db'}", actor="t", create=True)
    declare_workload(registry, Contract.from_yaml(
        "workload: w\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 40}\n"))
    for name, ratios in (("one-point", [2.0] * 5), ("several", [2.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]),
                         ("unbounded", [2.0, 2.0])):
        (tmp_path / f"{name}.bin").write_bytes(name.encode())
        register_artifact(registry, name, workload="w", kind="module", payload=str(tmp_path / f"{name}.bin"))
        session, _ = open_session(registry, name, "NVIDIA H200", "cuda_event", "sm90")
        record_pairs(registry, name, session, ratios, [1.0] * len(ratios), "b")
    return build(registry, workload=None, position=None, stale_days=30)


def test_every_speed_record_gets_a_bounds_chart(tmp_path):
    """A one-point record is drawn as a marked point with its bounds, a record without bounds says so: every
    record has its figure, and the matrix places each by its session's arch."""
    report, state = speed_record_report(tmp_path)
    page = report_html(report, state)
    for name in ("one-point", "several", "unbounded"):
        assert f'alt="running bounds of {name}"' in page
    [one] = [r for r in report["benchmark_records"] if r["artifacts"] == ["one-point"]]
    assert [b for b in one["running_bounds"] if b[0] is not None] == [[2.0, 2.0]]
    assert report["matrix"]["unplaced"] == [] and report["matrix"]["archs"] == ["sm90"]


def test_html_renders_in_a_headless_browser(registry, tmp_path):
    """The registry's report, and a report of speed records with their bounds charts, render in Chromium."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium) so the HTML is not rendered")
    _, h, projections = registry
    state = projections.state(as_of=h.at["rms_verdict"])
    records, records_state = speed_record_report(tmp_path)
    for name, page in (("report", report_html(build_report(state), state)),
                       ("records", report_html(records, records_state))):
        html = tmp_path / f"{name}.html"
        html.write_text(page, encoding="utf-8")
        shot = tmp_path / f"{name}.png"
        result = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / ('profile-' + name)}", f"--screenshot={shot}", "--window-size=1200,1600",
             html.as_uri()],
            capture_output=True, text=True, timeout=HANG_GUARD_S,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        data = shot.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 50_000


def test_a_registry_of_exact_tier_kernels_gets_no_empty_speed_fidelity_chart(registry_cli):
    """Byte-equal parity records no fidelity margin, so nothing can be plotted: the section says why, no figure."""
    from newcomer_helpers import KERNEL, WORKLOAD, evidence

    manifest, kernel = registry_cli.tmp / "w.yaml", registry_cli.tmp / "kernel.py"
    manifest.write_text(WORKLOAD)
    kernel.write_text(KERNEL)
    assert registry_cli("workload", "declare", str(manifest)).exit_code == 0
    registered = registry_cli("artifact", "register", "my-modln", "--workload", "my-wan-modln", "--kind",
                              "fused_kernel", "--payload", str(kernel)).output
    document = registry_cli.tmp / "ev.json"
    document.write_text(json.dumps(evidence(re.search(r"[0-9a-f]{64}", registered).group(0))))
    assert registry_cli("evidence", "import", str(document)).exit_code == 0
    assert registry_cli("promote", "my-modln").exit_code == 0
    out = registry_cli.tmp / "report.html"
    assert registry_cli("report", "--format", "html", "--out", str(out)).exit_code == 0
    page = out.read_text()
    section = page.split("<h2>Speed against fidelity</h2>", 1)[1].split("<h2>", 1)[0]
    assert "nothing to plot" in section and "<img" not in section


@pytest.mark.parametrize("worst_ssim, near", [(1.0, False), (0.9984, False), (0.985, True), (0.981, True)])
def test_a_near_miss_is_near_its_threshold_and_never_at_the_best_value(registry_cli, worst_ssim, near):
    """SSIM 1.0 against 0.98 is as good as SSIM gets: no near miss; 0.981 is one noisy rerun from failing."""
    from ship_helpers import declare, make_bundle, measure_and_promote, register

    declare(registry_cli)
    assert register(registry_cli, "cand", make_bundle(registry_cli.tmp / "bundles", "cand")).exit_code == 0
    assert measure_and_promote(registry_cli, "cand", 1.6, worst_ssim) == "promoted"
    report = json.loads(registry_cli("report", "--json").output)
    assert [n["artifact"] for n in report["near_misses"]] == (["cand"] if near else [])
