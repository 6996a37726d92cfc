"""Judging a workload's artifacts again after its contract changed, from the evidence already recorded.

A verdict names the contract version it was decided under. Once a workload
is declared again, a promotion (or rejection, or approval) decided under the
older version no longer ships (app/resolve.py, docs/gate.md): it must be
judged again under the current contract. `must_rejudge` lists those
artifacts (what `workload declare` reports), and `rejudge_workload` decides
each again through the ordinary promote path: the same gate over the
evidence each artifact's current identity has recorded, appending one new
verdict per artifact. Nothing is measured again.
"""
from __future__ import annotations

from typing import Any

from registry.projections.read_models import FINAL
from registry.formats.text import text_arguments

from .context import Registry
from .decisions import PromoteOutcome, promote
from .workloads import declared_contract


def must_rejudge(registry: Registry, workload: str) -> list[dict[str, Any]]:
    """The workload's artifacts whose standing decision was made under another contract than the current one."""
    with registry.view() as view:
        declared = declared_contract(view, workload)
        states = view.workload_artifacts(workload)[1]
    return [{"artifact": state["artifact"], "decision": state["decision"],
             "contract_version": state["contract_version"], "current_contract_version": declared.version}
            for state in states
            if state["decision"] in FINAL and state["verdict"] is not None
            and state["contract_version"] != declared.version]


@text_arguments
def rejudge_workload(registry: Registry, workload: str) -> list[tuple[str, PromoteOutcome]]:
    """Decide every artifact `must_rejudge` names again under the current contract; (artifact, outcome) each."""
    return [(entry["artifact"], promote(registry, entry["artifact"], rejudge=True))
            for entry in must_rejudge(registry, workload)]


def speed_terms_change(registry: Registry, workload: str) -> dict[str, Any] | None:
    """How the latest declaration moved the confident speed terms, and the speed records it affects.

    docs/gate.md, "The speed record": a loosening (a lower gate, a higher
    alpha) applies to a record's pairs only from the declaration on, the pairs
    recorded before it being read under the strictest terms in force since;
    a tightening re-reads every pair. None when the latest version did not
    change the confident terms (or there is no earlier version).
    """
    from registry.contracts import SpeedGate

    with registry.view() as view:
        declared = view.workload(workload)
        listed = view.workload_speed_records(workload) if declared is not None else []
    if declared is None or len(declared["versions"]) < 2:
        return None
    terms = []
    for version in declared["versions"][-2:]:
        block = version.get("speed")
        speed = SpeedGate.from_mapping(block, stored=True) if block is not None else None
        terms.append((speed.gate, speed.alpha) if speed is not None and speed.decision == "confident" else None)
    before, after = terms
    if after is None or before == after:
        return None
    if before is None:
        change = "declared"
    else:
        looser = after[0] < before[0] or after[1] > before[1]
        stricter = after[0] > before[0] or after[1] < before[1]
        change = "loosened and tightened" if looser and stricter else "loosened" if looser else "tightened"
    records = [{"payload_sha256": found["payload_sha256"], "pairs": sum(len(e["baseline_s"]) for e in found["entries"]),
                "artifacts": sorted({e["artifact"] for e in found["entries"]}
                                    | {s["artifact"] for s in found["sessions"].values()})}
               for found in listed if found["entries"]]
    return {"change": change, "gate": [before[0] if before else None, after[0]],
            "alpha": [before[1] if before else None, after[1]], "records": records}
