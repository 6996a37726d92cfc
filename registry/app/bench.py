"""Benchmark sessions: paired timings appended in batches, decided as soon as the confident rule can.

A GPU worker opens a session for an artifact's current identity (an event,
before anything is measured), appends each batch of pairs as it is measured
(one event per batch, under an idempotency key), and may ask after any batch
whether the speed question is decided (docs/evidence-format.md, "Benchmark
sessions"). Every session of one identity, under any artifact id of its
workload, continues one record, the stream `bench:<identity>`: its pairs
count in recorded order, so neither a new session nor a new name starts
afresh, and no session can be dropped. The record is read with the rule of
registry/formats/sequential.py under the workload's current contract, which
must declare `speed.decision: confident`; `speed.max_pairs` ends it held.

Appends name the record's version they read, so two workers racing on one
record cannot both pass a check the other invalidated: the later one is
refused and may simply retry.
"""
from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from registry.formats.errors import UserError
from registry.formats.names import check_name
from registry.formats.sequential import SequentialResult, decide_stream, running_bounds

from .context import Registry

# The event models (pydantic), the gate and the app's write paths load only
# where they are used: `show` and `report` read records without them
# (tests/test_cli_startup.py).

BENCH_PREFIX = "bench:"


def record_stream(identity: str) -> str:
    return BENCH_PREFIX + identity


@dataclass(frozen=True)
class Session:
    session: str
    artifact: str
    opened_position: int
    pairs: int


@dataclass(frozen=True)
class BenchRecord:
    """An identity's benchmark record as of its last event, and the rule's reading of it."""

    identity: str
    workload: str
    gate: float
    max_pairs: int
    sessions: list[Session]
    ratios: list[float]
    batch_ids: list[str]
    result: SequentialResult
    version: int
    bounds: list[tuple[float | None, float | None]] = field(default_factory=list)

    @property
    def closed(self) -> bool:
        """Decided, or at max_pairs: no batch may be added."""
        return self.result.decision != "held" or len(self.ratios) >= self.max_pairs

    @property
    def pairs_saved(self) -> int:
        """Pairs the record did not need of its max_pairs budget (0 while undecided)."""
        return self.max_pairs - len(self.ratios) if self.result.decision != "held" else 0

    def to_dict(self) -> dict[str, Any]:
        result = self.result
        return {
            "identity": self.identity, "workload": self.workload, "gate": self.gate, "alpha": result.alpha,
            "max_pairs": self.max_pairs, "pairs": len(self.ratios), "decision": result.decision,
            "decided_at": result.decided_at, "lower": result.lower, "upper": result.upper, "stop": _stop(self),
            "pairs_saved": self.pairs_saved, "closed": self.closed,
            "sessions": [{"session": s.session, "artifact": s.artifact, "pairs": s.pairs,
                          "opened_position": s.opened_position} for s in self.sessions],
        }


def _stop(record: BenchRecord) -> str:
    if record.result.decision != "held":
        return "decided"
    return "max_pairs" if len(record.ratios) >= record.max_pairs else "measuring"


def read_record(registry: Registry, artifact: str) -> BenchRecord:
    """The benchmark record of the artifact's current identity, decided under its workload's contract."""
    from .evidence import capture_subject

    subject = capture_subject(registry, artifact)
    workload = subject.registration["workload"]
    return _read(registry, subject.identity, workload, _confident_speed(registry, workload))


def open_session(registry: Registry, artifact: str, device: str, timer: str) -> tuple[str, BenchRecord]:
    """Open a session for the artifact's current identity; refused when its record is already closed."""
    from registry.events.store import NewEvent
    from registry.events.types import BenchmarkSessionOpened

    from .evidence import capture_subject

    subject = capture_subject(registry, artifact)
    workload = subject.registration["workload"]
    speed = _confident_speed(registry, workload)
    for value, what in ((device, "device"), (timer, "timer")):
        if not isinstance(value, str) or not value.strip() or len(value) > 200:
            raise UserError(f"{what}: expected 1 to 200 characters naming the {what}")
    record = _read(registry, subject.identity, workload, speed)
    if record.closed:
        raise UserError(f"the benchmark record of {artifact} is closed ({_closed_text(record)}); no session opened")
    session = f"bs-{uuid.uuid4().hex[:16]}"
    payload = BenchmarkSessionOpened(session=session, artifact=artifact, identity=subject.identity,
                                     payload_sha256=subject.payload_sha256, workload=workload, device=device,
                                     timer=timer)
    registry.store.append(record_stream(subject.identity), [NewEvent(payload.type, payload)],
                          expected_version=record.version, actor=registry.actor)
    return session, _read(registry, subject.identity, workload, speed)


def record_pairs(registry: Registry, artifact: str, session: str, baseline: list[float], candidate: list[float],
                 batch: str) -> tuple[bool, BenchRecord]:
    """Append one batch of pairs to an open session of the artifact's current identity.

    Returns (appended, record). A batch key already recorded with the same
    pairs appends nothing (appended False); with other pairs it is refused.
    Refused, nothing written: an unknown session or one of another identity,
    a closed record, a time that is not a positive finite number, arms of
    unequal length, or a batch that would pass max_pairs.
    """
    from registry.events.store import NewEvent
    from registry.events.types import BenchmarkPairsRecorded

    from .evidence import capture_subject

    check_name(batch, "batch key")
    check_name(session, "session")
    _check_times(baseline, candidate)
    subject = capture_subject(registry, artifact)
    workload = subject.registration["workload"]
    speed = _confident_speed(registry, workload)
    record = _read(registry, subject.identity, workload, speed)
    key = f"bench:{subject.identity}:{session}:{batch}"
    if session not in {s.session for s in record.sessions}:
        raise UserError(f"session {session} is not open for the current identity of {artifact} "
                         "(unknown, or opened for another identity); nothing recorded")
    payload = BenchmarkPairsRecorded(session=session, artifact=artifact, identity=subject.identity, batch=batch,
                                     baseline_s=[float(t) for t in baseline], candidate_s=[float(t) for t in candidate])
    if f"{session}:{batch}" in record.batch_ids:  # a retry: the store appends it once, or refuses other pairs
        head = registry.store.head_position()
        positions = registry.store.append(record_stream(subject.identity), [NewEvent(payload.type, payload)],
                                          idempotency_key=key, actor=registry.actor)
        return positions[0] > head, record
    if record.closed:
        raise UserError(f"the benchmark record of {artifact} is closed ({_closed_text(record)}); nothing recorded")
    if len(record.ratios) + len(baseline) > record.max_pairs:
        raise UserError(f"{len(baseline)} pairs would take the record of {artifact} past speed.max_pairs "
                         f"{record.max_pairs} ({len(record.ratios)} recorded); nothing recorded")
    registry.store.append(record_stream(subject.identity), [NewEvent(payload.type, payload)],
                          expected_version=record.version, idempotency_key=key, actor=registry.actor)
    return True, _read(registry, subject.identity, workload, speed)


# Pairs timed between two questions to the registry: one BC and one CB, so every batch is interleaved ABBA.
BATCH_PAIRS = 2


def next_batch_size(closed: bool, room: int, limit: int | None, measured: int) -> int:
    """Pairs to time before asking again: none once the record is closed, else BATCH_PAIRS within what is
    left of the record's max_pairs (`room`) and of this session's `limit` (`measured` already timed)."""
    if closed:
        return 0
    if limit is not None:
        room = min(room, limit - measured)
    return max(0, min(BATCH_PAIRS, room))


class BatchedSession:
    """A benchmark session measured batch by batch until the record closes (decided, or at max_pairs).

    The session is opened on construction, before anything is timed. The
    caller times `next_size()` pairs (0: stop), hands them to `add`, and asks
    again: the record is read after every batch, so measuring stops at the
    first batch after which the confident rule decides. `limit`, when given,
    caps the pairs this session measures (the record's max_pairs caps all
    sessions of the identity together).
    """

    def __init__(self, registry: Registry, artifact: str, *, device: str, timer: str, limit: int | None = None):
        self.registry, self.artifact, self.limit = registry, artifact, limit
        self.session, self.record = open_session(registry, artifact, device=device, timer=timer)
        self.pairs = 0
        self.batches = 0

    def next_size(self) -> int:
        return next_batch_size(self.record.closed, self.record.max_pairs - len(self.record.ratios), self.limit,
                               self.pairs)

    def add(self, baseline: list[float], candidate: list[float]) -> None:
        self.pairs += len(baseline)
        self.batches += 1
        _, self.record = record_pairs(self.registry, self.artifact, self.session, baseline, candidate,
                                      batch=f"pairs-{self.pairs}")

    @property
    def stop(self) -> str:
        """Why measuring stopped: decided, max_pairs (the record ends held), or limit (the record stays open)."""
        return _stop(self.record) if self.record.closed else "limit"

    def to_dict(self) -> dict[str, Any]:
        return _measured(self.record, self.session, self.pairs, self.batches, self.stop)


def closed_record_summary(record: BenchRecord) -> dict[str, Any]:
    """What a caller that found the record already closed measured: nothing (no session opened)."""
    return _measured(record, None, 0, 0, _stop(record))


def _measured(record: BenchRecord, session: str | None, pairs: int, batches: int, stop: str) -> dict[str, Any]:
    return {"session": session, "pairs": pairs, "batches": batches, "stop": stop,
            "decision": record.result.decision, "record_pairs": len(record.ratios),
            "max_pairs": record.max_pairs, "pairs_saved": record.pairs_saved}


def _closed_text(record: BenchRecord) -> str:
    result = record.result
    if result.decision != "held":
        return f"{result.decision} after {result.decided_at} pairs"
    return f"held at speed.max_pairs {record.max_pairs}"


def _check_times(baseline: list[float], candidate: list[float]) -> None:
    if not baseline or len(baseline) != len(candidate):
        raise UserError(f"a batch needs as many candidate as baseline times, at least one each "
                         f"(got {len(baseline)} and {len(candidate)}); nothing recorded")
    for arm, times in (("baseline", baseline), ("candidate", candidate)):
        for i, value in enumerate(times):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise UserError(f"{arm}[{i}]: {value!r} is not a positive finite time in seconds; nothing recorded")
    for i, (b, c) in enumerate(zip(baseline, candidate)):
        ratio = b / c
        if not math.isfinite(ratio) or ratio <= 0:
            raise UserError(f"pair {i}: baseline {b!r} / candidate {c!r} is not a finite positive ratio; "
                             "nothing recorded")


def _confident_speed(registry: Registry, workload: str):
    from .workloads import current_contract

    speed = current_contract(registry, workload).contract.speed
    if speed is None:
        raise UserError(f"workload {workload} declares no speed block: there is no gate to benchmark against")
    if speed.decision != "confident":
        raise UserError(f"workload {workload} declares speed.decision {speed.decision}: benchmark sessions are "
                         "read by the confident rule only")
    return speed


def record_summary(registry: Registry, state: dict[str, Any], contract: dict[str, Any],
                   up_to_position: int | None = None) -> dict | None:
    """What `show` and `report` print of an artifact's benchmark record (as of a position); None without one.

    Read under `contract`, the workload's stored contract as of the same
    position; a record under a contract that does not declare the confident
    rule is shown with its pairs and sessions only (no decision is read from it).
    """
    from registry.contracts import Contract

    stream = record_stream(state["identity"])
    if not registry.store.read_stream(stream, up_to_position=up_to_position):
        return None
    speed = Contract.from_stored(contract).speed
    readable = speed is not None and speed.decision == "confident"
    record = _read(registry, state["identity"], state["workload"], speed if readable else None, up_to_position)
    summary = record.to_dict()
    if not readable:
        return {"decision": None, "stop": f"speed.decision is {speed.decision if speed else 'undeclared'}",
                "pairs": summary["pairs"], "sessions": summary["sessions"]}
    summary["running_bounds"] = [list(bound) for bound in record.bounds]
    return summary


def _read(registry: Registry, identity: str, workload: str, speed, up_to_position: int | None = None) -> BenchRecord:
    events = registry.store.read_stream(record_stream(identity), up_to_position=up_to_position)
    sessions: dict[str, dict[str, Any]] = {}
    ratios: list[float] = []
    batch_ids: list[str] = []
    for event in events:
        payload = event.payload
        if event.type == "BenchmarkSessionOpened":
            sessions[payload["session"]] = {"artifact": payload["artifact"], "position": event.position, "pairs": 0}
        elif event.type == "BenchmarkPairsRecorded":
            sessions[payload["session"]]["pairs"] += len(payload["baseline_s"])
            batch_ids.append(f"{payload['session']}:{payload['batch']}")
            ratios.extend(b / c for b, c in zip(payload["baseline_s"], payload["candidate_s"]))
    if speed is None:  # not read by any rule: the sessions and pairs only
        result = SequentialResult("held", len(ratios), None, None, None, 0.0, "not read")
        return BenchRecord(identity=identity, workload=workload, gate=0.0, max_pairs=len(ratios),
                           sessions=[Session(name, s["artifact"], s["position"], s["pairs"])
                                     for name, s in sessions.items()],
                           ratios=ratios, batch_ids=batch_ids, result=result,
                           version=events[-1].version if events else 0)
    result = decide_stream(ratios, speed.gate, speed.alpha, speed.max_pairs)
    return BenchRecord(
        identity=identity, workload=workload, gate=speed.gate, max_pairs=speed.max_pairs,
        sessions=[Session(name, s["artifact"], s["position"], s["pairs"]) for name, s in sessions.items()],
        ratios=ratios, batch_ids=batch_ids, result=result, version=events[-1].version if events else 0,
        bounds=running_bounds(ratios[: result.pairs], speed.alpha),
    )


def pair_record(registry: Registry, identity: str):
    """The gate's view of an identity's sessions: every pair in recorded order; None when it has no session."""
    from registry.gate.model import PairRecord

    sources: dict[str, str] = {}
    used: list[str] = []
    ratios: list[float] = []
    event_ids: list[str] = []
    for event in registry.store.read_stream(record_stream(identity)):
        payload = event.payload
        if event.type == "BenchmarkSessionOpened":
            sources[payload["session"]] = f"{payload['timer']} {payload['device']}"
        elif event.type == "BenchmarkPairsRecorded":
            if sources[payload["session"]] not in used:
                used.append(sources[payload["session"]])
            ratios.extend(b / c for b, c in zip(payload["baseline_s"], payload["candidate_s"]))
            event_ids.append(event.event_id)
    if not sources:
        return None
    return PairRecord(event_ids=event_ids, ratios=ratios, sources=used, sessions=len(sources))
