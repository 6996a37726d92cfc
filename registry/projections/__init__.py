"""Read models folded from the event log: live tables, time travel, replay verification, reports.

- `View(store, actor=..., as_of=...)`: one unit of work (view.py), entered with `with`: one catch-up, one
  snapshot, typed answers (`artifact`, `workload`, `contract`, `speed_record`, `sharing_payload`,
  `workload_artifacts`, `state`, ...) and `append`; `Registry.view()` (app/context.py) opens one.
- `ReadModels(store)`: `catch_up()`, `reset()` (catchup.py).
- `resolve_as_of(store, text)`: a position or an ISO-8601 time -> a log position.
- `rebuild(store)`, `verify_projections(store) -> ReplayReport`.
- `apply(state, event)` / `fold(state, events)`: the pure fold over `RegistryState`, dispatched to the
  handlers each read model declares (read_models/).
- Reports: `registry.projections.report` (imported on demand; it pulls in matplotlib for HTML).

The replay check (`verify.py`) is imported when first asked for: a read
command never verifies, and pays for only what it uses.
"""
from .asof import resolve_as_of
from .catchup import ReadModels
from .errors import ProjectionError
from .fold import apply, fold
from .read_models import EVIDENCE_KINDS, RegistryState
from .read_models.artifacts import relative_margin, tightest
from .view import View

__all__ = [
    "EVIDENCE_KINDS",
    "Difference",
    "ProjectionError",
    "ReadModels",
    "RegistryState",
    "ReplayReport",
    "View",
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
