"""The artifacts read model: one row per artifact, its current registration, identity and decision.

Rules (docs/architecture.md, "Events" and "Decisions and lifecycle"; docs/gate.md, "Lifecycle"):
- An artifact's identity is the digest of everything its registration claims
  (`artifact_identity`: workload, kind, payload hash, backend, op, entry).
  Evidence, failures, verdicts and human decisions are scoped to the identity
  they name (events recorded before identities were: to their payload hash).
  An event for an identity set aside (a late result for a replaced
  registration) updates that identity's kept fields, never the current one's.
- A re-registration that changes the identity sets the old identity's
  evidence, failures, attempts, verdict fields and human decision aside
  (`earlier_identities`) and takes up the new identity's: its own, when those
  claims were registered before (its history belongs to it, however often it
  is registered), else a fresh start with decision `registered`.
  `identity_changed` says what changed where, and whether the identity
  `returned`.
- The latest of (verdict, human decision) sets `decision`: approve ->
  `promoted`, revoke -> `held` and the evidence scope restarts, so the
  artifact stays held until new evidence and a new verdict.
- A failure stays open until a later successful item of the kind its stage
  produces (STAGE_EVIDENCE) for the same identity; a stage the table does not
  name is cleared only by a new identity.
- `benchmark_attempts` counts every benchmark item of the current identity,
  across revokes.
- Every event of an artifact's stream moves its `last_position` and
  `stream_version` (the version the next append expects), whichever model
  folds the rest of it: this model holds a handler for each.
- An event the fold cannot place (evidence for an artifact never registered,
  a payload naming another stream's subject) raises ProjectionError naming
  its position: the state is never guessed.

An evidence entry references its event by position and holds no item: the
fold never decodes an evidence payload except a perceptual one that may close
an open failure (`_succeeded`). The questions that show items read them from
the log by position (items.py).

Side table: `projection_workload_counts`, how many artifact rows each
workload has; a listing of a workload's rows must find that many
(`check_workload_count`).
"""
# No `from __future__ import annotations`: TypedDict reads NotRequired[...] only from evaluated annotations.
import math
from typing import Any, Literal, Mapping, NotRequired, Protocol, TypedDict, cast

from sqlalchemy import BigInteger, Column, Connection, Float, String, Table, select

from registry.events.catalogue import EVIDENCE_KIND_BY_TYPE
from registry.events.identity import IDENTITY_FIELDS, artifact_identity
from registry.formats.names import ARTIFACT_PREFIX

from ..errors import DamagedReadModel, ProjectionError, REPLAY
from ..log import LogEvent
from .declaration import ReadModel, SideTable, counted, same_subject, state_table
from .monitors import MonitorState
from .outcomes import OutcomeRecord, outcome_record
from .verdicts import HISTORY_KEY, VerdictEntry

VERSION = 1
EVIDENCE_KINDS = ("parity", "benchmark", "execution", "perceptual")
# Decisions that stand for an identity until a person revokes them.
FINAL = ("promoted", "rejected")
# Which evidence kind shows a failed stage has since succeeded. `load` (the
# entry could not be imported) is shown good only by the artifact running.
STAGE_EVIDENCE = {"load": "execution", "execution": "execution", "parity": "parity", "benchmark": "benchmark",
                  "perceptual": "perceptual"}
HUMAN_DECISION = {"approve": "promoted", "revoke": "held"}


class Margin(TypedDict):
    """One signed margin of a verdict (the gate's `Margin.to_dict()`): positive or zero passes."""

    metric: str
    value: float
    threshold: float
    margin: float
    passed: bool


class EvidenceEntry(TypedDict):
    """The latest evidence event of one kind for an identity, as the fold keeps it and a row stores it
    (`_evidence`): a reference to the event, whose payload the fold never decodes."""

    event_id: str
    position: int


class AttachedEvidence(EvidenceEntry):
    """An evidence entry as the questions answer it: with its item, read from the log by position (items.py).

    `item` is the raw measurement (docs/evidence-format.md); `measured_at` an
    imported document's own time where it gives one, else the event's
    recorded time. Every state a question hands out (`show`, promote's gate,
    `report`, `what-if`, `rejudge`, as-of answers, `rebuild`) carries them;
    the fold, the stored rows and the answers that show no evidence (what
    `resolve` and `lock` list, the artifacts sharing a payload) hold the bare
    `EvidenceEntry`.
    """

    item: dict[str, Any] | None
    measured_at: str


class OpenFailure(TypedDict):
    """An `EvaluationFailed` not yet answered by a later success of its stage (`STAGE_EVIDENCE`)."""

    event_id: str
    position: int
    stage: str
    error: str


class HumanDecision(TypedDict):
    """The latest approve or revoke for an identity, and the verdict it answered (`_human`)."""

    action: Literal["approve", "revoke"]
    person: str
    reason: str
    event_id: str
    position: int
    verdict_event_id: str | None


class IdentityScope(TypedDict):
    """What belongs to one identity: its decision, evidence, failures and attempts.

    Set aside (`earlier_identities`) while other claims are registered, and
    taken up again when the same claims return (`set_aside`, `take_up`). The
    verdict fields come from the latest `VerdictRendered` for the identity,
    `decision`, `decided_by` and `human` from the latest of that verdict and
    a human decision; `evidence` and `evidence_counts` restart on a revoke,
    `open_failures` and `benchmark_attempts` do not.
    """

    decision: str
    decided_by: Literal["gate", "human"] | None
    tier: str | None
    rule: str | None
    reasons: list[str]
    margins: list[Margin]
    tightest_margin: Margin | None
    speedup: float | None
    speedup_ci: list[float] | None
    verdict: dict[str, Any] | None  # the gate's `Verdict.to_dict()` (docs/gate.md), as recorded
    verdict_event_id: str | None
    verdict_position: int | None
    contract_version: int | None
    contract_hash: str | None
    human: HumanDecision | None
    benchmark_attempts: int
    open_failures: list[OpenFailure]
    evidence: dict[str, AttachedEvidence]  # by kind: parity, benchmark, execution, perceptual (stored: EvidenceEntry)
    evidence_counts: dict[str, int]  # every kind, 0 when none


class KeptIdentity(IdentityScope):
    """An identity set aside, with the payload digest it was registered with (attempts count per payload)."""

    payload_sha256: str | None


class IdentityChange(TypedDict):
    """Where the latest change of identity happened, what changed, and whether earlier claims returned."""

    position: int
    previous_identity: str
    changes: dict[str, list[Any]]  # {field: [old, new]}
    returned: bool


class ArtifactState(IdentityScope):
    """One artifact: its current registration and identity, that identity's scope, and its stream's place.

    Registration facts (`describe`): `workload`, `kind`, `backend`, `op`,
    `entry`, `payload_sha256`, `bundle` from the latest `ArtifactRegistered`;
    `identity` is their digest. `registered_position` is where the current
    identity was registered; `last_position` and `stream_version` the last
    event of the stream folded and its version (the version the next append
    expects). `registered_payloads` lists every payload digest ever
    registered (the payload index's rows, payload_index.py). `verdicts` is the
    whole verdict history (verdicts.py): in a fold and in an answer asking for
    it, never in a stored row. `external` exists once an imported outcome
    names the artifact; `monitors` (monitors.py) once a promoted identity has
    re-measured pairs.
    """

    artifact: str
    workload: str
    kind: str
    backend: str | None
    op: str | None
    entry: str | None
    payload_sha256: str | None
    bundle: dict[str, Any] | None  # a bundle's canonical manifest (docs/bundles.md)
    identity: str
    identity_changed: IdentityChange | None
    earlier_identities: dict[str, KeptIdentity]  # by identity
    registered_payloads: list[str | None]
    registered_position: int
    last_position: int
    stream_version: int
    verdicts: NotRequired[list[VerdictEntry]]
    external: NotRequired[list[OutcomeRecord]]
    monitors: NotRequired[dict[str, MonitorState]]  # by identity, once one has re-measured pairs


class Artifacts(Protocol):
    """What this model's handlers fold into (RegistryState): the artifacts by id."""

    artifacts: dict[str, ArtifactState]


ARTIFACTS = state_table(
    "projection_artifacts", "artifact",
    Column("workload", String(200), nullable=False, index=True),
    Column("decision", String(32), nullable=False, index=True),
    Column("tier", String(32), nullable=True),
    Column("speedup", Float, nullable=True),
    Column("last_position", BigInteger, nullable=False),
    # What an append and a promotion need without decoding the state: the stream's
    # version at last_position (the expected version of the next append) and the identity.
    Column("stream_version", BigInteger, nullable=False),
    Column("identity", String(64), nullable=False),
)
# How many artifact rows each workload has, kept beside them: a read of a workload's artifacts (resolve, lock,
# rejudge) compares what it found with this count, so a deleted artifact row is a refusal, never an artifact
# that is not there.
WORKLOAD_COUNTS = Table(
    "projection_workload_counts", ARTIFACTS.metadata,
    Column("workload", String(200), primary_key=True),
    Column("artifacts", BigInteger, nullable=False),
)


# -- the identity's fields -------------------------------------------------------------------------------------

def relative_margin(margin: Mapping[str, Any]) -> float:
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
        HISTORY_KEY: [],
        "identity_changed": None,
        "earlier_identities": {},
        "registered_payloads": [],
    })
    start_identity(state, payload, position)
    return state


def set_aside(state: ArtifactState) -> None:
    """Keep the current identity's decision, evidence, failures and attempts for when it is registered again."""
    kept = cast(KeptIdentity, {key: state[key] for key in IDENTITY_SCOPED})  # type: ignore[literal-required]
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
    state["identity"] = identity
    state["registered_position"] = position
    state.update({key: kept[key] for key in IDENTITY_SCOPED})  # type: ignore[literal-required, typeddict-item]
    return True


def scope_of(state: ArtifactState, identity: str) -> IdentityScope | None:
    """The fields of `identity` in an artifact's state: the artifact itself when current, else its kept history."""
    if identity == state["identity"]:
        return state
    return state.get("earlier_identities", {}).get(identity)


def describe(state: ArtifactState, payload: dict[str, Any]) -> None:
    """The registration facts the identity is made of (`start_identity` sets them).

    `bundle` is a shipped artifact's manifest (its files, entry point, the op it
    replaces and its compatibility window), which `resolve` and `lock` read; its
    digest is the payload hash, so it changes only with the identity.
    """
    for key in ("workload", "kind", "backend", "op", "entry", "payload_sha256", "bundle"):
        state[key] = payload.get(key)


def start_identity(state: ArtifactState, payload: dict[str, Any], position: int) -> None:
    """An identity registered for the first time: nothing measured or decided about another one carries over."""
    describe(state, payload)
    state["identity"] = artifact_identity(payload)
    state["registered_position"] = position
    state.update({
        "decision": "registered", "decided_by": None, "tier": None, "rule": None, "reasons": [], "margins": [],
        "tightest_margin": None, "speedup": None, "speedup_ci": None, "verdict": None, "verdict_event_id": None,
        "verdict_position": None, "contract_version": None, "contract_hash": None, "human": None,
        "benchmark_attempts": 0, "open_failures": [],
    })
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


def contract_note(artifact: Mapping[str, Any], workload: Mapping[str, Any] | None) -> str | None:
    """Say when a final verdict was decided under an older contract than the workload's current one."""
    decided_under, current = artifact.get("contract_version"), (workload or {}).get("contract_version")
    if artifact["decision"] not in FINAL or decided_under is None or current is None or decided_under == current:
        return None
    return f"{artifact['decision']} under contract v{decided_under}; current v{current}"


def identity_scoped(artifact: ArtifactState, identity: str | None,
                    payload_sha256: str | None) -> tuple[str, IdentityScope] | None:
    """The identity an event is about and the fields it updates, or None when it is about none registered here.

    An event naming an identity updates that identity, current or set aside
    (a late result for a replaced registration counts when those claims are
    registered again). An event without one (recorded before identities
    were) counts for the current identity only, when its payload matches.
    """
    if identity is None:
        return (artifact["identity"], artifact) if payload_sha256 == artifact["payload_sha256"] else None
    fields = scope_of(artifact, identity)
    return None if fields is None else (identity, fields)


# -- the handlers ----------------------------------------------------------------------------------------------

def in_stream(state: Artifacts, event: LogEvent) -> ArtifactState:
    """The registered artifact whose stream holds `event`, its place in the stream moved to the event."""
    stream = event.stream
    if not stream.startswith(ARTIFACT_PREFIX):
        raise ProjectionError(
            f"event at position {event.position} ({event.type}) is in stream {stream}, not an artifact stream"
        )
    found = state.artifacts.get(stream[len(ARTIFACT_PREFIX):])
    if found is None:
        raise ProjectionError(
            f"event at position {event.position} ({event.type}) is for artifact "
            f"{stream[len(ARTIFACT_PREFIX):]!r}, which was never registered"
        )
    found["last_position"] = event.position
    found["stream_version"] += 1
    return found


def named_in_stream(state: Artifacts, event: LogEvent) -> ArtifactState:
    """`in_stream`, for an event whose payload must name the artifact of its stream."""
    artifact = in_stream(state, event)
    same_subject(event, event.payload["artifact"], artifact["artifact"])
    return artifact


def of_stream(state: Artifacts, event: LogEvent) -> ArtifactState:
    """The artifact of `event`'s stream, once this model's handler has placed the event (for other models)."""
    return state.artifacts[event.stream[len(ARTIFACT_PREFIX):]]


def _registered(state: Artifacts, event: LogEvent) -> None:
    payload = event.payload
    artifact_id = payload["artifact"]
    same_subject(event, ARTIFACT_PREFIX + artifact_id, event.stream)
    current = state.artifacts.get(artifact_id)
    if current is None:
        state.artifacts[artifact_id] = new_artifact(payload, event.position)
        return
    current["last_position"] = event.position
    current["stream_version"] += 1
    if artifact_identity(payload) != current["identity"]:
        previous = current["identity"]
        changes = identity_changes(current, payload)
        set_aside(current)
        returned = take_up(current, payload, event.position)
        current["identity_changed"] = {"position": event.position, "previous_identity": previous,
                                       "changes": changes, "returned": returned}


def _evidence(state: Artifacts, event: LogEvent) -> None:
    artifact = in_stream(state, event)
    same_subject(event, event.named_artifact(), artifact["artifact"])
    kind = EVIDENCE_KIND_BY_TYPE[event.type]
    scoped = identity_scoped(artifact, event.identity, event.scope)
    if scoped is None:
        return
    fields = scoped[1]
    # The item (and when it was measured) is read from the log by position when a question shows it (items.py).
    fields["evidence"][kind] = {"event_id": event.event_id, "position": event.position}  # type: ignore[typeddict-item]
    fields["evidence_counts"][kind] += 1
    if kind == "benchmark":
        fields["benchmark_attempts"] += 1
    open_failures = fields["open_failures"]
    if open_failures and any(STAGE_EVIDENCE.get(f["stage"]) == kind for f in open_failures) \
            and _succeeded(event, kind):
        fields["open_failures"] = [f for f in open_failures if STAGE_EVIDENCE.get(f["stage"]) != kind]


def _succeeded(event: LogEvent, kind: str) -> bool:
    """Whether an evidence item shows its stage completed (a perceptual item says so in `stage_status`)."""
    if kind != "perceptual":
        return True
    return event.payload["item"].get("stage_status") == "ok"


def _decided_about(state: Artifacts, event: LogEvent) -> IdentityScope | None:
    """The fields of the identity a failure, verdict or human decision names (its payload's identity and bytes),
    or None where it is about an identity the artifact no longer holds."""
    payload = event.payload
    scoped = identity_scoped(named_in_stream(state, event), payload.get("identity"), payload["payload_sha256"])
    return None if scoped is None else scoped[1]


def _failed(state: Artifacts, event: LogEvent) -> None:
    fields, payload = _decided_about(state, event), event.payload
    if fields is not None:
        fields["open_failures"].append({"event_id": event.event_id, "position": event.position,
                                        "stage": payload["stage"], "error": payload["error"]})


def _verdict(state: Artifacts, event: LogEvent) -> None:
    fields, payload = _decided_about(state, event), event.payload
    if fields is None:
        return
    verdict = payload["verdict"]
    margins = verdict["margins"]
    fields.update({
        "decision": verdict["decision"], "decided_by": "gate", "tier": verdict["tier"], "rule": verdict["rule"],
        "reasons": verdict["reasons"], "margins": margins, "tightest_margin": tightest(margins),
        "speedup": verdict["speedup"], "speedup_ci": verdict["speedup_ci"], "verdict": verdict,
        "verdict_event_id": event.event_id, "verdict_position": event.position,
        "contract_version": payload["contract_version"], "contract_hash": payload["contract_hash"],
    })


def _human(state: Artifacts, event: LogEvent) -> None:
    fields, payload = _decided_about(state, event), event.payload
    if fields is None:
        return
    action = payload["action"]
    if action not in HUMAN_DECISION:
        raise ProjectionError(f"event at position {event.position}: unknown human action {action!r}")
    fields["human"] = {
        "action": action, "person": payload["person"], "reason": payload["reason"],
        "event_id": event.event_id, "position": event.position,
        "verdict_event_id": payload.get("verdict_event_id"),
    }
    fields["decision"] = HUMAN_DECISION[action]
    fields["decided_by"] = "human"
    if action == "revoke":
        restart_evidence(fields)


def _external(state: Artifacts, event: LogEvent) -> None:
    """An imported record about an artifact: kept beside it, never as evidence (outcomes.py keeps the rest)."""
    if event.payload.get("artifact") is not None:
        named_in_stream(state, event).setdefault("external", []).append(outcome_record(event))


def _placed(state: Artifacts, event: LogEvent) -> None:
    """An event another model folds (monitors.py): its place in the artifact's stream."""
    named_in_stream(state, event)


# -- rows ----------------------------------------------------------------------------------------------------

def _without_history(state: dict[str, Any]) -> dict[str, Any]:
    """The artifact state as its row stores it: everything but the verdict history (verdicts.py's table)."""
    return {key: value for key, value in state.items() if key != HISTORY_KEY}


def check_workload_count(conn: Connection, workload: str, found: int) -> None:
    """Refuse a listing of a workload's artifact rows that finds another number than its count kept beside them."""
    counted_now = conn.execute(select(WORKLOAD_COUNTS.c.artifacts)
                               .where(WORKLOAD_COUNTS.c.workload == workload)).scalar()
    if (counted_now or 0) != found:
        raise DamagedReadModel(f"the read model of workload {workload!r} holds {found} artifact rows where "
                               f"{counted_now or 0} are counted; {REPLAY}")


DECLARATION = ReadModel(
    name="artifacts", version=VERSION, row_type=ArtifactState, singular="artifact",
    folds={"ArtifactRegistered": _registered, "EvaluationFailed": _failed, "VerdictRendered": _verdict,
           "HumanDecision": _human, "ExternalOutcome": _external,
           **{name: _evidence for name in EVIDENCE_KIND_BY_TYPE},
           **{name: _placed for name in ("PairsRemeasured", "RegressionDetected", "RegressionAcknowledged")}},
    table=ARTIFACTS, key=("artifact",), stored=_without_history,
    stream_prefix=ARTIFACT_PREFIX, logged=True, stream_version="stream_version",
    side_tables=(SideTable(WORKLOAD_COUNTS, ("workload",),
                           lambda states: counted(("workload",), "artifacts",
                                                  ((state["workload"],) for state in states)), "add"),),
)
