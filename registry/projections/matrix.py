"""The support matrix: for each workload and GPU architecture, the best outcome there is, and how fresh.

Rows are workloads grouped by model family, columns are device architectures,
and each cell holds the best outcome found for that pair with the date of its
latest evidence, marked stale when that date is older than the window. Two
sources feed it, both from the projected state:
- the registry's own decisions: an artifact is placed in the column of the
  `arch` its latest benchmark evidence names (evidence without one cannot be
  placed and is counted as unplaced); promoted -> promoted, rejected ->
  no_worthwhile_candidate, quarantined, held, recorded (advisory, waiting for
  a person) and measured-but-undecided -> candidates_found;
- imported outcome records (docs/import.md), by their own arch and outcome.
Outcomes rank promoted > candidates_found > no_worthwhile_candidate >
quarantined > held > not_attempted (a cell nothing reached). Pure: the caller
passes the moment staleness is judged at (the as-of time, or now).
"""
from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping

from registry.formats.errors import UserError
from .read_models import RegistryState

OUTCOMES = ("promoted", "candidates_found", "no_worthwhile_candidate", "quarantined", "held", "not_attempted")
RANK = {outcome: rank for rank, outcome in enumerate(OUTCOMES)}
DECISION_OUTCOME = {
    "promoted": "promoted", "rejected": "no_worthwhile_candidate", "quarantined": "quarantined",
    "held": "held", "recorded": "candidates_found", "registered": "candidates_found",
}
DEFAULT_STALE_DAYS = 30


def model_family(workload: str) -> str:
    """A workload's model family when no record names one: the id up to its first '-' (wan-t2v-1.3b -> wan)."""
    return workload.split("-", 1)[0] or workload


def support_matrix(state: RegistryState, *, at: datetime, stale_days: int = DEFAULT_STALE_DAYS,
                   archs: Iterable[str] = ()) -> dict[str, Any]:
    """The matrix as a JSON-able dict: `archs`, `rows` (family, workload, cells), `unplaced` artifacts."""
    if isinstance(stale_days, bool) or not isinstance(stale_days, int) or stale_days < 0:
        raise UserError(f"--stale-days must be a whole number of days >= 0, got {stale_days!r}")
    contributions: list[dict[str, Any]] = []
    families: dict[str, str] = {}
    unplaced: list[str] = []
    for artifact in state.artifacts.values():
        native = _native_contribution(artifact, state.records)
        if native is None:
            if artifact["evidence"]:
                unplaced.append(artifact["artifact"])
        else:
            contributions.append(native)
        for record in artifact.get("external", ()):
            contributions.append(_imported_contribution(record))
            families.setdefault(record["workload"], record.get("family") or "")
    for entry in state.outcomes.values():
        for record in entry["records"]:
            contributions.append(_imported_contribution(record))
            families.setdefault(record["workload"], record.get("family") or "")
    workloads = set(state.workloads) | {a["workload"] for a in state.artifacts.values()} | set(state.outcomes)
    columns = sorted(set(archs) | {c["arch"] for c in contributions if c["arch"] and c["outcome"]}, key=_arch_key)
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for found in contributions:
        if found["arch"] is None or found["outcome"] is None:
            continue
        key = (found["workload"], found["arch"])
        cell = cells.setdefault(key, {"outcome": "not_attempted", "latest": None, "sources": [],
                                      "unreadable_dates": []})
        if RANK.get(found["outcome"], len(RANK)) < RANK[cell["outcome"]]:
            cell["outcome"] = found["outcome"]
        date, moment = _readable(found["date"])
        if date is None and found["date"] is not None:
            cell["unreadable_dates"].append(str(found["date"]))
        elif date is not None and moment is not None and (cell["latest"] is None or moment > _moment(cell["latest"])):
            cell["latest"] = date
        cell["sources"].append({**{k: found[k] for k in ("source", "outcome", "subject")}, "date": date})
    try:
        cutoff = at - timedelta(days=stale_days)
    except OverflowError:  # a window reaching past the calendar's start: nothing dated is older than it
        cutoff = datetime.min.replace(tzinfo=at.tzinfo)
    rows = []
    for workload in sorted(workloads, key=lambda w: (families.get(w) or model_family(w), w)):
        row_cells: dict[str, dict[str, Any]] = {}
        for arch in columns:
            held = cells.get((workload, arch))
            if held is None:
                row_cells[arch] = {"outcome": "not_attempted", "latest": None, "stale": False, "sources": []}
                continue
            latest = held["latest"]
            row_cells[arch] = {
                "outcome": held["outcome"], "latest": latest,
                "stale": latest is not None and _moment(latest) < cutoff,
                "sources": sorted(held["sources"], key=lambda s: (s["date"] or "", s["subject"] or "")),
            }
            if held["unreadable_dates"]:
                row_cells[arch]["unreadable_dates"] = held["unreadable_dates"]
        rows.append({"family": families.get(workload) or model_family(workload), "workload": workload,
                     "cells": row_cells})
    return {"at": at.isoformat(), "stale_days": stale_days, "archs": columns, "rows": rows,
            "unplaced": sorted(unplaced), "position": state.position}


def _native_contribution(artifact: Mapping[str, Any], records: dict[str, Any]) -> dict[str, Any] | None:
    """Where the registry's own decision on an artifact goes: the arch of its latest benchmark item, else that
    of the latest session or document of its bytes' speed record that names one (a record decides on sessions)."""
    benchmark = artifact["evidence"].get("benchmark")
    item = (benchmark or {}).get("item") or {}
    arch = item.get("arch") or _record_arch(artifact, records)
    if arch is None:
        return None
    known = [entry["measured_at"] for entry in artifact["evidence"].values() if entry.get("measured_at")]
    readable = [text for text in known if _readable(text)[0] is not None]
    latest = max(readable, key=_moment) if readable else (known[0] if known else None)
    return {"workload": artifact["workload"], "arch": arch, "outcome": DECISION_OUTCOME.get(artifact["decision"]),
            "date": latest, "source": "registry", "subject": artifact["artifact"]}


def _record_arch(artifact: Mapping[str, Any], records: dict[str, Any]) -> str | None:
    from .read_models.speed_records import record_key

    if artifact["payload_sha256"] is None:
        return None
    found = records.get(record_key(artifact["workload"], artifact["payload_sha256"]))
    named = [entry["arch"] for entry in (found or {}).get("entries", ()) if entry["arch"]]
    return named[-1] if named else None


def _imported_contribution(record: Mapping[str, Any]) -> dict[str, Any]:
    origin = record.get("origin") or {}
    return {"workload": record["workload"], "arch": record.get("arch"), "outcome": record.get("outcome"),
            "date": record.get("recorded_utc") or record.get("recorded_at"),
            "source": f"{origin.get('system', 'import')}:{origin.get('path', '?')}",
            "subject": record.get("artifact")}


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def _readable(value: Any) -> tuple[str | None, datetime | None]:
    """A stored date and its moment, or (None, None) when it is not one.

    The log is immutable, so a date an earlier import let through (`yesterday`)
    stays in it forever: the matrix shows such a value marked as unreadable
    (a cell's `unreadable_dates`, present only then) and never lets it decide freshness, or stop a report.
    """
    if not isinstance(value, str):
        return None, None
    try:
        return value, _moment(value)
    except ValueError:
        return None, None


def _arch_key(arch: str) -> tuple[int, int, str]:
    """sm80 < sm90 < sm100 < ... by number, then anything else (cpu) by name."""
    digits = "".join(ch for ch in arch[2:] if ch.isdigit()) if arch.startswith("sm") else ""
    return (0, int(digits), arch) if digits else (1, 0, arch)


def cell_text(cell: dict[str, Any]) -> str:
    """A cell for a table: the outcome, its date and a stale mark."""
    unreadable = "".join(f", unreadable date {text[:40]!r}" for text in cell.get("unreadable_dates", ()))
    if cell["latest"] is None:
        return f"{cell['outcome']} ({unreadable[2:]})" if unreadable else cell["outcome"]
    return f"{cell['outcome']} ({cell['latest'][:10]}{', stale' if cell['stale'] else ''}{unreadable})"


def matrix_csv(matrix: dict[str, Any]) -> str:
    """One row per cell: family, workload, arch, outcome, latest, stale."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["family", "workload", "arch", "outcome", "latest", "stale"])
    for row in matrix["rows"]:
        for arch in matrix["archs"]:
            cell = row["cells"][arch]
            writer.writerow([row["family"], row["workload"], arch, cell["outcome"], cell["latest"] or "",
                             str(cell["stale"]).lower()])
    return out.getvalue()
