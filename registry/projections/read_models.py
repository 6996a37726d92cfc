"""The read models' shapes, declared: every key of a folded state, what it holds and who sets it.

A folded state is a plain dict, not an object, because the dict *is* the
read-model row's document: its canonical JSON is what `projection_artifacts`
(and the other tables) store, and `registry replay --verify` compares a fresh
fold with the stored row value for value. A dict folds with no encoding or
decoding step between the fold and the row (docs/projections.md, "Why the
read models are declared dicts"). These `TypedDict`s name its keys and the
types of their values in one place, for a reader and for a type checker;
tests/test_read_model_shapes.py folds generated logs and holds every state to
them, so a key the fold adds without declaring it here fails that test.

Who sets what: registration facts come from `ArtifactRegistered`
(state.py's `describe`, `start_identity`); the identity-scoped fields from
evidence, failures, verdicts and human decisions (fold.py's handlers); the
stream bookkeeping from every event of the stream (fold.py's `_artifact`).
"""
# No `from __future__ import annotations`: TypedDict reads NotRequired[...] only from evaluated annotations.
from typing import Any, Literal, NotRequired, TypedDict


class Margin(TypedDict):
    """One signed margin of a verdict (the gate's `Margin.to_dict()`): positive or zero passes."""

    metric: str
    value: float
    threshold: float
    margin: float
    passed: bool


class EvidenceEntry(TypedDict):
    """The latest evidence event of one kind for an identity, as the fold keeps it and a row stores it
    (fold.py's `_evidence`): a reference to the event, whose payload the fold never decodes."""

    event_id: str
    position: int


class AttachedEvidence(EvidenceEntry):
    """An evidence entry as the questions answer it: with its item, read from the log by position (items.py).

    `item` is the raw measurement (docs/evidence-format.md); `measured_at` an
    imported document's own time where it gives one, else the event's
    recorded time. Every state a question hands out (`show`, promote's gate,
    `report`, `what-if`, `rejudge`, as-of answers, `rebuild`) carries them;
    the fold, the stored rows and the answers that show no evidence (`resolve`
    and `lock`'s `workload_artifacts`, promote's `artifacts_sharing_payload`)
    hold the bare `EvidenceEntry`.
    """

    item: dict[str, Any] | None
    measured_at: str


class OpenFailure(TypedDict):
    """An `EvaluationFailed` not yet answered by a later success of its stage (fold.py's `STAGE_EVIDENCE`)."""

    event_id: str
    position: int
    stage: str
    error: str


class HumanDecision(TypedDict):
    """The latest approve or revoke for an identity, and the verdict it answered (fold.py's `_human`)."""

    action: Literal["approve", "revoke"]
    person: str
    reason: str
    event_id: str
    position: int
    verdict_event_id: str | None


class IdentityScope(TypedDict):
    """What belongs to one identity: its decision, evidence, failures and attempts.

    Set aside (`earlier_identities`) while other claims are registered, and
    taken up again when the same claims return (state.py's `set_aside`,
    `take_up`). The verdict fields come from the latest `VerdictRendered` for
    the identity, `decision`, `decided_by` and `human` from the latest of that
    verdict and a human decision; `evidence` and `evidence_counts` restart on
    a revoke, `open_failures` and `benchmark_attempts` do not.
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


class VerdictEntry(TypedDict):
    """One verdict of an artifact's history (fold.py's `_verdict`); the live read models keep each in
    `projection_verdicts` (verdict_history.py's `VerdictRecord`), not in the artifact's row."""

    position: int
    event_id: str
    decision: str
    rule: str
    recorded_at: str
    payload_sha256: str | None
    identity: str | None
    contract_version: int
    benchmark_attempts: int | None


class OutcomeRecord(TypedDict):
    """An imported `ExternalOutcome` (docs/import.md): shown by reports, never read by the gate."""

    workload: str
    artifact: str | None
    arch: str | None
    outcome: str | None  # one of ExternalOutcome's outcomes, or none recorded
    recorded_verdict: dict[str, Any] | None
    recorded_utc: str | None
    model_id: str | None
    family: str | None
    origin: dict[str, Any]
    position: int
    event_id: str
    recorded_at: str


class MonitorAlarm(TypedDict):
    """The `RegressionDetected` of a monitor (monitor_fold.py's `detected`)."""

    event_id: str
    position: int
    pairs: int
    recorded_at: str


class MonitorAcknowledgment(TypedDict):
    """A person's `RegressionAcknowledged` of a monitor's alarm."""

    person: str
    reason: str
    event_id: str
    position: int


class MonitorState(TypedDict):
    """One identity's monitor (monitor_fold.py; docs/monitor.md): its terms, the detector, its alarm.

    `detector` is registry/formats/monitor.py's `DetectorState.to_dict()`;
    `crossed_at` the pair at which it crossed 1/alpha (None while in
    control), with the log statistic and the count below the threshold there;
    `profiles` every device and software the counted pairs were timed on;
    `baseline_wait_share` the term fixed when the monitor started (None: not
    declared, nothing is left out); `left_out` the pairs not fed because the
    harness saw their baseline run wait for a CPU past it, `contended_batches`
    the batches with more such pairs than may be left out
    (registry/formats/monitor.py, `batch_signs`).
    """

    verdict_event_id: str
    threshold: float
    alpha: float
    reference: str
    baseline_wait_share: float | None
    contract_version: int
    started_position: int
    detector: dict[str, Any]
    left_out: int
    contended_batches: int
    crossed_at: int | None
    log_statistic_at_cross: float | None
    below_at_cross: int | None
    pairs_after_alarm: int
    profiles: list[dict[str, Any]]
    alarm: MonitorAlarm | None
    acknowledged: MonitorAcknowledgment | None
    last_position: int


class ArtifactState(IdentityScope):
    """One artifact: its current registration and identity, that identity's scope, and its stream's place.

    Registration facts (`describe`): `workload`, `kind`, `backend`, `op`,
    `entry`, `payload_sha256`, `bundle` from the latest `ArtifactRegistered`;
    `identity` is their digest. `registered_position` is where the current
    identity was registered; `last_position` and `stream_version` the last
    event of the stream folded and its version (the version the next append
    expects). `registered_payloads` lists every payload digest ever
    registered (the payload index's rows). `verdicts` is the whole verdict
    history: in a fold and in `Projections.artifact`, never in a stored row
    or `Projections.current_artifact`. `external` exists once an imported
    outcome names the artifact; `monitors` once a promoted identity has
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


class ContractVersion(TypedDict):
    """One declared version of a workload's contract, with its speed block (the loosening rule reads every
    version's speed terms: docs/gate.md, "The speed record")."""

    version: int
    hash: str
    position: int
    speed: dict[str, Any] | None


class WorkloadState(TypedDict):
    """A workload: its latest contract (fold.py's `_workload`) and every version it had."""

    workload: str
    contract_version: int
    contract_hash: str
    contract: dict[str, Any]  # the manifest (docs/workloads.md)
    versions: list[ContractVersion]
    last_position: int


class FrameSetState(TypedDict):
    """A frame set: its `FrameSetRegistered` payload, and where it was registered."""

    name: str
    seed: int
    frames: int
    height: int
    width: int
    channels: int
    dtype: str
    sha256: str
    source: str | None
    position: int


class OutcomesState(TypedDict):
    """Imported outcomes about a whole workload (no artifact named): the `projection_outcomes` row."""

    workload: str
    records: list[OutcomeRecord]
    last_position: int


class BenchSession(TypedDict):
    """One benchmark session of a speed record, as opened, and the pairs it has recorded."""

    artifact: str
    identity: str
    device: str
    timer: str
    arch: str | None
    opened_position: int
    pairs: int


class BenchStreamState(TypedDict):
    """One identity's `bench:` stream: the speed record it feeds (None for an artifact without a payload, which
    has none), its version (what the next append expects) and every batch key recorded (session:batch)."""

    identity: str
    record: str | None
    version: int
    batches: list[str]
    last_position: int


class RecordEntry(TypedDict):
    """One contribution to a speed record, in recorded order: a session's batch of pairs or a complete benchmark
    document, with its raw arms (the gate derives everything from them, registry/gate/record.py).

    A session's batch is stored whole; a document's entry is stored as a
    reference (source, position, event_id, artifact, identity, session) and
    its arms and names are attached from the log by position when a question
    reads the record (record_items.py), as evidence items are.
    """

    source: Literal["session", "document"]
    position: int
    event_id: str
    artifact: str
    identity: str | None
    session: str | None
    protocol: NotRequired[Literal["paired", "sequential"] | None]  # None: a stored item not shaped as a benchmark
    schedule: NotRequired[list[str] | None]
    baseline_s: NotRequired[list[float]]
    candidate_s: NotRequired[list[float]]
    timer: NotRequired[str]
    device: NotRequired[str]
    arch: NotRequired[str | None]


class SpeedRecordState(TypedDict):
    """The speed record of one payload within a workload (docs/gate.md, "The speed record"): every session
    batch and complete benchmark document of those bytes, under any artifact id or claim, in recorded order."""

    record: str
    workload: str
    payload_sha256: str
    sessions: dict[str, BenchSession]
    entries: list[RecordEntry]
    documents: int
    last_position: int
