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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="A Postgres server this benchmark may create a database on.")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batches", type=int, default=40, help="Batches per client.")
    parser.add_argument("--cli-batches", type=int, default=24)
    parser.add_argument("--workers", type=int, default=1, help="The server's worker processes (`serve --workers`).")
    parser.add_argument("--floor", action="store_true",
                        help="Also drive the same clients against the web stack alone (benchmarks/serve_floor.py).")
    args = parser.parse_args()
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
