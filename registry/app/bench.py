"""Benchmark sessions: paired timings appended in batches, decided as soon as the confident rule can.

A GPU worker opens a session for an artifact's current identity (an event,
before anything is measured), appends each batch of pairs as it is measured
(one event per batch, under an idempotency key), and may ask after any batch
whether the speed question is decided (docs/evidence-format.md, "Benchmark
sessions"). The events live in the stream `bench:<identity>`; every session
and every complete benchmark document of the same bytes in the workload,
under any artifact id or claim, continues one speed record (the read model
`projection_speed_records`, docs/gate.md "The speed record"): its pairs count
in recorded order, so neither a new session, a new name, a new claim nor a
retried document starts afresh, and no session can be dropped. The record
is read by registry/gate/record.py under the workload's contract versions
(which must declare `speed.decision: confident` now); `speed.max_pairs` ends
it held. An artifact without a payload has no record and opens no session.

Appends name the identity stream's version they read, so two workers racing
on one stream cannot both pass a check the other invalidated: the later one
is refused and may simply retry. (Two identities of the same bytes append to
their own streams; each append still reads the shared record first.)
"""
from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from registry.formats.errors import UserError
from registry.formats.fields import ARCH
from registry.formats.names import check_name
from registry.formats.sequential import SequentialResult
from registry.formats.text import check_line, text_arguments

from .context import Registry
from .record_summary import SHOWS, in_opened_order, stop_reason

# The event models (pydantic), the gate and the app's write paths load only
# where they are used: `show` and `report` read records without them
# (tests/test_cli_startup.py).

BENCH_PREFIX = "bench:"


def record_stream(identity: str) -> str:
    return BENCH_PREFIX + identity


@dataclass(frozen=True)
class Session:
    session: str
    identity: str
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
            "shows": SHOWS[result.decision], "level": 1.0 - 2.0 * result.alpha,
            "decided_at": result.decided_at, "lower": result.lower, "upper": result.upper, "stop": _stop(self),
            "pairs_saved": self.pairs_saved, "closed": self.closed,
            "sessions": [{"session": s.session, "artifact": s.artifact, "pairs": s.pairs,
                          "opened_position": s.opened_position} for s in self.sessions],
        }


def _stop(record: BenchRecord) -> str:
    return stop_reason(record.result, len(record.ratios), record.max_pairs)


def read_record(registry: Registry, artifact: str) -> BenchRecord:
    """The speed record of the artifact's bytes, as its current identity reads it, under its workload's contract."""
    return _record(_target(registry, artifact))


@dataclass(frozen=True)
class _Target:
    """What a session's open or append reads first (`Projections.bench_subject`), and the contract's speed block."""

    subject: Any  # app/evidence.py Subject
    speed: Any  # registry.contracts SpeedGate, whose decision is confident
    rows: Any  # registry.projections.subject BenchSubject

    @property
    def workload(self) -> dict[str, Any]:
        return self.rows.workload

    @property
    def position(self) -> int:
        """The log position the rows were read at (or the event last folded into them)."""
        return self.rows.position


def _target(registry: Registry, artifact: str, authorize: Callable[[str], None] | None = None) -> _Target:
    """The artifact's rows, read once; `authorize(workload)` runs before anything else is checked."""
    from .evidence import subject_of

    found = registry.reads.bench_subject(artifact)
    subject = subject_of(artifact, found.artifact)
    workload = subject.registration["workload"]
    if authorize is not None:
        authorize(workload)
    if found.workload is None:
        raise UserError(f"unknown workload {workload!r} (declare it with `registry workload declare`)")
    return _Target(subject, _confident_speed(workload, found.workload), found)


@text_arguments
def open_session(registry: Registry, artifact: str, device: str, timer: str,
                 arch: str | None = None, *, authorize: Callable[[str], None] | None = None) -> tuple[str, BenchRecord]:
    """Open a session for the artifact's current identity; refused when its record is already closed.

    `authorize(workload)` (the server's scope check) runs once the artifact's workload is known, before any other
    check.
    """
    from registry.events.store import NewEvent
    from registry.events.types import BenchmarkSessionOpened

    target = _target(registry, artifact, authorize)
    subject = target.subject
    for value, what in ((device, "device"), (timer, "timer")):
        check_line(value, what)
    if arch is not None and (not isinstance(arch, str) or not ARCH.fullmatch(arch)):
        raise UserError(f"arch: {arch!r} is not a device architecture such as sm90, sm100 or cpu")
    if subject.payload_sha256 is None:
        raise UserError(f"{artifact} was registered without a payload, so it has no speed record of its own and "
                        "borrows none: register its bytes (`registry artifact register --payload`); no session opened")
    record = _record(target)
    if record.closed:
        raise UserError(f"the benchmark record of {artifact} is closed ({_closed_text(record)}); no session opened")
    session = f"bs-{uuid.uuid4().hex[:16]}"
    payload = BenchmarkSessionOpened(session=session, artifact=artifact, identity=subject.identity,
                                     payload_sha256=subject.payload_sha256, workload=target.workload["workload"],
                                     device=device, timer=timer, arch=arch)
    positions = registry.store.append(record_stream(subject.identity), [NewEvent(payload.type, payload)],
                                      expected_version=record.version, actor=registry.actor)
    return session, _record(_with_appended(target, payload, positions[0]))


@text_arguments
def record_pairs(registry: Registry, artifact: str, session: str, baseline: list[float], candidate: list[float],
                 batch: str, *, authorize: Callable[[str], None] | None = None) -> tuple[bool, BenchRecord]:
    """Append one batch of pairs to an open session of the artifact's current identity.

    Returns (appended, record): the record as read before the append with
    this batch folded in. A batch key already recorded with the same pairs
    appends nothing (appended False); with other pairs it is refused (the
    store's idempotency index decides, IdempotencyConflict). Refused, nothing
    written: an unknown session or one of another identity, a closed record,
    a time that is not a positive finite number, arms of unequal length, or a
    batch that would pass max_pairs. `authorize(workload)` (the server's
    scope check) runs once the artifact's workload is known, before any other
    check. One catch-up and one snapshot of four rows are read
    (`Projections.bench_subject`), then one append.
    """
    from registry.events.store import NewEvent
    from registry.events.types import BenchmarkPairsRecorded

    target = _target(registry, artifact, authorize)
    check_name(batch, "batch key")
    check_name(session, "session")
    _check_times(baseline, candidate)
    subject = target.subject
    record = _record(target)
    key = f"bench:{subject.identity}:{session}:{batch}"
    if session not in {s.session for s in record.sessions if s.identity == subject.identity}:
        raise UserError(f"session {session} is not open for the current identity of {artifact} "
                         "(unknown, or opened for another identity); nothing recorded")
    payload = BenchmarkPairsRecorded(session=session, artifact=artifact, identity=subject.identity, batch=batch,
                                     baseline_s=[float(t) for t in baseline], candidate_s=[float(t) for t in candidate])
    if f"{session}:{batch}" in record.batch_ids:  # a retry: the store appends it once, or refuses other pairs
        positions = registry.store.append(record_stream(subject.identity), [NewEvent(payload.type, payload)],
                                          idempotency_key=key, actor=registry.actor)
        return positions[0] > target.position, record
    if record.closed:
        raise UserError(f"the benchmark record of {artifact} is closed ({_closed_text(record)}); nothing recorded")
    if len(record.ratios) + len(baseline) > record.max_pairs:
        raise UserError(f"{len(baseline)} pairs would take the record of {artifact} past speed.max_pairs "
                         f"{record.max_pairs} ({len(record.ratios)} recorded); nothing recorded")
    positions = registry.store.append(record_stream(subject.identity), [NewEvent(payload.type, payload)],
                                      expected_version=record.version, idempotency_key=key, actor=registry.actor)
    return True, _record(_with_appended(target, payload, positions[0]))


def _with_appended(target: _Target, payload, position: int) -> _Target:
    """The target with the event just appended at `position` folded into its rows, so the answer needs no second
    read: the record as read, and this event."""
    rows = target.rows.with_appended(position, payload.type, dict(payload.__dict__))
    return _Target(target.subject, target.speed, rows)


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

    def __init__(self, registry: Registry, artifact: str, *, device: str, timer: str, limit: int | None = None,
                 arch: str | None = None):
        self.registry, self.artifact, self.limit = registry, artifact, limit
        self.session, self.record = open_session(registry, artifact, device=device, timer=timer, arch=arch)
        self.pairs = 0
        self.batches = 0

    @property
    def max_pairs(self) -> int:
        return self.record.max_pairs

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
        return measured_summary(self.record.to_dict(), self.session, self.pairs, self.batches, self.stop)


def closed_record_summary(record: dict[str, Any]) -> dict[str, Any]:
    """What a caller that found the record (`BenchRecord.to_dict`) already closed measured: nothing (no session)."""
    return measured_summary(record, None, 0, 0, record["stop"])


def measured_summary(record: dict[str, Any], session: str | None, pairs: int, batches: int,
                     stop: str) -> dict[str, Any]:
    """What one session measured, beside the record (`BenchRecord.to_dict`, as the server also answers it)."""
    return {"session": session, "pairs": pairs, "batches": batches, "stop": stop, "decision": record["decision"],
            "record_pairs": record["pairs"], "max_pairs": record["max_pairs"], "pairs_saved": record["pairs_saved"]}


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


def _confident_speed(workload: str, declared: dict[str, Any]):
    """The speed block of the workload's current contract (its read-model row), which sessions need confident."""
    from registry.contracts import Contract

    speed = Contract.from_stored(declared["contract"]).speed
    if speed is None:
        raise UserError(f"workload {workload} declares no speed block: there is no gate to benchmark against")
    if speed.decision != "confident":
        raise UserError(f"workload {workload} declares speed.decision {speed.decision}: benchmark sessions are "
                         "read by the confident rule only")
    return speed


def speed_record(registry: Registry, state: dict[str, Any]):
    """The gate's view of the speed record of an artifact's bytes (registry/gate/model.py `SpeedRecord`): one row
    of the read model, with the workload's contract versions; no stream is read."""
    from registry.gate import SpeedRecord

    payload = state["payload_sha256"]
    if payload is None:
        return SpeedRecord(None)
    projections = registry.reads
    found = projections.speed_record(state["workload"], payload)
    declared = projections.workload(state["workload"])
    versions = declared["versions"] if declared is not None else []
    if found is None:
        return SpeedRecord(payload, (), 0, versions)
    return SpeedRecord(payload, found["entries"], len(found["sessions"]), versions)


def _record(target: _Target) -> BenchRecord:
    """The benchmark record of an identity's bytes from the rows read (`_target`), under the contract's rule."""
    from registry.gate import SpeedRecord
    from registry.gate.record import read_record as read_speed_record

    speed, found, stream = target.speed, target.rows.record, target.rows.stream
    entries = found["entries"] if found is not None else []
    sessions = found["sessions"] if found is not None else {}
    reading = read_speed_record(SpeedRecord(target.subject.payload_sha256, entries, len(sessions),
                                            target.workload["versions"]), speed)
    return BenchRecord(
        identity=target.subject.identity, workload=target.workload["workload"], gate=speed.gate,
        max_pairs=speed.max_pairs,
        sessions=[Session(name, s["identity"], s["artifact"], s["opened_position"], s["pairs"])
                  for name, s in in_opened_order(sessions)],
        ratios=reading.ratios, batch_ids=stream["batches"] if stream is not None else [], result=reading.result,
        version=stream["version"] if stream is not None else 0, bounds=reading.bounds,
    )
