"""`registry worker`, `registry reverify`, `registry jobs`: re-verification and evaluation jobs (docs/jobs.md)."""
from __future__ import annotations

import sys
import uuid

import click

from .output import EXIT_FAILURE_RECORDED, EXIT_NO, emit_json, say, table
from .params import Integer, Real, name_value
from .session import Session, pass_session



@click.command()
@click.option("--device", type=Integer(min=0), required=True,
              help="The GPU index this worker times on; one worker per device of a host.")
@click.option("--heartbeat", type=Real(min=0.0, min_open=True, max=3600.0), default=10.0,
              show_default=True, help="Seconds between heartbeats; a worker silent for two is presumed dead and "
                                      "its running job re-queued.")
@click.option("--drain", is_flag=True, help="Exit once the queue is empty instead of waiting for more jobs.")
@pass_session
def worker(session: Session, device: int, heartbeat: float, drain: bool) -> None:
    """Run the registry's jobs on one device, one at a time, from the queue in its Postgres database."""
    import os

    os.environ["CUDA_VISIBLE_DEVICES"] = str(device)  # before torch loads: the worker sees its device only
    from registry.app.jobs import run_worker

    run_worker(session.open(), device, heartbeat=heartbeat, wait=not drain)


@click.command()
@click.argument("workload_id")
@click.option("--pairs", type=Integer(), required=True, help="ABBA pairs to time per artifact (even, 2 to 1000).")
@click.option("--now", "now", is_flag=True, help="Re-measure here, one artifact after another (no queue; "
                                                  "what an SQLite registry does).")
@click.option("--schedule", metavar="CRON", help="Enqueue one re-verification per artifact now and at every "
                                                  "time CRON names (5 fields, UTC), until stopped.")
@click.option("--run", "run_id", callback=name_value,
              help="The run's key (default: a fresh one); a retried run appends nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@pass_session
def reverify(session: Session, workload_id: str, pairs: int, now: bool, schedule: str | None, run_id: str | None,
             as_json: bool) -> None:
    """Re-measure WORKLOAD_ID's monitored promoted artifacts (--now here, or --schedule onto the job queue).

    With --now: exit 4 when a measurement failed (its failure recorded), 3
    when an artifact could not be re-measured here (nothing recorded for it).
    """
    if now == (schedule is not None):
        raise click.UsageError("give exactly one of --now or --schedule CRON")
    registry = session.open()
    run = run_id if run_id is not None else f"rv-{uuid.uuid4().hex[:12]}"
    if now:
        from registry.app.reverify import reverify_now

        results = [r.to_dict() for r in reverify_now(registry, workload_id, pairs=pairs, run=run)]
        if as_json:
            emit_json({"workload": workload_id, "run": run, "artifacts": results})
        else:
            table(f"re-verification {run}", ["artifact", "outcome", "detail", "monitor"],
                  ((r["artifact"], r["outcome"], r["detail"], (r["monitor"] or {}).get("status", "-"))
                   for r in results))
        outcomes = {r["outcome"] for r in results}
        if "failed" in outcomes:  # a measurement failed, and its failure was recorded
            sys.exit(EXIT_FAILURE_RECORDED)
        if outcomes - {"recorded", "already_recorded"}:  # refused: nothing this machine can vouch for was recorded
            sys.exit(EXIT_NO)
        return
    from registry.app.schedule import run_schedule

    def report(tick: str, queued: list[dict]) -> None:
        if as_json:
            emit_json({"workload": workload_id, "at": tick, "queued": queued})
        else:
            say(f"{tick}: " + ", ".join(f"{q['artifact']} {'queued' if q['queued'] else 'already queued'}"
                                        for q in queued))

    run_schedule(registry, workload_id, schedule, pairs=pairs, run=run, report=report)


@click.command()
@click.option("--status", type=click.Choice(["todo", "doing", "succeeded", "failed", "cancelled", "aborted"]),
              help="Only jobs in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@pass_session
def jobs(session: Session, status: str | None, as_json: bool) -> None:
    """List the registry's jobs (re-verifications, recorded batches) and their states."""
    from registry.app.jobs import list_jobs

    found = list_jobs(session.open(), status)
    if as_json:
        emit_json(found)
        return
    table("jobs", ["id", "task", "status", "attempts", "queueing lock", "artifact"],
          ((j["id"], j["task_name"], j["status"], j["attempts"], j["queueing_lock"] or "-",
            j["args"].get("artifact", "-")) for j in found))


COMMANDS = [worker, reverify, jobs]
