"""The live view of `registry serve`: what the page at `/` draws, the events that tell it to redraw, the page.

The page is a shell holding no data. It takes the token from its URL's
fragment (never sent to the server, so never in a log), reads `/api/live`
with it, and listens to `/api/live/events`, server-sent events read through
`fetch` (an EventSource cannot send an Authorization header). The stream
sends the log's head whenever it moves (polled every POLL_SECONDS), so an
append shows on an open page well within two seconds, and the page reads the
snapshot again. Each benchmark record is drawn as the HTML report draws it
(projections/plots.py, `running_bounds_plot`): the running lower and upper
bounds of the median ratio, pair by pair, against the gate.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from registry.app import Registry
from registry.formats.errors import UserError

POLL_SECONDS = 0.5
# A stream ends after this long (the page reconnects), so a server never holds a forgotten tab for ever.
STREAM_SECONDS = 300
# Sent when nothing moved for this long, so a proxy does not close an idle stream.
KEEPALIVE_SECONDS = 15


def show_artifact(registry: Registry, artifact: str, shown_verdicts: int) -> dict[str, Any]:
    """An artifact's state with its latest verdicts and benchmark record: `registry show --json`'s document."""
    from registry.app.bench import record_summary
    from registry.projections.state import contract_note

    projections = registry.reads
    state, verdict_count = projections.shown_artifact(artifact, shown_verdicts)
    if state is None:
        raise UserError(f"unknown artifact {artifact!r}")
    workload = projections.workload(state["workload"])
    return {"artifact": state["artifact"], "decision": state["decision"],
            "contract_note": contract_note(state, workload), **state, "verdict_count": verdict_count,
            "verdicts_omitted": verdict_count - len(state["verdicts"]), "workload_declared": workload is not None,
            "bench": None if workload is None else record_summary(registry, state, workload)}


def snapshot(registry: Registry) -> dict[str, Any]:
    """Each workload's artifacts with their state, and each benchmark record with its running bounds."""
    from registry.app.bench import record_summary

    projections = registry.reads
    head = projections.catch_up()
    workloads, records = [], []
    for declared in projections.workloads():
        name = declared["workload"]
        artifacts = []
        for state in projections.artifacts(name):
            artifacts.append({"artifact": state["artifact"], "kind": state["kind"], "decision": state["decision"],
                              "tier": state["tier"], "speedup": state["speedup"]})
            record = record_summary(registry, state, declared)
            if record is not None and record.get("decision") is not None:
                records.append({"artifact": state["artifact"], "workload": name,
                                **{key: record[key] for key in ("gate", "alpha", "pairs", "max_pairs", "decision",
                                                                "decided_at", "lower", "upper", "stop",
                                                                "running_bounds")}})
        workloads.append({"workload": name, "contract_version": declared["contract_version"],
                          "artifacts": artifacts})
    return {"head": head, "workloads": workloads, "records": records}


def event_stream(registry: Registry) -> StreamingResponse:
    return StreamingResponse(_heads(registry), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _heads(registry: Registry) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    last, quiet = None, 0.0
    while loop.time() - started < STREAM_SECONDS:
        head = await run_in_threadpool(registry.store.head_position)
        if head != last:
            last, quiet = head, 0.0
            yield f"event: head\ndata: {json.dumps({'head': head})}\n\n"
        elif quiet >= KEEPALIVE_SECONDS:
            quiet = 0.0
            yield ": keep-alive\n\n"
        await asyncio.sleep(POLL_SECONDS)
        quiet += POLL_SECONDS


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>registry: live</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
.promoted{color:#2e7d32}.rejected,.quarantined{color:#c62828}.held{color:#6d4c41}
#status{color:#555}.error{color:#c62828}svg{background:#fafafa;border:1px solid #ddd}
</style></head>
<body>
<h1>registry: live</h1>
<p id="status">connecting</p><p>log head: <span id="head">-</span></p>
<div id="workloads"></div><h2>benchmark records: running bounds against the gate</h2><div id="records"></div>
<script>
"use strict";
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? {"Authorization": "Bearer " + token} : {};
const $ = (id) => document.getElementById(id);
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const child of children) node.append(child === null || child === undefined ? "-" : String(child));
  return node;
}
function svgEl(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}
function boundsPlot(record) {
  const w = 640, h = 240, pad = 40, bounds = record.running_bounds;
  const values = bounds.flat().filter((v) => v !== null).concat([record.gate]);
  const lo = Math.min(...values) * 0.98, hi = Math.max(...values) * 1.02;
  const x = (i) => pad + (w - 2 * pad) * i / Math.max(bounds.length + 1, 2);
  const y = (v) => h - pad - (h - 2 * pad) * (v - lo) / Math.max(hi - lo, 1e-9);
  const svg = svgEl("svg", {width: w, height: h, "data-artifact": record.artifact});
  for (const [which, dash] of [[0, ""], [1, "4 3"]]) {
    let d = "";
    bounds.forEach((b, i) => {
      if (b[which] === null) return;
      d += d ? ` H${x(i + 1)} V${y(b[which])}` : `M${x(i + 1)} ${y(b[which])}`;
    });
    if (d) svg.append(svgEl("path", {d, fill: "none", stroke: "#1565c0", "stroke-dasharray": dash}));
  }
  svg.append(svgEl("line", {x1: pad, x2: w - pad, y1: y(record.gate), y2: y(record.gate), stroke: "#6a1b9a"}));
  const label = svgEl("text", {x: pad, y: 16, "font-size": 12});
  label.textContent = record.artifact + ": " + record.pairs + " pairs, " + record.decision + ", gate " +
    record.gate + "x, bounds " + record.lower + " to " + record.upper;
  svg.append(label);
  return svg;
}
function render(data) {
  $("head").textContent = data.head;
  const workloads = $("workloads"); workloads.replaceChildren();
  for (const wl of data.workloads) {
    workloads.append(el("h2", {}, wl.workload + " (contract v" + wl.contract_version + ")"));
    const table = el("table", {"data-workload": wl.workload});
    table.append(el("tr", {}, ...["artifact", "kind", "state", "tier", "speedup"].map((t) => el("th", {}, t))));
    for (const a of wl.artifacts) {
      const row = el("tr", {"data-artifact": a.artifact});
      row.append(el("td", {}, a.artifact), el("td", {}, a.kind), el("td", {"class": a.decision}, a.decision),
                 el("td", {}, a.tier), el("td", {}, a.speedup === null ? null : a.speedup.toFixed(3) + "x"));
      table.append(row);
    }
    workloads.append(table);
  }
  const records = $("records"); records.replaceChildren();
  for (const r of data.records) {
    records.append(el("h3", {"class": "record", "data-artifact": r.artifact, "data-pairs": r.pairs},
                      r.artifact + " (" + r.workload + "): " + r.decision + " after " + r.pairs + " of at most " +
                      r.max_pairs + " pairs (" + r.stop + ")"), boundsPlot(r));
  }
}
async function refresh() {
  const response = await fetch("/api/live", {headers});
  const body = await response.json();
  if (!response.ok) { $("status").textContent = body.error; $("status").className = "error"; return false; }
  render(body); return true;
}
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
