"""`replay`: every read-model row rebuilt from the log, or compared with a fresh fold of it.

The read models are derived (registry/projections/), so a damaged or stale
one is rebuilt whole, never caught up: `rebuild_read_models` replaces every
row with a fold of the log, `verify_read_models` compares every row with one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .context import Registry

if TYPE_CHECKING:
    from registry.projections.verify import ReplayReport


def rebuild_read_models(registry: Registry) -> dict[str, Any]:
    """Replace every read-model row with a fresh fold of the whole log: how many events and artifacts it folded."""
    from registry.projections import ReadModels

    position = ReadModels(registry.store).reset()
    with registry.view(as_of=position) as view:
        state = view.state(items=False)  # counted, not shown
    return {"events": state.position, "artifacts": len(state.artifacts)}


def verify_read_models(registry: Registry) -> ReplayReport:
    """Every read-model row compared with a fresh fold of the log up to their checkpoint."""
    from registry.projections import verify_projections

    return verify_projections(registry.store)
