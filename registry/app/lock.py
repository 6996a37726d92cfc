"""Lock files: export what a deployment will use, and check later that it still holds.

`export_lock` takes the workload's promoted, unrevoked bundles (those matching
a profile when one is given) as of one log position, best first, and records
that position and the chain hash there, so the lock names exactly which log
it was read from. `registry_problems` checks a lock against a registry: the
chain still has that hash at that position, and every locked artifact still
has the locked identity and verdict, with no revocation recorded since.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from registry.bundles import CallSite, Candidate, Lock, LockProblem, Profile, resolve
from registry.bundles.lock import LOCK_FORMAT, locked_entry
from registry.bundles.resolution import SELECTED
from registry.formats.names import artifact_stream
from registry.formats.errors import UserError
from registry.projections import Projections

from .context import Registry
from .resolve import candidates_at


def chain_hash_at(registry: Registry, position: int) -> str:
    found = registry.store.read_all(after_position=position - 1, up_to_position=position)
    if not found:
        raise UserError(f"the log has no event at position {position}")
    return found[0].hash


def export_lock(registry: Registry, workload: str, profile: Profile | None = None, site: CallSite = CallSite(),
                as_of: int | None = None) -> dict[str, Any]:
    """The lock document; its `artifacts` list is empty when nothing promoted (and matching) has a bundle."""
    if as_of == 0 or registry.store.head_position() == 0:
        raise UserError("the log is empty: there is nothing to lock")
    position, found = candidates_at(registry, workload, as_of)
    states = {candidate.artifact: state for state, candidate in found}
    candidates = [candidate for _, candidate in found]
    if profile is None:
        shippable = [c for c in candidates if c.decision == "promoted" and c.manifest is not None]
    else:
        outcomes = resolve(candidates, profile, site).outcomes
        shippable = [o.candidate for o in outcomes if o.code in (SELECTED, "not_selected")]
    chosen = sorted(shippable, key=Candidate.rank)
    return {
        "format": LOCK_FORMAT, "workload": workload,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "log_position": position, "chain_hash": chain_hash_at(registry, position),
        "profile": None if profile is None else profile.to_dict(), "call_site": site.to_dict(),
        "artifacts": [locked_entry(states[c.artifact], c.manifest) for c in chosen],
    }


def registry_problems(registry: Registry, lock: Lock) -> list[LockProblem]:
    """How the registry now disagrees with the lock (empty when every locked artifact still stands)."""
    head = registry.store.head_position()
    if lock.log_position > head:
        return [LockProblem(None, "chain_mismatch", f"the lock was taken at position {lock.log_position}; "
                                                     f"this registry's log ends at {head}")]
    if chain_hash_at(registry, lock.log_position) != lock.chain_hash:
        return [LockProblem(None, "chain_mismatch", f"the chain hash at position {lock.log_position} differs from "
                                                     "the lock's: another registry, or a rewritten log")]
    problems = []
    projections = Projections(registry.store)
    for locked in lock.artifacts:
        problems.extend(_artifact_problems(registry, projections, lock, locked))
    return problems


def _artifact_problems(registry: Registry, projections: Projections, lock: Lock, locked) -> list[LockProblem]:
    name = locked.artifact
    verdict = registry.store.get(locked.verdict_event_id)
    if verdict is None or verdict.stream != artifact_stream(name) or verdict.type != "VerdictRendered" \
            or verdict.payload.get("payload_sha256") != locked.bundle_sha256:
        return [LockProblem(name, "verdict_unknown", f"the registry has no promoting verdict "
                                                     f"{locked.verdict_event_id} for {name}")]
    since = registry.store.read_stream(artifact_stream(name))
    revocations = [e for e in since if e.position > lock.log_position and e.type == "HumanDecision"
                   and e.payload.get("action") == "revoke"]
    if revocations:
        first = revocations[0]
        return [LockProblem(name, "revoked", f"{name} was revoked at position {first.position} by "
                                             f"{first.payload['person']}: {first.payload['reason']}")]
    state = projections.current_artifact(name) or {}
    changed = sorted(key for key, value in locked.identity.items() if state.get(key) != value)
    if changed:
        return [LockProblem(name, "identity_changed", f"{name} now claims another {', '.join(changed)} than the "
                                                      f"locked identity (a new candidate, not the one promoted)")]
    if state["decision"] != "promoted":
        return [LockProblem(name, "not_promoted", f"{name} is now {state['decision']}")]
    return []
