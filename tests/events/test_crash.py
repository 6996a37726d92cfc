"""SIGKILL a writer in the middle of a batch, twenty times, on SQLite and on Postgres.

An append is one transaction (docs/architecture.md, "Events"): a batch is in the log
whole or not at all, whatever moment the writer dies at. Each batch carries
its id and each event its index and the batch's size (`source` =
"batch:index/size"), so a partial batch would show. Every kill lands inside
an append by construction, at the worst moment the writer controls: the
store's hook inside the append lock, positions assigned, commit not sent (on
SQLite the rows are inserted by then; on Postgres they travel with the
COMMIT, in one round trip). The writer waits there until it is killed; no
kill depends on timing. Even kills hit the very batch the writer resends
(killed twice in a row), odd kills the batch after it. Like a real worker,
each new writer resends the batch its predecessor was sending (same
idempotency key), so no batch is lost and none is recorded twice.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict

from registry.events.database import make_engine, upgrade
from registry.events.store import EventStore, NewEvent
from read_side import Reads
from registry.projections import rebuild, verify_projections

from limits import HANG_GUARD_S
from processes import FORKSERVER  # clean children, forked fast from a preloaded server
from store_helpers import SHA

KILLS = 20
BATCH = 200  # events per append


def batch_events(batch_id: int) -> tuple[str, list[NewEvent]]:
    name = f"crash{batch_id % 3}"
    return f"frameset:{name}", [
        NewEvent("FrameSetRegistered", {"name": name, "seed": index, "frames": 1, "height": 8, "width": 8,
                                        "channels": 3, "dtype": "uint8", "sha256": SHA,
                                        "source": f"{batch_id}:{index}/{BATCH}"})
        for index in range(BATCH)
    ]


class HaltBeforeCommit(EventStore):
    """Appends normally, except batch `halt_at`: just before its commit, the writer waits to be killed."""

    def __init__(self, engine, halt_at: int | None, report):
        super().__init__(engine)
        self.halt_at, self.report, self.batch_id = halt_at, report, None

    def _before_commit(self):
        if self.batch_id == self.halt_at:
            self.report.send(("halted", self.batch_id))
            threading.Event().wait()  # until the SIGKILL


def crash_writer(url: str, first_batch: int, halt_at: int, report) -> None:
    """Append batches first_batch, first_batch+1, ... until killed, reporting each start and commit."""
    store = HaltBeforeCommit(make_engine(url), halt_at, report)
    batch_id = first_batch
    while True:
        stream, events = batch_events(batch_id)
        store.batch_id = batch_id
        report.send(("start", batch_id))
        store.append(stream, events, idempotency_key=f"batch-{batch_id}", actor="crash-writer")
        report.send(("done", batch_id))
        batch_id += 1


def receive_until(pipe, process, wanted: tuple[str, int], messages: list) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while wanted not in messages:
        assert process.is_alive(), f"writer died on its own (exit {process.exitcode}) before {wanted}"
        assert time.monotonic() < deadline, f"writer hung: no {wanted} within {HANG_GUARD_S} s"
        if pipe.poll(0.05):
            messages.append(pipe.recv())


def drain(pipe) -> list:
    """Whatever a dead writer sent before it died."""
    found = []
    try:
        while pipe.poll():
            found.append(pipe.recv())
    except EOFError:
        pass
    pipe.close()
    return found


def check_new_batches(events, present: set[int], resent_from: int) -> None:
    """The events after the last check hold whole batches, each once and in order; no batch is missing.

    `present` (updated) holds the batches found by earlier checks; the log
    before them was checked already and the hash chain covers it since.
    """
    indices: dict[int, list[str]] = defaultdict(list)
    positions: dict[int, list[int]] = defaultdict(list)
    for event in events:
        batch, rest = event.payload["source"].split(":")
        indices[int(batch)].append(rest)
        positions[int(batch)].append(event.position)
    for batch, found in positions.items():
        assert batch not in present, f"batch {batch} was recorded twice"
        assert indices[batch] == [f"{i}/{BATCH}" for i in range(BATCH)], f"batch {batch} is partial or repeated"
        assert found == list(range(found[0], found[0] + BATCH)), f"batch {batch} is not contiguous"
    present.update(positions)
    assert set(range(resent_from)) <= present, "a batch committed before the kill is missing"
    assert present <= set(range(resent_from + 1)), "a batch appeared that no writer sent"


def test_sigkill_mid_batch_never_leaves_a_partial_batch(backend_url):
    engine = make_engine(backend_url)
    upgrade(engine)
    store = EventStore(engine)
    next_batch, checked = 0, 0
    present: set[int] = set()
    for kill in range(KILLS):
        halt_at = next_batch + kill % 2  # even kills: the resent batch itself; odd: the one after it
        parent_end, child_end = FORKSERVER.Pipe(duplex=False)
        writer = FORKSERVER.Process(target=crash_writer, args=(backend_url, next_batch, halt_at, child_end))
        writer.start()
        child_end.close()
        messages: list = []
        try:
            receive_until(parent_end, writer, ("halted", halt_at), messages)
        finally:
            writer.kill()
            writer.join(HANG_GUARD_S)
        assert writer.exitcode == -9
        messages += drain(parent_end)
        started = max(batch for what, batch in messages if what == "start")
        assert started == halt_at and ("done", halt_at) not in messages
        assert all(("done", batch) in messages for batch in range(next_batch, halt_at))
        check_new_batches(store.read_all(after_position=checked), present, resent_from=started)
        assert halt_at not in present, "a batch that never committed became visible"
        checked = store.head_position()
        report = store.verify()
        assert report.intact and report.count == checked == BATCH * len(present)
        assert verify_projections(store).ok  # the read models catch up across the crash and equal a replay
        next_batch = started  # the next writer resends the batch this one was sending

    # The last batch in flight, resent once more: recorded exactly once either way.
    stream, events = batch_events(next_batch)
    store.append(stream, events, idempotency_key=f"batch-{next_batch}", actor="crash-writer")
    store.append(stream, events, idempotency_key=f"batch-{next_batch}", actor="crash-writer")
    check_new_batches(store.read_all(after_position=checked), present, resent_from=next_batch + 1)
    assert store.verify().intact

    live = Reads(store).state()
    assert live.position == store.head_position()
    assert live.to_dict() == rebuild(store).to_dict()
    engine.dispose()
