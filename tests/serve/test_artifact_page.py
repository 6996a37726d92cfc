"""A page per artifact, in the HTML report and in the live view, checked in the system's Chromium (Playwright by
`executable_path`, never a downloaded browser): the state in the headline (a regression included), every verdict
with its reasons, the speed record's running bounds over pairs, and a monitored artifact's re-measurements over
time against the threshold with the alarm marked.

Needs seconds: one `registry serve` process and one browser for the module.
"""
from __future__ import annotations

import json
import os

import pytest

from serve_helpers import CHROMIUM, WAIT_MS, WATCHED, ServerProcess, seed


def build(url: str) -> None:
    """`watched`: held on 4 pairs (no bounds yet), then promoted on 8 at 1.33x, then regressed (an alarm at pair
    10 of its re-measurements); `steady`: registered, never measured."""
    from registry.app import open_registry
    from registry.app.bench import open_session, record_pairs
    from registry.app.decisions import promote
    from registry.app.evidence import import_document
    from registry.app.monitor import record_remeasurement
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract

    registry = open_registry(url, actor="seeder")
    declare_workload(registry, Contract.from_yaml(WATCHED))
    register_artifact(registry, "watched", workload="wan-watched", kind="step_cache", payload_sha256="c" * 64)
    register_artifact(registry, "steady", workload="wan-watched", kind="step_cache", payload_sha256="d" * 64)
    import_document(registry, json.dumps({"format": "registry.evidence/1", "artifact": "watched", "evidence": [
        {"kind": "execution", "candidate_calls": 40, "fallbacks": 0},
        {"kind": "perceptual", "frame_set": "wan-8", "seed": 1024, "ssim": [0.999, 0.99], "lpips": None,
         "vbench": None, "stage_status": "ok"}]}))
    session, _ = open_session(registry, "watched", "NVIDIA H200", "cuda_event")
    record_pairs(registry, "watched", session, [2.0] * 4, [1.5] * 4, "b1")
    assert promote(registry, "watched").verdict["rule"] == "speed.undecided"
    record_pairs(registry, "watched", session, [2.0] * 4, [1.5] * 4, "b2")
    assert promote(registry, "watched").verdict["decision"] == "promoted"
    for batch in range(5):
        record_remeasurement(registry, "watched", [2.0, 2.0], [2.0 / 0.99] * 2, batch=f"m{batch}",
                             device="NVIDIA H200", software={"torch": "2.13.0"})
    registry.close()


@pytest.fixture(scope="module")
def browser_and_registry(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium) so the pages are not rendered")
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("pages")
    url = f"sqlite:///{folder / 'registry.db'}"
    seeded = seed(url)
    build(url)
    with sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True, timeout=WAIT_MS)
        try:
            yield browser, url, seeded, folder
        finally:
            browser.close()


@pytest.fixture
def page(browser_and_registry):
    opened = browser_and_registry[0].new_page()
    # Playwright's own waits (a navigation, a click, a locator's text) give up after 30 s unless told: a hang
    # guard like the suite's others, not a bound on how fast a loaded machine draws the page.
    opened.set_default_timeout(WAIT_MS)
    try:
        yield opened
    finally:
        opened.close()


def check_watched(section) -> None:
    """What the page of `watched` must show, wherever it is drawn."""
    assert section.get_attribute("data-state") == "promoted, regressed"
    headline = section.locator("h2 .state").inner_text()
    assert headline.startswith("promoted, regressed (alarm at pair 10 of its re-measurements")
    rows = section.locator("table.verdicts tbody tr")
    assert rows.count() == 2  # every verdict, the held one included, each with its reasons
    assert rows.nth(0).locator("td").nth(2).inner_text() == "held"
    assert "do not yet decide against the gate" in rows.nth(0).inner_text()
    assert rows.nth(1).locator("td").nth(2).inner_text() == "promoted"
    assert "lie above the gate" in rows.nth(1).inner_text()
    bounds = section.locator(".record-figure figure")
    assert bounds.locator("img").get_attribute("alt") == "running bounds of watched"
    assert "8 pairs from 1 session(s)" in bounds.locator("figcaption").inner_text()
    monitor = section.locator(".monitor-figure")
    assert monitor.get_attribute("data-status") == "regressed"
    caption = monitor.locator("figcaption").inner_text()
    assert "10 re-measured pairs in 5 batches" in caption and "crossed 1/alpha at pair 10" in caption
    for image in (bounds.locator("img"), monitor.locator("img")):
        assert image.evaluate("node => node.naturalWidth") > 0  # a PNG the browser decoded


def test_the_html_report_has_a_page_per_artifact(browser_and_registry, page):
    from click.testing import CliRunner

    from registry.cli.main import main

    _, url, _, folder = browser_and_registry
    out = folder / "report.html"
    result = CliRunner().invoke(main, ["--db", url, "report", "--format", "html", "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    page.goto(out.as_uri())
    index = page.locator("ul.artifact-index a")
    assert "watched" in [index.nth(i).inner_text() for i in range(index.count())]
    page.locator("ul.artifact-index a", has_text="watched").click()
    watched = page.locator("section.artifact-page[data-artifact='watched']")
    assert page.evaluate("location.hash") == "#" + watched.get_attribute("id")
    check_watched(watched)
    steady = page.locator("section.artifact-page[data-artifact='steady']")
    assert steady.get_attribute("data-state") == "registered"
    assert steady.locator("table.verdicts").count() == 0 and "no verdict yet" in steady.inner_text()
    assert steady.locator(".monitor-figure").count() == 0  # never promoted, never re-measured
    # The leaderboard marks the regressed artifact beside its name.
    assert "promoted, regressed" in page.locator("h2", has_text="leaderboard: wan-watched").locator(
        "xpath=following-sibling::table[1]").inner_text()


def test_the_live_view_opens_an_artifacts_page_from_its_row(browser_and_registry, page):
    _, url, seeded, _ = browser_and_registry
    with ServerProcess(url) as server:
        page.goto(f"{server.base}/#token={seeded.tokens['read']}")
        page.wait_for_selector("#status:text('live')")
        row = page.locator("table[data-workload='wan-watched'] tr[data-artifact='watched'] td")
        assert row.nth(2).inner_text() == "promoted, regressed"
        row.nth(0).locator("a").click()
        page.wait_for_selector("#artifact-page[data-artifact='watched']", timeout=WAIT_MS)
        assert "artifact=watched" in page.evaluate("location.hash") and "token=" in page.evaluate("location.hash")
        check_watched(page.locator("#artifact-page section.artifact-page"))
        page.locator("#back").click()
        page.wait_for_function("!document.querySelector('#artifact-page')", timeout=WAIT_MS)
        with server.client(seeded.tokens["read"]) as reader:
            missing = reader.get("/api/artifacts/nobody/page")
            assert missing.status_code == 400 and "unknown artifact 'nobody'" in missing.json()["error"]
        with server.client(seeded.tokens["ingest"]) as worker:
            assert worker.get("/api/artifacts/watched/page").status_code == 403
