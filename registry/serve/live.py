"""The live view of `registry serve`: what the page at `/` draws, the events that tell it to redraw, the page.

The page is a shell holding no data. It takes the token from its URL's
fragment (never sent to the server, so never in a log), reads `/api/live`
with it, and listens to `/api/live/events`, server-sent events read through
`fetch` (an EventSource cannot send an Authorization header). The stream
sends the log's head whenever it moves (polled every POLL_SECONDS, once for
all the streams of a server process: `Streams`), so an append shows on an
open page well within two seconds, and the page reads the snapshot again.
A stream ends when its token is revoked (within a poll of the revocation)
or expires, and after STREAM_SECONDS in any case; a token holds at most
MOST_STREAMS_PER_TOKEN streams at once, a server process MOST_STREAMS.

The snapshot is read as the report reads the registry
(app/reports.py) and drawn with the report's own renderers, never a copy:
the figures are html_report.py's (`speed_fidelity_figure`, `bounds_figure`
for each speed record: the running lower and upper bounds of the median
ratio, pair by pair, against the gate; `frame_figure` for each artifact's
per-frame fidelity), each a PNG drawn once per content, and the monitors'
table is report.py `monitors_table` over read_models/monitors.py `monitor_summary`,
the rows `show` and `report` print.
"""
from __future__ import annotations

import asyncio
import gc
import hashlib
import itertools
import json
import threading
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable

from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from registry.app import Registry
from registry.formats.errors import UserError
from registry.projections.latest import LatestPage, SeenRecord

from .bodies import RequestRefused

if TYPE_CHECKING:
    from registry.projections.view import View

POLL_SECONDS = 0.5
# A stream ends after this long (the page reconnects), so a server never holds a forgotten tab for ever.
STREAM_SECONDS = 300
# Open streams a token may hold at once, and a server process in all (a page holds one).
MOST_STREAMS_PER_TOKEN = 8
MOST_STREAMS = 512
# Sent when nothing moved for this long, so a proxy does not close an idle stream.
KEEPALIVE_SECONDS = 15
# The most speed records drawn (as the HTML report's `max_frame_plots`), and the most per-frame figures; the page
# says how many more there are.
MOST_PLOTS = 48
# The most artifacts the page lists (those that moved last), and the most promoted artifacts whose monitors it
# shows; the page says how many more there are. With MOST_PLOTS they bound what a read of the page holds, however
# large the registry grows (projections/latest.py).
MOST_ARTIFACTS = 100


def snapshot(registry: Registry, most_artifacts: int = MOST_ARTIFACTS, most_plots: int = MOST_PLOTS) -> dict[str, Any]:
    """What the page draws, a page of the registry (`View.latest`: the `most_artifacts` artifacts that moved last,
    as many promoted ones for the monitors, the `most_plots` speed records that moved last) read as the report
    reads it (app/reports.py) and drawn by the HTML report's own functions (html_report.py): each workload's
    artifacts with their state and monitor status and how many are not listed, the speed-against-fidelity figure of
    the artifacts listed, the monitors' table (report.py `monitors_table`, rows from `monitor_summary`), each speed
    record's running-bounds figure and each listed artifact's per-frame fidelity figure."""
    from registry.projections.headline import headline
    from registry.projections.html_report import has_frames
    from registry.projections.report import alerts_of, monitors_of, monitors_table, speed_gate

    kept = RECORDS.kept()
    with registry.view() as view:
        page = view.latest(most_artifacts, most_plots, {key: seen for key, (seen, _) in kept.items()}, decode=False)
        drawn, positions = _records_drawn(view, page)
    artifacts = sorted(page.artifacts, key=lambda artifact: artifact["artifact"])
    listed = {artifact["artifact"] for artifact in artifacts}
    watched = sorted(artifacts + [a for a in page.promoted if a["artifact"] not in listed],
                     key=lambda artifact: artifact["artifact"])
    monitors = monitors_of(watched)
    status = {monitor["artifact"]: monitor["status"] for monitor in monitors}
    names = sorted(set(page.workloads) | set(page.artifacts_in_all) | {a["workload"] for a in artifacts})
    workloads = []
    for name in names:
        declared = page.workloads.get(name)
        shown = [{"artifact": a["artifact"], "kind": a["kind"], "decision": a["decision"],
                  "state": headline(a)["short"], "tier": a["tier"], "speedup": a["speedup"],
                  "monitor": status.get(a["artifact"])} for a in artifacts if a["workload"] == name]
        workloads.append({"workload": name, "contract_version": declared["contract_version"] if declared else None,
                          "artifacts": shown, "artifacts_not_shown": page.artifacts_in_all.get(name, 0) - len(shown)})
    gates = {name: speed_gate((page.workloads.get(name) or {}).get("contract")) for name in names}
    scatter = _drawn("speed_fidelity", {"artifacts": [{key: a[key] for key in SCATTER_FIELDS} for a in artifacts],
                                        "gates": gates})
    on_page = RECORDS.page(page, drawn, kept)
    records = [on_page[key] for key in sorted(on_page, key=lambda key: -positions[key]) if on_page[key] is not None]
    measured = [artifact for artifact in artifacts if has_frames(artifact)]
    frames = [{"artifact": a["artifact"], "figure": _drawn("frames", {
        "artifact": {"artifact": a["artifact"], "decision": a["decision"],
                     "evidence": {"perceptual": a["evidence"]["perceptual"]}},
        "declared": page.workloads.get(a["workload"])})} for a in measured[:most_plots]]
    title, columns, rows = monitors_table(monitors)
    FIGURES.read_done()
    return {"head": page.position, "workloads": workloads, "speed_fidelity": scatter, "records": records,
            "records_not_drawn": page.records_in_all - len(records), "frames": frames,
            "frames_not_drawn": len(measured) - len(frames),
            "artifacts_listed": len(artifacts), "artifacts_in_all": sum(page.artifacts_in_all.values()),
            "monitors": {"title": title, "columns": columns, "rows": [list(row) for row in rows],
                         "artifacts": [m["artifact"] for m in monitors], "statuses": [m["status"] for m in monitors],
                         "promoted_not_shown": page.promoted_in_all - len(page.promoted)},
            "alerts": alerts_of(monitors)}


# What the speed-against-fidelity figure reads of each artifact (plots.py `speed_fidelity_plot`).
SCATTER_FIELDS = ("artifact", "decision", "speedup", "margins")


def _records_drawn(view: View, page: LatestPage) -> tuple[dict[str, tuple[str, dict[str, Any] | None]],
                                                          dict[str, int]]:
    """The page's records that moved since the last read, each read (app/reports.py) and drawn, one at a time: a
    record is the largest thing a page holds, so a read holds one at once, however many moved ({record: (its
    workload, its entry)}); and where each record of the page stands (its last position), for its order."""
    from registry.app.reports import benchmark_records
    from registry.projections.read_models import RegistryState

    drawn: dict[str, tuple[str, dict[str, Any] | None]] = {}
    positions = dict(page.unchanged)
    for record in itertools.chain(page.records, (view.record_of(key) for key in page.moved)):
        positions[record["record"]] = record["last_position"]
        alone = RegistryState(workloads=page.workloads, records={record["record"]: record})
        for summary in benchmark_records(alone, page.workloads):
            drawn[record["record"]] = (summary["workload"], _record_shown(summary))
    return drawn, positions


def _record_shown(record: dict[str, Any]) -> dict[str, Any] | None:
    """A speed record's entry on the page, its running-bounds figure drawn (None: not read by the confident rule
    yet, so not drawn)."""
    if record.get("reading") is None:
        return None
    return {"record": record["record"], "workload": record["workload"], "artifacts": record["artifacts"],
            "pairs": record["pairs"], "max_pairs": record["max_pairs"], "shows": record["shows"],
            "stop": record["stop"], "figure": _drawn("bounds", record)}


class PageRecords:
    """The speed records of the last page read, as the page shows them (figure drawn), by what their rows were.

    A record is the largest thing a page decodes (every batch of its pairs:
    about 0.5 MB of Python objects at 400 pairs), and most of a page's
    records have not moved since the read before. So each read names the
    records it holds (`seen`), the page's read leaves undecoded those whose
    rows are unchanged (projections/latest.py), and their entries are taken
    from here: a read decodes and draws only what moved since the last one,
    and its working set is that, not the page's 48 records. What is kept is
    the last page's records only (at most its size), replaced by each read.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[SeenRecord, dict[str, Any] | None]] = {}

    def kept(self) -> dict[str, tuple[SeenRecord, dict[str, Any] | None]]:
        """The kept entries (None: a record not drawn) and the rows they were drawn from, by record: what a read
        names to the page's read and then takes its undecoded records from."""
        with self._lock:
            return dict(self._kept)

    def page(self, page: LatestPage, drawn: dict[str, tuple[str, dict[str, Any] | None]],
             kept: dict[str, tuple[SeenRecord, dict[str, Any] | None]]) -> dict[str, dict[str, Any] | None]:
        """The page's records as shown (None: not drawn): those `drawn` now (record -> its workload and entry)
        and those of `kept` (what this read named) that the page left undecoded; these are then what is kept,
        with the rows they were read from."""
        shown = {key: kept[key] for key in page.unchanged}
        for key, (workload, entry) in drawn.items():
            if key in page.row_hashes:  # a live row (a folded page's records have none to name next time)
                shown[key] = (SeenRecord(page.row_hashes[key], workload, page.workloads[workload]["last_position"]),
                              entry)
        with self._lock:
            self._kept = shown
        return {key: entry for key, (_, entry) in shown.items()} | {key: entry for key, (_, entry) in drawn.items()}

    def held(self) -> int:
        """Records kept now."""
        with self._lock:
            return len(self._kept)


# The most bytes of drawn figures a server process keeps (FIGURES), whatever its pages hold: a whole page's figures
# (one scatter and MOST_PLOTS of each other kind, about 40 kB each on a soak's records: 4 MB) fit four times over.
MOST_FIGURE_BYTES = 16 * 2**20


class PageFigures:
    """The live view's figures kept drawn: those the last page read asked for, and those asked for since.

    A figure is drawn once per content (its inputs, by digest), so a redraw
    renders only what an append changed. What is kept is what the pages ask
    for, not every content ever drawn: each completed read (`read_done`) makes
    the figures asked for since the one before the kept ones and drops the
    rest, so a record's figure drawn before its last batch is gone after the
    next read, and what a server holds is a page's figures (two at most,
    while a read is under way), reached at its first reads, never a count of
    stale figures filling for minutes. However large the figures, no more
    than `most_bytes` of them are kept: past it a figure is drawn and not kept.
    """

    def __init__(self, most_bytes: int = MOST_FIGURE_BYTES, draw: Callable[[str, str], str] | None = None):
        self.most_bytes = most_bytes
        self._draw = draw or _draw
        self._lock = threading.Lock()
        self._kept: dict[bytes, str] = {}  # asked for by the last completed read
        self._asked: dict[bytes, str] = {}  # asked for since
        self._bytes = 0

    def figure(self, kind: str, inputs: str) -> str:
        """The figure of `kind` drawn from `inputs` (JSON text), drawn now only when no read kept it."""
        key = hashlib.sha256(f"{kind}\0{inputs}".encode()).digest()
        with self._lock:
            found = self._asked.get(key)
            if found is None and (found := self._kept.pop(key, None)) is not None:
                self._asked[key] = found
        if found is not None:
            return found
        drawn = self._draw(kind, inputs)
        with self._lock:
            if key not in self._asked and self._bytes + len(drawn) <= self.most_bytes:
                self._asked[key] = drawn
                self._bytes += len(drawn)
        return drawn

    def read_done(self) -> None:
        """A page read is complete: what it and the reads since the last asked for is kept; the rest dropped."""
        with self._lock:
            self._bytes -= sum(len(figure) for figure in self._kept.values())
            self._kept, self._asked = self._asked, {}

    def held(self) -> tuple[int, int]:
        """(figures, bytes) kept now."""
        with self._lock:
            return len(self._kept) + len(self._asked), self._bytes


def _drawn(kind: str, inputs: dict[str, Any]) -> str:
    """A figure of the report's, drawn from `inputs` (exactly what its function is given), or kept (FIGURES)."""
    return FIGURES.figure(kind, json.dumps(inputs, sort_keys=True, default=str))


def _draw(kind: str, inputs: str) -> str:
    """The figure of `kind` (html_report.py's own), drawn from its inputs as JSON text (what FIGURES keys)."""
    from registry.projections import html_report

    given = json.loads(inputs)
    try:
        if kind == "bounds":
            return html_report.bounds_figure(given)
        if kind == "frames":
            return html_report.frame_figure(given["artifact"], given["declared"])
        return html_report.speed_fidelity_section(given["artifacts"], given["gates"])
    finally:
        collect_drawn()


def collect_drawn() -> None:
    """Free what a figure just drawn left behind. A matplotlib figure, its canvas (holding the Agg renderer and
    its pixel buffer, outside Python's allocator) and its axes refer to each other, so a drawn figure is freed
    only by the cyclic collector, and once its objects are old only by a full collection, which a server holding
    many objects runs seldom: 48 figures drawn left 21 MB resident until one ran. Collected while young (the
    two younger generations: a few ms), each leaves 0.4 MB at most (docs/benchmarks.md, "Soak")."""
    gc.collect(1)


FIGURES = PageFigures()
RECORDS = PageRecords()


def artifact_page(registry: Registry, artifact: str) -> dict[str, Any]:
    """One artifact's page (app/artifact_page.py), drawn as the HTML report draws it (html_report.py
    `artifact_section`), once per content."""
    from registry.app.artifact_page import artifact_page as read_page
    from registry.projections.headline import headline

    page = read_page(registry, artifact).to_dict()
    return {"artifact": page["state"]["artifact"], "state": headline(page["state"])["short"],
            "html": _section(json.dumps(page, sort_keys=True, default=str))}


@lru_cache(maxsize=64)
def _section(page: str) -> str:
    from registry.projections.html_report import artifact_section

    try:
        return artifact_section(json.loads(page))
    finally:
        collect_drawn()


class StreamRefused(RequestRefused):
    """No room for another live stream: this token's (429) or the server process's (503)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class _Stream:
    """One open live stream: whose token, until when, and the event that wakes it (a move of the head, its end)."""

    def __init__(self, key_id: str, presented: str, not_after: datetime):
        self.key_id, self.presented, self.not_after = key_id, presented, not_after
        self.wake = asyncio.Event()
        self.ended: str | None = None

    def end(self, why: str) -> None:
        self.ended = why
        self.wake.set()


class Streams:
    """The live event streams open in one server process, and the one poll of the log's head they all share.

    Every POLL_SECONDS one thread reads the head (one indexed statement,
    however many streams are open). Whenever it moved, the same thread reads
    again the token stream of every distinct token whose streams are open
    (`still_valid`, a server's KnownTokens: one version read each): a token
    revoked since is the head moving, so its streams end within a poll of the
    revocation; an expired one ends at its not-after; every stream ends at the
    next poll once `stopping` is set (the server is stopping), so a stop never
    waits for an open page. Streams are capped per token and per process, so
    however many a client opens, the polling and the memory stay bounded.
    """

    def __init__(self, registry: Registry, still_valid: Callable[[str], Any], stopping: threading.Event | None = None):
        self.registry, self.still_valid = registry, still_valid
        self.stopping = stopping or threading.Event()
        self.open: set[_Stream] = set()
        self.head: int | None = None
        self._poller: asyncio.Task | None = None

    def response(self, key_id: str, presented: str, not_after: datetime) -> StreamingResponse:
        """A new stream for this token, or StreamRefused when the token or the process has no room for one."""
        mine = sum(1 for stream in self.open if stream.key_id == key_id)
        if mine >= MOST_STREAMS_PER_TOKEN:
            raise StreamRefused(f"token {key_id} has {mine} live streams open, the most one token may; close one "
                                "first", 429)
        if len(self.open) >= MOST_STREAMS:
            raise StreamRefused(f"this server has {len(self.open)} live streams open, the most it keeps; try again "
                                "later", 503)
        stream = _Stream(key_id, presented, not_after)
        self.open.add(stream)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        return _StreamResponse(self._events(stream), lambda: self.open.discard(stream), media_type="text/event-stream",
                               headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def _events(self, stream: _Stream) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        ends = loop.time() + STREAM_SECONDS
        last = None
        while stream.ended is None and loop.time() < ends:
            if self.head is not None and self.head != last:
                last = self.head
                yield f"event: head\ndata: {json.dumps({'head': last})}\n\n"
            stream.wake.clear()
            try:
                await asyncio.wait_for(stream.wake.wait(), timeout=max(0.0, min(KEEPALIVE_SECONDS,
                                                                                 ends - loop.time())))
            except (asyncio.TimeoutError, TimeoutError):
                yield ": keep-alive\n\n"
        if stream.ended is not None:
            yield f"event: end\ndata: {json.dumps({'why': stream.ended})}\n\n"

    async def _poll(self) -> None:
        checked = None
        while self.open:
            streams = list(self.open)
            head, refused = await run_in_threadpool(self._read, streams, checked)
            checked = head
            now = datetime.now(timezone.utc)
            for stream in streams:
                if self.stopping.is_set():
                    stream.end("the server is stopping")
                elif stream.key_id in refused:
                    stream.end(refused[stream.key_id])
                elif now >= stream.not_after:
                    stream.end(f"token {stream.key_id} expired")
            if head != self.head:
                self.head = head
                for stream in streams:
                    stream.wake.set()
            await asyncio.sleep(POLL_SECONDS)

    def _read(self, streams: list[_Stream], checked: int | None) -> tuple[int, dict[str, str]]:
        """(the head, {key id: why} for each token refused now); the tokens are read only when the head moved."""
        from registry.formats.errors import first_line

        head = self.registry.store.head_position()
        refused: dict[str, str] = {}
        if head != checked:
            for presented, key_id in {stream.presented: stream.key_id for stream in streams}.items():
                try:
                    self.still_valid(presented)
                except UserError as exc:
                    refused[key_id] = first_line(exc)
        return head, refused


class _StreamResponse(StreamingResponse):
    """A streaming response that gives its stream's place back however it ends (finished, client gone, cancelled)."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None], **kwargs: Any):
        super().__init__(content, **kwargs)
        self.release = release

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>registry: live</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1150px}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
.promoted{color:#2e7d32}.rejected,.quarantined,.regressed,.alarm_due{color:#c62828}.held{color:#6d4c41}
#status{color:#555}.error{color:#c62828}#alerts{color:#c62828;font-weight:bold}
figure{margin:8px 0 20px}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.85em;color:#555}
</style></head>
<body>
<h1>registry: live</h1>
<p id="status">connecting</p><p>log head: <span id="head">-</span></p><p id="alerts"></p>
<div id="artifact"></div>
<div id="workloads"></div><div id="monitors"></div>
<h2>Speed against fidelity</h2><div id="speed-fidelity"></div>
<h2>Running bounds against the gate (speed records)</h2><div id="records"></div><p id="records-not-drawn"></p>
<h2>Per-frame fidelity (latest perceptual evidence)</h2><div id="frames"></div><p id="frames-not-drawn"></p>
<script>
"use strict";
const fragment = () => new URLSearchParams(location.hash.slice(1));
const token = fragment().get("token");
function pageOf(artifact) {  // the fragment that opens an artifact's page (the token stays in the fragment)
  const next = fragment(); if (artifact === null) next.delete("artifact"); else next.set("artifact", artifact);
  return "#" + next.toString();
}
const headers = token ? {"Authorization": "Bearer " + token} : {};
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) {
    node.append(child instanceof Node ? child : child === null || child === undefined ? "-" : String(child));
  }
  return node;
}
function table(attrs, columns, rows) {
  const node = el("table", attrs);
  node.append(el("tr", {}, ...columns.map((c) => el("th", {}, c))));
  for (const [rowAttrs, cells] of rows) node.append(el("tr", rowAttrs, ...cells));
  return node;
}
function render(data) {
  $("head").textContent = data.head;
  $("alerts").textContent = data.alerts.length ? "regressed, not acknowledged: " + data.alerts.join(", ") : "";
  const workloads = $("workloads"); workloads.replaceChildren();
  for (const wl of data.workloads) {
    const version = wl.contract_version === null ? "no contract" : "contract v" + wl.contract_version;
    workloads.append(el("h2", {}, wl.workload + " (" + version + ")"), table({"data-workload": wl.workload},
      ["artifact", "kind", "state", "tier", "speedup", "monitor"],
      wl.artifacts.map((a) => [{"data-artifact": a.artifact}, [
        el("td", {}, el("a", {"href": pageOf(a.artifact), "class": "artifact-link"}, a.artifact)),
        el("td", {}, a.kind), el("td", {"class": a.decision + (a.state === a.decision ? "" : " regressed")}, a.state),
        el("td", {}, a.tier), el("td", {}, a.speedup === null ? null : a.speedup.toFixed(4) + "x"),
        el("td", {"class": a.monitor || ""}, a.monitor)]])));
    if (wl.artifacts_not_shown) workloads.append(el("p", {"class": "not-shown", "data-workload": wl.workload},
      wl.artifacts_not_shown + " more artifacts not listed (the page lists the " + data.artifacts_listed +
      " of all " + data.artifacts_in_all + " that moved last)"));
  }
  const m = data.monitors, monitors = $("monitors"); monitors.replaceChildren();
  if (m.rows.length) monitors.append(el("h2", {}, m.title), table({"id": "monitor-table"}, m.columns,
    m.rows.map((row, i) => [{"data-artifact": m.artifacts[i], "data-status": m.statuses[i],
                             "data-pairs": row[3]}, row.map((cell) => el("td", {}, cell))])));
  if (m.promoted_not_shown) monitors.append(el("p", {"id": "monitors-not-shown"}, m.promoted_not_shown +
    " more promoted artifacts not shown (the page shows those that moved last)"));
  show($("speed-fidelity"), data.speed_fidelity);
  figures($("records"), data.records, (r) => r.record,
          (r) => ({"class": "record", "data-artifacts": r.artifacts.join(" "), "data-pairs": r.pairs,
                   "data-shows": r.shows}));
  figures($("frames"), data.frames, (f) => f.artifact, (f) => ({"class": "frames", "data-artifact": f.artifact}));
  $("records-not-drawn").textContent = data.records_not_drawn ? data.records_not_drawn + " more not drawn" :
    data.records.length ? "" : "nothing to draw: no speed record is read by the confident rule yet";
  $("frames-not-drawn").textContent = data.frames_not_drawn ? data.frames_not_drawn + " more not drawn" :
    data.frames.length ? "" : "nothing to draw: no artifact has current per-frame perceptual evidence";
}
function show(node, figure) {  // the server's figure (the HTML report's markup, escaped there), set only when changed
  if (node.dataset.figure !== figure) { node.innerHTML = figure; node.dataset.figure = figure; }
}
function figures(container, items, key, attrs) {
  const drawn = new Map();
  for (const node of container.children) drawn.set(node.dataset.key, node);
  container.replaceChildren(...items.map((item) => {
    const node = drawn.get(key(item)) || el("div", {"data-key": key(item)});
    for (const [k, v] of Object.entries(attrs(item))) node.setAttribute(k, v);
    show(node, item.figure);
    return node;
  }));
}
async function showArtifact() {  // the page of the artifact the fragment names, above the registry's tables
  const artifact = fragment().get("artifact"), node = $("artifact");
  if (!artifact) { node.replaceChildren(); return; }
  const response = await fetch("/api/artifacts/" + encodeURIComponent(artifact) + "/page", {headers});
  const body = await response.json();
  if (!response.ok) { node.replaceChildren(el("p", {"class": "error"}, body.error)); return; }
  const back = el("p", {}, el("a", {"href": pageOf(null), "id": "back"}, "back to the whole registry"));
  const holder = el("div", {"id": "artifact-page", "data-artifact": body.artifact, "data-state": body.state});
  holder.innerHTML = body.html;  // the HTML report's own section, escaped there
  node.replaceChildren(back, holder);
}
async function refresh() {
  const response = await fetch("/api/live", {headers});
  const body = await response.json();
  if (!response.ok) { $("status").textContent = body.error; $("status").className = "error"; return false; }
  render(body); await showArtifact(); return true;
}
window.addEventListener("hashchange", () => { if (token) showArtifact(); });
async function listen() {
  for (;;) {
    try {
      const response = await fetch("/api/live/events", {headers});
      if (!response.ok) { $("status").textContent = (await response.json()).error; $("status").className = "error";
                          return; }
      $("status").textContent = "live"; $("status").className = "";
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf("\\n\\n")) >= 0) {
          const message = buffer.slice(0, end); buffer = buffer.slice(end + 2);
          if (message.startsWith("event: head")) await refresh();
        }
      }
    } catch (e) { $("status").textContent = "reconnecting"; }
    await new Promise((r) => setTimeout(r, 1000));
  }
}
if (!token) { $("status").textContent = "open this page as /#token=rgt_... (a token with the read scope)";
              $("status").className = "error"; } else { refresh().then((ok) => { if (ok) listen(); }); }
</script></body></html>
"""
