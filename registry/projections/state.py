"""The folded state of the registry: plain, JSON-able dicts keyed by id, and the rules that set them up.

Each value is exactly what a read model row stores (as canonical JSON), so a
replay in memory and the live tables can be compared value for value. Their
shapes (every key, its type, who sets it) are declared in read_models.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from registry.formats.errors import UserError
from registry.events.identity import IDENTITY_FIELDS, artifact_identity

from .read_models import (
    ArtifactState, BenchStreamState, FrameSetState, IdentityScope, KeptIdentity, Margin, OutcomesState,
    SpeedRecordState, WorkloadState,
)

EVIDENCE_KINDS = ("parity", "benchmark", "execution", "perceptual")
# Decisions that stand for an identity until a person revokes them.
FINAL = ("promoted", "rejected")


class ProjectionError(UserError):
    """The log holds something the fold cannot place, or the read models cannot be trusted."""


@dataclass
class RegistryState:
    """Artifacts, workloads, frame sets and imported workload outcomes as of `position`.

    Each artifact keeps its verdict history; `outcomes` holds records imported
    from other systems about a workload as a whole (docs/import.md).
    """

    artifacts: dict[str, ArtifactState] = field(default_factory=dict)
    workloads: dict[str, WorkloadState] = field(default_factory=dict)
    framesets: dict[str, FrameSetState] = field(default_factory=dict)
    outcomes: dict[str, OutcomesState] = field(default_factory=dict)
    bench_streams: dict[str, BenchStreamState] = field(default_factory=dict)
    records: dict[str, SpeedRecordState] = field(default_factory=dict)
    position: int = 0
    # Loads a speed record's stored row by key (the live catch-up sets it; a fold from position 0 needs none):
    # a record is touched by events of many streams, so its row cannot be chosen before the fold.
    load_record: Callable[[str], SpeedRecordState | None] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "artifacts": [self.artifacts[key] for key in sorted(self.artifacts)],
            "workloads": [self.workloads[key] for key in sorted(self.workloads)],
            "framesets": [self.framesets[key] for key in sorted(self.framesets)],
            "outcomes": [self.outcomes[key] for key in sorted(self.outcomes)],
            "bench_streams": [self.bench_streams[key] for key in sorted(self.bench_streams)],
            "records": [self.records[key] for key in sorted(self.records)],
        }


def relative_margin(margin: Margin) -> float:
    """margin / |threshold|: how far inside (+) or outside (-) its threshold a metric sits.

    Margins of different metrics (SSIM, a speedup, a CV) only compare on this
    scale. A zero threshold has no scale: exactly at it counts as 0 (the
    tightest a passing margin can be), anything else as +/- infinity.
    """
    scale = abs(margin["threshold"])
    if scale:
        return margin["margin"] / scale
    return 0.0 if margin["margin"] == 0 else math.copysign(math.inf, margin["margin"])


def tightest(margins: list[Margin]) -> Margin | None:
    """The margin with the smallest relative margin (the first one on a tie), or None."""
    return min(margins, key=relative_margin) if margins else None


# What belongs to one identity (its decision, evidence, failures, attempts): set aside while another
# identity is registered, and taken up again when the same claims are registered again.
IDENTITY_SCOPED = tuple(IdentityScope.__annotations__)


def new_artifact(payload: dict[str, Any], position: int) -> ArtifactState:
    state = cast(ArtifactState, {  # start_identity adds the rest
        "artifact": payload["artifact"],
        "registered_position": position,
        "last_position": position,
        "stream_version": 1,  # every event of the stream is folded into it: the count is its version
        "verdicts": [],
        "identity_changed": None,
        "earlier_identities": {},
        "registered_payloads": [],
    })
    start_identity(state, payload, position)
    return state


def set_aside(state: ArtifactState) -> None:
    """Keep the current identity's decision, evidence, failures and attempts for when it is registered again."""
    kept = cast(KeptIdentity, {key: state[key] for key in IDENTITY_SCOPED})
    kept["payload_sha256"] = state["payload_sha256"]
    state.setdefault("earlier_identities", {})[state["identity"]] = kept


def take_up(state: ArtifactState, payload: dict[str, Any], position: int) -> bool:
    """Register `payload`'s identity: its own history again if it had one (True), else a fresh start (False)."""
    identity = artifact_identity(payload)
    kept = state.setdefault("earlier_identities", {}).pop(identity, None)
    if kept is None:
        start_identity(state, payload, position)
        return False
    describe(state, payload)
    _note_payload(state, payload)
    state["identity"] = identity
    state["registered_position"] = position
    state.update({key: kept[key] for key in IDENTITY_SCOPED})
    return True


def scope_of(state: ArtifactState, identity: str) -> IdentityScope | None:
    """The fields of `identity` in an artifact's state: the artifact itself when current, else its kept history."""
    if identity == state["identity"]:
        return state
    return state.get("earlier_identities", {}).get(identity)


def _note_payload(state: ArtifactState, payload: dict[str, Any]) -> None:
    payloads = state.setdefault("registered_payloads", [])
    if payload.get("payload_sha256") not in payloads:
        payloads.append(payload.get("payload_sha256"))


def describe(state: ArtifactState, payload: dict[str, Any]) -> None:
    """The registration facts the identity is made of (state.py's start_identity sets them).

    `bundle` is a shipped artifact's manifest (its files, entry point, the op it
    replaces and its compatibility window), which `resolve` and `lock` read; its
    digest is the payload hash, so it changes only with the identity.
    """
    for key in ("workload", "kind", "backend", "op", "entry", "payload_sha256", "bundle"):
        state[key] = payload.get(key)


def start_identity(state: ArtifactState, payload: dict[str, Any], position: int) -> None:
    """An identity registered for the first time: nothing measured or decided about another one carries over."""
    describe(state, payload)
    _note_payload(state, payload)
    state["identity"] = artifact_identity(payload)
    state["registered_position"] = position
    state.update(
        decision="registered", decided_by=None, tier=None, rule=None, reasons=[], margins=[],
        tightest_margin=None, speedup=None, speedup_ci=None, verdict=None, verdict_event_id=None,
        verdict_position=None, contract_version=None, contract_hash=None, human=None,
        benchmark_attempts=0, open_failures=[],
    )
    restart_evidence(state)


def restart_evidence(state: IdentityScope) -> None:
    """Evidence scope restarts: only evidence recorded from here on counts.

    Open failures and the benchmark attempt count belong to the identity and
    survive a revoke: a failure is cleared only by its own stage's later
    success, and attempts are what a revoke-and-rebenchmark loop must not hide.
    """
    state["evidence"] = {}
    state["evidence_counts"] = {kind: 0 for kind in EVIDENCE_KINDS}


def attempts_on(artifact: ArtifactState, payload_sha256: str) -> int:
    """Benchmark items an artifact has recorded for one payload, under every identity it registered."""
    count = artifact["benchmark_attempts"] if artifact["payload_sha256"] == payload_sha256 else 0
    return count + sum(kept["benchmark_attempts"] for kept in artifact.get("earlier_identities", {}).values()
                       if kept.get("payload_sha256") == payload_sha256)


def identity_changes(before: ArtifactState, after: dict[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} for each identity field a re-registration changed."""
    return {key: [before.get(key), after.get(key)] for key in IDENTITY_FIELDS if before.get(key) != after.get(key)}


def contract_note(artifact: ArtifactState, workload: WorkloadState | None) -> str | None:
    """Say when a final verdict was decided under an older contract than the workload's current one."""
    decided_under, current = artifact.get("contract_version"), (workload or {}).get("contract_version")
    if artifact["decision"] not in FINAL or decided_under is None or current is None or decided_under == current:
        return None
    return f"{artifact['decision']} under contract v{decided_under}; current v{current}"
