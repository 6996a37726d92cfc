"""Append throughput: this registry's store beside the `eventsourcing` library's recorders.

SQLite: both write the same payloads to a fresh SQLite file in WAL mode with
the driver's default synchronous setting. Postgres (with --postgres URL, a
server this benchmark may create two scratch databases on): ours against the
library's PostgresApplicationRecorder, which serializes inserts with a table
lock for the same reason ours takes an advisory lock (a reader tailing by
position must never skip a late commit). Each mode runs one event per
transaction and then in batches; on Postgres also with N writer processes at
once. The two alternate in ABBA rounds so drift on a shared machine falls on
both alike. Ours also validates each payload (given as a dict, so by its
model's compiled checks: registry/events/plain_payloads.py), writes its
canonical JSON, computes the hash chain and passes the immutability
triggers. A third SQLite row lets the peer encode each event's state with
the library's JSON transcoder, as an application does, where the first two
hand it bytes encoded once. Prints events/s for each and the median
per-round ratio ours/peer (machines are shared and noisy: the ratio is the
figure to read, not the absolute rates), and on Postgres what the append
lock itself costs per transaction, uncontended.

    .venv/bin/python benchmarks/append.py [--events N] [--batch B] [--rounds R]
        [--postgres URL [--writers W] [--no-sqlite]]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from registry.events.database import make_engine, resolve_url, upgrade
from registry.events.store import APPEND_LOCK_KEY, EventStore, NewEvent

PAYLOAD = {
    "artifact": "wan-mln-v3",
    "payload_sha256": "ab" * 32,
    "run": None,
    "item": {"kind": "execution", "candidate_calls": 6143, "fallbacks": 0,
             "requested_backend": "SAGE_ATTN", "effective_backend": "SAGE_ATTN"},
}
HEADER = f"{'mode':<36}{'registry ev/s':>15}{'eventsourcing ev/s':>20}{'ratio':>8}"


class Ours:
    def __init__(self, url: str, *, create: bool = True):
        self.engine = make_engine(url)
        if create:
            upgrade(self.engine)
        self.store = EventStore(self.engine)
        self.event = NewEvent("ExecutionObserved", PAYLOAD)

    def append(self, stream: str, count: int) -> None:
        self.store.append(f"artifact:{stream}", [self.event] * count, actor="bench")


class _Peer:
    """The library's recorder behind the same `append(stream, count)` as ours.

    With `encoding`, each event's state is encoded as it is appended, by the
    library's own JSON transcoder, as an application's mapper does; without
    it, every event carries the same bytes, encoded once.
    """

    def __init__(self, recorder, stored_event, *, encoding: bool = False):
        from eventsourcing.persistence import JSONTranscoder

        self.recorder = recorder
        self.stored_event = stored_event
        self.transcoder = JSONTranscoder() if encoding else None
        self.state = json.dumps(PAYLOAD, sort_keys=True).encode()
        self.versions: dict[uuid.UUID, int] = {}

    def append(self, stream: str, count: int) -> None:
        originator = uuid.uuid5(uuid.NAMESPACE_URL, stream)
        transcoder = self.transcoder
        batch = []
        for _ in range(count):
            self.versions[originator] = self.versions.get(originator, 0) + 1
            state = self.state if transcoder is None else transcoder.encode(PAYLOAD)
            batch.append(self.stored_event(originator, self.versions[originator], "bench:Executed", state))
        self.recorder.insert_events(batch)


def peer_sqlite(path: Path, *, encoding: bool = False) -> _Peer:
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    recorder = SQLiteApplicationRecorder(SQLiteDatastore(str(path)))
    recorder.create_table()
    return _Peer(recorder, StoredEvent, encoding=encoding)


def peer_postgres(url: str, *, create: bool = True) -> _Peer:
    from eventsourcing.persistence import StoredEvent
    from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    datastore = PostgresDatastore(parsed.database, parsed.host or "localhost", parsed.port or 5432,
                                  parsed.username or "", parsed.password or "")
    recorder = PostgresApplicationRecorder(datastore)
    if create:
        recorder.create_table()
    return _Peer(recorder, StoredEvent)


def rate(writer, events: int, batch: int, label: str) -> float:
    """Events per second for `events` events appended `batch` at a time over 100 streams."""
    start = time.perf_counter()
    for index in range(events // batch):
        writer.append(f"{label}-{batch}-{index % 100}", batch)
    return (events // batch) * batch / (time.perf_counter() - start)


def compare(measure, events: int, batch: int, rounds: int) -> tuple[float, float, float]:
    """Alternate ours and the peer in ABBA rounds; return median rates and the median per-round ratio.

    `measure(kind, events, batch, label)` returns one rate for kind "ours" or "peer".
    """
    ours_rates, peer_rates, ratios = [], [], []
    for round_index in range(rounds):
        order = ("ours", "peer") if round_index % 2 == 0 else ("peer", "ours")
        measured = {kind: measure(kind, events, batch, f"r{round_index}-{batch}") for kind in order}
        ours_rates.append(measured["ours"])
        peer_rates.append(measured["peer"])
        ratios.append(ours_rates[-1] / peer_rates[-1])
    return statistics.median(ours_rates), statistics.median(peer_rates), statistics.median(ratios)


def print_row(label: str, figures: tuple[float, float, float]) -> None:
    our_rate, peer_rate, ratio = figures
    print(f"{label:<36}{our_rate:>15,.0f}{peer_rate:>20,.0f}{ratio:>8.2f}", flush=True)


def bench_sqlite(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ours = Ours(f"sqlite:///{Path(tmp) / 'ours.db'}")
        peers = {"stored": peer_sqlite(Path(tmp) / "peer.db"),
                 "encoding": peer_sqlite(Path(tmp) / "peer-encoding.db", encoding=True)}
        print(f"SQLite, {args.rounds} ABBA rounds of {args.events} events; batches of {args.batch}")
        print(HEADER)
        for label, batch, peer in (("one event per commit", 1, "stored"),
                                   (f"batched ({args.batch})", args.batch, "stored"),
                                   (f"batched ({args.batch}), peer encodes", args.batch, "encoding")):
            writers = {"ours": ours, "peer": peers[peer]}
            print_row(label, compare(lambda kind, n, b, tag: rate(writers[kind], n, b, tag), args.events, batch,
                                     args.rounds))


# -- Postgres ---------------------------------------------------------------------------

def writer_process(urls: dict[str, str], index: int, commands, barrier, results) -> None:
    """One of N writers: on each command (kind, label, events, batch) append in step with the others."""
    writers = {"ours": Ours(urls["ours"], create=False), "peer": peer_postgres(urls["peer"], create=False)}
    for kind, label, events, batch in iter(commands.get, None):
        writer = writers[kind]
        barrier.wait()
        start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes
        for i in range(events // batch):
            writer.append(f"{label}-w{index}-{i % 100}", batch)
        results.put((start, time.monotonic(), (events // batch) * batch))


class WriterPool:
    """N writer processes, started once; `rate` runs one measurement across all of them."""

    def __init__(self, urls: dict[str, str], count: int):
        context = multiprocessing.get_context("spawn")
        self.barrier = context.Barrier(count)
        self.results = context.Queue()
        self.commands = [context.Queue() for _ in range(count)]
        self.processes = [context.Process(target=writer_process, args=(urls, i, q, self.barrier, self.results))
                          for i, q in enumerate(self.commands)]
        for process in self.processes:
            process.start()

    def rate(self, kind: str, events: int, batch: int, label: str) -> float:
        share = events // len(self.processes)
        for queue in self.commands:
            queue.put((kind, label, share, batch))
        spans = [self.results.get(timeout=600) for _ in self.processes]
        elapsed = max(end for _, end, _ in spans) - min(start for start, _, _ in spans)
        return sum(count for _, _, count in spans) / elapsed

    def close(self) -> None:
        for queue in self.commands:
            queue.put(None)
        for process in self.processes:
            process.join(30)


def lock_cost_us(url: str, transactions: int = 3000) -> tuple[float, float]:
    """Mean microseconds per uncontended transaction: (with the append lock, without it)."""
    import psycopg
    from sqlalchemy.engine import make_url

    variants = {"plain": ("SELECT 1", None), "lock": ("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK_KEY,))}
    timings: dict[str, list[float]] = {"plain": [], "lock": []}
    with psycopg.connect(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)) as conn:
        for round_index in range(4):  # ABBA
            for name in ("plain", "lock") if round_index % 2 == 0 else ("lock", "plain"):
                sql, params = variants[name]
                start = time.perf_counter()
                for _ in range(transactions):
                    conn.execute(sql, params)
                    conn.commit()
                timings[name].append((time.perf_counter() - start) / transactions * 1e6)
    return statistics.median(timings["lock"]), statistics.median(timings["plain"])


def bench_postgres(args) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    try:
        import psycopg_pool  # noqa: F401  - the library's Postgres recorder needs it
    except ImportError:
        print("Postgres: skipped, the eventsourcing Postgres recorder needs psycopg_pool, which is not installed")
        return
    admin = make_url(resolve_url(args.postgres))
    admin_dsn = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    names = {kind: f"bench_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("ours", "peer")}
    urls = {kind: admin.set(database=name).render_as_string(hide_password=False) for kind, name in names.items()}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("server_version", "fsync", "synchronous_commit")}
        for name in names.values():
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        writers = {"ours": Ours(urls["ours"]), "peer": peer_postgres(urls["peer"])}
        print(f"Postgres {settings['server_version']} (fsync {settings['fsync']}, synchronous_commit "
              f"{settings['synchronous_commit']}), {args.rounds} ABBA rounds of {args.events} events; "
              f"batches of {args.batch}")
        print(HEADER)
        for label, batch in (("one event per commit", 1), (f"batched ({args.batch})", args.batch)):
            print_row(label, compare(lambda kind, n, b, tag: rate(writers[kind], n, b, tag), args.events, batch,
                                     args.rounds))
        pool = WriterPool(urls, args.writers)
        try:
            for label, batch in (("one event per commit", 1), (f"batched ({args.batch})", args.batch)):
                print_row(f"{label}, {args.writers} writers",
                          compare(pool.rate, args.events, batch, args.rounds))
        finally:
            pool.close()
        with_lock, without = lock_cost_us(urls["ours"])
        print(f"append lock, uncontended: {with_lock:.0f} us per transaction with pg_advisory_xact_lock, "
              f"{without:.0f} us with SELECT 1 in its place ({with_lock - without:+.0f} us)")
        writers["ours"].engine.dispose()
        writers["peer"].recorder.datastore.close()
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--postgres", metavar="URL", help="Postgres server to benchmark on (scratch databases are "
                        "created there and dropped); without it the Postgres part is skipped.")
    parser.add_argument("--writers", type=int, default=8, help="Writer processes for the concurrent Postgres runs.")
    parser.add_argument("--no-sqlite", dest="sqlite", action="store_false", help="Skip the SQLite part.")
    args = parser.parse_args()
    if args.sqlite:
        bench_sqlite(args)
    if args.postgres:
        bench_postgres(args)
    else:
        print("Postgres: skipped (give --postgres URL of a server to benchmark on)")


if __name__ == "__main__":
    main()
