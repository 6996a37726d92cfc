"""The live view at `/` in a real browser: the system's Chromium driven by Playwright (never a downloaded
browser), against a real `registry serve` process. The page shows each workload's artifacts, the HTML report's
own figures (speed against fidelity, each speed record's running bounds against the gate, per-frame fidelity)
and the monitors' table, and redraws when a batch or a re-measurement is appended while it is open, without a reload.

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
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            server.seeded, server.url = seeded, url
            yield server, browser
        finally:
            browser.close()


@pytest.fixture
def page(live):
    server, browser = live
    opened = browser.new_page()
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
