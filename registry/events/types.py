"""Typed, versioned event payloads.

Each event type is a pydantic model with a `schema_version`. Payloads are
validated when appended and again when read; an event written under an older
schema is first passed through the upcasters registered for its type, so old
events keep reading after a payload changes (the pattern of the
`eventsourcing` library's upcasting, kept to plain functions). The names and
versions of the types are also listed, without pydantic, in `catalogue`.
"""
from __future__ import annotations

from typing import Annotated, Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from registry.formats.digests import SHA256_PATTERN
from registry.formats.kinds import ARTIFACT_KINDS

from .errors import PayloadError, UnknownEventType
from .plain_payloads import PlainPayload, compile_plain


class EventPayload(BaseModel):
    """Base of every payload: strict, closed, immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    type: ClassVar[str]
    schema_version: ClassVar[int] = 1


class WorkloadDeclared(EventPayload):
    """A workload contract, versioned: re-declaring with new content appends a version."""

    type: ClassVar[str] = "WorkloadDeclared"
    workload: str = Field(min_length=1)
    contract_version: int = Field(ge=1)
    contract_hash: str = Field(min_length=64, max_length=64)
    contract: dict[str, Any]


class FrameSetRegistered(EventPayload):
    """A named, seeded reference frame set, identified by the hash of its pixels."""

    type: ClassVar[str] = "FrameSetRegistered"
    name: str = Field(min_length=1)
    seed: int
    frames: int = Field(ge=1)
    height: int = Field(ge=1)
    width: int = Field(ge=1)
    channels: int = Field(ge=1)
    dtype: str
    sha256: str = Field(min_length=64, max_length=64)
    source: str | None = None


class ArtifactRegistered(EventPayload):
    """A candidate artifact bound to a workload; its payload hash scopes all evidence."""

    type: ClassVar[str] = "ArtifactRegistered"
    artifact: str = Field(min_length=1)
    kind: Literal[ARTIFACT_KINDS]  # type: ignore[valid-type]  # the tuple spelled as its members
    workload: str = Field(min_length=1)
    payload_sha256: str | None = None
    backend: str | None = None
    op: str | None = None
    entry: str | None = None
    # A bundle's canonical manifest (docs/bundles.md); payload_sha256 is then its digest.
    bundle: dict[str, Any] | None = None
    origin: dict[str, Any] | None = None


# The identity (identity.artifact_identity) an event was measured or decided
# under. Events written before identities were recorded have none and are
# scoped by payload hash alone.
Identity = Field(default=None, pattern=SHA256_PATTERN)


class _Evidence(EventPayload):
    """Raw measurement plus what the registry derived from it, for one identity (and its payload hash)."""

    artifact: str = Field(min_length=1)
    identity: str | None = Identity
    payload_sha256: str | None
    run: str | None = None
    item: dict[str, Any]
    origin: dict[str, Any] | None = None


class ParityMeasured(_Evidence):
    type: ClassVar[str] = "ParityMeasured"


class BenchmarkMeasured(_Evidence):
    type: ClassVar[str] = "BenchmarkMeasured"


class ExecutionObserved(_Evidence):
    type: ClassVar[str] = "ExecutionObserved"


class PerceptualMeasured(_Evidence):
    type: ClassVar[str] = "PerceptualMeasured"


class EvaluationFailed(EventPayload):
    """An evaluation stage that produced nothing, and why."""

    type: ClassVar[str] = "EvaluationFailed"
    artifact: str = Field(min_length=1)
    identity: str | None = Identity
    payload_sha256: str | None
    run: str | None = None
    stage: str = Field(min_length=1)
    error: str = Field(min_length=1)
    origin: dict[str, Any] | None = None


class VerdictRendered(EventPayload):
    """The gate's decision with its reasons, margins and the evidence it rested on."""

    type: ClassVar[str] = "VerdictRendered"
    artifact: str = Field(min_length=1)
    identity: str | None = Identity
    payload_sha256: str | None
    workload: str
    contract_version: int
    contract_hash: str
    gate_version: str
    verdict: dict[str, Any]
    # Benchmark items the identity had when it was decided (None: not counted, older events).
    benchmark_attempts: int | None = Field(default=None, ge=0)


class HumanDecision(EventPayload):
    """A named person's approval (advisory tier) or revocation, with a reason and the verdict it answers."""

    type: ClassVar[str] = "HumanDecision"
    artifact: str = Field(min_length=1)
    identity: str | None = Identity
    payload_sha256: str | None
    action: Literal["approve", "revoke"]
    reason: str = Field(min_length=1)
    person: str = Field(min_length=1)
    verdict_event_id: str | None = None


class ExternalOutcome(EventPayload):
    """What another system recorded (an outcome, its own verdict), kept with its origin; never evidence.

    Imported summaries carry no raw measurement, so the gate never reads them;
    reports and the support matrix show them labelled with their origin
    (docs/import.md). In an artifact's stream when they concern one artifact,
    else in the stream `outcomes:<workload>`.
    """

    type: ClassVar[str] = "ExternalOutcome"
    workload: str = Field(min_length=1)
    artifact: str | None = None
    arch: str | None = None
    outcome: Literal[
        "promoted", "candidates_found", "no_worthwhile_candidate", "quarantined", "held", "not_attempted"
    ] | None = None
    recorded_verdict: dict[str, Any] | None = None
    recorded_utc: str | None = None
    model_id: str | None = None
    family: str | None = None
    summary: dict[str, Any]
    origin: dict[str, Any]


class BenchmarkSessionOpened(EventPayload):
    """A benchmark session opened for an artifact's identity, before anything is measured.

    Stored in the stream `bench:<identity>`, the benchmark record that every
    session of that identity (under any artifact id of the workload) continues,
    so its pairs count in recorded order and no session can be left out
    (docs/evidence-format.md, "Benchmark sessions").
    """

    type: ClassVar[str] = "BenchmarkSessionOpened"
    session: str = Field(min_length=1)
    artifact: str = Field(min_length=1)
    identity: str = Field(pattern=r"^[0-9a-f]{64}$")
    payload_sha256: str | None
    workload: str = Field(min_length=1)
    device: str = Field(min_length=1)
    timer: str = Field(min_length=1)
    # The device architecture (sm90, sm100a, cpu), where the worker named it: the support matrix places a
    # record's artifacts by it. Sessions opened before it was recorded carry none.
    arch: str | None = Field(default=None, pattern=r"^(sm[0-9]{2,3}[a-z]?|cpu)$")


class BenchmarkPairsRecorded(EventPayload):
    """One batch of paired timings (seconds) of an open session, appended under its idempotency key."""

    type: ClassVar[str] = "BenchmarkPairsRecorded"
    session: str = Field(min_length=1)
    artifact: str = Field(min_length=1)
    identity: str = Field(pattern=r"^[0-9a-f]{64}$")
    batch: str = Field(min_length=1)
    baseline_s: list[float] = Field(min_length=1)
    candidate_s: list[float] = Field(min_length=1)


class TokenIssued(EventPayload):
    """An API token for `registry serve`: who holds it, what it may do, until when; never the secret itself.

    Stored in the stream `token:<key_id>`, so a request's token is found by
    one indexed read of a stream of one or two events (docs/serve.md).
    """

    type: ClassVar[str] = "TokenIssued"
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    secret_sha256: str = Field(pattern=SHA256_PATTERN)
    principal: str = Field(min_length=1, max_length=128)
    person: bool
    scopes: list[str] = Field(min_length=1)
    workload: str | None = None
    not_after: str = Field(min_length=1)
    issuer: str = Field(min_length=1)


class TokenRevoked(EventPayload):
    """A token ended before its time: refused from the next request on."""

    type: ClassVar[str] = "TokenRevoked"
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    reason: str = Field(min_length=1)
class PairsRemeasured(EventPayload):
    """One batch of paired timings (seconds) re-measured for a promoted identity, watched by its monitor.

    Appended under its idempotency key (a retried job appends it once). It
    names the promoting verdict it re-measures and the monitor's terms (the
    threshold and alpha, fixed when the monitor started: registry/app/monitor.py),
    and the device and software the pairs were timed on (docs/monitor.md).
    `baseline_waited_s`, where the harness recorded it, is the time each
    pair's baseline run spent waiting for a CPU (None per pair: unreported);
    `baseline_wait_share` the monitor's term that leaves out pairs that
    waited more (both absent in batches recorded before the term existed).
    """

    type: ClassVar[str] = "PairsRemeasured"
    artifact: str = Field(min_length=1)
    identity: str = Field(pattern=SHA256_PATTERN)
    payload_sha256: str | None
    verdict_event_id: str = Field(min_length=1)
    batch: str = Field(min_length=1, max_length=200)
    baseline_s: list[float] = Field(min_length=1)
    candidate_s: list[float] = Field(min_length=1)
    threshold: float = Field(gt=0)
    alpha: float = Field(gt=0, le=0.5)
    reference: Literal["gate", "promoted"]
    contract_version: int = Field(ge=1)
    device: str = Field(min_length=1, max_length=200)
    software: dict[str, str]
    baseline_waited_s: list[Annotated[float, Field(ge=0, allow_inf_nan=False)] | None] | None = None
    baseline_wait_share: float | None = Field(default=None, gt=0, le=1)


class RegressionDetected(EventPayload):
    """The monitor's alarm: its detector crossed 1/alpha at pair `pairs` of the identity's re-measurements.

    `log_statistic` is log R at the alarm (registry/formats/monitor.py);
    `profiles` every device and software the counted pairs were timed on.
    The fold recomputes the detector from the pairs and refuses an alarm it
    did not reach, so a replay reproduces every alarm position.
    """

    type: ClassVar[str] = "RegressionDetected"
    artifact: str = Field(min_length=1)
    identity: str = Field(pattern=SHA256_PATTERN)
    payload_sha256: str | None
    verdict_event_id: str = Field(min_length=1)
    pairs: int = Field(ge=1)
    below: int = Field(ge=0)
    log_statistic: float
    threshold: float = Field(gt=0)
    alpha: float = Field(gt=0, le=0.5)
    profiles: list[dict[str, Any]]


class RegressionAcknowledged(EventPayload):
    """A named person's acknowledgment of an alarm (a human decision naming it): a known regression, not alerted again."""

    type: ClassVar[str] = "RegressionAcknowledged"
    artifact: str = Field(min_length=1)
    identity: str = Field(pattern=SHA256_PATTERN)
    alarm_event_id: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    person: str = Field(min_length=1)


class HookAdded(EventPayload):
    """A webhook: where decisions, alarms and revocations are delivered, and which of them (docs/hooks.md).

    Stored in the stream `hook:<hook_id>`. The secret is never in the log:
    `secret_file` is where the deliverer reads it (an absolute path, owner-only),
    `secret_id` a domain-separated SHA-256 prefix naming it, so a file that
    changed since is refused rather than used.
    """

    type: ClassVar[str] = "HookAdded"
    hook_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    url: str = Field(min_length=1, max_length=2000)
    events: list[Literal["decision", "promotion", "alarm", "revocation"]] = Field(min_length=1)
    secret_file: str = Field(min_length=1, max_length=4096)
    secret_id: str = Field(pattern=r"^[0-9a-f]{16}$")


class HookRemoved(EventPayload):
    """A webhook removed: nothing more is delivered to it, retries included."""

    type: ClassVar[str] = "HookRemoved"
    hook_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    reason: str = Field(min_length=1)


class HookDeliveryAttempted(EventPayload):
    """One attempt to deliver one event to a webhook, and what came of it.

    `delivery` is the id the receiver sees on every attempt of it; `event_id`
    and `position` the log event delivered. A failed attempt names when the
    next may be made (`next_attempt_after`), or none when it was the last.
    """

    type: ClassVar[str] = "HookDeliveryAttempted"
    hook_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    delivery: str = Field(min_length=1, max_length=200)
    event_id: str = Field(min_length=1)
    position: int = Field(ge=1)
    event: Literal["decision", "promotion", "alarm", "revocation"]
    attempt: int = Field(ge=1)
    outcome: Literal["delivered", "failed"]
    status: int | None = None
    error: str | None = Field(default=None, max_length=500)
    next_attempt_after: str | None = None


EVIDENCE_EVENT_BY_KIND: dict[str, type[_Evidence]] = {
    "parity": ParityMeasured,
    "benchmark": BenchmarkMeasured,
    "execution": ExecutionObserved,
    "perceptual": PerceptualMeasured,
}

PAYLOAD_TYPES: dict[str, type[EventPayload]] = {
    cls.type: cls
    for cls in (
        WorkloadDeclared,
        FrameSetRegistered,
        ArtifactRegistered,
        ParityMeasured,
        BenchmarkMeasured,
        ExecutionObserved,
        PerceptualMeasured,
        EvaluationFailed,
        VerdictRendered,
        HumanDecision,
        ExternalOutcome,
        BenchmarkSessionOpened,
        BenchmarkPairsRecorded,
        TokenIssued,
        TokenRevoked,
        PairsRemeasured,
        RegressionDetected,
        RegressionAcknowledged,
        HookAdded,
        HookRemoved,
        HookDeliveryAttempted,
    )
}

class _PlainPayloads(dict):
    """Event type -> its model's compiled plain form (plain_payloads.py), or None where the model has none.

    How an append validates and encodes a payload given as a dict, falling
    back to the model for anything the form does not accept. Each is
    compiled on first use: all twelve at import would add a few percent to
    the import of this module. An unknown type gives None and is not kept.
    """

    def __missing__(self, event_type: str) -> PlainPayload | None:
        model = PAYLOAD_TYPES.get(event_type)
        if model is None:
            return None
        plain = self[event_type] = compile_plain(model)
        return plain


PLAIN_PAYLOADS = _PlainPayloads()

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
# (event type, schema version it reads) -> function returning the next version's dict.
UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def register_upcaster(event_type: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Declare how a payload at `from_version` becomes `from_version + 1`."""

    def decorate(fn: Upcaster) -> Upcaster:
        UPCASTERS[(event_type, from_version)] = fn
        return fn

    return decorate


def payload_class(event_type: str) -> type[EventPayload]:
    try:
        return PAYLOAD_TYPES[event_type]
    except KeyError:
        raise UnknownEventType(f"unknown event type {event_type!r}") from None


def _validation_message(event_type: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "payload"
    return f"invalid {event_type} payload: {where}: {first['msg']}"


def validate_payload(event_type: str, data: dict[str, Any]) -> EventPayload:
    """Build the typed payload for `event_type`, raising PayloadError in one line."""
    cls = payload_class(event_type)
    if not isinstance(data, dict):
        raise PayloadError(f"invalid {event_type} payload: expected an object")
    try:
        # What `model_validate` calls, without its Python wrapper: a sixth of validating an evidence payload.
        return cls.__pydantic_validator__.validate_python(data)
    except ValidationError as exc:
        raise PayloadError(_validation_message(event_type, exc)) from None


def read_payload(event_type: str, schema_version: int, data: dict[str, Any]) -> EventPayload:
    """Upcast a stored payload to the current schema and validate it."""
    cls = payload_class(event_type)
    if schema_version > cls.schema_version:
        raise PayloadError(
            f"{event_type} schema_version {schema_version} is newer than this registry "
            f"reads ({cls.schema_version})"
        )
    version = schema_version
    while version < cls.schema_version:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise PayloadError(f"no upcaster for {event_type} from schema_version {version}")
        data = step(dict(data))
        version += 1
    return validate_payload(event_type, data)


if __name__ == "__main__":  # writes the models' compiled forms down (plain_payloads.py, `written_forms`)
    from .plain_payloads import FORMS_FILE, written_forms

    FORMS_FILE.write_text(written_forms(PAYLOAD_TYPES), encoding="utf-8")
