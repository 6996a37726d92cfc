"""The live view at `/` in a real browser: the system's Chromium driven by Playwright (never a downloaded
browser), against a real `registry serve` process. The page shows each workload's artifacts and each
benchmark record's running bounds, and redraws when a batch is appended while it is open, without a reload.

Needs seconds: one server process and one browser start for the module.
"""
from __future__ import annotations

import os
import shutil

import pytest

from serve_helpers import ServerProcess, seed

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium) so the live page is not rendered")
    from playwright.sync_api import sync_playwright

    url = f"sqlite:///{tmp_path_factory.mktemp('live') / 'registry.db'}"
    seeded = seed(url)
    with ServerProcess(url) as server, sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            server.seeded = seeded
            yield server, browser
        finally:
            browser.close()


def test_the_page_draws_the_artifacts_and_redraws_when_a_batch_arrives(live):
    server, browser = live
    tokens = server.seeded.tokens
    with server.client(tokens["ingest"]) as worker:
        session = worker.post("/api/artifacts/wan-fast/sessions", json={"device": "d", "timer": "t"}).json()["session"]
        batches = f"/api/artifacts/wan-fast/sessions/{session}/batches"
        assert worker.post(batches, json={"batch": "b1", "baseline_s": [2.0, 2.0, 2.1],
                                          "candidate_s": [1.5, 1.5, 1.6]}).status_code == 200
        page = browser.new_page()
        try:
            page.goto(f"{server.base}/#token={tokens['read']}")
            page.wait_for_selector("#status:text('live')")
            assert page.locator("table[data-workload='wan-t2v'] tr[data-artifact='wan-fast'] td").nth(2).inner_text() \
                == "registered"
            assert page.locator("table[data-workload='ltx-video'] tr[data-artifact='ltx-fast']").count() == 1
            assert page.locator(".record[data-artifact='wan-fast']").get_attribute("data-pairs") == "3"
            assert page.locator("svg[data-artifact='wan-fast'] line").count() == 1  # the gate
            head = int(page.locator("#head").inner_text())
            # An append while the page is open: the server-sent event makes the page read and redraw.
            assert worker.post(batches, json={"batch": "b2", "baseline_s": [2.0, 2.0],
                                              "candidate_s": [1.5, 1.5]}).status_code == 200
            page.wait_for_selector(".record[data-artifact='wan-fast'][data-pairs='5']", timeout=15_000)
            assert int(page.locator("#head").inner_text()) == head + 1
            assert page.locator("svg[data-artifact='wan-fast'] path").count() >= 1  # bounds exist from pair 5
        finally:
            page.close()


def test_the_page_without_a_read_token_shows_the_refusal_and_no_data(live):
    server, browser = live
    page = browser.new_page()
    try:
        page.goto(f"{server.base}/#token={server.seeded.tokens['ingest']}")
        page.wait_for_selector("#status.error")
        assert "lacks the read scope" in page.locator("#status").inner_text()
        assert page.locator("table").count() == 0
        page.goto(f"{server.base}/")
        page.reload()
        page.wait_for_selector("#status.error")
        assert "#token=" in page.locator("#status").inner_text()
    finally:
        page.close()
