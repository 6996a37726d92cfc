"""Load on `registry serve`: loopback clients posting pair batches against Postgres, beside the CLI.

A real server process (`registry serve --port 0`) on a fresh database of the
Postgres server given; CLIENTS threads, each a worker with its own artifact of
one workload (its own benchmark record), its own session and its own
`ingest:` token, post BATCHES batches of two pairs each as fast as answers
come. A client whose answer does not come within its timeout sends the same
batch again under the same key, after an exponential backoff with full jitter
(registry/serve/client.py; the server appends it once). Afterwards the
log is read: every batch of every client must be there exactly once (none
lost, none duplicated). Prints batches/s over the run, the p50/p99 latency
of a batch (from first send to its answer, retries included), and the same
batches appended through `registry bench record`, one process per batch as a
shell loop runs it, for the ratio server/CLI, the server process's CPU
seconds a batch, and `registry verify` on the log afterwards. On a shared
machine the absolute rates move with the neighbours; the ratio comes from
one run. With --floor, the same clients then post the same batches to the
web stack alone (benchmarks/serve_floor.py: the same routes, models and
uvicorn settings, no registry behind them), for the ratio server/floor: the
most this stack answers on this machine beside these clients.

    .venv/bin/python benchmarks/serve.py --postgres URL [--clients 16] [--batches 40] [--cli-batches 24] [--workers 1] [--floor]

With --soak the server is driven for --minutes (default 30) by mixed ingest
and reads instead, with its resident memory (VmRSS from /proc) sampled every
--sample-seconds: each client registers an artifact over HTTP, opens a
session, posts ROTATE batches of two pairs (reading the artifact, its record
and a page of its history every READ_EVERY batches), posts an evidence
document under a run id, and moves on to a new artifact; beside them a
reader asks for the live view's data every LIVE_EVERY seconds and one live
event stream stays open throughout. Afterwards every batch and document is
looked up in the log (none lost, none recorded twice) and the chain walked.
It prints the memory of each minute and compares the mean of the last third
of the run with the first third (the goal: within 5%). Without --postgres it
runs on a fresh SQLite file.

    .venv/bin/python benchmarks/serve.py --soak [--postgres URL] [--minutes 30] [--clients 8] [--samples rss.csv]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psycopg
from sqlalchemy.engine import make_url

from registry.app import open_registry
from registry.app.tokens import issue_token
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract
from registry.serve.client import RegistryClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # the tests' helpers
from serve_helpers import ServerProcess  # noqa: E402  (the tests' real-process harness)

GATE = 1.2
# The ratio of every pair is the gate itself, so no record is ever decided: every batch is taken.
MANIFEST = f"workload: wan-load\nspeed: {{min_speedup: {GATE}, runs_per_arm: 16, protocol: paired, max_pairs: 100000}}\n"
# A batch whose answer takes longer is sent again (with the client's backoff); well above the p99 sought, so that
# only a stalled answer is resent.
TIMEOUT_SECONDS = 5.0


def fresh_database(base: str) -> str:
    url = make_url(base)
    name = f"serve_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.set(database=name).render_as_string(hide_password=False)


def seed(url: str, clients: int) -> list[tuple[str, str]]:
    registry = open_registry(url, actor="bench", create=True)
    declare_workload(registry, Contract.from_yaml(MANIFEST))
    workers = []
    for i in range(clients):
        artifact = f"load-{i}"
        register_artifact(registry, artifact, workload="wan-load", kind="step_cache",
                          payload_sha256=f"{i:064x}")
        token, _ = issue_token(registry, f"gpu-{i}", ["ingest"], workload="wan-*")
        workers.append((artifact, token))
    registry.close()
    return workers


def batch_times(i: int) -> tuple[list[float], list[float]]:
    candidate = [0.010 + 0.0001 * (i % 7), 0.011]
    return [c * GATE for c in candidate], candidate


def client(base: str, artifact: str, token: str, batches: int, latencies: list[float], resent: list[int],
           sessions: dict[str, str]) -> None:
    """One worker: a session, then `batches` batches through the worker's own client (registry/serve/client.py),
    which resends a batch whose answer does not come within TIMEOUT_SECONDS, after a jittered backoff."""
    with RegistryClient(base, token, timeout=TIMEOUT_SECONDS) as http:
        session = http.open_session(artifact, "d", "perf_counter")["session"]
        sessions[artifact] = session
        for i in range(batches):
            baseline, candidate = batch_times(i)
            started = time.perf_counter()
            http.record_batch(artifact, session, f"b{i}", baseline, candidate)
            latencies.append(time.perf_counter() - started)
        resent.append(http.resent)


def count_from_log(url: str, sessions: dict[str, str], batches: int) -> tuple[int, int]:
    """(lost, duplicated) batches, read from the log itself."""
    store = open_registry(url).store
    seen: dict[tuple[str, str], int] = {}
    for event in store.read_all():
        if event.type == "BenchmarkPairsRecorded":
            key = (event.payload["session"], event.payload["batch"])
            seen[key] = seen.get(key, 0) + 1
    expected = {(session, f"b{i}") for session in sessions.values() for i in range(batches)}
    lost = sum(1 for key in expected if key not in seen)
    duplicated = sum(count - 1 for count in seen.values() if count > 1)
    return lost, duplicated


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process and its running children so far (the server's worker processes),
    from /proc (None where there is none): what the server spent, which the neighbours on a shared machine move
    far less than its wall-clock rate."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    spent = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return spent + sum(cpu_seconds(int(child)) or 0.0 for child in children)


def chain_verified(url: str) -> str:
    """`registry verify` on the benchmark's database afterwards: its one line (the hash chain over every append)."""
    done = subprocess.run([sys.executable, "-m", "registry", "--db", url, "verify"], capture_output=True, text=True)
    return f"exit {done.returncode}: {(done.stdout or done.stderr).strip().splitlines()[0]}"


def through_cli(url: str, artifact: str, batches: int) -> float:
    """Batches per second through `registry bench record`, one process per batch."""
    run = [sys.executable, "-m", "registry", "--db", url, "--actor", "cli-bench"]
    opened = subprocess.run([*run, "bench", "open", artifact, "--device", "d", "--timer", "perf_counter", "--json"],
                            capture_output=True, text=True, check=True)
    import json

    session = json.loads(opened.stdout)["session"]
    started = time.perf_counter()
    for i in range(batches):
        baseline, candidate = batch_times(i)
        subprocess.run([*run, "bench", "record", artifact, session, "--batch", f"c{i}",
                        "--baseline", ",".join(map(repr, baseline)), "--candidate", ",".join(map(repr, candidate))],
                       capture_output=True, text=True, check=True)
    return batches / (time.perf_counter() - started)


@dataclass
class Run:
    """One load run: every client's batches against one server."""

    elapsed: float
    latencies: list[float]
    resent: int
    sessions: dict[str, str]
    server_cpu: float | None  # seconds, the server's processes
    clients_cpu: float  # seconds, this process (the clients)

    def line(self, batches: int) -> str:
        ordered = sorted(self.latencies)
        p50, p99 = statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return (f"{batches} batches from {len(self.sessions)} clients in {self.elapsed:.2f} s = "
                f"{batches / self.elapsed:.1f} batches/s (sessions opened first, inside the time); "
                f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; {self.resent} resent")

    def cpu_line(self, batches: int) -> str:
        server = ("unknown" if self.server_cpu is None
                  else f"{self.server_cpu:.2f} s = {self.server_cpu / batches * 1000:.1f} ms a batch")
        return f"server CPU {server} (sessions included); the clients' process: {self.clients_cpu / batches * 1000:.1f} ms a batch"


def drive(base: str, pid: int, workers: list[tuple[str, str]], batches: int) -> Run:
    """Every client in its own thread against the server at `base` (its process `pid`), until all are done."""
    latencies: list[float] = []
    resent: list[int] = []
    sessions: dict[str, str] = {}
    failed: list[BaseException] = []

    def worker(*arguments) -> None:
        try:
            client(*arguments)
        except BaseException as exc:  # noqa: BLE001 - reported below: a client that gave up is a failed run, not a slow one
            failed.append(exc)

    threads = [threading.Thread(target=worker, args=(base, artifact, token, batches, latencies, resent, sessions))
               for artifact, token in workers]
    cpu_before = cpu_seconds(pid)
    clients_before = time.process_time()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    clients_cpu = time.process_time() - clients_before
    cpu_after = cpu_seconds(pid)
    if failed:
        raise SystemExit(f"{len(failed)} of {len(workers)} clients gave up; the first: {failed[0]}")
    server_cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return Run(elapsed, latencies, sum(resent), sessions, server_cpu, clients_cpu)


@contextmanager
def floor_server() -> Iterator[tuple[str, int]]:
    """benchmarks/serve_floor.py as a process: (its base URL, its pid) while the block runs."""
    process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("serve_floor.py"))],
                               stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        if " on http://" not in line:
            raise SystemExit(f"benchmarks/serve_floor.py did not start: {line!r}")
        yield line.split(" on ")[1].strip(), process.pid
    finally:
        process.terminate()
        process.wait(timeout=20)


# The soak: batches per artifact before a client moves to a new one (each record's pairs, and so the work of each
# batch, stay bounded), batches between a client's reads, and seconds between the live view's reads.
ROTATE = 200
READ_EVERY = 10
LIVE_EVERY = 10.0


@dataclass
class Soaked:
    """What the soak's clients sent: every batch key by session, every document by run id, and what failed."""

    batches: dict[str, list[str]]
    documents: list[str]
    reads: int = 0
    live_reads: int = 0
    stream_heads: int = 0
    failures: list[str] | None = None


def soak_seed(url: str, clients: int) -> tuple[list[str], str, str]:
    """The workload, a worker token per client, one that registers artifacts and one that reads."""
    registry = open_registry(url, actor="bench", create=True)
    declare_workload(registry, Contract.from_yaml(MANIFEST))
    workers = [issue_token(registry, f"gpu-{i}", ["ingest"], workload="wan-*")[0] for i in range(clients)]
    lead = issue_token(registry, "lead", ["decide"], workload="wan-*")[0]
    reader = issue_token(registry, "watcher", ["read"])[0]
    registry.engine.dispose()
    return workers, lead, reader


def soak_client(base: str, index: int, token: str, lead: str, reader: str, until: float, sent: Soaked) -> None:
    """One worker until `until`: an artifact registered, a session, ROTATE batches with reads between, a document."""
    with RegistryClient(base, token, timeout=TIMEOUT_SECONDS) as http, \
            RegistryClient(base, lead, timeout=TIMEOUT_SECONDS) as registrar, \
            RegistryClient(base, reader, timeout=TIMEOUT_SECONDS) as looker:
        generation = 0
        while time.monotonic() < until:
            artifact = f"soak-{index}-{generation}"
            registrar.request("POST", "/api/artifacts", {"artifact": artifact, "workload": "wan-load",
                                                         "kind": "step_cache",
                                                         "payload_sha256": f"{index:08x}{generation:056x}"},
                              retry=True)
            session = http.open_session(artifact, "d", "perf_counter")["session"]
            keys = sent.batches.setdefault(session, [])
            for i in range(ROTATE):
                if time.monotonic() >= until:
                    break
                baseline, candidate = batch_times(i)
                http.record_batch(artifact, session, f"b{i}", baseline, candidate)
                keys.append(f"b{i}")
                if i % READ_EVERY == READ_EVERY - 1:
                    looker.request("GET", f"/api/artifacts/{artifact}", retry=True)
                    looker.request("GET", f"/api/artifacts/{artifact}/bench", retry=True)
                    looker.request("GET", f"/api/history/{artifact}?limit=20", retry=True)
                    sent.reads += 3
            run = f"run-{artifact}"
            http.record_document({"format": "registry.evidence/1", "artifact": artifact, "run": run,
                                  "evidence": [{"kind": "execution", "candidate_calls": 4, "fallbacks": 0}]})
            sent.documents.append(run)
            generation += 1


def soak_reader(base: str, reader: str, until: float, sent: Soaked) -> None:
    """The live view's data every LIVE_EVERY seconds, as an open page reads it."""
    with RegistryClient(base, reader, timeout=60) as looker:
        while time.monotonic() < until:
            looker.request("GET", "/api/live", retry=True)
            sent.live_reads += 1
            time.sleep(max(0.0, min(LIVE_EVERY, until - time.monotonic())))


def soak_stream(base: str, reader: str, until: float, sent: Soaked) -> None:
    """One live event stream held open for the whole run (reopened when the server ends it after 300 s)."""
    import httpx

    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {reader}"}, timeout=60) as client:
        while time.monotonic() < until:
            with client.stream("GET", "/api/live/events") as response:
                for line in response.iter_lines():
                    if line.startswith("event: head"):
                        sent.stream_heads += 1
                    if time.monotonic() >= until:
                        break


def server_log(stderr, crashes: list[str]) -> None:
    """Read the server's log for the whole run, keeping each crash's line and the exception that ended it (a log
    left unread fills its pipe, and the server stops at its next line)."""
    crash = None
    for line in stderr:
        if " ERROR crash " in line:
            crash = line.strip()
        elif crash is not None and line[:1] not in (" ", "T", "") and "Error" in line.split(":")[0]:
            crashes.append(f"{crash}: {line.strip()}")
            crash = None


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise SystemExit(f"no VmRSS for process {pid}")


def soak_log(url: str, sent: Soaked) -> tuple[int, int, int, int]:
    """(lost, duplicated) batches and (lost, duplicated) documents, from the log itself."""
    store = open_registry(url).store
    batches: dict[tuple[str, str], int] = {}
    runs: dict[str, int] = {}
    for event in store.read_all():
        if event.type == "BenchmarkPairsRecorded":
            key = (event.payload["session"], event.payload["batch"])
            batches[key] = batches.get(key, 0) + 1
        elif event.type == "ExecutionObserved" and event.payload.get("run"):
            runs[event.payload["run"]] = runs.get(event.payload["run"], 0) + 1
    expected = {(session, key) for session, keys in sent.batches.items() for key in keys}
    return (sum(key not in batches for key in expected), sum(n - 1 for n in batches.values() if n > 1),
            sum(run not in runs for run in sent.documents), sum(n - 1 for n in runs.values() if n > 1))


def soak(args: argparse.Namespace) -> None:
    if args.postgres:
        url = fresh_database(args.postgres)
    else:
        import tempfile

        url = f"sqlite:///{Path(tempfile.mkdtemp(prefix='soak-')) / 'registry.db'}"
    workers, lead, reader = soak_seed(url, args.clients)
    sent = Soaked(batches={}, documents=[], failures=[])
    samples: list[tuple[float, float]] = []
    with ServerProcess(url, "--workers", str(args.workers)) as server:
        pid = server.process.pid
        started = time.monotonic()
        until = started + args.minutes * 60

        def guarded(target, *arguments) -> None:
            try:
                target(*arguments)
            except BaseException as exc:  # noqa: BLE001 - reported below: a client that gave up is a failed soak
                sent.failures.append(f"{target.__name__}: {type(exc).__name__}: {exc}")

        crashes: list[str] = []
        threading.Thread(target=server_log, args=(server.process.stderr, crashes), daemon=True).start()
        threads = [threading.Thread(target=guarded, args=(soak_client, server.base, i, token, lead, reader, until,
                                                          sent)) for i, token in enumerate(workers)]
        threads += [threading.Thread(target=guarded, args=(soak_reader, server.base, reader, until, sent)),
                    threading.Thread(target=guarded, args=(soak_stream, server.base, reader, until, sent))]
        cpu_before = cpu_seconds(pid)
        for thread in threads:
            thread.start()
        while time.monotonic() < until:
            samples.append((time.monotonic() - started, rss_mb(pid)))
            time.sleep(args.sample_seconds)
        for thread in threads:
            thread.join()
        cpu = (cpu_seconds(pid) or 0.0) - (cpu_before or 0.0)
        samples.append((time.monotonic() - started, rss_mb(pid)))
    elapsed = samples[-1][0]
    if crashes:
        print(f"soak: the server logged {len(crashes)} crashes; the first: {crashes[0]}")
    if sent.failures:
        raise SystemExit(f"{len(sent.failures)} soak clients gave up; the first: {sent.failures[0]}")
    lost, duplicated, lost_documents, duplicated_documents = soak_log(url, sent)
    batches = sum(len(keys) for keys in sent.batches.values())
    third = elapsed / 3
    first = [mb for at, mb in samples if at <= third]
    last = [mb for at, mb in samples if at >= elapsed - third]
    change = (statistics.mean(last) - statistics.mean(first)) / statistics.mean(first)
    print(f"soak: {elapsed / 60:.1f} min, {args.clients} clients, {'Postgres' if args.postgres else 'SQLite'}; "
          f"{batches} batches ({batches / elapsed:.1f}/s) in {len(sent.batches)} sessions, {len(sent.documents)} "
          f"documents, {sent.reads} reads, {sent.live_reads} live reads, {sent.stream_heads} heads streamed; "
          f"server CPU {cpu:.0f} s")
    print(f"soak: lost {lost}, duplicated {duplicated} batches; lost {lost_documents}, duplicated "
          f"{duplicated_documents} documents (from the log); registry verify: {chain_verified(url)}")
    print(f"soak: resident memory first third mean {statistics.mean(first):.1f} MB, last third mean "
          f"{statistics.mean(last):.1f} MB: {change:+.1%} (goal within 5%); min {min(mb for _, mb in samples):.1f}, "
          f"max {max(mb for _, mb in samples):.1f} MB")
    for minute in range(int(elapsed // 60) + 1):
        inside = [mb for at, mb in samples if minute * 60 <= at < (minute + 1) * 60]
        if inside:
            print(f"  minute {minute:2d}: {statistics.mean(inside):7.1f} MB (max {max(inside):.1f})")
    if args.samples:
        Path(args.samples).write_text("seconds,rss_mb\n" + "".join(f"{at:.1f},{mb:.1f}\n" for at, mb in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="A Postgres server this benchmark may create a database on (required "
                                           "but for --soak, which runs on SQLite without it).")
    parser.add_argument("--soak", action="store_true", help="Mixed ingest and reads for --minutes, memory sampled.")
    parser.add_argument("--minutes", type=float, default=30.0, help="How long the soak runs.")
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="Seconds between memory samples (soak).")
    parser.add_argument("--samples", help="Write the soak's memory samples to this CSV file.")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batches", type=int, default=40, help="Batches per client.")
    parser.add_argument("--cli-batches", type=int, default=24)
    parser.add_argument("--workers", type=int, default=1, help="The server's worker processes (`serve --workers`).")
    parser.add_argument("--floor", action="store_true",
                        help="Also drive the same clients against the web stack alone (benchmarks/serve_floor.py).")
    args = parser.parse_args()
    if args.soak:
        soak(args)
        return
    if not args.postgres:
        parser.error("--postgres is required (but for --soak)")
    url = fresh_database(args.postgres)
    workers = seed(url, args.clients)
    total = args.clients * args.batches
    with ServerProcess(url, "--workers", str(args.workers)) as server:
        run = drive(server.base, server.process.pid, workers, args.batches)
    lost, duplicated = count_from_log(url, run.sessions, args.batches)
    verified = chain_verified(url)
    cli_rate = through_cli(url, workers[0][0], args.cli_batches)
    rate = total / run.elapsed
    print(f"server: {run.line(total)}; lost {lost}, duplicated {duplicated} (from the log)")
    print(f"server: {run.cpu_line(total)}")
    print(f"registry verify: {verified}")
    print(f"cli: {args.cli_batches} batches through `registry bench record` = {cli_rate:.2f} batches/s; "
          f"server/cli {rate / cli_rate:.1f}x")
    if args.floor:
        with floor_server() as (base, pid):
            floor = drive(base, pid, workers, args.batches)
        print(f"floor: {floor.line(total)}")
        print(f"floor: {floor.cpu_line(total)}")
        print(f"server/floor {floor.elapsed / run.elapsed:.2f}x of the web stack alone's rate")


if __name__ == "__main__":
    main()
