"""Read models folded from the event log: live tables, time travel, replay verification, reports.

- `Projections(store)`: `catch_up()`, `artifact(id, as_of)`, `artifacts(workload, as_of)`,
  `workload(id, as_of)`, `workloads(as_of)`, `frameset(name, as_of)`, `state(as_of)`, `reset()`,
  `artifacts_sharing_payload(workload, payload_sha256)` (the payload index), `workload_artifacts(workload)`;
  each method is written in the module answering that question (live.py lists them).
- `resolve_as_of(store, text)`: a position or an ISO-8601 time -> a log position.
- `rebuild(store)`, `verify_projections(store) -> ReplayReport`.
- `apply(state, event)` / `fold(state, events)`: the pure fold over `RegistryState`.
- Reports: `registry.projections.report` (imported on demand; it pulls in matplotlib for HTML).
"""
from .asof import resolve_as_of
from .fold import apply, fold
from .live import Projections
from .state import EVIDENCE_KINDS, ProjectionError, RegistryState, relative_margin, tightest
from .verify import Difference, ReplayReport, rebuild, verify_projections

__all__ = [
    "EVIDENCE_KINDS",
    "Difference",
    "ProjectionError",
    "Projections",
    "RegistryState",
    "ReplayReport",
    "apply",
    "fold",
    "rebuild",
    "relative_margin",
    "resolve_as_of",
    "tightest",
    "verify_projections",
]
