"""`resolve`: which promoted, unrevoked bundle a runtime may use for a workload, as of now or any past position.

The candidates are the workload's artifacts as the projections hold them (as
of a log position for audit questions); the matching and the choice are the
pure registry.bundles.resolution, shared with runtimes that read a lock file.

Only what was promoted under the workload's current contract ships: a
promotion judged under an older contract version (the workload was declared
again since) gets `stale_contract` until it is judged again under the
current one (`registry rejudge`, app/rejudge.py; docs/gate.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.bundles import BundleManifest, CallSite, Candidate, Profile, Resolution, parse_manifest, resolve
from registry.formats.errors import UserError
from registry.projections.read_models.monitors import regression_of
from registry.projections.read_models import ArtifactState
from registry.formats.text import text_arguments

from .context import Registry


def standing_revocation(state: ArtifactState) -> dict[str, Any] | None:
    """The artifact's revocation when it is the latest decision about its current payload, else None."""
    human = state.get("human")
    if not human or human.get("action") != "revoke":
        return None
    if (state.get("verdict_position") or 0) > human["position"]:
        return None
    return {"person": human["person"], "reason": human["reason"], "event_id": human["event_id"]}


def candidate_from_state(state: ArtifactState, current_contract: int | None) -> Candidate:
    """A projected artifact as a resolution candidate, with what `resolve` reports beside its code."""
    bundle = state.get("bundle")
    manifest = None if bundle is None else parse_manifest(bundle, f"artifact {state['artifact']}: stored bundle")
    ci = state.get("speedup_ci")
    record = {
        "decision": state["decision"], "rule": state.get("rule"), "payload_sha256": state.get("payload_sha256"),
        "speedup": state.get("speedup"), "speedup_ci": ci, "verdict_event_id": state.get("verdict_event_id"),
        "contract_version": state.get("contract_version"),
        "entry_point": {"file": manifest.entry_file, "symbol": manifest.entry_symbol}
        if isinstance(manifest, BundleManifest) else None,  # a compiled kernel bundle has launches, not an entry
    }
    stale = None
    if state["decision"] == "promoted" and state.get("contract_version") != current_contract:
        record["note"] = f"promoted under contract v{state.get('contract_version')}; current v{current_contract}"
        stale = f"{record['note']}: only what was promoted under the current contract ships; judge it again " \
                f"(`registry rejudge {state['workload']}`)"
    return Candidate(state["artifact"], state["decision"], manifest, state.get("speedup"),
                     tuple(ci) if ci else None, standing_revocation(state), record, stale,
                     regression_detail(state), (state.get("verdict") or {}).get("speedup_ci_level"))


def regression_detail(state: ArtifactState) -> str | None:
    """Why a regressed artifact is skipped (its monitor's alarm), or None when its monitor is in control."""
    monitor = regression_of(state)
    if monitor is None:
        return None
    alarm = monitor["alarm"]
    named = f"alarm {alarm['event_id']}" if alarm else "alarm not yet recorded"
    return (f"regression detected at pair {monitor['crossed_at']} of its re-measurements ({named}): the median "
            f"ratio is shown below {monitor['threshold']:.4g} at alpha {monitor['alpha']:g}")


@dataclass(frozen=True)
class WorkloadResolution:
    workload: str
    position: int
    profile: Profile
    site: CallSite
    resolution: Resolution

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "as_of_position": self.position, "profile": self.profile.to_dict(),
                "call_site": self.site.to_dict(), **self.resolution.to_dict()}


def candidates_at(registry: Registry, workload: str,
                  as_of: int | None) -> tuple[int, list[tuple[dict[str, Any], Candidate]]]:
    """(position, every artifact of `workload` at it with its candidate): now from the caught-up read models (one
    indexed lookup by workload, whatever the log's length, at the position the answer reflects), or as of an
    earlier position from the log. An unknown workload is refused."""
    with registry.view(as_of=as_of) as view:
        declared, states = view.workload_artifacts(workload)
        position = view.position
    if declared is None:
        raise UserError(f"unknown workload {workload!r} as of position {position} "
                        "(declare it with `registry workload declare`)")
    return position, [(state, candidate_from_state(state, declared["contract_version"])) for state in states]


@text_arguments
def resolve_workload(registry: Registry, workload: str, profile: Profile, site: CallSite = CallSite(),
                     as_of: int | None = None) -> WorkloadResolution:
    """The best promoted bundle of `workload` for `profile` at `site`, and why every other artifact is not it."""
    position, found = candidates_at(registry, workload, as_of)
    candidates = [candidate for _, candidate in found]
    return WorkloadResolution(workload, position, profile, site, resolve(candidates, profile, site))
