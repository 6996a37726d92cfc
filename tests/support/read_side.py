"""The read side as tests ask it: each question its own unit of work (registry/projections/view.py).

A use case reads through one `View` for all its questions; a test usually
asks one question at a time, of a bare store, live or as of a position, and
catches up or resets the read models by themselves. `Reads(store).artifact(id)`
is `with View(store) as view: view.artifact(id, history=True)`.
"""
from __future__ import annotations

from typing import Any

from registry.events.store import EventStore
from registry.projections import ReadModels, View


class Reads:
    """One store's read side, a question per unit of work."""

    def __init__(self, store: EventStore):
        self.store = store
        self.position: int | None = None  # where the last answer stood

    def catch_up(self) -> int:
        return ReadModels(self.store).catch_up()

    def reset(self) -> int:
        return ReadModels(self.store).reset()

    def ask(self, question: str, *args: Any, as_of: int | None = None, **kwargs: Any) -> Any:
        with View(self.store, as_of=as_of) as view:
            self.position = view.position
            return getattr(view, question)(*args, **kwargs)

    def artifact(self, artifact_id: str, as_of: int | None = None) -> Any:
        """With its whole verdict history and its evidence items."""
        return self.ask("artifact", artifact_id, as_of=as_of, history=True)

    def current_artifact(self, artifact_id: str) -> Any:
        """Without its verdict history: what an append or a promote reads."""
        return self.ask("artifact", artifact_id)

    def shown_artifact(self, artifact_id: str, latest: int, as_of: int | None = None) -> Any:
        return self.ask("shown_artifact", artifact_id, latest, as_of=as_of)

    def artifacts(self, workload: str | None = None, as_of: int | None = None) -> Any:
        return self.ask("artifacts", workload, as_of=as_of)

    def workload(self, workload_id: str, as_of: int | None = None) -> Any:
        return self.ask("workload", workload_id, as_of=as_of)

    def workloads(self, as_of: int | None = None) -> Any:
        return self.ask("workloads", as_of=as_of)

    def frameset(self, name: str, as_of: int | None = None) -> Any:
        return self.ask("frameset", name, as_of=as_of)

    def artifacts_sharing_payload(self, workload: str, payload_sha256: str) -> Any:
        return self.ask("sharing_payload", workload, payload_sha256)

    def state(self, as_of: int | None = None, **kwargs: Any) -> Any:
        return self.ask("state", as_of=as_of, **kwargs)


def land_before_append(monkeypatch, *landings) -> None:
    """Each landing runs between a unit of work's reads and its next append (the seam where a concurrent
    writer lands); a landing's own appends go through at once."""
    from registry.projections.view import View

    real, pending, landing = View.append, list(landings), []

    def land_then_append(view, *args, **kwargs):
        if pending and not landing:
            landing.append(pending.pop(0))
            try:
                landing[0]()
            finally:
                landing.clear()
        return real(view, *args, **kwargs)

    monkeypatch.setattr(View, "append", land_then_append)
