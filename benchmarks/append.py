"""Append throughput: this registry's store beside the `eventsourcing` library's recorder.

Both write the same payloads to a fresh SQLite file in WAL mode with the
driver's default synchronous setting, in the same run, one event per
transaction and then in batches, alternating in ABBA rounds so drift on a
shared machine falls on both alike. Ours also computes the hash chain, checks the
stream's expected version and passes the immutability triggers. Prints events/s
for each and the ratio ours/peer (machines are shared and noisy: the ratio is
the figure to read, not the absolute rates).

    .venv/bin/python benchmarks/append.py [--events N] [--batch B] [--rounds R]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from registry.events.database import make_engine, upgrade
from registry.events.store import EventStore, NewEvent

PAYLOAD = {
    "artifact": "wan-mln-v3",
    "payload_sha256": "ab" * 32,
    "run": None,
    "item": {"kind": "execution", "candidate_calls": 6143, "fallbacks": 0,
             "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"},
}


class Ours:
    def __init__(self, path: Path):
        self.engine = make_engine(f"sqlite:///{path}")
        upgrade(self.engine)
        self.store = EventStore(self.engine)
        self.event = NewEvent("ExecutionObserved", PAYLOAD)

    def append(self, stream: str, count: int) -> None:
        self.store.append(f"artifact:{stream}", [self.event] * count, actor="bench")


class PeerSQLite:
    def __init__(self, path: Path):
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

        self.recorder = SQLiteApplicationRecorder(SQLiteDatastore(str(path)))
        self.recorder.create_table()
        self.stored_event = StoredEvent
        self.state = json.dumps(PAYLOAD, sort_keys=True).encode()
        self.versions: dict[uuid.UUID, int] = {}

    def append(self, stream: str, count: int) -> None:
        originator = uuid.uuid5(uuid.NAMESPACE_URL, stream)
        batch = []
        for _ in range(count):
            self.versions[originator] = self.versions.get(originator, 0) + 1
            batch.append(self.stored_event(originator, self.versions[originator], "bench:Executed", self.state))
        self.recorder.insert_events(batch)


def rate(writer, events: int, batch: int, label: str) -> float:
    """Events per second for `events` events appended `batch` at a time over 100 streams."""
    start = time.perf_counter()
    for index in range(events // batch):
        writer.append(f"{label}-{batch}-{index % 100}", batch)
    return (events // batch) * batch / (time.perf_counter() - start)


def compare(ours, peer, events: int, batch: int, rounds: int) -> tuple[float, float, float]:
    """Alternate the two in ABBA rounds; return median rates and the median per-round ratio."""
    ours_rates, peer_rates, ratios = [], [], []
    for round_index in range(rounds):
        order = (ours, peer) if round_index % 2 == 0 else (peer, ours)
        measured = {id(writer): rate(writer, events, batch, f"r{round_index}") for writer in order}
        ours_rates.append(measured[id(ours)])
        peer_rates.append(measured[id(peer)])
        ratios.append(ours_rates[-1] / peer_rates[-1])
    return statistics.median(ours_rates), statistics.median(peer_rates), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours, peer = Ours(Path(tmp) / "ours.db"), PeerSQLite(Path(tmp) / "peer.db")
        print(f"SQLite, {args.rounds} ABBA rounds of {args.events} events; batches of {args.batch}")
        print(f"{'mode':<22}{'registry ev/s':>15}{'eventsourcing ev/s':>20}{'ratio':>8}")
        for label, batch in (("one event per commit", 1), (f"batched ({args.batch})", args.batch)):
            our_rate, peer_rate, ratio = compare(ours, peer, args.events, batch, args.rounds)
            print(f"{label:<22}{our_rate:>15,.0f}{peer_rate:>20,.0f}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
