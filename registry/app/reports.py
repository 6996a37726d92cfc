"""Building the report: the projected state plus what only the app layer can add.

The report itself is a pure function of a RegistryState
(registry.projections.report); two parts need more than the state:
- imported verdicts compared with the registry's own judgement of the very
  evidence each document brought (app.imports reads those events);
- the support matrix's staleness, judged at the moment the report speaks for
  (the time of the as-of position, or now).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from .context import Registry
from .imports import compare_recorded_verdicts


def moment_of(registry: Registry, position: int | None) -> datetime:
    """When the log stood at `position`: that event's recorded time; now for the live head."""
    if position is None:
        return datetime.now(timezone.utc)
    if position == 0:
        return datetime.min.replace(tzinfo=timezone.utc)
    found = registry.store.read_all(after_position=position - 1, up_to_position=position)
    if not found:
        return datetime.now(timezone.utc)
    moment = found[0].recorded_at
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def build(registry: Registry, *, workload: str | None, position: int | None, stale_days: int,
          archs: tuple[str, ...] = ()) -> tuple[dict[str, Any], Any]:
    """(report, state) as of `position` (None: now), with imported comparisons and the support matrix."""
    from registry.projections import Projections
    from registry.projections.matrix import support_matrix
    from registry.projections.report import build_report

    state = Projections(registry.store).state(as_of=position)
    matrix = support_matrix(state, at=moment_of(registry, position), stale_days=stale_days, archs=archs)
    report = build_report(state, workload=workload, imported=compare_recorded_verdicts(registry, state),
                          matrix=matrix)
    return report, state
