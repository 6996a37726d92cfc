"""The folded state of the registry: plain, JSON-able dicts keyed by id.

Each value is exactly what a read model row stores (as canonical JSON), so a
replay in memory and the live tables can be compared value for value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

EVIDENCE_KINDS = ("parity", "benchmark", "execution", "perceptual")


class ProjectionError(ValueError):
    """The log holds something the fold cannot place, or the read models cannot be trusted."""


@dataclass
class RegistryState:
    """Artifacts, workloads, frame sets and imported workload outcomes as of `position`.

    Each artifact keeps its verdict history; `outcomes` holds records imported
    from other systems about a workload as a whole (docs/import.md).
    """

    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    framesets: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    position: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "artifacts": [self.artifacts[key] for key in sorted(self.artifacts)],
            "workloads": [self.workloads[key] for key in sorted(self.workloads)],
            "framesets": [self.framesets[key] for key in sorted(self.framesets)],
            "outcomes": [self.outcomes[key] for key in sorted(self.outcomes)],
        }


def relative_margin(margin: dict[str, Any]) -> float:
    """margin / |threshold|: how far inside (+) or outside (-) its threshold a metric sits.

    Margins of different metrics (SSIM, a speedup, a CV) only compare on this
    scale. A zero threshold has no scale: exactly at it counts as 0 (the
    tightest a passing margin can be), anything else as +/- infinity.
    """
    scale = abs(margin["threshold"])
    if scale:
        return margin["margin"] / scale
    return 0.0 if margin["margin"] == 0 else math.copysign(math.inf, margin["margin"])


def tightest(margins: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The margin with the smallest relative margin (the first one on a tie), or None."""
    return min(margins, key=relative_margin) if margins else None


def new_artifact(payload: dict[str, Any], position: int) -> dict[str, Any]:
    state = {
        "artifact": payload["artifact"],
        "registered_position": position,
        "last_position": position,
        "verdicts": [],
    }
    describe(state, payload)
    start_payload(state, payload.get("payload_sha256"), position)
    return state


def describe(state: dict[str, Any], payload: dict[str, Any]) -> None:
    """The registration facts; a re-registration of the same payload updates them.

    `bundle` is a shipped artifact's manifest (its files, entry point, the op it
    replaces and its compatibility window), which `resolve` and `lock` read.
    """
    for key in ("workload", "kind", "backend", "op", "entry", "bundle"):
        state[key] = payload.get(key)


def start_payload(state: dict[str, Any], payload_sha256: str | None, position: int) -> None:
    """A new payload hash: nothing measured or decided about the old one carries over."""
    state["payload_sha256"] = payload_sha256
    state["registered_position"] = position
    state.update(
        decision="registered", decided_by=None, tier=None, rule=None, reasons=[], margins=[],
        tightest_margin=None, speedup=None, speedup_ci=None, verdict=None, verdict_event_id=None,
        verdict_position=None, contract_version=None, contract_hash=None, human=None,
    )
    restart_evidence(state)


def restart_evidence(state: dict[str, Any]) -> None:
    """Evidence scope restarts: only evidence recorded from here on counts."""
    state["evidence"] = {}
    state["evidence_counts"] = {kind: 0 for kind in EVIDENCE_KINDS}
    state["open_failures"] = []
