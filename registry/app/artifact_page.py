"""One artifact's page (the HTML report's and the live view's): its state, every verdict with its reasons, its
speed record's running bounds, and its monitor's re-measurements against the threshold with the alarm.

The state, the speed record and the monitor come from the read models, as
`show` reads them, through one view (`report_pages`: one for every page). Verdict reasons and re-measured pairs are kept only in the
artifact's own events (the read models keep a verdict's decision and rule,
and a monitor's detector state), so the page reads the artifact's stream a
page at a time, as `history` does, keeping only `VerdictRendered` and the
current identity's `PairsRemeasured`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from registry.formats.errors import UserError
from registry.formats.names import artifact_stream

from .context import Registry
from .record_summary import summarize_record

if TYPE_CHECKING:
    from registry.events.store import EventStore
    from registry.projections.view import View


@dataclass(frozen=True)
class ArtifactPage:
    state: dict[str, Any]  # the artifact's projected state (its evidence items attached)
    workload: dict[str, Any] | None  # its workload's state, None when undeclared
    verdicts: list[dict[str, Any]]  # every verdict, oldest first, with its reasons
    record: dict[str, Any] | None  # the speed record of its bytes (summarize_record), None without one
    monitor: dict[str, Any] | None  # the current identity's monitor (read_models/monitors.py monitor_summary)
    remeasured: list[dict[str, Any]]  # the current identity's monitor batches, oldest first

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "workload": self.workload, "verdicts": self.verdicts, "record": self.record,
                "monitor": self.monitor, "remeasured": self.remeasured}


def artifact_page(registry: Registry, artifact: str, as_of: int | None = None) -> ArtifactPage:
    """The page of `artifact` now, or as of a log position; an unknown artifact is refused."""
    with registry.view(as_of=as_of) as view:
        return _page(view, artifact, as_of)


def _page(view: View, artifact: str, as_of: int | None) -> ArtifactPage:
    """The page of `artifact` as of the view's position: its rows as `show` reads them, then its stream up to
    the same position."""
    from registry.projections.read_models.monitors import current_monitor, monitor_summary

    state, _ = view.shown_artifact(artifact, 0)
    if state is None:
        raise UserError(f"unknown artifact {artifact!r}" + ("" if as_of is None else f" as of position {as_of}"))
    workload = view.workload(state["workload"])
    read = view.speed_record(state, workload) if workload is not None else None
    record = summarize_record(read) if read is not None and read.row is not None else None
    monitor = current_monitor(state)
    verdicts, remeasured = _from_stream(view.store, state["artifact"], state["identity"],
                                        None if monitor is None else monitor["started_position"], view.position)
    return ArtifactPage(state, workload, verdicts, record, monitor_summary(state), remeasured)


def _from_stream(store: EventStore, artifact: str, identity: str, monitor_start: int | None,
                 up_to: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    verdicts, batches = [], []
    for event in store.iter_stream(artifact_stream(artifact), up_to_position=up_to):
        payload = event.payload
        if event.type == "VerdictRendered":
            verdict = payload["verdict"]
            verdicts.append({"position": event.position, "recorded_at": event.recorded_at.isoformat(),
                             "actor": event.actor, "decision": verdict["decision"], "rule": verdict["rule"],
                             "reasons": verdict["reasons"], "contract_version": payload["contract_version"],
                             "payload_sha256": payload.get("payload_sha256"), "speedup": verdict.get("speedup")})
        elif event.type == "PairsRemeasured" and payload["identity"] == identity and monitor_start is not None \
                and event.position >= monitor_start:
            batches.append({"position": event.position, "recorded_at": event.recorded_at.isoformat(),
                            "batch": payload["batch"], "device": payload["device"],
                            "ratios": [b / c for b, c in zip(payload["baseline_s"], payload["candidate_s"])],
                            "threshold": payload["threshold"]})
    return verdicts, batches


# The most artifact pages one HTML report holds (as it draws at most 48 figures of a kind); it says how many more.
MOST_PAGES = 48


def report_pages(registry: Registry, artifacts: list[str], as_of: int | None = None) -> tuple[list[dict], int]:
    """The pages of the report's artifacts (at most MOST_PAGES, by id), as of a position; and how many more."""
    chosen = sorted(artifacts)[:MOST_PAGES]
    with registry.view(as_of=as_of) as view:
        return [_page(view, name, as_of).to_dict() for name in chosen], len(artifacts) - len(chosen)
