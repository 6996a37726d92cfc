"""The report's figures, drawn with matplotlib's Agg canvas (no display, no pyplot state) as PNG bytes.

1. Speed against fidelity: one point per artifact at (tightest fidelity
   margin / |threshold|, speedup), coloured by decision, with the gate's
   lines: x = 0 (a fidelity metric exactly at its threshold passes) and, per
   workload, y = its contract's speed gate. Margins of different metrics are
   only comparable relative to their thresholds, hence the x scale.
2. Per-frame fidelity: each perceptual artifact's per-frame SSIM (and LPIPS
   when measured) from its latest perceptual evidence, the worst frame
   marked (the gate judges the worst frame: min SSIM, max LPIPS) and the
   contract's threshold drawn.
3. Running bounds: for an artifact's benchmark sessions, the confident
   rule's running lower and upper bounds of the median ratio after each
   pair, against the gate; the pair that decided is marked.
4. Re-measurements: a monitored artifact's re-measured pairs in recorded
   order against its monitor's threshold, each batch's median, and the pair
   its alarm came at.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .read_models.artifacts import relative_margin, tightest

DECISION_COLOURS = {
    "promoted": "#2e7d32", "rejected": "#ef6c00", "quarantined": "#c62828",
    "held": "#616161", "recorded": "#1565c0", "registered": "#bdbdbd",
}
# A speed record's reading (never an artifact's state) -> the colour of the pair it was decided at.
READING_COLOURS = {"above": DECISION_COLOURS["promoted"], "below": DECISION_COLOURS["rejected"]}
GATE_STYLES = ("--", "-.", ":", (0, (5, 1, 1, 1)))


def literal(name: str) -> str:
    """A name from the log as matplotlib text: every `$` escaped, so `$...$` is never drawn as mathtext.

    Captions go into the HTML page (escaped there), never through matplotlib, and need no escaping.
    """
    return name.replace("$", r"\$")
LABEL_LIMIT = 40  # name the points while they stay legible
DPI = 100


def is_fidelity_metric(metric: str) -> bool:
    """Fidelity margins: perceptual metrics and parity error bounds (not speed or noise)."""
    return metric in ("ssim", "lpips", "vbench") or metric.startswith("max_abs_error:")


def tightest_fidelity(artifact: Mapping[str, Any]) -> Any:
    return tightest([m for m in artifact["margins"] if is_fidelity_metric(m["metric"])])


def _png(figure: Figure) -> bytes:
    """The figure as PNG bytes, drawn once.

    `tight_layout` has placed the axes already and leaves a placeholder layout engine behind; with any engine set,
    `savefig` first draws the whole figure without rendering it, to lay it out again, which a placeholder never does.
    Unset, the same bytes come out of one draw (the pre-draw was about 40% of a figure's CPU).
    """
    figure.set_layout_engine(None)
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


@dataclass(frozen=True)
class Plot:
    png: bytes
    caption: str


def can_plot(artifact: Mapping[str, Any]) -> bool:
    """Whether the artifact is a point of the speed-against-fidelity figure: a speedup and a finite fidelity margin."""
    margin = tightest_fidelity(artifact)
    return artifact["speedup"] is not None and margin is not None and math.isfinite(relative_margin(margin))


def speed_fidelity_plot(artifacts: Sequence[Mapping[str, Any]], gates: dict[str, float | None]) -> Plot:
    points, left_out = [], []
    for artifact in artifacts:
        margin = tightest_fidelity(artifact)
        x = relative_margin(margin) if margin is not None else math.nan
        if not can_plot(artifact):
            left_out.append(artifact["artifact"])
            continue
        points.append((x, artifact["speedup"], artifact))
    figure = Figure(figsize=(10, 6.5))
    axes = figure.add_subplot()
    for decision, colour in DECISION_COLOURS.items():
        chosen = [(x, y) for x, y, a in points if a["decision"] == decision]
        if chosen:
            axes.scatter([p[0] for p in chosen], [p[1] for p in chosen], c=colour, s=46, label=decision,
                         edgecolors="black", linewidths=0.4, zorder=3)
    if len(points) <= LABEL_LIMIT:
        for x, y, artifact in points:
            axes.annotate(literal(artifact["artifact"]), (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    axes.axvline(0.0, color="black", linewidth=1.2, label="fidelity threshold (margin 0)")
    xs = [x for x, _, _ in points] or [0.0]
    pad = 0.1 * max(abs(min(xs)), abs(max(xs)), 1e-3)
    axes.set_xlim(min(min(xs), 0.0) - pad, max(max(xs), 0.0) + pad)
    axes.axvspan(axes.get_xlim()[0], 0.0, color="#c62828", alpha=0.06, label="fails a fidelity threshold")
    for index, (workload, gate) in enumerate(sorted((w, g) for w, g in gates.items() if g is not None)):
        axes.axhline(gate, color="#6a1b9a", linewidth=1.0, linestyle=GATE_STYLES[index % len(GATE_STYLES)],
                     label=f"{literal(workload)} speed gate {gate:.3g}x")
    axes.set_xlabel("tightest fidelity margin / |threshold|  (> 0 passes)")
    axes.set_ylabel("speedup (median of paired ratios)")
    axes.set_title("Speed against fidelity, per artifact")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    caption = f"{len(points)} artifact(s) plotted."
    if left_out:
        caption += (f" Not plotted ({len(left_out)}), having no measured speedup or no fidelity margin"
                    f" (byte-exact parity records none): {', '.join(left_out[:20])}"
                    f"{' ...' if len(left_out) > 20 else ''}.")
    return Plot(_png(figure), caption)


def _worst(values: list[float], lowest: bool) -> int:
    target = min(values) if lowest else max(values)
    return values.index(target)


def frame_plot(artifact: Mapping[str, Any], fidelity: Mapping[str, Any]) -> Plot:
    """Per-frame panels for one artifact's latest perceptual item; thresholds from `fidelity` (its contract)."""
    item = artifact["evidence"]["perceptual"]["item"]
    panels = [(metric, item[metric]) for metric in ("ssim", "lpips") if item.get(metric)]
    figure = Figure(figsize=(5.2 * max(1, len(panels)), 3.0))
    notes = []
    for index, (metric, values) in enumerate(panels, start=1):
        axes = figure.add_subplot(1, len(panels), index)
        frames = list(range(len(values)))
        axes.plot(frames, values, marker="o", markersize=3, color="#1565c0", linewidth=1.2)
        worst = _worst(values, lowest=metric == "ssim")
        axes.scatter([worst], [values[worst]], s=110, facecolors="none", edgecolors="#c62828", linewidths=2,
                     zorder=4, label=f"worst frame {worst}: {values[worst]:.4g}")
        key = "min_ssim" if metric == "ssim" else "max_lpips"
        threshold = fidelity.get(key)
        if threshold is not None:
            axes.axhline(threshold, color="#c62828", linestyle="--", linewidth=1, label=f"{key} {threshold:g}")
        else:
            notes.append(f"no {key} declared")
        axes.set_title(f"{literal(artifact['artifact'])}: {metric.upper()} per frame", fontsize=9)
        axes.set_xlabel("frame")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=7, loc="best")
    figure.tight_layout()
    caption = (f"{artifact['artifact']} ({artifact['decision']}): frame set {item['frame_set']}, seed {item['seed']},"
               f" evidence at position {artifact['evidence']['perceptual']['position']}")
    if notes:
        caption += "; " + ", ".join(notes)
    return Plot(_png(figure), caption + ".")


def running_bounds_plot(record: dict[str, Any]) -> Plot:
    """The running confidence bounds of one speed record against its gate (docs/gate.md, "The speed record").

    Every record is drawn: a record whose bounds exist at one pair only is a
    marked point with its bounds as an error bar, and one with no bound yet
    says so on the axes.
    """
    figure = Figure(figsize=(8, 3.6))
    axes = figure.add_subplot()
    bounds = record["running_bounds"]
    pairs = [i + 1 for i, (low, _) in enumerate(bounds) if low is not None]
    lows = [bounds[i - 1][0] for i in pairs]
    highs = [bounds[i - 1][1] for i in pairs]
    level = f"two-sided {record['level']:.0%}"
    if len(pairs) == 1:
        middle = (lows[0] + highs[0]) / 2.0
        axes.errorbar(pairs, [middle], yerr=[[middle - lows[0]], [highs[0] - middle]], fmt="o", color="#1565c0",
                      capsize=6, label=f"bounds at pair {pairs[0]} ({level})")
    elif pairs:
        axes.fill_between(pairs, lows, highs, step="post", color="#1565c0", alpha=0.15)
        axes.step(pairs, lows, where="post", color="#1565c0", label=f"lower bound ({level})")
        axes.step(pairs, highs, where="post", color="#1565c0", linestyle="--", label="upper bound")
    else:
        axes.text(0.5, 0.5, "no bound yet: fewer pairs than the fewest that can decide", transform=axes.transAxes,
                  ha="center", va="center", fontsize=9, color="#555")
    axes.axhline(record["gate"], color="#6a1b9a", linewidth=1.2, label=f"gate {record['gate']:.3g}x")
    if record.get("decided_at"):
        axes.axvline(record["decided_at"], color=READING_COLOURS.get(record["reading"], "black"), linewidth=1.0,
                     label=f"{record['shows']} at pair {record['decided_at']}")
    axes.set_xlim(0, max(len(bounds), 1) + 1)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("pairs")
    axes.set_ylabel("median ratio bounds")
    name = ", ".join(record["artifacts"]) or record["payload_sha256"][:12]
    axes.set_title(f"{literal(name)}: running bounds against the gate (alpha {record['alpha']:g} per side)")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    caption = (f"{name} (payload {record['payload_sha256'][:12]}): {record['pairs']} pairs from "
               f"{len(record['sessions'])} session(s) and {record['documents']} document(s), {record['shows']} "
               f"({record['stop']}); bounds {level}. No bound exists before the fewest pairs that can decide at alpha.")
    return Plot(_png(figure), caption)


def remeasurement_plot(artifact: str, monitor: dict[str, Any], batches: list[dict[str, Any]]) -> Plot:
    """A monitored artifact's re-measured pairs in recorded order against its monitor's threshold, with the pair
    its alarm came at marked (docs/monitor.md): each pair's ratio, each batch's median, the threshold line."""
    figure = Figure(figsize=(8, 3.6))
    axes = figure.add_subplot()
    index, xs, ys, medians = 0, [], [], []
    for batch in batches:
        ratios = batch["ratios"]
        positions = list(range(index + 1, index + len(ratios) + 1))
        xs += positions
        ys += ratios
        ordered = sorted(ratios)
        middle = len(ordered) // 2
        median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        medians.append(((positions[0] + positions[-1]) / 2, median))
        index += len(ratios)
    threshold = monitor["threshold"]
    below = [(x, y) for x, y in zip(xs, ys) if y < threshold]
    above = [(x, y) for x, y in zip(xs, ys) if y >= threshold]
    if above:
        axes.scatter([x for x, _ in above], [y for _, y in above], s=14, color="#1565c0", label="pair at or above")
    if below:
        axes.scatter([x for x, _ in below], [y for _, y in below], s=14, color="#c62828", label="pair below")
    if medians:
        axes.plot([m[0] for m in medians], [m[1] for m in medians], color="#424242", linewidth=1.0,
                  marker="_", label="batch median")
    axes.axhline(threshold, color="#6a1b9a", linewidth=1.2, label=f"threshold {threshold:.3g}x")
    if monitor.get("crossed_at"):
        axes.axvline(monitor["crossed_at"], color="#c62828", linewidth=1.2, linestyle="--",
                     label=f"alarm at pair {monitor['crossed_at']}")
    axes.set_xlim(0, max(index, 1) + 1)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("re-measured pair (recorded order)")
    axes.set_ylabel("speedup (baseline / candidate)")
    axes.set_title(f"{literal(artifact)}: re-measurements against the monitor's threshold")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="best", fontsize=8)
    figure.tight_layout()
    span = f" from {batches[0]['recorded_at'][:19]} to {batches[-1]['recorded_at'][:19]} UTC" if batches else ""
    alarm = (f"; the detector crossed 1/alpha at pair {monitor['crossed_at']} ({monitor['status']})"
             if monitor.get("crossed_at") else f"; no alarm ({monitor['status']})")
    caption = (f"{artifact}: {index} re-measured pairs in {len(batches)} batches{span}, {monitor['below']} of the "
               f"{monitor['pairs']} counted below the threshold {threshold:.4g}x (alpha {monitor['alpha']:g}){alarm}.")
    return Plot(_png(figure), caption)
