"""The report as one self-contained HTML page: inline CSS, plots as base64 PNG, no external request."""
from __future__ import annotations

import base64
import json
import re
from html import escape
from typing import Any, Mapping, Sequence

from .plots import Plot, can_plot, frame_plot, running_bounds_plot, speed_fidelity_plot
from .matrix import cell_text
from .report import head_text, matrix_table, report_tables
from .read_models import RegistryState

STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #212121; max-width: 1150px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 8px 0 20px; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.85em; color: #555; } .none { color: #777; font-style: italic; }
table.matrix td { text-align: center; min-width: 9em; }
td.promoted { background: #c8e6c9; } td.candidates_found { background: #e3f2fd; }
td.no_worthwhile_candidate { background: #fff3e0; } td.quarantined { background: #ffcdd2; }
td.held { background: #fff9c4; } td.not_attempted { background: #f5f5f5; color: #777; }
td.stale { font-style: italic; opacity: 0.7; }
section.artifact-page { border-top: 2px solid #ddd; margin-top: 2em; } h3 { font-size: 1em; }
.state.promoted { color: #2e7d32; } .state.regressed, .state.quarantined, .state.rejected { color: #c62828; }
"""


NUMERIC = re.compile(r"[-+]?[0-9][0-9.e+-]*")


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    numeric = isinstance(value, (int, float)) or bool(NUMERIC.fullmatch(text))
    return f'<td class="num">{escape(text)}</td>' if numeric else f"<td>{escape(text)}</td>"


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    heading = f"<h2>{escape(title)}</h2>"
    if not rows:
        return heading + '<p class="none">none</p>'
    head = "".join(f"<th>{escape(column)}</th>" for column in columns)
    body = "".join("<tr>" + "".join(_cell(cell) for cell in row) + "</tr>" for row in rows)
    return f"{heading}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(plot: Plot, alt: str) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    return (f'<figure><img alt="{escape(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(plot.caption)}</figcaption></figure>")


def report_html(report: dict[str, Any], state: RegistryState, *, max_frame_plots: int = 48,
                pages: Sequence[dict[str, Any]] = (), pages_left_out: int = 0) -> str:
    """One self-contained HTML page of the report (plots embedded as base64 PNG), ending with `pages`, one per
    artifact (app/artifact_page.py), and how many were left out."""
    workloads = report["workloads"]
    artifacts = [a for key, a in sorted(state.artifacts.items()) if a["workload"] in workloads]
    scope = "all workloads" if report["workload"] is None else f"workload {report['workload']}"
    totals = ", ".join(f"{decision}: {count}" for decision, count in report["totals"].items()) or "no artifacts"
    [workload_table, *tables] = report_tables(report)
    matrix_title = matrix_table(report["matrix"])[0] if report["matrix"] is not None else None
    drawn: dict[str, str] = {}  # a speed record's figure is shown twice: in its section and on its artifact's page
    parts = [
        f"<h1>Registry report: {escape(scope)}, as of log position {report['as_of']}</h1>",
        *([f"<p>chain head <code>{escape(head_text(report['head']))}</code> "
           "(check it with <code>registry verify --expect-head</code>)</p>"] if report.get("head") else []),
        f"<p>{escape(totals)}</p>",
        _table(*workload_table),
        "<h2>Speed against fidelity</h2>",
        speed_fidelity_section(artifacts, {w: s["speed_gate"] for w, s in workloads.items()}),
        *(_table(*table) for table in tables if table[0] != matrix_title),
        *([matrix_grid(report["matrix"])] if report["matrix"] is not None else []),
        *_bounds_section(report.get("benchmark_records") or [], max_frame_plots, drawn),
        *_frame_section(artifacts, state, max_frame_plots),
        *artifact_pages_section(list(pages), pages_left_out, drawn),
    ]
    return page(f"Registry report as of position {report['as_of']}", parts)


def _bounds_section(records: list[dict[str, Any]], limit: int, drawn: dict[str, str] | None = None) -> list[str]:
    """One running-bounds figure per benchmark record read by the confident rule (at most `limit`)."""
    readable = [record for record in records if record.get("reading") is not None]
    if not readable:
        return []
    parts = ["<h2>Running bounds against the gate (speed records)</h2>"]
    parts += [bounds_figure(record, drawn) for record in readable[:limit]]
    if len(readable) > limit:
        parts.append(f'<p class="none">{len(readable) - limit} more not drawn</p>')
    return parts


def bounds_figure(record: dict[str, Any], drawn: dict[str, str] | None = None) -> str:
    """One speed record's running-bounds figure as the report draws it (the live view of `registry serve` too).

    The figure is a function of the record alone, so with `drawn` (one page's figures by their record's JSON) a
    record already drawn for the page is not drawn again."""
    key = json.dumps(record, sort_keys=True, default=str) if drawn is not None else ""
    if drawn is not None and key in drawn:
        return drawn[key]
    figure = _figure(running_bounds_plot(record), f"running bounds of {', '.join(record['artifacts'])}")
    if drawn is not None:
        drawn[key] = figure
    return figure


def page(title: str, parts: Sequence[str]) -> str:
    """A self-contained HTML document around `parts`."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def matrix_grid(matrix: dict[str, Any]) -> str:
    """The support matrix as a coloured grid: one class per outcome, `stale` on old cells."""
    title, _, _ = matrix_table(matrix)
    head = "".join(f"<th>{escape(column)}</th>" for column in ("family", "workload", *matrix["archs"]))
    body = []
    for row in matrix["rows"]:
        cells = []
        for arch in matrix["archs"]:
            cell = row["cells"][arch]
            classes = cell["outcome"] + (" stale" if cell["stale"] else "")
            cells.append(f'<td class="{classes}" data-arch="{escape(arch)}">{escape(cell_text(cell))}</td>')
        body.append(f"<tr><td>{escape(row['family'])}</td><td>{escape(row['workload'])}</td>{''.join(cells)}</tr>")
    return (f"<h2>{escape(title)}</h2><table class=\"matrix\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def speed_fidelity_section(artifacts: Sequence[Mapping[str, Any]], gates: dict[str, float | None]) -> str:
    """The speed-against-fidelity figure, or, when no artifact has both a measured speedup and a fidelity margin
    (a registry of exact-tier kernels: byte-equal parity records no margin), why there is none."""
    if not any(can_plot(artifact) for artifact in artifacts):
        return ('<p class="none">nothing to plot: no artifact has both a measured speedup and a fidelity margin '
                "(exact-tier parity that is byte-equal records no margin; perceptual metrics do)</p>")
    return speed_fidelity_figure(artifacts, gates)


def speed_fidelity_figure(artifacts: Sequence[Mapping[str, Any]], gates: dict[str, float | None]) -> str:
    """The speed-against-fidelity figure as the report draws it (the live view of `registry serve` too)."""
    return _figure(speed_fidelity_plot(artifacts, gates), "speedup against tightest fidelity margin")


def has_frames(artifact: Mapping[str, Any]) -> bool:
    """Whether the artifact's latest perceptual evidence has per-frame values to draw."""
    entry = artifact["evidence"].get("perceptual")
    return entry is not None and bool(entry["item"].get("ssim") or entry["item"].get("lpips"))


def frame_figure(artifact: Mapping[str, Any], declared: Mapping[str, Any] | None) -> str:
    """An artifact's per-frame fidelity figure against its workload's thresholds (`declared`: the workload's
    state, None when undeclared), as the report draws it (the live view of `registry serve` too)."""
    fidelity = (declared["contract"].get("fidelity") or {}) if declared else {}
    plot = frame_plot(artifact, fidelity)
    version = f"contract v{declared['contract_version']}" if declared else "no declared contract"
    return _figure(Plot(plot.png, f"{plot.caption} Thresholds from {version}."),
                   f"per-frame fidelity of {artifact['artifact']}")


def _frame_section(artifacts: Sequence[Mapping[str, Any]], state: RegistryState, limit: int) -> list[str]:
    measured = [artifact for artifact in artifacts if has_frames(artifact)]
    parts = ["<h2>Per-frame fidelity (latest perceptual evidence)</h2>"]
    if not measured:
        return parts + ['<p class="none">no artifact has current per-frame perceptual evidence</p>']
    if len(measured) > limit:
        parts.append(f"<p>{len(measured)} artifacts have per-frame evidence; the first {limit} by id are drawn.</p>")
    parts += [frame_figure(artifact, state.workloads.get(artifact["workload"])) for artifact in measured[:limit]]
    return parts


def artifact_anchor(artifact: str) -> str:
    """The id of an artifact's section in a page: stable, and safe in a URL fragment and an attribute."""
    import hashlib

    readable = re.sub(r"[^A-Za-z0-9_.-]", "-", artifact)[:60]
    return f"artifact-{readable}-{hashlib.sha256(artifact.encode('utf-8')).hexdigest()[:8]}"


def artifact_section(page: dict[str, Any], drawn: dict[str, str] | None = None) -> str:
    """One artifact's page (app/artifact_page.py `ArtifactPage.to_dict`): its state in the headline (a regressed
    monitor included), every verdict with its reasons, its speed record's running bounds, and for a monitored
    artifact its re-measurements against the threshold with the alarm marked. `drawn`: as `bounds_figure`."""
    from .headline import headline, margin_rows, parity_text
    from .plots import remeasurement_plot

    state = page["state"]
    name = state["artifact"]
    shown = headline(state)
    facts = [f"{state['kind']} for workload {state['workload']}", f"tier {state['tier'] or '-'}",
             f"payload {state['payload_sha256'] or 'none'}", f"identity {state['identity']}"]
    parts = [f'<section class="artifact-page" id="{artifact_anchor(name)}" data-artifact="{escape(name)}" '
             f'data-state="{escape(shown["short"])}">',
             f'<h2>{escape(name)}: <span class="state {escape(shown["decision"])}'
             f'{" regressed" if shown["regressed"] else ""}">{escape(shown["text"])}</span></h2>',
             f"<p>{escape('; '.join(facts))}</p>"]
    parity = parity_text(state)
    if parity:
        parts.append(f'<p class="parity">{escape(parity)}</p>')
    if state.get("reasons"):
        parts.append('<ul class="reasons">' + "".join(f"<li>{escape(r)}</li>" for r in state["reasons"]) + "</ul>")
    if state.get("margins"):
        parts.append(_table("margins of its current verdict",
                            ["metric", "value", "threshold", "margin", "meets the threshold"], margin_rows(state))
                     .replace("<h2>", "<h3>").replace("</h2>", "</h3>"))
    verdicts = page["verdicts"]
    parts.append(f"<h3>verdicts ({len(verdicts)})</h3>")
    if verdicts:
        rows = "".join(
            f'<tr data-position="{v["position"]}"><td class="num">{v["position"]}</td><td>{escape(v["recorded_at"][:19])}'
            f'</td><td class="{escape(v["decision"])}">{escape(v["decision"])}</td><td>{escape(v["rule"])}</td>'
            f'<td class="num">v{v["contract_version"]}</td><td><ul>'
            + "".join(f"<li>{escape(reason)}</li>" for reason in v["reasons"]) + "</ul></td></tr>"
            for v in verdicts)
        parts.append('<table class="verdicts"><thead><tr><th>position</th><th>recorded (UTC)</th><th>decision</th>'
                     f"<th>rule</th><th>contract</th><th>reasons</th></tr></thead><tbody>{rows}</tbody></table>")
    else:
        parts.append('<p class="none">no verdict yet</p>')
    record = page["record"]
    parts.append("<h3>speed record of its bytes</h3>")
    if record is None:
        parts.append('<p class="none">none: ' + ("it was registered without a payload" if state["payload_sha256"]
                                                 is None else "no pairs or documents recorded yet") + "</p>")
    elif record.get("reading") is None:
        parts.append(f'<p class="none">{record["pairs"]} pairs; not read ({escape(record["stop"])})</p>')
    else:
        parts.append(f'<div class="record-figure">{bounds_figure(record, drawn)}</div>')
    monitor = page["monitor"]
    if monitor is not None:
        parts.append("<h3>monitor: re-measurements against the threshold</h3>")
        parts.append(f'<div class="monitor-figure" data-status="{escape(monitor["status"])}">'
                     + _figure(remeasurement_plot(name, monitor, page["remeasured"]),
                               f"re-measurements of {name} against the threshold") + "</div>")
    parts.append("</section>")
    return "\n".join(parts)


def artifact_pages_section(pages: list[dict[str, Any]], more: int, drawn: dict[str, str] | None = None) -> list[str]:
    """The report's page per artifact: an index of links, then each artifact's section."""
    if not pages:
        return []
    links = "".join(f'<li><a href="#{artifact_anchor(p["state"]["artifact"])}">{escape(p["state"]["artifact"])}</a>'
                    f" ({escape(p['state']['decision'])})</li>" for p in pages)
    parts = ["<h2>Artifacts, one page each</h2>", f'<ul class="artifact-index">{links}</ul>']
    if more:
        parts.append(f'<p class="none">{more} more artifacts not shown (narrow the report with --workload)</p>')
    return parts + [artifact_section(page, drawn) for page in pages]
