"""The registry report: what is promoted, what was caught and why, what is close, who is waiting.

Sections (all computed from a RegistryState, so a report as of any past
position is the same function over `View(store, as_of=...).state()`):
- leaderboard: per workload, promoted artifacts by speedup (descending), with
  the speedup's interval (speedup_ci), tier and tightest margin, and the
  headline state (`promoted, regressed` for one whose monitor alarmed: it
  ranks, but resolve and lock skip it, and its name says so);
- caught: held / quarantined / rejected artifacts grouped by the rule that
  decided them (a person's revoke counts as rule `human.revoke`);
- near_misses: promoted artifacts whose tightest margin is within 10% of its
  threshold (|margin| <= 0.1 * |threshold|): promoted, but one noisy rerun
  from the other side of the line; for a metric bounded on its good side
  (SSIM and VBench at 1) also within half the room between the threshold
  and that bound, since a value near the best possible cannot be one rerun
  from failing (an SSIM of 1.0 against 0.98 is no near miss);
- waiting: advisory-tier artifacts the gate recorded and no person has
  decided since (docs/architecture.md: the advisory tier never promotes by itself);
- contracts_moved: final decisions that stand under an older contract than
  their workload's current one ("promoted under contract v1; current v2");
  `registry what-if` shows how they fare under the new one;
- attempts: every artifact's benchmark items for its current identity (a
  decision reached after many attempts is weaker than it reads);
- monitors: every current identity with re-measured pairs, its monitor's
  status (docs/monitor.md); `alerts` are the regressions no person has
  acknowledged yet.
Renderers: JSON, one flat CSV table (a `section` column), and a
self-contained HTML page with embedded plots (html_report.py).
"""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Mapping, Sequence

from registry.contracts.speed import derived_gate
from registry.formats.errors import UserError

from .headline import headline
from .read_models import RegistryState
from .read_models.artifacts import contract_note, relative_margin
from .read_models.monitors import monitor_summary

NEAR_MISS_SHARE = 0.10
# A margin past this share of the room between a threshold and the metric's best possible value is no near miss.
NEAR_MISS_ROOM = 0.5
# The best value a bounded metric can take (higher is better for both): the far side of a threshold's room.
BEST_VALUE = {"ssim": 1.0, "vbench": 1.0}
CAUGHT = ("held", "quarantined", "rejected")
HUMAN_REVOKE_RULE = "human.revoke"
CSV_COLUMNS = (
    "section", "as_of", "workload", "artifact", "rank", "decision", "decided_by", "rule", "count", "tier",
    "speedup", "ci_low", "ci_high", "metric", "value", "threshold", "margin", "relative_margin",
    "recorded", "agree", "origin", "note",
)


def speed_gate(contract: dict[str, Any] | None) -> float | None:
    """The contract's minimum speedup: `min_speedup`, or the Amdahl gate of `ceiling_share`; None if undeclared."""
    speed = (contract or {}).get("speed") or {}
    if speed.get("min_speedup") is not None:
        return float(speed["min_speedup"])
    if speed.get("ceiling_share") is not None:
        return derived_gate(float(speed["ceiling_share"]))[0]
    return None


def _margin_entry(margin: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The margin with its relative size; None where it has no finite one (a zero threshold)."""
    if margin is None:
        return None
    relative = relative_margin(margin)
    return {**margin, "relative_margin": relative if math.isfinite(relative) else None}


def build_report(state: RegistryState, workload: str | None = None, *,
                 imported: Sequence[dict[str, Any]] = (), matrix: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report over every workload, or one (an unknown workload is refused, not reported empty).

    `imported` (imported verdicts beside the registry's, from the app layer,
    which can read the documents' evidence) and `matrix` (the support matrix)
    are added as they are, the imported rows narrowed to the workload.
    """
    known = set(state.workloads) | {a["workload"] for a in state.artifacts.values()}
    if workload is not None and workload not in known:
        raise UserError(f"no workload {workload!r} as of position {state.position}")
    scope = sorted(known if workload is None else {workload})
    artifacts = [state.artifacts[key] for key in sorted(state.artifacts)
                 if workload is None or state.artifacts[key]["workload"] == workload]
    return {
        "as_of": state.position,
        "workload": workload,
        "workloads": {w: _workload_summary(state.workloads.get(w)) for w in scope},
        "totals": _totals(artifacts),
        "leaderboard": _leaderboard(artifacts, scope),
        "caught": _caught(artifacts),
        "near_misses": _near_misses(artifacts),
        "waiting": _waiting(artifacts),
        "contracts_moved": _contracts_moved(artifacts, state.workloads),
        "attempts": [{"artifact": a["artifact"], "decision": a["decision"], "benchmark_attempts": a["benchmark_attempts"]}
                     for a in artifacts],
        "imported": [row for row in imported if workload is None or row["workload"] == workload],
        "matrix": matrix,
        "monitors": (monitors := monitors_of(artifacts)),
        "alerts": alerts_of(monitors),
    }


def alerts_of(monitors: list[dict[str, Any]]) -> list[str]:
    """The artifacts whose monitor crossed with no acknowledgment: alarmed, or its alarm about to be appended."""
    return [m["artifact"] for m in monitors if m["status"] in ("regressed", "alarm_due")]


def monitors_of(artifacts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each artifact's monitor summary (`monitor_summary`) with its id and workload, for those with one."""
    found = []
    for artifact in artifacts:
        summary = monitor_summary(artifact)
        if summary is not None:
            found.append({"artifact": artifact["artifact"], "workload": artifact["workload"], **summary})
    return found


def _workload_summary(declared: Mapping[str, Any] | None) -> dict[str, Any]:
    if declared is None:
        return {"declared": False, "contract_version": None, "tier": None, "speed_gate": None}
    contract = declared["contract"]
    return {
        "declared": True, "contract_version": declared["contract_version"],
        "tier": (contract.get("fidelity") or {}).get("tier"), "speed_gate": speed_gate(contract),
    }


def _totals(artifacts: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for artifact in artifacts:
        totals[artifact["decision"]] = totals.get(artifact["decision"], 0) + 1
    return dict(sorted(totals.items()))


def _leaderboard(artifacts: Sequence[Mapping[str, Any]], scope: list[str]) -> dict[str, list[dict[str, Any]]]:
    board: dict[str, list[dict[str, Any]]] = {w: [] for w in scope}
    for artifact in artifacts:
        if artifact["decision"] != "promoted":
            continue
        board[artifact["workload"]].append({
            "artifact": artifact["artifact"], "kind": artifact["kind"], "backend": artifact["backend"],
            "speedup": artifact["speedup"], "speedup_ci": artifact["speedup_ci"], "tier": artifact["tier"],
            "speedup_ci_level": (artifact["verdict"] or {}).get("speedup_ci_level"),
            "speedup_ci_pair": (artifact["verdict"] or {}).get("speedup_ci_pair"),
            "decided_by": artifact["decided_by"], "tightest_margin": _margin_entry(artifact["tightest_margin"]),
            "benchmark_attempts": artifact["benchmark_attempts"], "state": headline(artifact)["short"],
        })
    for entries in board.values():
        # Fastest first; an artifact promoted without a measured speedup (a person's approval) last.
        entries.sort(key=lambda e: (e["speedup"] is None, -(e["speedup"] or 0.0), e["artifact"]))
        for rank, entry in enumerate(entries, start=1):
            entry["rank"] = rank
    return board


def _caught(artifacts: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, dict[str, list[str]]] = {decision: {} for decision in CAUGHT}
    for artifact in artifacts:
        if artifact["decision"] in groups:
            # A person's decision can only leave an artifact held here (a revoke).
            rule = HUMAN_REVOKE_RULE if artifact["decided_by"] == "human" else artifact["rule"]
            groups[artifact["decision"]].setdefault(rule, []).append(artifact["artifact"])
    return {
        decision: [
            {"rule": rule, "count": len(ids), "artifacts": ids}
            for rule, ids in sorted(by_rule.items(), key=lambda item: (-len(item[1]), item[0]))
        ]
        for decision, by_rule in groups.items()
    }


def _near_misses(artifacts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for artifact in artifacts:
        margin = artifact["tightest_margin"]
        if artifact["decision"] != "promoted" or margin is None:
            continue
        if is_near_miss(margin):
            found.append({"artifact": artifact["artifact"], "workload": artifact["workload"],
                          "speedup": artifact["speedup"], **(_margin_entry(margin) or {})})
    return sorted(found, key=lambda entry: (entry["relative_margin"], entry["artifact"]))


def is_near_miss(margin: dict[str, Any]) -> bool:
    """A margin within NEAR_MISS_SHARE of its threshold and, for a bounded metric, within NEAR_MISS_ROOM of the
    room between the threshold and the best value."""
    if abs(margin["margin"]) > NEAR_MISS_SHARE * abs(margin["threshold"]):
        return False
    best = BEST_VALUE.get(margin["metric"])
    return best is None or abs(margin["margin"]) <= NEAR_MISS_ROOM * abs(best - margin["threshold"])


def _waiting(artifacts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # `recorded` is only ever the gate's decision, and any later human decision replaces it.
    return [
        {"artifact": a["artifact"], "workload": a["workload"], "verdict_position": a["verdict_position"],
         "speedup": a["speedup"], "tightest_margin": _margin_entry(a["tightest_margin"])}
        for a in artifacts if a["decision"] == "recorded" and a["tier"] == "advisory"
    ]


def _contracts_moved(artifacts: Sequence[Mapping[str, Any]],
                     workloads: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for artifact in artifacts:
        note = contract_note(artifact, workloads.get(artifact["workload"]))
        if note is not None:
            found.append({"artifact": artifact["artifact"], "workload": artifact["workload"],
                          "decision": artifact["decision"], "decided_under": artifact["contract_version"],
                          "current": workloads[artifact["workload"]]["contract_version"], "note": note})
    return found


# -- renderers ---------------------------------------------------------------------------------

def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)


def report_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report as one flat table (rows keyed by CSV_COLUMNS; absent cells are None)."""
    rows: list[dict[str, Any]] = []

    def row(section: str, **cells: Any) -> None:
        rows.append({column: None for column in CSV_COLUMNS} | {"section": section, "as_of": report["as_of"]} | cells)

    def margin_cells(margin: dict[str, Any] | None) -> dict[str, Any]:
        if margin is None:
            return {}
        return {key: margin[key] for key in ("metric", "value", "threshold", "margin", "relative_margin")}

    for workload, entries in report["leaderboard"].items():
        for e in entries:
            low, high = e["speedup_ci"] or (None, None)
            row("leaderboard", workload=workload, artifact=e["artifact"], rank=e["rank"], decision="promoted",
                decided_by=e["decided_by"], tier=e["tier"], speedup=e["speedup"], ci_low=low, ci_high=high,
                note=None if e.get("state", "promoted") == "promoted" else e["state"],
                **margin_cells(e["tightest_margin"]))
    for decision, groups in report["caught"].items():
        for group in groups:
            for artifact in group["artifacts"]:
                row("caught", artifact=artifact, decision=decision, rule=group["rule"], count=group["count"])
    for e in report["near_misses"]:
        row("near_miss", workload=e["workload"], artifact=e["artifact"], decision="promoted", speedup=e["speedup"],
            **margin_cells(e))
    for e in report["waiting"]:
        row("waiting", workload=e["workload"], artifact=e["artifact"], decision="recorded", tier="advisory",
            speedup=e["speedup"], **margin_cells(e["tightest_margin"]))
    for e in report["contracts_moved"]:
        row("contract_moved", workload=e["workload"], artifact=e["artifact"], decision=e["decision"], note=e["note"])
    for e in report["attempts"]:
        row("attempts", artifact=e["artifact"], decision=e["decision"], count=e["benchmark_attempts"])
    for e in report["imported"]:
        row("imported", workload=e["workload"], artifact=e["artifact"], decision=e["registry"]["decision"],
            rule=e["registry"]["rule"], recorded=e["recorded"]["decision"], agree=e["agree"],
            origin=e["origin"]["path"])
    for decision, count in report["totals"].items():
        row("total", decision=decision, count=count)
    return rows


def number(value: Any) -> Any:
    """A cell for people: floats to 4 significant digits, everything else as it is."""
    return f"{value:.4g}" if isinstance(value, float) else value


def speedup_number(value: float | None) -> str | None:
    """A speedup for people, to four decimals: what a team compares with its own harness's figure."""
    return None if value is None else f"{value:.4f}"


def margin_text(margin: dict[str, Any] | None) -> str | None:
    if margin is None:
        return None
    return (f"{margin['metric']} {number(margin['value'])} vs {number(margin['threshold'])}"
            f" (margin {number(margin['margin'])})")


def interval_text(ci: list[float] | None, level: float | None = None, at_pair: int | None = None) -> str | None:
    """An interval with the two-sided level it holds at (a verdict's `speedup_ci_level`), or says none was
    recorded: an interval is never printed without its level. `at_pair`: the interval is a speed record's running
    bounds at that pair (a verdict's `speedup_ci_pair`), and says so."""
    if ci is None:
        return None
    named = f", running bounds at pair {at_pair}" if at_pair else ""
    return f"[{number(ci[0])}, {number(ci[1])}] ({f'{level:.0%} two-sided' if level else 'level not recorded'}{named})"


def speedup_text(verdict: dict[str, Any]) -> str:
    """A verdict's speedup as `promote` and `show` print it: the figure (over how many pairs, for a speed record),
    then its interval named as what it is."""
    pairs = verdict.get("speedup_pairs")
    ci = interval_text(verdict["speedup_ci"], verdict.get("speedup_ci_level"), verdict.get("speedup_ci_pair"))
    return (f"speedup {verdict['speedup']:.4f}x" + (f" over {pairs} pairs" if pairs else "")
            + (f", interval {ci}" if ci else ""))


Table = tuple[str, list[str], list[tuple[Any, ...]]]


def report_tables(report: dict[str, Any]) -> list[Table]:
    """The report as titled tables for people (the CLI's table format, the HTML page)."""
    at = f"as of position {report['as_of']}" + (f", chain head {head_text(report['head'])}" if report.get("head") else "")
    tables: list[Table] = [(
        f"workloads ({at})", ["workload", "contract version", "tier", "speed gate"],
        [(w, s["contract_version"], s["tier"], number(s["speed_gate"])) for w, s in report["workloads"].items()],
    )]
    for workload, entries in report["leaderboard"].items():
        tables.append((
            f"leaderboard: {workload} (promoted, fastest first)",
            ["rank", "artifact", "speedup", "interval (two-sided level)", "tier", "decided by", "tightest margin",
             "benchmark attempts"],
            [(e["rank"], _ranked_name(e), speedup_number(e["speedup"]),
              interval_text(e["speedup_ci"], e.get("speedup_ci_level"), e.get("speedup_ci_pair")),
              e["tier"], e["decided_by"],
              margin_text(e["tightest_margin"]), e["benchmark_attempts"]) for e in entries],
        ))
    tables.append((
        "caught (by the rule that decided)", ["decision", "rule", "count", "artifacts"],
        [(decision, g["rule"], g["count"], ", ".join(g["artifacts"]))
         for decision, groups in report["caught"].items() for g in groups],
    ))
    tables.append((
        f"near misses (promoted within {NEAR_MISS_SHARE:.0%} of a threshold, and within {NEAR_MISS_ROOM:.0%} of "
        "the way to a bounded metric's best value)",
        ["artifact", "workload", "metric", "value", "threshold", "margin", "speedup"],
        [(e["artifact"], e["workload"], e["metric"], number(e["value"]), number(e["threshold"]),
          number(e["margin"]), number(e["speedup"])) for e in report["near_misses"]],
    ))
    tables.append((
        "waiting for a person (advisory tier, recorded)",
        ["artifact", "workload", "verdict position", "speedup", "tightest margin"],
        [(e["artifact"], e["workload"], e["verdict_position"], number(e["speedup"]), margin_text(e["tightest_margin"]))
         for e in report["waiting"]],
    ))
    tables.append((
        "decided under an older contract (see `registry what-if`)", ["artifact", "workload", "decision", "note"],
        [(e["artifact"], e["workload"], e["decision"], e["note"]) for e in report["contracts_moved"]],
    ))
    tables.append((
        "benchmark attempts (current identity)", ["artifact", "decision", "attempts"],
        [(e["artifact"], e["decision"], e["benchmark_attempts"]) for e in report["attempts"]],
    ))
    if report.get("benchmark_records"):
        tables.append(benchmark_records_table(report["benchmark_records"]))
    if report.get("monitors"):
        tables.append(monitors_table(report["monitors"]))
    if report["imported"]:
        tables.append(imported_table(report["imported"]))
    if report["matrix"] is not None:
        tables.append(matrix_table(report["matrix"]))
    return tables


def _ranked_name(entry: dict[str, Any]) -> str:
    """A leaderboard entry's artifact, marked with its state when that is more than promoted (a regression)."""
    state = entry.get("state", "promoted")
    return entry["artifact"] if state == "promoted" else f"{entry['artifact']} ({state}: resolve and lock skip it)"


def monitors_table(monitors: list[dict[str, Any]]) -> Table:
    """Promoted identities watched for a regression: pairs, the detector against its level, the alarm."""
    return (
        "monitors (re-measured promoted artifacts)",
        ["artifact", "workload", "status", "pairs", "below", "threshold", "alpha", "log statistic", "alarm level",
         "alarm at pair", "acknowledged by", "left out"],
        [(m["artifact"], m["workload"], m["status"], m["pairs"], m["below"], number(m["threshold"]), m["alpha"],
          number(m["log_statistic"]), number(m["log_alarm_level"]), m["crossed_at"],
          (m["acknowledged"] or {}).get("person"), m["left_out"]) for m in monitors],
    )


def benchmark_records_table(records: list[dict[str, Any]]) -> Table:
    """Speed records (one per payload within a workload) read by the confident rule: what each shows, the pairs,
    the running bounds with their level, and why measuring stopped."""
    return (
        "speed records (one per payload within a workload; sessions and complete documents, confident rule)",
        ["workload", "payload", "artifacts", "shows", "pairs", "speedup (pairs up to what decided)", "decided at",
         "stop", "running lower", "running upper", "level", "gate", "alpha", "sessions", "documents", "archs"],
        [(r["workload"], r["payload_sha256"][:12], ", ".join(r["artifacts"]), r["shows"] or "-", r["pairs"],
          None if r.get("speedup") is None else f"{speedup_number(r['speedup'])} ({r['speedup_pairs']})",
          r.get("decided_at"), r["stop"], number(r.get("lower")), number(r.get("upper")),
          f"{r['level']:.0%} two-sided" if r.get("level") else None, number(r.get("gate")), r.get("alpha"),
          len(r["sessions"]), r["documents"], ", ".join(r["archs"]))
         for r in records],
    )


def head_text(head: dict[str, Any]) -> str:
    """The chain head a report speaks for, as `verify --expect-head` takes it (POSITION:HASH)."""
    return f"{head['position']}:{head['hash']}"


def imported_table(rows: list[dict[str, Any]]) -> Table:
    """Imported verdicts beside the registry's own under the declared contract, disagreements first."""
    return (
        "imported verdicts beside the registry's (disagreements first)",
        ["artifact", "origin", "recorded", "registry", "agree", "registry's reason"],
        [(e["artifact"], e["origin"]["path"], e["recorded"]["decision"],
          f"{e['registry']['decision']} ({e['registry']['rule']})", "yes" if e["agree"] else "NO",
          e["registry"]["reason"]) for e in rows],
    )


def matrix_table(matrix: dict[str, Any]) -> Table:
    """The support matrix: a row per workload (by family), a column per architecture."""
    from .matrix import cell_text

    return (
        f"support matrix (stale after {matrix['stale_days']} days, judged at {matrix['at'][:19]})",
        ["family", "workload", *matrix["archs"]],
        [(row["family"], row["workload"], *(cell_text(row["cells"][arch]) for arch in matrix["archs"]))
         for row in matrix["rows"]],
    )


def report_csv(report: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in report_rows(report):
        writer.writerow({key: "" if value is None else value for key, value in row.items()})
    return out.getvalue()
