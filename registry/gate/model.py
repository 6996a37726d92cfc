"""What the gate takes (recorded evidence, artifact facts) and what it returns (a verdict)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.formats.fields import is_finite_number
from registry.formats.kinds import ARTIFACT_KINDS
from registry.formats.errors import UserError

GATE_VERSION = "gate/1"
DECISIONS = ("promoted", "rejected", "quarantined", "held", "recorded")
# Every rule id a verdict can carry, in the order the gate applies them (docs/gate.md).
RULES = (
    "evaluation_failed", "evidence.invalid",
    "execution.missing", "execution.fallback", "execution.backend_mismatch", "execution.backend_unknown",
    "execution.unsandboxed", "execution.launches_unverified", "execution.launcher_unbound",
    "parity.missing", "parity.failed", "parity.no_tolerance", "parity.undecidable",
    "fidelity.missing", "fidelity.frame_set_mismatch", "fidelity.stage_failed", "fidelity.metric_absent",
    "fidelity.failed",
    "speed.attempts", "speed.attempts_unknown", "speed.attempts_exceeded",
    "speed.no_gate", "speed.no_payload", "speed.missing", "speed.runs_per_arm", "speed.protocol", "speed.interleave",
    "speed.max_cv", "speed.interpreter", "speed.memory_unmeasured", "speed.inconclusive",
    "speed.not_interleaved", "speed.drift",
    "speed.undecided", "speed.below_gate", "speed.passed",
    "advisory",
)


@dataclass(frozen=True)
class Recorded:
    """One evidence event: its id and its item payload (as returned by parse_document)."""

    event_id: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class SpeedRecord:
    """The speed record of the artifact's bytes within its workload (the read model `projection_speed_records`).

    payload_sha256: the bytes (None for an artifact registered without a
    payload, which has no record and borrows none: the confident rule holds
    it). entries: every session batch and complete benchmark document of those
    bytes, under any artifact id or claim, in recorded order (projections/read_models/speed_records.py
    `RecordEntry`). sessions: how many sessions were opened. versions: every
    contract version of the workload with its position and stored speed block
    (the loosening rule reads them: registry/gate/record.py). key, head and
    digest: the record's key, the log position it stands at and the digest of
    its entries' event ids (read_models/speed_records.py), which a verdict
    decided on it cites instead of every entry (`reference`).
    """

    payload_sha256: str | None
    entries: Sequence[Mapping[str, Any]] = ()
    sessions: int = 0
    versions: Sequence[Mapping[str, Any]] = ()
    key: str | None = None
    head: int | None = None
    digest: str | None = None
    # The running reading the read model keeps (registry/gate/record.py `RecordReader`), under the terms it names:
    # read instead of the entries when they are the current contract's terms, never otherwise.
    reading: Mapping[str, Any] | None = None

    def reference(self) -> dict[str, Any] | None:
        """What a verdict cites of the record it read: key, head position, entry count and digest (None for a
        record with no row: no entry was ever recorded for the bytes)."""
        if self.key is None:
            return None
        return {"record": self.key, "head": self.head, "entries": len(self.entries), "digest": self.digest}


@dataclass(frozen=True)
class StandingRejection:
    """A verdict that rejected the artifact's bytes in its workload before (under any artifact id, claims,
    contract version or rule): a rejection of given bytes stands (docs/gate.md, "Decisions and contract
    versions"), so every later verdict of those bytes is rejected whatever they show."""

    verdict_event_id: str
    artifact: str
    contract_version: int | None


@dataclass(frozen=True)
class GateEvidence:
    execution: Recorded | None = None
    benchmark: Recorded | None = None
    parity: Recorded | None = None
    perceptual: Recorded | None = None
    failures: Sequence[Recorded] = ()
    # How many benchmark items the artifact's current identity has had, this one
    # included; None when the caller did not count them (speed.max_benchmark_attempts).
    benchmark_attempts: int | None = None
    # The speed record of the artifact's bytes; given, it decides speed under the confident rule.
    record: SpeedRecord | None = None
    # An earlier rejection of the artifact's bytes in its workload; given, the verdict is rejected.
    rejection: StandingRejection | None = None


@dataclass(frozen=True)
class ArtifactFacts:
    artifact_id: str
    kind: str
    claimed_backend: str | None = None
    # A triton_kernel's registered cubins, {kernel@arch: sha256}, from its bundle's manifest; None when unknown
    # (any other kind). Evidence of the harness launcher must name these digests (gate/execution.py).
    cubins: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ARTIFACT_KINDS:
            raise UserError(f"artifact kind {self.kind!r} is not one of {', '.join(ARTIFACT_KINDS)}")


@dataclass(frozen=True)
class Margin:
    """A signed margin: positive passes, zero (exactly at threshold) passes."""

    metric: str
    value: float
    threshold: float
    margin: float
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "value": self.value, "threshold": self.threshold,
            "margin": self.margin, "passed": self.passed,
        }


_VERDICT_KEYS = (
    "decision", "tier", "reasons", "margins", "speedup", "speedup_ci", "rule",
    "evidence_ids", "gate_version",
)
# Keys a verdict carries since they were added; a verdict recorded before one of them existed lacks it.
_LATER_VERDICT_KEYS = ("speedup_ci_level", "speedup_pairs", "speedup_ci_pair", "speed_record")
_RECORD_REFERENCE_KEYS = {"record", "head", "entries", "digest"}


@dataclass(frozen=True)
class Verdict:
    decision: str
    tier: str
    reasons: list[str]
    margins: list[Margin]
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    rule: str
    evidence_ids: list[str]
    gate_version: str = field(default=GATE_VERSION)
    # The two-sided coverage of speedup_ci (1 - 2 alpha for running bounds and confident bounds, the document's
    # own level for a point-rule interval); None where there is no interval or it was recorded before levels were.
    speedup_ci_level: float | None = None
    # For a verdict decided on a speed record: how many pairs `speedup` is over (every pair read up to the batch or
    # document that decided) and the pair at which `speedup_ci`, the rule's running bounds, were taken (where it
    # decided, or the last pair read). None otherwise, and in verdicts recorded before these existed.
    speedup_pairs: int | None = None
    speedup_ci_pair: int | None = None
    # For a verdict decided on a speed record: the record it read, by reference (`SpeedRecord.reference`: key, head
    # position, entry count, digest of its entries' event ids), so a verdict's size does not grow with the record.
    # `evidence_ids` then lists the latest items consulted, not every entry of the record; verdicts recorded before
    # the reference existed list every entry there, and have none.
    speed_record: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "tier": self.tier,
            "reasons": list(self.reasons),
            "margins": [margin.to_dict() for margin in self.margins],
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci is not None else None,
            "rule": self.rule,
            "evidence_ids": list(self.evidence_ids),
            "gate_version": self.gate_version,
            "speedup_ci_level": self.speedup_ci_level,
            "speedup_pairs": self.speedup_pairs,
            "speedup_ci_pair": self.speedup_ci_pair,
            "speed_record": None if self.speed_record is None else dict(self.speed_record),
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Verdict:
        """Rebuild a stored verdict; a dict that is not exactly a verdict is refused."""
        if not isinstance(obj, Mapping) or set(obj) - set(_LATER_VERDICT_KEYS) != set(_VERDICT_KEYS):
            got = sorted(obj) if isinstance(obj, Mapping) else type(obj).__name__
            raise UserError(f"verdict: expected keys {sorted(_VERDICT_KEYS)}, got {got}")
        if obj["decision"] not in DECISIONS:
            raise UserError(f"verdict.decision: {obj['decision']!r} is not one of {', '.join(DECISIONS)}")
        margins = []
        for i, raw in enumerate(obj["margins"]):
            if not isinstance(raw, Mapping) or set(raw) != {"metric", "value", "threshold", "margin", "passed"}:
                raise UserError(f"verdict.margins[{i}]: expected metric, value, threshold, margin, passed")
            for key in ("value", "threshold", "margin"):
                if not is_finite_number(raw[key]):
                    raise UserError(f"verdict.margins[{i}].{key}: expected a finite number")
            margins.append(Margin(
                metric=str(raw["metric"]), value=float(raw["value"]), threshold=float(raw["threshold"]),
                margin=float(raw["margin"]), passed=bool(raw["passed"]),
            ))
        ci = obj["speedup_ci"]
        return cls(
            decision=obj["decision"],
            tier=obj["tier"],
            reasons=[str(reason) for reason in obj["reasons"]],
            margins=margins,
            speedup=None if obj["speedup"] is None else float(obj["speedup"]),
            speedup_ci=None if ci is None else (float(ci[0]), float(ci[1])),
            rule=obj["rule"],
            evidence_ids=[str(event_id) for event_id in obj["evidence_ids"]],
            gate_version=obj["gate_version"],
            speedup_ci_level=_level(obj.get("speedup_ci_level")),
            speedup_pairs=_pair_count(obj.get("speedup_pairs"), "speedup_pairs"),
            speedup_ci_pair=_pair_count(obj.get("speedup_ci_pair"), "speedup_ci_pair"),
            speed_record=_reference(obj.get("speed_record")),
        )


def _level(value: Any) -> float | None:
    if value is None:
        return None
    if not is_finite_number(value) or not 0.0 < value < 1.0:
        raise UserError(f"verdict.speedup_ci_level: {value!r} is not a coverage in (0, 1)")
    return float(value)


def _reference(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != _RECORD_REFERENCE_KEYS:
        raise UserError(f"verdict.speed_record: expected keys {sorted(_RECORD_REFERENCE_KEYS)}")
    return dict(value)


def _pair_count(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"verdict.{name}: {value!r} is not a pair count")
    return value
