"""Load on `registry serve`: loopback clients posting pair batches against Postgres, beside the CLI.

A real server process (`registry serve --port 0`) on a fresh database of the
Postgres server given; CLIENTS threads, each a worker with its own artifact of
one workload (its own benchmark record), its own session and its own
`ingest:` token, post BATCHES batches of two pairs each as fast as answers
come. A client whose answer does not come within its timeout sends the same
batch again under the same key (the server appends it once). Afterwards the
log is read: every batch of every client must be there exactly once (none
lost, none duplicated). Prints batches/s over the run, the p50/p99 latency
of a batch (from first send to its answer, retries included), and the same
batches appended through `registry bench record`, one process per batch as a
shell loop runs it, for the ratio server/CLI. On a shared machine the
absolute rates move with the neighbours; the ratio comes from one run.

    .venv/bin/python benchmarks/serve.py --postgres URL [--clients 16] [--batches 40] [--cli-batches 24]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
from sqlalchemy.engine import make_url

from registry.app import open_registry
from registry.app.tokens import issue_token
from registry.app.workloads import declare_workload, register_artifact
from registry.contracts import Contract

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from serve_helpers import ServerProcess  # noqa: E402  (the tests' real-process harness)

GATE = 1.2
# The ratio of every pair is the gate itself, so no record is ever decided: every batch is taken.
MANIFEST = f"workload: wan-load\nspeed: {{min_speedup: {GATE}, runs_per_arm: 16, protocol: paired, max_pairs: 100000}}\n"
TIMEOUT_SECONDS = 2.0


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
    registry.engine.dispose()
    return workers


def batch_times(i: int) -> tuple[list[float], list[float]]:
    candidate = [0.010 + 0.0001 * (i % 7), 0.011]
    return [c * GATE for c in candidate], candidate


def client(base: str, artifact: str, token: str, batches: int, latencies: list[float], retries: list[int],
           sessions: dict[str, str]) -> None:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_SECONDS) as http:
        opened = http.post(f"/api/artifacts/{artifact}/sessions", json={"device": "d", "timer": "t"}, timeout=600)
        if opened.status_code != 200:
            raise SystemExit(f"{artifact}: no session opened: {opened.status_code} {opened.text}")
        session = opened.json()["session"]
        sessions[artifact] = session
        path = f"/api/artifacts/{artifact}/sessions/{session}/batches"
        for i in range(batches):
            baseline, candidate = batch_times(i)
            body = {"batch": f"b{i}", "baseline_s": baseline, "candidate_s": candidate}
            started = time.perf_counter()
            while True:
                try:
                    answer = http.post(path, json=body)
                except httpx.TimeoutException:
                    retries.append(1)
                    continue
                if answer.status_code == 409:  # lost a race for the append lock's order: the same key again
                    retries.append(1)
                    continue
                answer.raise_for_status()
                break
            latencies.append(time.perf_counter() - started)


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


def through_cli(url: str, artifact: str, batches: int) -> float:
    """Batches per second through `registry bench record`, one process per batch."""
    run = [sys.executable, "-m", "registry", "--db", url, "--actor", "cli-bench"]
    opened = subprocess.run([*run, "bench", "open", artifact, "--device", "d", "--timer", "t", "--json"],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="A Postgres server this benchmark may create a database on.")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batches", type=int, default=40, help="Batches per client.")
    parser.add_argument("--cli-batches", type=int, default=24)
    args = parser.parse_args()
    url = fresh_database(args.postgres)
    workers = seed(url, args.clients)
    latencies: list[float] = []
    retries: list[int] = []
    sessions: dict[str, str] = {}
    with ServerProcess(url) as server:
        threads = [threading.Thread(target=client, args=(server.base, artifact, token, args.batches, latencies,
                                                         retries, sessions)) for artifact, token in workers]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    lost, duplicated = count_from_log(url, sessions, args.batches)
    total = args.clients * args.batches
    rate = total / elapsed
    ordered = sorted(latencies)
    p50, p99 = statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    cli_rate = through_cli(url, workers[0][0], args.cli_batches)
    print(f"server: {total} batches from {args.clients} clients in {elapsed:.2f} s = {rate:.1f} batches/s "
          f"(sessions opened first, inside the time); p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; "
          f"{len(retries)} retries; lost {lost}, duplicated {duplicated} (from the log)")
    print(f"cli: {args.cli_batches} batches through `registry bench record` = {cli_rate:.2f} batches/s; "
          f"server/cli {rate / cli_rate:.1f}x")


if __name__ == "__main__":
    main()
