"""The fold: events in position order -> RegistryState. No I/O.

Rules (docs/architecture.md, "Events" and "Decisions and lifecycle"; docs/gate.md, "Lifecycle"):
- An artifact's identity is the digest of everything its registration claims
  (`artifact_identity`: workload, kind, payload hash, backend, op, entry).
  Evidence, failures, verdicts and human decisions are scoped to the identity
  they name (events recorded before identities were: to their payload hash).
  An event for an identity set aside (a late result for a replaced
  registration) updates that identity's kept fields, never the current one's;
  a verdict still enters the artifact's verdict history, marked with its
  identity.
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
- An event the fold cannot place (evidence for an artifact never registered,
  a payload naming another stream's subject, an unknown type, positions out of
  order) raises ProjectionError naming its position: the state is never
  guessed.

An evidence entry references its event by position and holds no item: the
fold never decodes an evidence payload except a perceptual one that may close
an open failure (`_succeeded`). The questions that show items read them from
the log by position (items.py).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from registry.events.identity import artifact_identity
from registry.events.store import StoredEvent
from registry.formats.names import ARTIFACT_PREFIX, HOOK_PREFIX, frameset_stream, workload_stream

from . import monitor_fold

from .log import EVIDENCE_KIND_BY_TYPE, LogEvent
from .payload_index import payload_key
from .state import (
    ProjectionError, RegistryState, identity_changes, new_artifact, restart_evidence, scope_of, set_aside, take_up,
    tightest,
)

# Which evidence kind shows a failed stage has since succeeded. `load` (the
# entry could not be imported) is shown good only by the artifact running.
STAGE_EVIDENCE = {
    "load": "execution",
    "execution": "execution",
    "parity": "parity",
    "benchmark": "benchmark",
    "perceptual": "perceptual",
}


def apply(state: RegistryState, event: StoredEvent | LogEvent) -> RegistryState:
    """Fold one event into `state` (updated in place and returned)."""
    return fold(state, (event,))


def fold(state: RegistryState, events: Iterable[StoredEvent | LogEvent]) -> RegistryState:
    """Fold events, in position order, into `state` (updated in place and returned)."""
    handlers = HANDLERS
    for event in events:
        if type(event) is not LogEvent:
            event = LogEvent.from_stored(event)
        if event.position <= state.position:
            raise ProjectionError(
                f"event at position {event.position} arrives after position {state.position}: "
                "the log must be folded in order"
            )
        handler = handlers.get(event.type)
        if handler is None:
            raise ProjectionError(f"event at position {event.position}: no projection handles type {event.type!r}")
        try:
            handler(state, event)
        except (KeyError, TypeError, AttributeError) as exc:
            raise ProjectionError(
                f"event at position {event.position} ({event.type}) cannot be folded: malformed payload ({exc!r})"
            ) from None
        state.position = event.position
    return state


def _same_subject(event: LogEvent, named: str, expected: str) -> None:
    if named != expected:
        raise ProjectionError(
            f"event at position {event.position} ({event.type}) in stream {event.stream} names {named!r}"
        )


def _named_artifact(state: RegistryState, event: LogEvent) -> tuple[dict[str, Any], dict[str, Any]]:
    """The artifact whose stream holds `event`, and the payload, which must name that artifact."""
    artifact = _artifact(state, event)
    _same_subject(event, event.payload["artifact"], artifact["artifact"])
    return artifact, event.payload


def _artifact(state: RegistryState, event: LogEvent) -> dict[str, Any]:
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


def _registered(state: RegistryState, event: LogEvent) -> None:
    payload = event.payload
    artifact_id = payload["artifact"]
    _same_subject(event, ARTIFACT_PREFIX + artifact_id, event.stream)
    current = state.artifacts.get(artifact_id)
    if current is None:
        state.artifacts[artifact_id] = new_artifact(payload, event.position)
        return
    current["last_position"] = event.position
    current["stream_version"] += 1
    if artifact_identity(payload) != current["identity"]:
        changed = {"position": event.position, "previous_identity": current["identity"],
                   "changes": identity_changes(current, payload)}
        set_aside(current)
        changed["returned"] = take_up(current, payload, event.position)
        current["identity_changed"] = changed


def _scope(artifact: dict[str, Any], identity: str | None, payload_sha256: str | None) -> tuple[str, dict] | None:
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


def _evidence(state: RegistryState, event: LogEvent) -> None:
    artifact = _artifact(state, event)
    _same_subject(event, event.named_artifact(), artifact["artifact"])
    kind = EVIDENCE_KIND_BY_TYPE[event.type]
    if kind == "benchmark":
        _benchmark_document(state, artifact, event)
    scoped = _scope(artifact, event.identity, event.scope)
    if scoped is None:
        return
    fields = scoped[1]
    # The item (and when it was measured) is read from the log by position when a question shows it (items.py).
    fields["evidence"][kind] = {"event_id": event.event_id, "position": event.position}
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


def _failed(state: RegistryState, event: LogEvent) -> None:
    artifact, payload = _named_artifact(state, event)
    scoped = _scope(artifact, payload.get("identity"), payload["payload_sha256"])
    if scoped is None:
        return
    scoped[1]["open_failures"].append(
        {"event_id": event.event_id, "position": event.position, "stage": payload["stage"], "error": payload["error"]}
    )


def _verdict(state: RegistryState, event: LogEvent) -> None:
    artifact, payload = _named_artifact(state, event)
    verdict = payload["verdict"]
    artifact["verdicts"].append({
        "position": event.position, "event_id": event.event_id, "decision": verdict["decision"],
        "rule": verdict["rule"], "recorded_at": event.recorded_at,
        "payload_sha256": payload["payload_sha256"], "identity": payload.get("identity"),
        "contract_version": payload["contract_version"], "benchmark_attempts": payload.get("benchmark_attempts"),
    })
    scoped = _scope(artifact, payload.get("identity"), payload["payload_sha256"])
    if scoped is None:
        return
    margins = verdict["margins"]
    scoped[1].update(
        decision=verdict["decision"], decided_by="gate", tier=verdict["tier"], rule=verdict["rule"],
        reasons=verdict["reasons"], margins=margins, tightest_margin=tightest(margins),
        speedup=verdict["speedup"], speedup_ci=verdict["speedup_ci"], verdict=verdict,
        verdict_event_id=event.event_id, verdict_position=event.position,
        contract_version=payload["contract_version"], contract_hash=payload["contract_hash"],
    )


HUMAN_DECISION = {"approve": "promoted", "revoke": "held"}


def _human(state: RegistryState, event: LogEvent) -> None:
    artifact, payload = _named_artifact(state, event)
    scoped = _scope(artifact, payload.get("identity"), payload["payload_sha256"])
    if scoped is None:
        return
    fields = scoped[1]
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
        monitor_fold.revoked(artifact, scoped[0])


def _workload(state: RegistryState, event: LogEvent) -> None:
    payload = event.payload
    workload_id = payload["workload"]
    _same_subject(event, workload_stream(workload_id), event.stream)
    current = state.workloads.setdefault(workload_id, {"workload": workload_id, "versions": []})
    current.update(
        contract_version=payload["contract_version"], contract_hash=payload["contract_hash"],
        contract=payload["contract"], last_position=event.position,
    )
    current["versions"].append(
        {"version": payload["contract_version"], "hash": payload["contract_hash"], "position": event.position,
         "speed": payload["contract"].get("speed")}
    )


def _frameset(state: RegistryState, event: LogEvent) -> None:
    payload = event.payload
    _same_subject(event, frameset_stream(payload["name"]), event.stream)
    state.framesets[payload["name"]] = {**payload, "position": event.position}


OUTCOMES_PREFIX = "outcomes:"
# What an outcome record keeps in the projected state: all but the bulky summary, which history shows.
_OUTCOME_KEYS = ("workload", "artifact", "arch", "outcome", "recorded_verdict", "recorded_utc", "model_id", "family",
                 "origin")


def _external(state: RegistryState, event: LogEvent) -> None:
    """An imported record: kept beside the artifact (or the workload) it concerns, never as evidence."""
    payload = event.payload
    record = {key: payload.get(key) for key in _OUTCOME_KEYS}
    record.update(position=event.position, event_id=event.event_id, recorded_at=event.recorded_at)
    if payload.get("artifact") is not None:
        artifact, _ = _named_artifact(state, event)
        artifact.setdefault("external", []).append(record)
        return
    workload = payload["workload"]
    _same_subject(event, OUTCOMES_PREFIX + workload, event.stream)
    entry = state.outcomes.setdefault(workload, {"workload": workload, "records": []})
    entry["records"].append(record)
    entry["last_position"] = event.position


BENCH_PREFIX = "bench:"


def record_key(workload: str, payload_sha256: str) -> str:
    """The speed record's key: one record per payload within a workload (docs/gate.md, "The speed record").

    The payload part is the payload index's key for the value (the digest itself, else a digest of it), so a
    registered value that is not a digest (a log written by other means) still keys a row either backend stores.
    """
    return f"{workload}:{payload_key(payload_sha256)}"


def _speed_record(state: RegistryState, workload: str, payload_sha256: str, position: int) -> dict[str, Any]:
    """The record of these bytes in this workload: folded already, else its stored row, else a new one."""
    payload_sha256 = payload_key(payload_sha256)
    key = record_key(workload, payload_sha256)
    found = state.records.get(key)
    if found is None and state.load_record is not None:
        found = state.load_record(key)
    if found is None:
        found = {"record": key, "workload": workload, "payload_sha256": payload_sha256, "sessions": {},
                 "entries": [], "documents": 0, "last_position": position}
    state.records[key] = found
    found["last_position"] = position
    return found


def _bench_stream(state: RegistryState, event: LogEvent) -> dict[str, Any]:
    identity = event.payload["identity"]
    _same_subject(event, BENCH_PREFIX + identity, event.stream)
    stream = state.bench_streams.get(identity)
    if stream is None:
        if event.type != "BenchmarkSessionOpened":
            raise ProjectionError(f"event at position {event.position} ({event.type}) records pairs in "
                                  f"{event.stream}, where no session was opened")
        stream = state.bench_streams[identity] = {"identity": identity, "record": None, "version": 0,
                                                  "batches": [], "last_position": event.position}
    stream["version"] += 1
    stream["last_position"] = event.position
    return stream


def _bench_session(state: RegistryState, event: LogEvent) -> None:
    """A benchmark session opened: its identity's stream notes which speed record it feeds.

    An artifact without a payload has no speed record (and borrows none): its
    sessions are kept in its stream's row only.
    """
    payload = event.payload
    stream = _bench_stream(state, event)
    if payload["payload_sha256"] is None:
        return
    record = _speed_record(state, payload["workload"], payload["payload_sha256"], event.position)
    stream["record"] = record["record"]
    record["sessions"][payload["session"]] = {
        "artifact": payload["artifact"], "identity": payload["identity"], "device": payload["device"],
        "timer": payload["timer"], "arch": payload.get("arch"), "opened_position": event.position, "pairs": 0}


def _bench_pairs(state: RegistryState, event: LogEvent) -> None:
    """A batch of pairs: appended to its session's speed record, in recorded order."""
    payload = event.payload
    stream = _bench_stream(state, event)
    stream["batches"].append(f"{payload['session']}:{payload['batch']}")
    if stream["record"] is None:
        return
    workload, payload_sha256 = stream["record"].split(":", 1)
    record = _speed_record(state, workload, payload_sha256, event.position)
    session = record["sessions"][payload["session"]]
    session["pairs"] += len(payload["baseline_s"])
    record["entries"].append({
        "source": "session", "position": event.position, "event_id": event.event_id,
        "artifact": payload["artifact"], "identity": payload["identity"], "session": payload["session"],
        "protocol": "paired", "schedule": None, "baseline_s": payload["baseline_s"],
        "candidate_s": payload["candidate_s"], "timer": session["timer"], "device": session["device"],
        "arch": session["arch"]})


def _benchmark_document(state: RegistryState, artifact: dict[str, Any], event: LogEvent) -> None:
    """A complete benchmark item joins the speed record of the bytes it measured (none without a payload).

    The entry references its event, as an evidence entry does: the fold
    decodes no evidence payload, and a question that reads the record attaches
    the document's arms from the log by position (record_items.py).
    """
    if event.scope is None:
        return
    record = _speed_record(state, artifact["workload"], event.scope, event.position)
    record["documents"] += 1
    record["entries"].append({"source": "document", "position": event.position, "event_id": event.event_id,
                              "artifact": artifact["artifact"], "identity": event.identity, "session": None})


TOKEN_PREFIX = "token:"


def _token(state: RegistryState, event: LogEvent) -> None:
    """A token's issue or revocation: it must sit in its key's stream, and changes no artifact's read model.

    `registry serve` reads a token from that one short stream on every
    request (registry/app/tokens.py), so no read model is kept for tokens.
    """
    _same_subject(event, TOKEN_PREFIX + event.payload["key_id"], event.stream)


def _hook(state: RegistryState, event: LogEvent) -> None:
    """A webhook's addition, delivery attempt or removal: it must sit in its hook's stream, and changes no read
    model (its deliverer reads the hook's own stream, registry/app/hooks.py)."""
    _same_subject(event, HOOK_PREFIX + event.payload["hook_id"], event.stream)


Handler = Callable[[RegistryState, LogEvent], None]
HANDLERS: dict[str, Handler] = {
    "ArtifactRegistered": _registered,
    "EvaluationFailed": _failed,
    "VerdictRendered": _verdict,
    "HumanDecision": _human,
    "WorkloadDeclared": _workload,
    "FrameSetRegistered": _frameset,
    "ExternalOutcome": _external,
    "BenchmarkSessionOpened": _bench_session,
    "BenchmarkPairsRecorded": _bench_pairs,
    "TokenIssued": _token,
    "TokenRevoked": _token,
    "PairsRemeasured": lambda state, event: monitor_fold.remeasured(_artifact(state, event), event),
    "RegressionDetected": lambda state, event: monitor_fold.detected(_artifact(state, event), event),
    "RegressionAcknowledged": lambda state, event: monitor_fold.acknowledged(_artifact(state, event), event),
    "HookAdded": _hook,
    "HookRemoved": _hook,
    "HookDeliveryAttempted": _hook,
    **{name: _evidence for name in EVIDENCE_KIND_BY_TYPE},
}
