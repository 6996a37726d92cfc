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

import logging
import math
import os
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from registry.formats.errors import UserError
from registry.formats.evidence.schemas import TIMERS
from registry.formats.fields import ARCH
from registry.formats.names import bench_stream, check_name
from registry.formats.sequential import SequentialResult
from registry.formats.text import check_line, text_arguments

from .context import Registry
from .record_summary import READINGS, SHOWS, in_opened_order, stop_reason

if TYPE_CHECKING:
    from registry.projections.view import View

LOG = logging.getLogger("registry.app")

# The event models (pydantic), the gate and the app's write paths load only
# where they are used: `show` and `report` read records without them
# (tests/cli/test_cli_startup.py).

@dataclass(frozen=True)
class OpenedSession:
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
    sessions: list[OpenedSession]
    pairs: int  # read by the rule's stream (pairs set aside are not)
    batch_ids: list[str]
    result: SequentialResult
    version: int
    bounds: list[tuple[float | None, float | None]] = field(default_factory=list)
    speedup: float | None = None  # over every pair read up to the batch or document that decided (gate/record.py)
    speedup_pairs: int | None = None
    set_aside: int = 0  # pairs timed by an interpreter or emulator: recorded, never read
    runs_per_arm: int | None = None  # the contract's size of a complete document; a session is not held to it

    @property
    def closed(self) -> bool:
        """Decided, or at max_pairs: no batch may be added."""
        return self.result.decision != "held" or self.pairs >= self.max_pairs

    @property
    def pairs_saved(self) -> int:
        """Pairs the record did not need of its max_pairs budget (0 while undecided)."""
        return self.max_pairs - self.pairs if self.result.decision != "held" else 0

    def to_dict(self) -> dict[str, Any]:
        result = self.result
        return {
            "identity": self.identity, "workload": self.workload, "gate": self.gate, "alpha": result.alpha,
            "max_pairs": self.max_pairs, "pairs": self.pairs, "speedup": self.speedup,
            "speedup_pairs": self.speedup_pairs, "set_aside_pairs": self.set_aside,
            "reading": READINGS[result.decision],
            "shows": SHOWS[result.decision], "level": 1.0 - 2.0 * result.alpha,
            "decided_at": result.decided_at, "lower": result.lower, "upper": result.upper, "stop": _stop(self),
            "pairs_saved": self.pairs_saved, "closed": self.closed,
            "sessions": [{"session": s.session, "artifact": s.artifact, "pairs": s.pairs,
                          "opened_position": s.opened_position} for s in self.sessions],
        }


def _stop(record: BenchRecord) -> str:
    return stop_reason(record.result, record.pairs, record.max_pairs)


def benchmark_record(registry: Registry, artifact: str) -> BenchRecord:
    """The speed record of the artifact's bytes, as its current identity reads it, under its workload's contract."""
    with registry.view() as view:
        return _record(_target(view, artifact))


@dataclass(frozen=True)
class _Target:
    """What a session's open or append reads first (`View.bench_subjects`), and the contract's confident rule."""

    subject: Any  # app/evidence.py Subject
    rule: Any  # (SpeedGate, terms): registry.projections.speed_reading `speed_terms`, the gate confident
    rows: Any  # registry.projections.subject BenchSubject

    @property
    def speed(self) -> Any:
        return self.rule[0]

    @property
    def workload(self) -> dict[str, Any]:
        return self.rows.workload

    @property
    def position(self) -> int:
        """The log position the rows were read at (or the event last folded into them)."""
        return self.rows.position


def _target(view: View, artifact: str, authorize: Callable[[str], None] | None = None) -> _Target:
    """The artifact's rows, read once; `authorize(workload)` runs before anything else is checked."""
    from .evidence import subject_of

    found, = view.bench_subjects([artifact]).values()
    subject = subject_of(artifact, found.artifact)
    if authorize is not None:
        authorize(subject.registration["workload"])
    return _benchmarked(subject, found)


def _benchmarked(subject, found, speeds: dict[tuple[str, int], Any] | None = None) -> _Target:
    """The target of a subject whose rows were read (`View.bench_subjects`): its workload must be declared with a
    confident speed block. `speeds` keeps the rule of each workload's contract version read."""
    workload = subject.registration["workload"]
    if found.workload is None:
        raise UserError(f"unknown workload {workload!r} (declare it with `registry workload declare`)")
    speeds = {} if speeds is None else speeds
    declared = (workload, len(found.workload["versions"]))  # a contract declared between two reads is another
    if declared not in speeds:
        speeds[declared] = _confident_rule(workload, found.workload)
    return _Target(subject, speeds[declared], found)


@text_arguments
def open_session(registry: Registry, artifact: str, device: str, timer: str,
                 arch: str | None = None, *, authorize: Callable[[str], None] | None = None) -> tuple[str, BenchRecord]:
    """Open a session for the artifact's current identity; refused when its record is already closed.

    `authorize(workload)` (the server's scope check) runs once the artifact's workload is known, before any other
    check.
    """
    from registry.events.store import NewEvent
    from registry.events.types import BenchmarkSessionOpened

    with registry.view() as view:
        target = _target(view, artifact, authorize)
        subject = target.subject
        for value, what in ((device, "device"), (timer, "timer")):
            check_line(value, what)
        if timer not in TIMERS:
            # The four an evidence document may name: a typo would otherwise sit in the log for ever, and a session
            # timed by an interpreter or emulator must say so to be held.
            raise UserError(f"timer: {timer!r} is not one of {', '.join(TIMERS)} (the timers evidence documents "
                            "name); no session opened")
        if arch is not None and (not isinstance(arch, str) or not ARCH.fullmatch(arch)):
            raise UserError(f"arch: {arch!r} is not a device architecture such as sm90, sm100 or cpu")
        if subject.payload_sha256 is None:
            raise UserError(f"{artifact} was registered without a payload, so it has no speed record of its own and "
                            "borrows none: register its bytes (`registry artifact register --payload`); "
                            "no session opened")
        record = _record(target)
        if record.closed:
            raise UserError(f"the benchmark record of {artifact} is closed ({_closed_text(record)}); "
                            "no session opened")
        session = f"bs-{uuid.uuid4().hex[:16]}"
        payload = BenchmarkSessionOpened(session=session, artifact=artifact, identity=subject.identity,
                                         payload_sha256=subject.payload_sha256,
                                         workload=target.workload["workload"], device=device, timer=timer, arch=arch)
        placed = view.append(bench_stream(subject.identity), [NewEvent(payload.type, payload)],
                             expected_version=record.version)
    return session, _record(_with_appended(target, payload, placed.positions[0]))


@dataclass(frozen=True)
class Pairs:
    """One batch of pairs to record, its arguments checked (`pairs`): an item of `record_pair_group`."""

    registry: Registry
    artifact: str
    session: str
    baseline: list[float]
    candidate: list[float]
    batch: str
    authorize: Callable[[str], None] | None = None


@text_arguments
def pairs(registry: Registry, artifact: str, session: str, baseline: list[float], candidate: list[float],
          batch: str, *, authorize: Callable[[str], None] | None = None) -> Pairs:
    """A batch for `record_pair_group`, its text arguments checked and its names normalised."""
    return Pairs(registry, artifact, session, baseline, candidate, batch, authorize)


def record_pairs(registry: Registry, artifact: str, session: str, baseline: list[float], candidate: list[float],
                 batch: str, *, authorize: Callable[[str], None] | None = None) -> tuple[bool, BenchRecord]:
    """Append one batch of pairs to an open session of the artifact's current identity (a group of one).

    Returns (appended, record): the record as read before the append with
    this batch folded in. A batch key already recorded with the same pairs
    appends nothing (appended False); with other pairs it is refused (the
    store's idempotency index decides, IdempotencyConflict). Refused, nothing
    written: an unknown session or one of another identity, a closed record,
    a time that is not a positive finite number, arms of unequal length, or a
    batch that would pass max_pairs. `authorize(workload)` (the server's
    scope check) runs once the artifact's workload is known, before any other
    check. One catch-up and one snapshot of four rows are read
    (`View.bench_subjects`), then one append.
    """
    outcome, = record_pair_group([pairs(registry, artifact, session, baseline, candidate, batch,
                                        authorize=authorize)])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


# What `record_pair_group` answers a batch: (appended, record) as `record_pairs` returns them, the exception
# `record_pairs` would raise, or None for a batch left to the next group.
BatchAnswer = tuple[bool, BenchRecord] | Exception | None


def record_pair_group(group: list[Pairs]) -> list[BatchAnswer]:
    """Record several batches, in order, as `record_pairs` records each: one catch-up, one snapshot of the
    artifacts' rows, one append transaction for all (group commit).

    Each batch is checked against its artifact's rows with the group's
    earlier batches of that artifact folded in, so a retry of a batch earlier
    in the group is answered as a retry, and one that would pass max_pairs
    after them is refused. A batch refused is that batch's answer only. A
    batch whose bench stream or speed record an earlier batch of another
    artifact in the group has touched (two artifacts of the same bytes share
    one record) is left to the next group (None), so that every check reads
    rows the group itself keeps current. The append names each stream's
    version as the group read it (`EventStore.append_group`): a batch whose
    stream moved meanwhile is refused (ConcurrencyError), with its stream's
    later batches of the group. The records answered are folded at positions
    following the rows read, in order; a record's reading depends only on
    the order of its pairs and on the contract versions declared before them,
    which the rows read hold, so it is the same at the positions the append
    gives. A new batch whose key another process's append reached first
    (after the rows were read) is answered as a retry, by the record read
    again. Batches of registries with different stores are recorded as one
    group a store, each read from and appended to its own.
    """
    from registry.events.errors import IdempotencyConflict
    from registry.events.store import Append, NewEvent, check_names
    from registry.events.types import BenchmarkPairsRecorded

    from .evidence import subject_of

    outcomes: list[BatchAnswer] = [None] * len(group)
    stores = list(dict.fromkeys(id(request.registry.store) for request in group))
    if len(stores) > 1:
        for store in stores:
            indices = [index for index, request in enumerate(group) if id(request.registry.store) == store]
            for index, outcome in zip(indices, record_pair_group([group[index] for index in indices])):
                outcomes[index] = outcome
        return outcomes
    read: dict[str, Any] = {}  # artifact -> its rows (`View.bench_subjects`), read once a group
    speeds: dict[tuple[str, int], Any] = {}  # (workload, contract versions) -> its speed block, parsed once a group
    current: dict[str, tuple[_Target, BenchRecord]] = {}  # artifact -> its target and record after the group's batches
    owner: dict[str, str] = {}  # a bench stream or speed record -> the artifact whose batch in the group touched it
    appends: list[Append] = []
    answers: list[tuple[int, bool, BenchRecord]] = []  # (index, new to the rows read, record answered)
    position = 0  # the last position folded into any answer
    try:
        with group[0].registry.view() as view:
            read.update(view.bench_subjects([request.artifact for request in group]))
    except Exception:  # noqa: BLE001 - a damaged row among them: each batch reads its own rows below, and hears its own refusal
        pass
    for index, request in enumerate(group):
        try:
            artifact = request.artifact
            if artifact not in read:
                with request.registry.view() as view:
                    read.update(view.bench_subjects([artifact]))
            found = read[artifact]
            subject = subject_of(artifact, found.artifact)
            if request.authorize is not None:
                request.authorize(subject.registration["workload"])
            if artifact not in current:
                target = _benchmarked(subject, found, speeds)
                current[artifact] = target, _record(target)
            target, record = current[artifact]
            check_name(request.batch, "batch key")
            check_name(request.session, "session")
            _check_times(request.baseline, request.candidate)
            stream = bench_stream(subject.identity)
            fed = [name for name in (stream, (target.rows.stream or {}).get("record")) if name is not None]
            if any(owner.get(name, artifact) != artifact for name in fed):
                continue
            appended, record = _checked_batch(request, target, record)
            key = f"bench:{subject.identity}:{request.session}:{request.batch}"
            # What the store would refuse (a key too long) is refused before the batch is folded in: the group's
            # later batches of its stream are checked against the record with it.
            check_names(stream, request.registry.actor, key)
            payload = BenchmarkPairsRecorded(session=request.session, artifact=artifact, identity=subject.identity,
                                             batch=request.batch, baseline_s=[float(t) for t in request.baseline],
                                             candidate_s=[float(t) for t in request.candidate])
            # A retry names no version: its key answers it, or it is refused alone (other pairs under the key, or a
            # first copy earlier in the group refused, with its stream's later batches).
            appends.append(Append(stream, [NewEvent(payload.type, payload)], request.registry.actor,
                                  record.version if appended else None, key))
            if appended:
                position = max(position, target.position) + 1
                target = _with_appended(target, payload, position)
                record = _record(target)
                current[artifact] = target, record
                owner.update(dict.fromkeys(fed, artifact))
            answers.append((index, appended, record))
        except Exception as exc:  # noqa: BLE001 - the batch's own answer: a refusal, or a defect reported for it alone
            outcomes[index] = exc
    try:
        placed = group[0].registry.store.append_group(appends) if appends else []
    except Exception as exc:  # noqa: BLE001 - the database failed: every batch that was to be appended hears it
        placed = [exc] * len(appends)
    for (index, new, record), outcome in zip(answers, placed):
        if isinstance(outcome, IdempotencyConflict):
            # Named by the batch key the caller gave, never the store's internal key for it.
            request = group[index]
            outcome = IdempotencyConflict(f"batch {request.batch!r} of session {request.session} is already recorded "
                                          "with other pairs; nothing appended (a batch key names one batch: give "
                                          "new pairs a new key)")
        if isinstance(outcome, Exception) or outcome.new or not new:
            outcomes[index] = outcome if isinstance(outcome, Exception) else (outcome.new, record)
            continue
        # A new batch that another process's append of the same key reached first is not appended again, and is a
        # retry: answered by the record as it stands, which the rows read (without that process's appends) are not.
        try:
            outcomes[index] = False, benchmark_record(group[index].registry, group[index].artifact)
        except Exception as exc:  # noqa: BLE001 - this batch's answer alone
            outcomes[index] = exc
    return outcomes


class PairWriter:
    """Group commit for the pair batches of one process (the server's requests).

    `submit` hands a batch over and returns at once; one writer thread takes
    every batch waiting at that moment, records them as one group
    (`record_pair_group`) and hands each batch's outcome to its `answer`
    (from the writer thread); a batch the group left over waits at the head
    of the next one. The writer thread starts with the first batch of each
    process and holds the process's one append connection for pair batches.
    A process forked from one whose writer had started starts its own, with
    none of the parent's batches (the parent answers those). Whatever a
    group raises, each of its batches is answered (`_each_answered`) and the
    writer goes on.
    """

    def __init__(self) -> None:
        self._started()
        os.register_at_fork(after_in_child=partial(_forked, weakref.ref(self)))

    def _started(self) -> None:
        """No batch waiting and no writer thread yet (a new writer, or one in a forked child: the parent's thread
        and the lock it may have held at the fork are not the child's)."""
        self._ready = threading.Condition()
        self._waiting: list[tuple[Pairs, Callable[[BatchAnswer], None]]] = []
        self._thread: threading.Thread | None = None

    def submit(self, batch: Pairs, answer: Callable[[BatchAnswer], None]) -> None:
        """Record `batch` in the next group; `answer` gets what `record_pair_group` answered it (never None)."""
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write, name="pair-writer", daemon=True)
                self._thread.start()
            self._waiting.append((batch, answer))
            self._ready.notify()

    def _write(self) -> None:
        while True:
            with self._ready:
                while not self._waiting:
                    self._ready.wait()
                group, self._waiting = self._waiting, []
            outcomes = _each_answered([batch for batch, _ in group])
            left = [waiting for waiting, outcome in zip(group, outcomes) if outcome is None]
            if left:
                with self._ready:
                    self._waiting[:0] = left
            for (_, answer), outcome in zip(group, outcomes):
                if outcome is not None:
                    try:
                        answer(outcome)
                    except BaseException:  # one request's delivery failing must not leave the others unanswered
                        LOG.exception("a pair batch's answer could not be delivered")


def _each_answered(group: list[Pairs]) -> list[BatchAnswer]:
    """`record_pair_group`, whatever it raises: a group that raised is recorded again batch by batch, so that only
    the batch that raised hears it (a BaseException, such as one a batch's own callback raised, as a RuntimeError:
    the writer thread must outlive it, or this group and every later batch of the process would go unanswered)."""
    try:
        return record_pair_group(group)
    except BaseException as exc:  # noqa: BLE001 - answered batch by batch below, the writer thread goes on
        if len(group) > 1:
            return [_each_answered([batch])[0] for batch in group]
        return [exc if isinstance(exc, Exception) else
                RuntimeError(f"recording a pair batch stopped: {type(exc).__name__}: {exc}")]


def _forked(writer: Callable[[], PairWriter | None]) -> None:
    """In a child process just forked: the writer of its parent, if still alive, starts afresh there."""
    if (found := writer()) is not None:
        found._started()


def _checked_batch(request: Pairs, target: _Target, record: BenchRecord) -> tuple[bool, BenchRecord]:
    """Whether the batch is new to the record (else a retry, answered by the record as it stands), after
    `record_pairs`'s checks of the session, the record's state and max_pairs."""
    artifact, session = request.artifact, request.session
    if session not in {s.session for s in record.sessions if s.identity == target.subject.identity}:
        raise UserError(f"session {session} is not open for the current identity of {artifact} "
                        "(unknown, or opened for another identity); nothing recorded")
    if f"{session}:{request.batch}" in record.batch_ids:  # a retry: the store appends it once, or refuses other pairs
        return False, record
    if record.closed:
        raise UserError(f"the benchmark record of {artifact} is closed ({_closed_text(record)}); nothing recorded")
    if record.pairs + len(request.baseline) > record.max_pairs:
        raise UserError(f"{len(request.baseline)} pairs would take the record of {artifact} past speed.max_pairs "
                        f"{record.max_pairs} ({record.pairs} recorded); nothing recorded")
    return True, record


def _with_appended(target: _Target, payload, position: int) -> _Target:
    """The target with the event just appended at `position` folded into its rows, so the answer needs no second
    read: the record as read, and this event."""
    rows = target.rows.with_appended(position, payload.type, dict(payload.__dict__))
    return _Target(target.subject, target.rule, rows)


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
        from registry.gate.record import not_speed_evidence

        # Pairs an interpreter or emulator times are recorded but never read (docs/gate.md, "The speed record"):
        # timing more of them decides nothing, so such a session times one batch unless told otherwise.
        self.speed_evidence = not_speed_evidence(timer, device) is None
        if limit is None and not self.speed_evidence:
            limit = BATCH_PAIRS
        self.registry, self.artifact, self.limit = registry, artifact, limit
        self.session, self.record = open_session(registry, artifact, device=device, timer=timer, arch=arch)
        self.pairs = 0
        self.batches = 0

    @property
    def max_pairs(self) -> int:
        return self.record.max_pairs

    def next_size(self) -> int:
        return next_batch_size(self.record.closed, self.record.max_pairs - self.record.pairs, self.limit,
                               self.pairs)

    def add(self, baseline: list[float], candidate: list[float]) -> None:
        self.pairs += len(baseline)
        self.batches += 1
        _, self.record = record_pairs(self.registry, self.artifact, self.session, baseline, candidate,
                                      batch=f"pairs-{self.pairs}")

    @property
    def stop(self) -> str:
        """Why measuring stopped: decided, max_pairs (the record ends held), limit (the record stays open), or
        not_speed_evidence (an interpreter or emulator timed the pairs: the record never reads them)."""
        if self.record.closed:
            return _stop(self.record)
        return "limit" if self.speed_evidence else "not_speed_evidence"

    def to_dict(self) -> dict[str, Any]:
        return measured_summary(self.record.to_dict(), self.session, self.pairs, self.batches, self.stop)


def closed_record_summary(record: dict[str, Any]) -> dict[str, Any]:
    """What a caller that found the record (`BenchRecord.to_dict`) already closed measured: nothing (no session)."""
    return measured_summary(record, None, 0, 0, record["stop"])


def measured_summary(record: dict[str, Any], session: str | None, pairs: int, batches: int,
                     stop: str) -> dict[str, Any]:
    """What one session measured, beside the record (`BenchRecord.to_dict`, as the server also answers it)."""
    return {"session": session, "pairs": pairs, "batches": batches, "stop": stop, "reading": record["reading"],
            "record_pairs": record["pairs"], "max_pairs": record["max_pairs"], "pairs_saved": record["pairs_saved"]}


def _closed_text(record: BenchRecord) -> str:
    result = record.result
    if result.decision != "held":
        return f"{SHOWS[result.decision]} after {result.decided_at} pairs"
    return f"undecided at speed.max_pairs {record.max_pairs}"


def finite_number(value: Any) -> bool:
    """Whether `value` is a number (not a bool) that a float holds finitely: an int past float's range is not
    (a job's JSON or a caller of the app may carry one; math.isfinite would raise on it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_times(baseline: list[float], candidate: list[float]) -> None:
    if not baseline or len(baseline) != len(candidate):
        raise UserError(f"a batch needs as many candidate as baseline times, at least one each "
                         f"(got {len(baseline)} and {len(candidate)}); nothing recorded")
    for arm, times in (("baseline", baseline), ("candidate", candidate)):
        for i, value in enumerate(times):
            if not finite_number(value) or value <= 0:
                raise UserError(f"{arm}[{i}]: {value!r} is not a positive finite time in seconds; nothing recorded")
    for i, (b, c) in enumerate(zip(baseline, candidate)):
        ratio = b / c
        if not math.isfinite(ratio) or ratio <= 0:
            raise UserError(f"pair {i}: baseline {b!r} / candidate {c!r} is not a finite positive ratio; "
                             "nothing recorded")


def _confident_rule(workload: str, declared: dict[str, Any]):
    """The rule of the workload's current contract (its read-model row: `speed_terms`), which sessions need
    confident."""
    from registry.projections.speed_reading import speed_terms

    speed, terms = speed_terms(declared)  # type: ignore[arg-type]
    if speed is None:
        raise UserError(f"workload {workload} declares no speed block: there is no gate to benchmark against")
    if speed.decision != "confident":
        raise UserError(f"workload {workload} declares speed.decision {speed.decision}: benchmark sessions are "
                         "read by the confident rule only")
    return speed, terms


def _record(target: _Target) -> BenchRecord:
    """The benchmark record of an identity's bytes from the rows read (`_target`), under the contract's rule."""
    from registry.projections.speed_reading import read_speed_record

    speed, found, stream = target.speed, target.rows.record, target.rows.stream
    sessions = found["sessions"] if found is not None else {}
    reading = read_speed_record(found, target.workload, target.subject.payload_sha256, target.rule).reading
    assert reading is not None  # the rule is confident (`_confident_rule`)
    return BenchRecord(
        identity=target.subject.identity, workload=target.workload["workload"], gate=speed.gate,
        max_pairs=speed.max_pairs, runs_per_arm=speed.runs_per_arm,
        sessions=[OpenedSession(name, s["identity"], s["artifact"], s["opened_position"], s["pairs"])
                  for name, s in in_opened_order(sessions)],
        pairs=reading.pairs, batch_ids=stream["batches"] if stream is not None else [], result=reading.result,
        version=stream["version"] if stream is not None else 0, bounds=reading.bounds, speedup=reading.value,
        speedup_pairs=reading.figure and reading.figure.pairs, set_aside=sum(found.pairs for found in reading.set_aside),
    )
