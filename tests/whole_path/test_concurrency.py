"""Many writers and tailing readers on one log, on SQLite and on Postgres.

docs/architecture.md, "Events": appends are serialized by the log's writer lock, so
positions commit in order and a reader tailing by position never skips an
event that commits late. Here real processes race on shared streams with
optimistic concurrency (read the stream's version, append expecting it,
retry on ConcurrencyError) while two readers tail `read_all(after_position=)`;
then one append is held open inside the lock to show nothing after it can
become visible first. Idempotent retries are exercised from the CLI and from
two processes sending the same key at the same moment.
"""
from __future__ import annotations

import json
import queue
import random
import threading
import time
from collections import Counter, defaultdict

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from registry.cli.main import main
from registry.events import database
from registry.events.errors import ConcurrencyError, StoreError
from registry.events.store import APPEND_LOCK_KEY, EventStore, NewEvent

from limits import HANG_GUARD_S
from processes import FORKSERVER  # children start clean: no inherited connections or threads
from store_helpers import SHA, opened, opened_store

# The full size, 8 writers x 500 appends (4,000 commits, plus the conflicts'
# retries), ran once on the 2-core machine in 13.6 s on SQLite and 26.6 s on
# Postgres (figures in docs/postgres.md). The suite keeps 6 writers, three
# processes per core, so each is preempted mid-append, with 100 appends each
# (600 commits on 32 streams): the conflict and retry that must happen is
# forced by construction (FORCED_STREAM), not left to the volume of appends.
WRITERS = 6
APPENDS_PER_WRITER = 100
READERS = 2
STREAMS = 32
MAX_ATTEMPTS = 200  # optimistic retries per append before a writer gives up (a livelock would fail the test)
# Writers 0 and 1 open on this stream: writer 1 appends between writer 0's read of the version and
# writer 0's append, so at least one conflict and retry happens by construction, not by luck.
FORCED_STREAM = "s0"


def frameset(name: str, seed: int, source: str) -> NewEvent:
    """A FrameSetRegistered event for stream frameset:<name>; `source` identifies who appended it."""
    return NewEvent("FrameSetRegistered", {"name": name, "seed": seed, "frames": 1, "height": 8, "width": 8,
                                           "channels": 3, "dtype": "uint8", "sha256": SHA, "source": source})


# -- child processes (module level so that spawn can import them) -------------------

def race_writer(url: str, index: int, count: int, start, stale_read, overtaken, results) -> None:
    """Append `count` events with optimistic concurrency; report the retries.

    Writer 0's first read of FORCED_STREAM's version is made stale on purpose:
    it signals `stale_read`, and writer 1, which waited for that, appends to
    the same stream and signals `overtaken`; only then does writer 0 append.
    """
    store = opened_store(url)
    rng = random.Random(index)
    retries = 0
    start.wait()
    for j in range(count):
        forced = j == 0 and index in (0, 1)
        name = FORCED_STREAM if forced else f"s{rng.randrange(STREAMS)}"
        event = frameset(name, j, f"w{index}:{j}")
        if forced and index == 1 and not stale_read.wait(HANG_GUARD_S):
            raise RuntimeError("writer 0 never read the stream version")
        for _ in range(MAX_ATTEMPTS):
            version = store.stream_version(f"frameset:{name}")
            if forced and index == 0 and retries == 0:
                stale_read.set()
                if not overtaken.wait(HANG_GUARD_S):
                    raise RuntimeError("writer 1 never appended to the forced stream")
            try:
                store.append(f"frameset:{name}", [event], expected_version=version, actor=f"writer-{index}")
                break
            except ConcurrencyError:
                retries += 1
        else:
            raise RuntimeError(f"writer {index} gave up on append {j} after {MAX_ATTEMPTS} conflicts")
        if forced and index == 1:
            overtaken.set()
    results.put(("writer", index, retries))


def tail_reader(url: str, index: int, total: int, start, results) -> None:
    """Poll read_all(after_position=last) until `total` events are seen; report every event and any gap."""
    store = opened_store(url)
    seen: list[tuple[int, str]] = []
    gaps: list[tuple[int, int]] = []
    last = 0
    start.wait()
    deadline = time.monotonic() + HANG_GUARD_S
    while len(seen) < total and time.monotonic() < deadline:
        batch = store.read_all(after_position=last, limit=500)
        for event in batch:
            if event.position != last + 1:
                gaps.append((last, event.position))
            seen.append((event.position, event.event_id))
            last = event.position
        if not batch:
            time.sleep(0.005)
    results.put(("reader", index, (seen, gaps)))


def same_key_sender(url: str, keys: int, barrier, results) -> None:
    store = opened_store(url)
    got = []
    for k in range(keys):
        batch = [frameset("idem", seed, f"run-{k}") for seed in range(3)]
        barrier.wait()
        got.append(store.append("frameset:idem", batch, idempotency_key=f"run-{k}", actor="retrying-worker"))
    results.put(got)


def run_processes(processes, results, expected: int) -> list:
    """Start, collect `expected` results (before joining, so no child blocks on a full pipe), join."""
    for process in processes:
        process.start()
    collected = []
    deadline = time.monotonic() + HANG_GUARD_S
    try:
        while len(collected) < expected:
            try:
                collected.append(results.get(timeout=0.5))
            except queue.Empty:
                failed = {p.name: p.exitcode for p in processes if p.exitcode not in (None, 0)}
                assert not failed, f"children failed: {failed}"
                assert time.monotonic() < deadline, f"children hung: no report within {HANG_GUARD_S} s"
        for process in processes:
            process.join(timeout=max(1.0, deadline - time.monotonic()))
            assert process.exitcode == 0, f"{process.name} exited {process.exitcode}"
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
    return collected


# -- the race ---------------------------------------------------------------------

def test_writers_race_and_tailing_readers_see_every_event_once_in_order(migrated_backend_url):
    store = opened_store(migrated_backend_url)
    total = WRITERS * APPENDS_PER_WRITER
    start = FORKSERVER.Barrier(WRITERS + READERS)
    stale_read, overtaken = FORKSERVER.Event(), FORKSERVER.Event()
    results = FORKSERVER.Queue()
    processes = [FORKSERVER.Process(target=race_writer, args=(migrated_backend_url, i, APPENDS_PER_WRITER, start,
                                                              stale_read, overtaken, results))
                 for i in range(WRITERS)]
    processes += [FORKSERVER.Process(target=tail_reader, args=(migrated_backend_url, i, total, start, results))
                  for i in range(READERS)]
    collected = run_processes(processes, results, WRITERS + READERS)

    log = store.read_all()
    assert [e.position for e in log] == list(range(1, total + 1))
    sources = Counter(e.payload["source"] for e in log)
    assert sources == Counter(f"w{i}:{j}" for i in range(WRITERS) for j in range(APPENDS_PER_WRITER))
    versions = defaultdict(list)
    for event in log:
        versions[event.stream].append(event.version)
    assert all(found == list(range(1, len(found) + 1)) for found in versions.values())
    expected_tail = [(e.position, e.event_id) for e in log]
    for _, _, (seen, gaps) in (r for r in collected if r[0] == "reader"):
        assert gaps == []
        assert seen == expected_tail
    retries = {index: count for kind, index, count in collected if kind == "writer"}
    assert retries[0] >= 1, "writer 0 appended on a stale version without a conflict"
    report = store.verify()
    assert report.intact and report.count == total


# -- a late commit cannot be overtaken ---------------------------------------------

class PausedStore(EventStore):
    """An EventStore whose appends stop inside the lock, just before they commit."""

    def __init__(self, engine, held: threading.Event, release: threading.Event):
        super().__init__(engine)
        self.held, self.release = held, release

    def _before_commit(self):
        self.held.set()
        if not self.release.wait(HANG_GUARD_S):
            raise RuntimeError("never released")


def waiting_for_advisory_lock(url: str) -> int:
    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()[0]


def test_an_append_held_open_is_never_overtaken(migrated_backend_url):
    store = opened_store(migrated_backend_url)
    for seed in range(5):
        store.append("frameset:early", [frameset("early", seed, "early")], actor="t")
    held, release = threading.Event(), threading.Event()
    paused = PausedStore(store.engine, held, release)
    errors: list[BaseException] = []

    def append(target: EventStore, name: str, source: str, entered: threading.Event | None = None) -> None:
        try:
            if entered is not None:
                entered.set()
            target.append(f"frameset:{name}", [frameset(name, 0, source)], actor="t")
        except BaseException as exc:  # reported to the test below
            errors.append(exc)

    late = threading.Thread(target=append, args=(paused, "late", "late"))
    late.start()
    assert held.wait(HANG_GUARD_S), "the held append never reached its commit"
    entered = [threading.Event() for _ in range(4)]
    others = [threading.Thread(target=append, args=(store, f"other{i}", f"other{i}", entered[i])) for i in range(4)]
    for thread in others:
        thread.start()
    assert all(event.wait(HANG_GUARD_S) for event in entered)
    if store.dialect == "postgresql":
        # Postgres shows its lock queue: wait until every other append is queued behind the held one.
        deadline = time.monotonic() + HANG_GUARD_S
        while waiting_for_advisory_lock(migrated_backend_url) < len(others) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waiting_for_advisory_lock(migrated_backend_url) == len(others)
    # SQLite shows no lock queue: the others have entered append() and may or may not be waiting on
    # BEGIN IMMEDIATE yet; either way none can commit before the held append, which is what follows.
    # Position 6 is assigned (on SQLite inserted) but not committed; 7.. cannot even be assigned yet.
    for _ in range(20):
        assert store.read_all(after_position=5) == []
    assert all(thread.is_alive() for thread in others)

    seen: list[int] = []
    stop = threading.Event()

    def tail() -> None:
        last, deadline = 5, time.monotonic() + HANG_GUARD_S
        while (not stop.is_set() or last < 10) and time.monotonic() < deadline:
            for event in store.read_all(after_position=last):
                seen.append(event.position)
                last = event.position

    reader = threading.Thread(target=tail)
    reader.start()
    release.set()
    for thread in (late, *others):
        thread.join(HANG_GUARD_S)
    stop.set()
    reader.join(HANG_GUARD_S)
    assert errors == []
    assert seen == [6, 7, 8, 9, 10]
    assert store.read_all(after_position=5, limit=1)[0].payload["source"] == "late"
    assert store.verify().intact


def test_an_append_that_cannot_get_the_lock_is_refused_in_one_line(migrated_backend_url, monkeypatch):
    opened_store(migrated_backend_url).append("frameset:a", [frameset("a", 0, "a")], actor="t")
    monkeypatch.setattr(database, "PG_LOCK_TIMEOUT_MS", 200)
    monkeypatch.setattr(database, "SQLITE_BUSY_TIMEOUT_MS", 200)
    store = opened_store(migrated_backend_url)
    holder = store.engine.raw_connection()
    try:
        cursor = holder.cursor()
        if store.dialect == "postgresql":
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))
            expected = "canceling statement due to lock timeout"
        else:
            cursor.execute("BEGIN IMMEDIATE")
            expected = "database is locked"
        with pytest.raises(StoreError, match=f"append to frameset:a failed, nothing written: {expected}"):
            store.append("frameset:a", [frameset("a", 1, "b")], actor="t")
    finally:
        holder.rollback()
        holder.close()
    assert store.head_position() == 1
    assert store.append("frameset:a", [frameset("a", 1, "b")], actor="t") == [2]


# -- idempotent retries --------------------------------------------------------------

def test_a_resent_evidence_run_is_recorded_once(migrated_backend_url, tmp_path):
    runner = CliRunner()

    def cli(*args):
        return runner.invoke(main, ["--db", migrated_backend_url, "--actor", "worker", *args])

    manifest = tmp_path / "w.yaml"
    manifest.write_text("workload: w\n", encoding="utf-8")
    assert cli("workload", "declare", str(manifest)).exit_code == 0
    assert cli("artifact", "register", "k1", "--workload", "w", "--kind", "fused_kernel").exit_code == 0
    document = {"format": "registry.evidence/1", "artifact": "k1", "run": "run-7",
                "evidence": [{"kind": "execution", "candidate_calls": 3, "fallbacks": 0},
                             {"kind": "failure", "stage": "timing", "error": "worker timed out"}]}
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    first = cli("evidence", "import", str(path), "--json")
    assert first.exit_code == 0, first.output
    again = cli("evidence", "import", str(path), "--json")  # the worker timed out and resends
    assert again.exit_code == 0 and json.loads(again.output) == {**json.loads(first.output), "appended": False}
    store = opened_store(migrated_backend_url)
    head = store.head_position()
    assert json.loads(first.output)["positions"] == [head - 1, head]
    document["evidence"][0]["candidate_calls"] = 4
    path.write_text(json.dumps(document), encoding="utf-8")
    changed = cli("evidence", "import", str(path))
    assert changed.exit_code == 1 and changed.stderr.count("\n") == 1 and "run-7" in changed.stderr
    assert store.head_position() == head and store.verify().intact


def test_the_same_key_from_two_processes_at_once_appends_once(migrated_backend_url):
    store = opened_store(migrated_backend_url)
    keys, senders = 15, 2
    barrier = FORKSERVER.Barrier(senders)
    results = FORKSERVER.Queue()
    processes = [FORKSERVER.Process(target=same_key_sender, args=(migrated_backend_url, keys, barrier, results))
                 for _ in range(senders)]
    got = run_processes(processes, results, senders)
    assert got[0] == got[1]
    log = store.read_all()
    assert len(log) == keys * 3
    assert [p for positions in got[0] for p in positions] == [e.position for e in log]
    assert Counter(e.payload["source"] for e in log) == Counter({f"run-{k}": 3 for k in range(keys)})
    assert store.verify().intact


# -- readers of the read models while writers keep appending ----------------------------------

IMPORTERS = 6  # three per core: each catch-up is preempted by the others' appends
IMPORT_ROUNDS = 25
SHARED_ARTIFACTS = ("k0", "k1")  # every importer writes to and reads both, so their catch-ups collide


def importing_reader(url: str, index: int, rounds: int, start, results) -> None:
    """Import evidence, read the artifact back through the read models, promote now and then.

    A read that raises is recorded (the test requires none). A promote that
    keeps losing its race to imports is refused by design ("run promote
    again"), which is a correct answer, not a failed read.
    """
    from registry.app.decisions import promote
    from registry.app.evidence import capture_subject, record_evidence
    from registry.formats.evidence.items import parse_item
    from read_side import Reads

    registry = opened(url, actor=f"importer-{index}")
    item = parse_item({"kind": "execution", "candidate_calls": index + 1, "fallbacks": 0})
    failed_reads: list[str] = []
    reads = refused_promotes = 0
    start.wait()
    for round_ in range(rounds):
        artifact = SHARED_ARTIFACTS[(index + round_) % len(SHARED_ARTIFACTS)]
        record_evidence(registry, capture_subject(registry, artifact), [item])
        try:
            state = Reads(registry.store).artifact(artifact)
            assert state is not None and state["evidence_counts"]["execution"] >= 1
            reads += 1
        except Exception as exc:  # the point of the test: no read may fail
            failed_reads.append(f"{type(exc).__name__}: {exc}")
        if round_ % 5 == index % 5:
            try:
                promote(registry, artifact)
            except ValueError as exc:
                if "run promote again" not in str(exc):
                    raise
                refused_promotes += 1
    results.put((index, reads, failed_reads, refused_promotes))


def test_reads_through_the_read_models_never_fail_while_writers_append(migrated_backend_url):
    """6 processes import, read and promote on two shared artifacts at once: every read answers.

    Catch-up folds up to the head it saw when it started and serves that,
    however many events writers append meanwhile (docs/projections.md). Every
    verdict appended under that concurrency rests on exactly the stream it
    was decided on: its expected version came from the read model, so the
    event before it in its stream is the latest execution evidence it names.
    """
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract
    from registry.projections import verify_projections

    registry = opened(migrated_backend_url, actor="setup")
    declare_workload(registry, Contract.from_mapping({"workload": "w"}))
    for artifact in SHARED_ARTIFACTS:
        register_artifact(registry, artifact, workload="w", kind="fused_kernel")
    start = FORKSERVER.Barrier(IMPORTERS)
    results = FORKSERVER.Queue()
    processes = [FORKSERVER.Process(target=importing_reader,
                                    args=(migrated_backend_url, i, IMPORT_ROUNDS, start, results))
                 for i in range(IMPORTERS)]
    reports = run_processes(processes, results, IMPORTERS)
    assert [failed for _, _, failed, _ in reports] == [[]] * IMPORTERS
    assert sorted(reads for _, reads, _, _ in reports) == [IMPORT_ROUNDS] * IMPORTERS
    store = registry.store
    log = store.read_all()
    assert sum(e.type == "ExecutionObserved" for e in log) == IMPORTERS * IMPORT_ROUNDS
    for artifact in SHARED_ARTIFACTS:
        stream = store.read_stream(f"artifact:{artifact}")
        assert [e.version for e in stream] == list(range(1, len(stream) + 1))
        latest_execution = None
        for event in stream:
            if event.type == "ExecutionObserved":
                latest_execution = event.event_id
            elif event.type == "VerdictRendered":
                assert latest_execution in event.payload["verdict"]["evidence_ids"], event.position
    assert verify_projections(store).ok
    assert store.verify().intact


def test_a_catch_up_overtaken_every_time_still_answers(migrated_backend_url):
    """Each time this catch-up has folded, a writer appends, another reader catches up past it, and the
    writer appends again, so the checkpoint has moved and the log has grown again before it can commit.

    A catch-up that chased the moving head lost this race on every attempt and
    failed the read; one that fixed its head at the start sees that the
    checkpoint already passed it and answers at once.
    """
    from read_side import Reads
    from registry.projections import ReadModels

    store = opened_store(migrated_backend_url)
    store.append("frameset:a", [frameset("a", 0, "setup")], actor="t")
    other = Reads(opened_store(migrated_backend_url))
    appended = iter(range(1, 1000))

    class Overtaken(ReadModels):
        overtaken = 0

        def _advance(self, checkpoint, head, rebuild):
            store.append("frameset:a", [frameset("a", next(appended), "writer")], actor="t")
            other.catch_up()
            store.append("frameset:a", [frameset("a", next(appended), "writer")], actor="t")
            self.overtaken += 1
            return super()._advance(checkpoint, head, rebuild)

    reader = Overtaken(store)
    head_at_start = store.head_position()
    served = reader.catch_up()
    assert reader.overtaken == 1 and head_at_start < served < store.head_position()
    assert Reads(store).frameset("a") is not None  # the next read catches up to the new head


def test_a_catch_up_that_waited_its_turn_folds_what_was_appended_meanwhile(migrated_backend_url, monkeypatch):
    """A thread that found another of its process folding reads the head again once its turn comes: the event
    appended while it waited is folded in the same pass, not left for the next request to fold."""
    from read_side import Reads
    from registry.projections import catchup

    store = opened_store(migrated_backend_url)
    store.append("frameset:a", [frameset("a", 0, "setup")], actor="t")
    reader = Reads(store)
    turn = catchup._folding(store.engine)
    refused = threading.Event()

    class NotingTurn:
        """The process's folding lock, noting when a thread asks for it and finds it taken."""

        def acquire(self, blocking: bool = True) -> bool:
            got = turn.acquire(blocking)
            if not got:
                refused.set()
            return got

        def release(self) -> None:
            turn.release()

    monkeypatch.setattr(catchup, "_folding", lambda _engine: NotingTurn())
    served = []
    with turn:  # another thread of this process folding
        waiting = threading.Thread(target=lambda: served.append(reader.catch_up()))
        waiting.start()
        # It has read the head (1) and found the turn taken: only now can an append fall in its wait (waiting
        # for the head's read alone, the turn could come free before the thread asked for it, and it would
        # rightly fold only to the head it read).
        assert refused.wait(HANG_GUARD_S)
        later = store.append("frameset:a", [frameset("a", 1, "meanwhile")], actor="t")[0]
    waiting.join(HANG_GUARD_S)
    assert served == [later] == [store.head_position()]
