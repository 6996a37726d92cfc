"""Jobs on the registry's own Postgres database, run by procrastinate (docs/jobs.md).

Two tasks, both writing their result as events under an idempotency key, so
a job that a killed worker left half done and that is retried appends once:
- `registry.reverify`: re-measure one promoted artifact (app/reverify.py),
  deferred with the queueing lock `reverify:<artifact>`, so at most one
  re-verification per artifact waits in the queue;
- `registry.record_remeasurement`: record one batch of re-measured pairs
  timed elsewhere (app/monitor.py), keyed by its batch.

A worker (`registry worker --device N`) runs one job at a time and holds a
session advisory lock on `<host>:<N>` for its whole life, so no two workers
(and so no two timing jobs) ever use one device at once. Every worker
heartbeats every `heartbeat` seconds and, every half heartbeat, re-queues
the jobs of workers whose heartbeat is older than STALLED_AFTER_HEARTBEATS
heartbeats (a worker killed mid-job): such a job is back in the queue within
two and a half heartbeats of its worker's last one.
"""
from __future__ import annotations

import asyncio
import socket
from typing import Any

from registry.formats.errors import UserError

from .context import Registry

JOB_QUEUE = "registry"
REVERIFY_TASK = "registry.reverify"
RECORD_TASK = "registry.record_remeasurement"
DEFAULT_HEARTBEAT_S = 10.0
STALLED_AFTER_HEARTBEATS = 2
# A job that fails (a refusal, a lost database) is tried this many times in all, a second apart.
MAX_ATTEMPTS = 5
_SCHEMA_LOCK = "registry-procrastinate-schema"


def conninfo(registry: Registry) -> str:
    """The libpq connection string of the registry's Postgres database; refused for any other database."""
    parsed = registry.engine.url
    if parsed.get_backend_name() != "postgresql":
        raise UserError("the job queue lives in the registry's Postgres database; an SQLite registry runs its "
                        "jobs in-process (`registry reverify --now`)")
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def ensure_schema(registry: Registry) -> None:
    """Install procrastinate's tables in the registry's database once (concurrent callers serialize)."""
    import psycopg
    from procrastinate.schema import SchemaManager

    with psycopg.connect(conninfo(registry)) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_SCHEMA_LOCK,))
        if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0] is None:
            conn.execute(SchemaManager.get_schema())


def job_app(registry: Registry):
    """A procrastinate App on the registry's database, with the registry's tasks bound to `registry`."""
    from procrastinate import App, PsycopgConnector, RetryStrategy

    app = App(connector=PsycopgConnector(conninfo=conninfo(registry), min_size=1, max_size=4))
    retry = RetryStrategy(max_attempts=MAX_ATTEMPTS, wait=1)

    @app.task(name=REVERIFY_TASK, queue=JOB_QUEUE, retry=retry)
    def reverify(artifact: str, pairs: int, run: str) -> dict[str, Any]:
        from .reverify import reverify_artifact

        return reverify_artifact(registry, artifact, pairs=pairs, run=run).to_dict()

    @app.task(name=RECORD_TASK, queue=JOB_QUEUE, retry=retry)
    def record(artifact: str, batch: str, baseline: list[float], candidate: list[float], device: str,
               software: dict[str, str], baseline_waited: list[float | None] | None = None) -> bool:
        from .monitor import record_remeasurement

        appended, _ = record_remeasurement(registry, artifact, baseline, candidate, batch=batch, device=device,
                                           software=software, baseline_waited=baseline_waited, summary=False)
        return appended

    return app


def enqueue_reverify(registry: Registry, workload: str, *, pairs: int, run: str) -> list[dict[str, Any]]:
    """Defer one re-verification per monitored promoted artifact; one already waiting is left as it is."""
    from procrastinate.exceptions import AlreadyEnqueued

    from .reverify import check_pairs, monitored_artifacts, run_keys

    check_pairs(pairs)
    keys = run_keys(run, monitored_artifacts(registry, workload))
    ensure_schema(registry)
    app = job_app(registry)
    queued = []
    with app.open():
        for artifact, key in keys.items():
            try:
                job_id = app.configure_task(REVERIFY_TASK, queueing_lock=f"reverify:{artifact}").defer(
                    artifact=artifact, pairs=pairs, run=key)
                queued.append({"artifact": artifact, "job": job_id, "queued": True})
            except AlreadyEnqueued:
                queued.append({"artifact": artifact, "job": None, "queued": False})
    return queued


def enqueue_records(registry: Registry, batches: list[dict[str, Any]]) -> list[int]:
    """Defer one `record_remeasurement` job per batch (each a dict of that task's arguments)."""
    ensure_schema(registry)
    app = job_app(registry)
    with app.open():
        return [app.configure_task(RECORD_TASK).defer(**batch) for batch in batches]


def list_jobs(registry: Registry, status: str | None = None) -> list[dict[str, Any]]:
    """Every job of the registry's queue (id, task, status, attempts, lock, queueing lock, arguments)."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(conninfo(registry), row_factory=dict_row) as conn:
        if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()["to_regclass"] is None:
            return []
        rows = conn.execute(
            "SELECT id, task_name, status::text AS status, attempts, lock, queueing_lock, args, worker_id "
            "FROM procrastinate_jobs WHERE queue_name = %s AND (%s::text IS NULL OR status::text = %s) ORDER BY id",
            (JOB_QUEUE, status, status)).fetchall()
    return [dict(row) for row in rows]


def device_lock_key(device: int) -> str:
    return f"registry-device:{socket.gethostname()}:{device}"


def run_worker(registry: Registry, device: int, *, heartbeat: float = DEFAULT_HEARTBEAT_S,
               wait: bool = True) -> None:
    """Serve the queue on one device until stopped (or, with wait=False, until the queue is empty).

    Refused when another worker holds this host's device: the device lock is
    a session advisory lock held by a connection open for the worker's life.
    """
    import psycopg

    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise UserError(f"--device {device!r}: expected a device index (0, 1, ...)")
    if not 0 < heartbeat <= 3600:
        raise UserError(f"--heartbeat {heartbeat!r}: expected seconds in (0, 3600]")
    ensure_schema(registry)
    with psycopg.connect(conninfo(registry), autocommit=True) as holder:
        key = device_lock_key(device)
        if not holder.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:
            raise UserError(f"device {device} of {socket.gethostname()} already has a worker; one worker per device")
        asyncio.run(_serve(job_app(registry), device, heartbeat, wait))


async def _serve(app, device: int, heartbeat: float, wait: bool) -> None:
    async with app.open_async():
        recovery = asyncio.create_task(_recover_stalled(app, heartbeat))
        try:
            await app.run_worker_async(
                queues=[JOB_QUEUE], concurrency=1, name=f"device-{device}@{socket.gethostname()}", wait=wait,
                update_heartbeat_interval=heartbeat, stalled_worker_timeout=STALLED_AFTER_HEARTBEATS * heartbeat,
                listen_notify=True, fetch_job_polling_interval=heartbeat / 2)
        finally:
            recovery.cancel()


async def _recover_stalled(app, heartbeat: float) -> None:
    """Re-queue, every half heartbeat, the running jobs of workers silent for STALLED_AFTER_HEARTBEATS heartbeats."""
    while True:
        for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_AFTER_HEARTBEATS * heartbeat):
            await app.job_manager.retry_job(job)
        await asyncio.sleep(heartbeat / 2)
