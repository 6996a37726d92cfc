"""The live view at `/` in a real browser: the system's Chromium driven by Playwright (never a downloaded
browser), against a real `registry serve` process. The page shows each workload's artifacts, the HTML report's
own figures (speed against fidelity, each speed record's running bounds against the gate, per-frame fidelity)
and the monitors' table, and redraws when a batch or a re-measurement is appended while it is open, without a reload.
Below them, the page's data read in this process (no browser): a page of the registry, never the whole of it.

Needs seconds: one server process and one browser start for the module; each wait polls the page.
"""
from __future__ import annotations

import json
import os

import pytest

from serve_helpers import CHROMIUM, WAIT_MS, WATCHED, ServerProcess, seed
from store_helpers import opened



def promote_watched(url: str) -> None:
    """`watched`: promoted on 8 pairs at 1.33x against a 1.2x gate, its workload declaring a monitor."""
    from registry.app.bench import open_session, record_pairs
    from registry.app.decisions import promote
    from registry.app.evidence import import_document
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract

    registry = opened(url, actor="seeder")
    declare_workload(registry, Contract.from_yaml(WATCHED))
    register_artifact(registry, "watched", workload="wan-watched", kind="step_cache", payload_sha256="c" * 64)
    session, _ = open_session(registry, "watched", "d", "perf_counter")
    record_pairs(registry, "watched", session, [2.0] * 8, [1.5] * 8, "b1")
    import_document(registry, json.dumps({"format": "registry.evidence/1", "artifact": "watched", "evidence": [
        {"kind": "execution", "candidate_calls": 40, "fallbacks": 0},
        {"kind": "perceptual", "frame_set": "wan-8", "seed": 1024, "ssim": [0.999, 0.99], "lpips": None,
         "vbench": None, "stage_status": "ok"}]}))
    assert promote(registry, "watched").verdict["decision"] == "promoted"
    registry.engine.dispose()


def remeasure(url: str, batch: str, ratio: float) -> None:
    """Two re-measured pairs of `watched` at `ratio`, appended straight to the registry the server serves."""
    from registry.app.monitor import record_remeasurement

    registry = opened(url, actor="reverifier")
    record_remeasurement(registry, "watched", [2.0, 2.0], [2.0 / ratio] * 2, batch=batch, device="NVIDIA H200",
                         software={"torch": "2.13.0"})
    registry.engine.dispose()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium) so the live page is not rendered")
    from playwright.sync_api import sync_playwright

    url = f"sqlite:///{tmp_path_factory.mktemp('live') / 'registry.db'}"
    seeded = seed(url)
    promote_watched(url)
    with ServerProcess(url) as server, sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True, timeout=WAIT_MS)
        try:
            server.seeded, server.url = seeded, url
            yield server, browser
        finally:
            browser.close()


@pytest.fixture
def page(live):
    server, browser = live
    opened = browser.new_page()
    # Playwright's own waits (a navigation, a click, a locator's text) give up after 30 s unless told: a hang
    # guard like the suite's others, not a bound on how fast a loaded machine draws the page.
    opened.set_default_timeout(WAIT_MS)
    try:
        yield opened
    finally:
        opened.close()


def test_the_page_draws_the_reports_figures_and_redraws_when_a_batch_arrives(live, page):
    server, _ = live
    tokens = server.seeded.tokens
    with server.client(tokens["ingest"]) as worker:
        session = worker.post("/api/artifacts/wan-fast/sessions", json={"device": "d", "timer": "perf_counter"}).json()["session"]
        batches = f"/api/artifacts/wan-fast/sessions/{session}/batches"
        assert worker.post(batches, json={"batch": "b1", "baseline_s": [2.0, 2.0, 2.1],
                                          "candidate_s": [1.5, 1.5, 1.6]}).status_code == 200
        page.goto(f"{server.base}/#token={tokens['read']}")
        page.wait_for_selector("#status:text('live')")
        assert page.locator("table[data-workload='wan-t2v'] tr[data-artifact='wan-fast'] td").nth(2).inner_text() \
            == "registered"
        assert page.locator("table[data-workload='ltx-video'] tr[data-artifact='ltx-fast']").count() == 1
        record = page.locator(".record[data-artifacts='wan-fast']")
        assert record.get_attribute("data-pairs") == "3"
        # The HTML report's figure itself: a PNG of the running bounds, with the report's caption.
        assert record.locator("figure img").get_attribute("src").startswith("data:image/png;base64,")
        assert record.locator("figure img").get_attribute("alt") == "running bounds of wan-fast"
        assert "3 pairs from 1 session(s)" in record.locator("figcaption").inner_text()
        assert page.evaluate("document.querySelector(\".record[data-artifacts='wan-fast'] img\").naturalWidth") > 0
        # The report's other figures: speed against fidelity, and the per-frame fidelity of perceptual evidence.
        assert page.locator("#speed-fidelity figure img").get_attribute("alt") == \
            "speedup against tightest fidelity margin"
        frames = page.locator(".frames[data-artifact='watched'] figcaption").inner_text()
        assert frames.startswith("watched (promoted): frame set wan-8") and "Thresholds from contract v1" in frames
        head = int(page.locator("#head").inner_text())
        # An append while the page is open: the server-sent event makes the page read and redraw.
        assert worker.post(batches, json={"batch": "b2", "baseline_s": [2.0, 2.0],
                                          "candidate_s": [1.5, 1.5]}).status_code == 200
        page.wait_for_selector(".record[data-artifacts='wan-fast'][data-pairs='5']", timeout=WAIT_MS)
        assert int(page.locator("#head").inner_text()) == head + 1
        assert "5 pairs from 1 session(s)" in record.locator("figcaption").inner_text()


def test_the_monitor_appears_and_turns_to_an_alert_while_the_page_is_open(live, page):
    server, _ = live
    page.goto(f"{server.base}/#token={server.seeded.tokens['read']}")
    page.wait_for_selector("#status:text('live')")
    row = page.locator("table[data-workload='wan-watched'] tr[data-artifact='watched'] td")
    assert row.nth(2).inner_text() == "promoted" and row.nth(5).inner_text() == "-"
    assert page.locator("#monitor-table").count() == 0  # no re-measurement yet
    remeasure(server.url, "m0", 0.99)  # below the 1.2x gate: both pairs count below
    page.wait_for_selector("#monitor-table tr[data-artifact='watched'][data-pairs='2']", timeout=WAIT_MS)
    monitor = page.locator("#monitor-table tr[data-artifact='watched']")
    assert monitor.get_attribute("data-status") == "in_control"
    cells = monitor.locator("td")
    assert [cells.nth(i).inner_text() for i in (2, 3, 4, 5, 6, 8)] == ["in_control", "2", "2", "1.2", "0.001",
                                                                       "6.908"]
    assert page.locator("#alerts").inner_text() == ""
    for batch in range(1, 5):  # at the tenth pair below the threshold the detector crosses 1/alpha
        remeasure(server.url, f"m{batch}", 0.99)
    page.wait_for_selector("#monitor-table tr[data-artifact='watched'][data-status='regressed']", timeout=WAIT_MS)
    assert cells.nth(3).inner_text() == "10" and cells.nth(9).inner_text() == "10"  # alarmed at pair 10
    assert float(cells.nth(7).inner_text()) > float(cells.nth(8).inner_text())  # the statistic over its level
    assert page.locator("#alerts").inner_text() == "regressed, not acknowledged: watched"
    assert row.nth(5).inner_text() == "regressed"


def test_the_page_without_a_read_token_shows_the_refusal_and_no_data(live, page):
    server, _ = live
    page.goto(f"{server.base}/#token={server.seeded.tokens['ingest']}")
    page.wait_for_selector("#status.error")
    assert "lacks the read scope" in page.locator("#status").inner_text()
    assert page.locator("table").count() == 0
    page.goto(f"{server.base}/")
    page.reload()
    page.wait_for_selector("#status.error")
    assert "#token=" in page.locator("#status").inner_text()


# The live view's page, read in this process against a real SQLite file (no browser): what a read holds is bounded
# by the page (registry/serve/live.py MOST_ARTIFACTS and MOST_PLOTS), however many artifacts and pairs the
# registry has; the page says how many more there are.
PAGED = "workload: wan-paged\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 400}\n"


def paged_registry(url: str, registered: int, measured: int):
    """`registered` artifacts p0.. of wan-paged, each with its own bytes; the first `measured` of them given two
    pairs in a session each, in order (so their speed records moved in that order), before the rest register."""
    from registry.app.bench import open_session, record_pairs
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract

    registry = opened(url, actor="seeder", create=True)
    declare_workload(registry, Contract.from_yaml(PAGED))
    for index in range(registered):
        register_artifact(registry, f"p{index}", workload="wan-paged", kind="step_cache",
                          payload_sha256=f"{index + 1:064x}")
        if index < measured:
            session, _ = open_session(registry, f"p{index}", "d", "perf_counter")
            record_pairs(registry, f"p{index}", session, [2.0, 2.0], [1.5, 1.5], "b1")
    return registry


def execution_evidence(registry, artifact: str) -> None:
    """An evidence document for `artifact`: its row moves to the log's head."""
    from registry.app.evidence import import_document

    import_document(registry, json.dumps({"format": "registry.evidence/1", "artifact": artifact, "evidence": [
        {"kind": "execution", "candidate_calls": 4, "fallbacks": 0}]}))


def test_the_live_view_lists_the_artifacts_and_records_that_moved_last_and_says_how_many_more(sqlite_url):
    from registry.serve.live import snapshot

    registry = paged_registry(sqlite_url, registered=6, measured=3)
    execution_evidence(registry, "p1")  # p1 moves last; then p5, p4 registered last
    shown = snapshot(registry, most_artifacts=3, most_plots=2)
    [workload] = shown["workloads"]
    assert [a["artifact"] for a in workload["artifacts"]] == ["p1", "p4", "p5"]
    assert workload["artifacts_not_shown"] == 3
    assert (shown["artifacts_listed"], shown["artifacts_in_all"]) == (3, 6)
    # The two records that moved last (p2's, then p1's), newest first, each drawn; p0's is counted, not drawn.
    assert [record["artifacts"] for record in shown["records"]] == [["p2"], ["p1"]]
    assert all(record["figure"].startswith("<figure") for record in shown["records"])
    assert shown["records_not_drawn"] == 1
    # The whole registry fits in the default page: every artifact listed, every record drawn.
    whole = snapshot(registry)
    assert len(whole["workloads"][0]["artifacts"]) == 6 and whole["workloads"][0]["artifacts_not_shown"] == 0
    assert len(whole["records"]) == 3 and whole["records_not_drawn"] == 0


def test_a_promoted_artifact_off_the_page_keeps_its_monitor_and_its_alert(sqlite_url):
    from registry.serve.live import snapshot

    registry = paged_registry(sqlite_url, registered=3, measured=0)
    promote_watched(sqlite_url)
    for batch in range(5):  # ten pairs below the gate: the detector crosses 1/alpha
        remeasure(sqlite_url, f"m{batch}", 0.99)
    for index in range(3):
        execution_evidence(registry, f"p{index}")  # the page's two artifacts are p1 and p2, not `watched`
    shown = snapshot(registry, most_artifacts=2)
    assert [a["artifact"] for w in shown["workloads"] for a in w["artifacts"]] == ["p1", "p2"]
    assert {w["workload"]: w["artifacts_not_shown"] for w in shown["workloads"]} == {"wan-paged": 1,
                                                                                      "wan-watched": 1}
    assert shown["monitors"]["artifacts"] == ["watched"] and shown["monitors"]["statuses"] == ["regressed"]
    assert shown["alerts"] == ["watched"] and shown["monitors"]["promoted_not_shown"] == 0
    # Listed and promoted at once: one artifact, one monitor row.
    whole = snapshot(registry)
    assert "watched" in [a["artifact"] for w in whole["workloads"] for a in w["artifacts"]]
    assert whole["monitors"]["artifacts"] == ["watched"] and whole["alerts"] == ["watched"]


def test_the_live_view_reads_only_the_rows_on_its_page(sqlite_url):
    """A row off the page is never read (a damaged one does not stop the page); a damaged row on it is refused in
    the read models' one line, as any read that rests on it is."""
    import sqlite3

    from registry.projections.errors import DamagedReadModel
    from registry.serve.live import snapshot

    registry = paged_registry(sqlite_url, registered=4, measured=2)
    snapshot(registry, most_artifacts=2, most_plots=1)  # caught up
    database = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with database:  # p0's artifact row and its speed record's row: both off a page of two artifacts, one record
        assert database.execute("UPDATE projection_artifacts SET state = replace(state, 'step_cache', 'kernel') "
                                "WHERE artifact = 'p0'").rowcount == 1
        assert database.execute("UPDATE projection_speed_records SET state = replace(state, '2.0', '9.0') "
                                "WHERE record LIKE '%' || ?", (f"{1:064x}",)).rowcount == 1
    shown = snapshot(registry, most_artifacts=2, most_plots=1)
    assert [a["artifact"] for a in shown["workloads"][0]["artifacts"]] == ["p2", "p3"]
    with database:
        assert database.execute("UPDATE projection_artifacts SET state = replace(state, 'step_cache', 'kernel') "
                                "WHERE artifact = 'p3'").rowcount == 1
    database.close()
    with pytest.raises(DamagedReadModel, match="artifact 'p3' does not match the log"):
        snapshot(registry, most_artifacts=2, most_plots=1)


def test_the_page_folded_from_the_log_is_the_page_read_from_the_live_tables(sqlite_url):
    """A view as of a position (or over a connection that may only read) folds the log; it takes the same page."""
    registry = paged_registry(sqlite_url, registered=5, measured=3)
    execution_evidence(registry, "p0")
    with registry.view() as view:
        live_page = view.latest(3, 2)
        assert view.live
    with registry.view(as_of=live_page.position) as view:
        folded_page = view.latest(3, 2)
        assert not view.live
    assert [a["artifact"] for a in live_page.artifacts] == ["p0", "p4", "p3"]
    assert [r["record"] for r in live_page.records] == [r["record"] for r in folded_page.records]
    assert live_page.records_in_all == folded_page.records_in_all == 3
    assert live_page.artifacts_in_all == folded_page.artifacts_in_all == {"wan-paged": 5}
    assert [a["artifact"] for a in folded_page.artifacts] == ["p0", "p4", "p3"]
    assert (live_page.promoted, live_page.promoted_in_all) == (folded_page.promoted, folded_page.promoted_in_all) \
        == ([], 0)
