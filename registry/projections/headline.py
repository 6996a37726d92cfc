"""What an artifact's state says at a glance, in one set of words for `show`, the report and the live view.

An artifact's state word (registered, promoted, held, ...) is its verdict's
decision. Two facts change what that word means to a reader and so stand
beside it wherever it is printed:

- a promoted artifact whose monitor crossed its threshold is `promoted,
  regressed`: resolve and lock skip it (docs/monitor.md), so the word
  "promoted" alone would say it ships;
- a margin whose point value meets its threshold is not "passed" when the
  rule of that very metric held, rejected or quarantined the verdict (a
  speedup of 1.5x against a 1.2x gate whose confident bounds still reach
  below 1.2 is held by `speed.undecided`): the margin table says which rule
  decided instead.

Pure: reads a folded artifact state (registry.projections.read_models), no I/O.
"""
from __future__ import annotations

from typing import Any, Mapping

from .read_models.monitors import monitor_summary

# The monitor statuses under which a promoted artifact no longer ships (read_models/monitors.py monitor_summary).
REGRESSED_STATUSES = ("alarm_due", "regressed", "acknowledged")


def headline(artifact: Mapping[str, Any]) -> dict[str, Any]:
    """The artifact's state as a headline: its decision, its monitor's status, and the words to print."""
    decision = artifact["decision"]
    monitor = monitor_summary(artifact)
    status = None if monitor is None else monitor["status"]
    regressed = status in REGRESSED_STATUSES
    text = short = decision
    if monitor is not None and regressed:
        short = f"{decision}, regressed"
        alarm = f"alarm at pair {monitor['crossed_at']} of its re-measurements"
        known = ", acknowledged" if status == "acknowledged" else ""
        text = f"{short} ({alarm}{known}; resolve and lock skip it)"
    return {"decision": decision, "monitor": status, "regressed": regressed, "short": short, "text": text}


def _metric_family(metric: str) -> str:
    """The rule family a margin's metric belongs to: the speed gate, a CV ceiling, fidelity or parity."""
    if metric == "speedup":
        return "speedup"
    if metric.endswith("_cv"):
        return "cv"
    if metric.startswith("max_abs_error"):
        return "parity"
    return "fidelity"


def _rule_family(rule: str | None) -> str | None:
    if rule is None:
        return None
    if rule == "speed.max_cv":
        return "cv"
    for prefix, family in (("speed.", "speedup"), ("parity.", "parity"), ("fidelity.", "fidelity")):
        if rule.startswith(prefix):
            return family
    return None


def margin_outcome(margin: dict[str, Any], decision: str | None, rule: str | None) -> str:
    """What a margin shows: `yes` or `no` against its threshold, or, when the rule of this metric decided the
    verdict against it while the point value met the threshold, which rule decided (never a bare yes)."""
    if not margin["passed"]:
        return "no"
    if decision in ("held", "rejected", "quarantined") and _rule_family(rule) == _metric_family(margin["metric"]):
        return f"point value only: {decision} by {rule}"
    return "yes"


def margin_rows(artifact: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The verdict's margins as rows (metric, value, threshold, margin, meets the threshold)."""
    return [(m["metric"], f"{m['value']:.6g}", f"{m['threshold']:.6g}", f"{m['margin']:+.6g}",
             margin_outcome(m, artifact.get("decision"), artifact.get("rule")))
            for m in artifact.get("margins") or []]


def parity_text(artifact: dict[str, Any]) -> str | None:
    """One line on the latest parity evidence of an exact-tier artifact (None without any): what it shows."""
    entry = (artifact.get("evidence") or {}).get("parity")
    item = None if entry is None else entry.get("item")
    if entry is None or not item:
        return None
    leaves = item.get("leaves") or []
    equal = sum(1 for leaf in leaves if leaf.get("byte_equal"))
    policy = item.get("policy") or "byte_equal"
    if leaves and equal == len(leaves):
        return (f"parity: all {len(leaves)} output leaves byte-equal to the reference "
                f"(evidence {entry['event_id']}, comparator policy {policy})")
    return (f"parity: {equal} of {len(leaves)} output leaves byte-equal (evidence {entry['event_id']}, comparator "
            f"policy {policy}); the gate judged the others under the contract's parity policy")
