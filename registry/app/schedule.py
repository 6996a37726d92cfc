"""`reverify --schedule CRON`: enqueue re-verifications now and at every time a cron expression names.

The schedule is this process (stop it to stop the schedule); several of them
for one workload enqueue no duplicates, since each artifact's re-verification
takes the queueing lock `reverify:<artifact>` (app/jobs.py). Times are UTC.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable

from registry.formats.errors import UserError

from .context import Registry


def check_cron(expression: str) -> str:
    from croniter import croniter

    if not isinstance(expression, str) or len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise UserError(f"--schedule {expression!r}: expected a cron expression of 5 fields (e.g. '0 */6 * * *')")
    return expression


def run_schedule(registry: Registry, workload: str, expression: str, *, pairs: int, run: str,
                 report: Callable[[str, list[dict[str, Any]]], None], ticks: int | None = None) -> None:
    """Enqueue now, then at each time `expression` names; `ticks` bounds how many times (None: until stopped)."""
    from croniter import croniter

    from .jobs import enqueue_reverify

    check_cron(expression)
    now = datetime.now(timezone.utc)
    schedule = croniter(expression, now)
    done = 0
    at = now
    while ticks is None or done < ticks:
        report(at.isoformat(timespec="seconds"),
               enqueue_reverify(registry, workload, pairs=pairs, run=f"{run}-{done}"))
        done += 1
        if ticks is not None and done >= ticks:
            return
        at = schedule.get_next(datetime)
        time.sleep(max(0.0, (at - datetime.now(timezone.utc)).total_seconds()))
