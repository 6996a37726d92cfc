"""The job queue on a real Postgres (procrastinate, app/jobs.py): workers as processes, killed for real.

These tests need seconds: they start worker processes (forked from a server that has imported the
registry and procrastinate, never torch: a recording job times nothing) and
drain hundreds of jobs through a real server, because what they show (no
job lost or doubled across kill -9s, stalled jobs re-queued, one worker per
device) only exists across processes. The jobs are the shortest the queue
runs (one batch of two pairs); the heartbeat is set per test: long where
nothing is meant to stall (fewer recovery polls competing for the cores),
short where a stall is the point. Every wait polls the database with a
deadline; none sleeps for a result, and a kill waits for progress, not time.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from registry.app.jobs import (RECORD_TASK, STALLED_AFTER_HEARTBEATS, conninfo, enqueue_records, enqueue_reverify,
                               ensure_schema, job_app, list_jobs)
from registry.app.schedule import run_schedule
from registry.cli.main import main
from ship_helpers import MANIFEST, make_bundle, measure_and_promote, register
from store_helpers import opened
from limits import HANG_GUARD_S
from process_forks import ProcessForks, Started

pytestmark = pytest.mark.postgres
MONITORED = MANIFEST + "monitor: {alpha: 0.001, reference: gate, margin: 0.0}\n"
# Heartbeats (s): a worker is presumed dead after two; the drain's workers must never look dead under load.
DRAIN_HEARTBEAT = 5.0
KILL_HEARTBEAT = 1.0
STALL_HEARTBEAT = 0.5
PRELOADED = ("registry.cli.main", "registry.cli.job_commands", "registry.app.jobs", "procrastinate", "psycopg")
"""What a worker imports before its first job, imported once by the server the workers are forked from."""


@pytest.fixture
def pg_registry(postgres_url, tmp_path):
    runner = CliRunner()

    def cli(*args):
        return runner.invoke(main, ["--db", postgres_url, "--actor", "reviewer", *args])

    cli.tmp = tmp_path
    assert cli("init").exit_code == 0
    path = tmp_path / "wan.yaml"
    path.write_text(MONITORED)
    assert cli("workload", "declare", str(path)).exit_code == 0
    for name in ("fast", "steady"):
        assert register(cli, name, make_bundle(tmp_path / "bundles", name)).exit_code == 0
        assert measure_and_promote(cli, name, 1.4) == "promoted"
    registry = opened(postgres_url)
    ensure_schema(registry)
    return postgres_url, registry


def batches(count: int) -> list[dict]:
    """Short jobs: one in-control batch of two pairs each, alternating between the two artifacts; every third
    with the baseline's waits for a CPU, as a harness of its own records them."""
    return [{"artifact": ("fast", "steady")[i % 2], "batch": f"job-{i}", "baseline": [2.0, 2.0],
             "candidate": [1.5, 1.5], "device": "NVIDIA H200", "software": {"torch": "2.13.0"},
             **({"baseline_waited": [0.001, None]} if i % 3 == 0 else {})}
            for i in range(count)]


@pytest.fixture(scope="module")
def forks() -> Iterator[ProcessForks]:
    """The server the workers are forked from (tests/support/process_forks.py), with what a worker imports before
    its first job imported once: each worker is still a process of its own, killed for real, without an
    interpreter's start-up and those imports each time (the file starts 38 workers; run alone, it took 25 CPU-s
    of the machine's against 30 with each worker a fresh interpreter)."""
    server = ProcessForks({**os.environ, "PYTHONUNBUFFERED": "1"}, PRELOADED)
    yield server
    server.close()


def start_worker(forks: ProcessForks, url: str, device: int, *, drain: bool, heartbeat: float) -> Started:
    """`registry worker` for `device`, forked and left running."""
    return forks.start("registry", ["--db", url, "--actor", f"worker{device}", "worker", "--device", str(device),
                                    "--heartbeat", str(heartbeat)] + (["--drain"] if drain else []),
                       cwd=Path.cwd(), env={**os.environ, "PYTHONUNBUFFERED": "1"})


def statuses(registry) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in list_jobs(registry):
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    return counts


def wait_until(condition, what: str) -> None:
    """Poll until `condition()` holds; HANG_GUARD_S only calls it hung (worker processes start slowly on a loaded
    machine, and eight of them share its cores)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"hung waiting for {what}")
        time.sleep(0.05)


def recorded_batches(registry) -> list[str]:
    return [event.payload["batch"] for name in ("fast", "steady")
            for event in registry.store.read_stream(f"artifact:{name}") if event.type == "PairsRemeasured"]


def test_eight_workers_drain_a_thousand_short_jobs_each_recorded_once(pg_registry, forks):
    url, registry = pg_registry
    enqueue_records(registry, batches(1000))
    workers = [start_worker(forks, url, device, drain=True, heartbeat=DRAIN_HEARTBEAT) for device in range(8)]
    for worker in workers:
        assert worker.wait(timeout=HANG_GUARD_S) == 0, worker.errors()
    assert statuses(registry) == {"succeeded": 1000}
    recorded = recorded_batches(registry)
    assert sorted(recorded) == sorted(f"job-{i}" for i in range(1000))
    waits = [event.payload.get("baseline_waited_s") for event in registry.store.read_stream("artifact:fast")
             if event.type == "PairsRemeasured"]
    assert waits.count([0.001, None]) == 167 and waits.count(None) == 333
    assert CliRunner().invoke(main, ["--db", url, "replay", "--verify"]).exit_code == 0


def test_twenty_kill_9s_mid_job_lose_and_double_nothing(pg_registry, forks):
    """Each kill waits for a job running and for the queue to have moved on since the last one (so the kills
    spread over the drain and land on workers that are working, restarted ones included), never for time."""
    url, registry = pg_registry
    jobs = 200
    enqueue_records(registry, batches(jobs))
    rng = random.Random(7)
    workers = {device: start_worker(forks, url, device, drain=False, heartbeat=KILL_HEARTBEAT) for device in range(8)}
    with psycopg.connect(conninfo(registry), autocommit=True) as conn:
        def count(status: str) -> int:
            return conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = %s", (status,)).fetchone()[0]

        done = 0
        for _ in range(20):
            wait_until(lambda: count("doing") > 0 and count("succeeded") > done, "a running job and progress")
            done = count("succeeded")
            device = rng.randrange(8)
            workers[device].send_signal(signal.SIGKILL)
            workers[device].wait(timeout=HANG_GUARD_S)
            workers[device] = start_worker(forks, url, device, drain=False, heartbeat=KILL_HEARTBEAT)
        wait_until(lambda: statuses(registry) == {"succeeded": jobs}, "every job to succeed")
        interrupted = conn.execute(
            "SELECT count(*) FROM (SELECT job_id FROM procrastinate_events WHERE type = 'started' "
            "GROUP BY job_id HAVING count(*) > 1) AS again").fetchone()[0]
    for worker in workers.values():
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=HANG_GUARD_S)
    assert 1 <= interrupted <= 20  # some kills landed mid-job, and those jobs ran again
    recorded = recorded_batches(registry)
    assert len(recorded) == len(set(recorded)) == jobs  # none doubled, none lost


def test_a_stalled_job_is_requeued_within_two_heartbeats_and_a_device_takes_one_worker(pg_registry, forks):
    """A worker that took a job and went silent (registered, never heartbeating again) loses it to a live one."""
    url, registry = pg_registry
    enqueue_records(registry, batches(1))
    app = job_app(registry)

    async def take_and_go_silent() -> int:
        async with app.open_async():
            worker_id = await app.job_manager.register_worker()
            job = await app.job_manager.fetch_job(queues=None, worker_id=worker_id)
            assert job is not None and job.task_name == RECORD_TASK
            return worker_id

    worker_id = asyncio.run(take_and_go_silent())
    with psycopg.connect(conninfo(registry), autocommit=True) as conn:
        silent_since = conn.execute("SELECT last_heartbeat FROM procrastinate_workers WHERE id = %s",
                                    (worker_id,)).fetchone()[0]
        live = start_worker(forks, url, 0, drain=False, heartbeat=STALL_HEARTBEAT)
        running_since = []

        def running() -> bool:
            """Whether the live worker has registered; when it was first seen so, by the database's clock."""
            seen = conn.execute("SELECT now() FROM procrastinate_workers WHERE id > %s", (worker_id,)).fetchone()
            running_since[:] = running_since or seen or []
            return bool(running_since)

        try:
            wait_until(running, "the live worker to start")
            wait_until(lambda: statuses(registry) == {"succeeded": 1}, "the stalled job to run again")
            second = start_worker(forks, url, 0, drain=False, heartbeat=STALL_HEARTBEAT)
            assert second.wait(timeout=HANG_GUARD_S) == 1
            assert "already has a worker" in second.errors()
            started = [at for (at,) in conn.execute(
                "SELECT at FROM procrastinate_events WHERE type = 'started' ORDER BY at").fetchall()]
        finally:
            live.send_signal(signal.SIGTERM)
            live.wait(timeout=HANG_GUARD_S)
    assert len(started) == 2  # taken by the silent worker, then again by the live one
    # The job is stalled two heartbeats after the silent worker's last, and the live worker can act once it runs:
    # it looks every half heartbeat and polls for a job every half heartbeat. Its start-up, which a loaded machine
    # stretches to seconds, is before `running_since`, so no part of the bound; the 5 s are for a running worker
    # waiting for a core on that machine.
    could_act = max(silent_since + timedelta(seconds=STALLED_AFTER_HEARTBEATS * STALL_HEARTBEAT), running_since[0])
    assert (started[1] - could_act).total_seconds() <= STALL_HEARTBEAT + 5
    assert recorded_batches(registry) == ["job-0"]


def test_one_reverification_per_artifact_waits_in_the_queue(pg_registry):
    url, registry = pg_registry
    runner = CliRunner()
    ticks = []
    run_schedule(registry, "wan", "0 * * * *", pairs=2, run="r1", report=lambda at, queued: ticks.append(queued),
                 ticks=1)
    assert [q["queued"] for q in ticks[0]] == [True, True]
    again = enqueue_reverify(registry, "wan", pairs=2, run="r2")
    assert [q["queued"] for q in again] == [False, False]
    bad = runner.invoke(main, ["--db", url, "reverify", "wan", "--pairs", "2", "--schedule", "every hour"])
    assert bad.exit_code == 1 and "cron expression" in bad.output
    listed = json.loads(runner.invoke(main, ["--db", url, "jobs", "--json"]).output)
    assert sorted(j["queueing_lock"] for j in listed) == ["reverify:fast", "reverify:steady"]
