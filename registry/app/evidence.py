"""Recording evidence: imported documents and frame-set measurements become events."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.contracts.names import check_name
from registry.events.store import NewEvent
from registry.events.types import EVIDENCE_EVENT_BY_KIND, EvaluationFailed

from .context import Registry
from .workloads import artifact_stream, registration


def evidence_events(artifact: str, payload_sha256: str | None, run: str | None, items: list[dict[str, Any]],
                    origin: dict[str, Any] | None = None) -> list[NewEvent]:
    """One event per parsed evidence item; a `failure` item becomes EvaluationFailed.

    `origin` names the imported document the items came from (docs/import.md).
    """
    events = []
    for item in items:
        if item["kind"] == "failure":
            payload = EvaluationFailed(artifact=artifact, payload_sha256=payload_sha256, run=run,
                                       stage=item["stage"], error=item["error"], origin=origin)
        else:
            payload = EVIDENCE_EVENT_BY_KIND[item["kind"]](artifact=artifact, payload_sha256=payload_sha256,
                                                           run=run, item=item, origin=origin)
        events.append(NewEvent(payload.type, payload))
    return events


@dataclass(frozen=True)
class Recorded:
    """Where a batch of evidence is in the log, and whether this call put it there.

    `appended` is False when the run id's batch was recorded before: the
    positions are then the original ones and nothing new was written.
    """

    positions: list[int]
    appended: bool


def record_evidence(registry: Registry, artifact: str, items: list[dict[str, Any]], run: str | None = None) -> Recorded:
    """Append parsed items for the artifact's current payload as one atomic batch.

    A run id makes the append idempotent: a worker that retries the same run
    after a timeout appends it once. A new batch always lands after the head
    read just before the append; a recorded one is found at or before it.
    """
    if run is not None:
        check_name(run, "run id")
    if not items:
        raise ValueError("an evidence document needs at least one item")
    registered = registration(registry, artifact)
    stream = artifact_stream(artifact)
    key = f"evidence:{artifact}:{run}" if run else None
    head = registry.store.head_position()
    positions = registry.store.append(
        stream, evidence_events(artifact, registered["payload_sha256"], run, items),
        idempotency_key=key, actor=registry.actor,
    )
    return Recorded(positions, positions[0] > head)


def import_document(registry: Registry, text: str) -> tuple[str, Recorded]:
    """Validate a `registry.evidence/1` document completely, then append it."""
    from registry.evidence.document import parse_document_text

    document = parse_document_text(text)
    return document.artifact, record_evidence(registry, document.artifact, document.items, document.run)
