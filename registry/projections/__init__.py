"""Read models folded from the event log: live tables, time travel, replay verification, reports.

- `Projections(store)`: `catch_up()`, `artifact(id, as_of)`, `artifacts(workload, as_of)`,
  `workload(id, as_of)`, `workloads(as_of)`, `frameset(name, as_of)`, `state(as_of)`, `reset()`,
  `artifacts_sharing_payload(workload, payload_sha256)` (the payload index), `workload_artifacts(workload)`;
  each method is written in the module answering that question (live.py lists them).
- `resolve_as_of(store, text)`: a position or an ISO-8601 time -> a log position.
- `rebuild(store)`, `verify_projections(store) -> ReplayReport`.
- `apply(state, event)` / `fold(state, events)`: the pure fold over `RegistryState`.
- Reports: `registry.projections.report` (imported on demand; it pulls in matplotlib for HTML).

The replay check (`verify.py`) is imported when first asked for: a read
command never verifies, and pays for only what it uses.
"""
from .asof import resolve_as_of
from .fold import apply, fold
from .live import Projections
from .state import EVIDENCE_KINDS, ProjectionError, RegistryState, relative_margin, tightest

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

_ON_DEMAND = {"Difference", "ReplayReport", "rebuild", "verify_projections"}


def __getattr__(name: str):
    if name not in _ON_DEMAND:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import verify

    found = getattr(verify, name)
    globals()[name] = found
    return found
