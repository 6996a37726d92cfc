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

from registry.projections import Projections
from registry.projections.state import FINAL
from registry.formats.text import text_arguments

from .context import Registry
from .decisions import PromoteOutcome, promote
from .workloads import current_contract


def must_rejudge(registry: Registry, workload: str) -> list[dict[str, Any]]:
    """The workload's artifacts whose standing decision was made under another contract than the current one."""
    declared = current_contract(registry, workload)
    return [{"artifact": state["artifact"], "decision": state["decision"],
             "contract_version": state["contract_version"], "current_contract_version": declared.version}
            for state in Projections(registry.store).artifacts(workload=workload)
            if state["decision"] in FINAL and state["verdict"] is not None
            and state["contract_version"] != declared.version]


@text_arguments
def rejudge_workload(registry: Registry, workload: str) -> list[tuple[str, PromoteOutcome]]:
    """Decide every artifact `must_rejudge` names again under the current contract; (artifact, outcome) each."""
    return [(entry["artifact"], promote(registry, entry["artifact"], rejudge=True))
            for entry in must_rejudge(registry, workload)]
