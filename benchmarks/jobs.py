"""The job queue's cost: draining short jobs through procrastinate beside a plain loop doing the same work.

On a Postgres registry (REGISTRY_BENCH_POSTGRES_URL, or the throwaway
server's REGISTRY_TEST_POSTGRES_URL: a fresh database is made in it) with
one promoted, monitored artifact, it records --jobs batches of two pairs:
1. a plain loop calling app/monitor.py's record_remeasurement in this process;
2. the same batches as `registry.record_remeasurement` jobs, drained by one
   `registry worker --drain` process, then by --workers of them at once.
Printed: the wall time of each, the jobs per second, and the queue's
overhead per job (one worker's drain time minus the loop's, per job; the
worker's start-up included).

    .venv/bin/python benchmarks/jobs.py [--jobs N] [--workers W]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from click.testing import CliRunner
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))  # the tests' helpers
from ship_helpers import MANIFEST, make_bundle, measure_and_promote, register  # noqa: E402

from registry.app import open_registry  # noqa: E402
from registry.app.jobs import enqueue_records, ensure_schema  # noqa: E402
from registry.app.monitor import record_remeasurement  # noqa: E402
from registry.cli.main import main as cli_main  # noqa: E402


def fresh_registry(server: str) -> str:
    base = make_url(server)
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = base.set(database=name).render_as_string(hide_password=False)
    runner = CliRunner()

    def cli(*args):
        return runner.invoke(cli_main, ["--db", url, "--actor", "bench", *args])

    cli.tmp = Path(tempfile.mkdtemp())
    assert cli("init").exit_code == 0
    manifest = cli.tmp / "wan.yaml"
    manifest.write_text(MANIFEST + "monitor: {alpha: 0.001, reference: gate, margin: 0.0}\n")
    assert cli("workload", "declare", str(manifest)).exit_code == 0
    assert register(cli, "fast", make_bundle(cli.tmp / "bundles", "fast")).exit_code == 0
    assert measure_and_promote(cli, "fast", 1.4) == "promoted"
    return url


def batch(tag: str, i: int) -> dict:
    return {"artifact": "fast", "batch": f"{tag}-{i}", "baseline": [2.0, 2.0], "candidate": [1.5, 1.5],
            "device": "NVIDIA H200", "software": {"torch": "2.13.0"}}


def drain(url: str, workers: int) -> float:
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "registry", "--db", url, "--actor", f"w{d}", "worker",
                               "--device", str(d), "--drain", "--heartbeat", "2"], env=os.environ.copy())
             for d in range(workers)]
    for proc in procs:
        assert proc.wait() == 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    server = os.environ.get("REGISTRY_BENCH_POSTGRES_URL") or os.environ.get("REGISTRY_TEST_POSTGRES_URL")
    if not server:
        sys.exit("set REGISTRY_BENCH_POSTGRES_URL (or source scripts/pg_throwaway.sh; pg_throwaway_start)")
    url = fresh_registry(server)
    registry = open_registry(url)
    ensure_schema(registry)
    start = time.perf_counter()
    for i in range(args.jobs):
        record_remeasurement(registry, **{k: v for k, v in batch("loop", i).items()}, summary=False)
    loop = time.perf_counter() - start
    enqueue_records(registry, [batch("one", i) for i in range(args.jobs)])
    one = drain(url, 1)
    enqueue_records(registry, [batch("many", i) for i in range(args.jobs)])
    many = drain(url, args.workers)
    print(f"{args.jobs} short jobs (one batch of two pairs each)")
    print(f"  plain loop, in process      {loop:7.2f} s  {args.jobs / loop:7.1f} jobs/s")
    print(f"  queue, 1 worker             {one:7.2f} s  {args.jobs / one:7.1f} jobs/s  "
          f"overhead {(one - loop) / args.jobs * 1000:.1f} ms per job (start-up included)")
    print(f"  queue, {args.workers} workers            {many:7.2f} s  {args.jobs / many:7.1f} jobs/s")


if __name__ == "__main__":
    main()
