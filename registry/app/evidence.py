"""Recording evidence: imported documents and measurements become events bound to what was measured.

Evidence is about one identity of an artifact (events.types.artifact_identity):
the registration is captured once, before anything is measured, and every
event carries that identity and its payload hash. The append refuses (one
line, nothing written) when the registration has changed since the capture;
if a re-registration lands between that check and the append, the event still
names the identity it measured and the projection does not count it for the
new one. A measurement is never lent to a registration it did not measure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.events.store import NewEvent
from registry.events.types import EVIDENCE_EVENT_BY_KIND, IDENTITY_FIELDS, EvaluationFailed, artifact_identity

from .context import Registry
from .workloads import artifact_stream, registration


@dataclass(frozen=True)
class Subject:
    """An artifact's registration as captured before measuring: what the evidence is about."""

    artifact: str
    registration: dict[str, Any]

    @property
    def identity(self) -> str:
        return artifact_identity(self.registration)

    @property
    def payload_sha256(self) -> str | None:
        return self.registration.get("payload_sha256")


def capture_subject(registry: Registry, artifact: str) -> Subject:
    """The artifact's current registration (a one-line error for an unknown artifact)."""
    return Subject(artifact, registration(registry, artifact))


def _short(digest: str | None) -> str:
    return "none" if digest is None else digest[:12]


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> str:
    return ", ".join(key for key in IDENTITY_FIELDS if before.get(key) != after.get(key))


def evidence_events(subject: Subject, run: str | None, items: list[dict[str, Any]]) -> list[NewEvent]:
    """One event per parsed evidence item; a `failure` item becomes EvaluationFailed."""
    bound = {"artifact": subject.artifact, "identity": subject.identity, "payload_sha256": subject.payload_sha256,
             "run": run}
    events = []
    for item in items:
        if item["kind"] == "failure":
            payload = EvaluationFailed(**bound, stage=item["stage"], error=item["error"])
        else:
            payload = EVIDENCE_EVENT_BY_KIND[item["kind"]](**bound, item=item)
        events.append(NewEvent(payload.type, payload))
    return events


def record_evidence(registry: Registry, subject: Subject, items: list[dict[str, Any]],
                    run: str | None = None) -> list[int]:
    """Append parsed items measured on `subject` as one atomic batch, if it is still the registration.

    A run id makes the append idempotent: a worker that retries the same run
    after a timeout appends it once.
    """
    if not items:
        raise ValueError("an evidence document needs at least one item")
    now = capture_subject(registry, subject.artifact)
    if now.identity != subject.identity:
        raise ValueError(
            f"artifact {subject.artifact} was re-registered while its evidence was measured "
            f"({_changed_fields(subject.registration, now.registration)} changed); nothing recorded: measure it again"
        )
    key = f"evidence:{subject.artifact}:{run}" if run else None
    return registry.store.append(artifact_stream(subject.artifact), evidence_events(subject, run, items),
                                 idempotency_key=key, actor=registry.actor)


def import_document(registry: Registry, text: str) -> tuple[str, list[int]]:
    """Validate a `registry.evidence/1` document completely, then append it for the payload it names."""
    from registry.evidence.document import parse_document_text

    document = parse_document_text(text)
    subject = capture_subject(registry, document.artifact)
    if document.payload_sha256 is not None and document.payload_sha256 != subject.payload_sha256:
        raise ValueError(
            f"payload_sha256: the document measured payload {_short(document.payload_sha256)}, but artifact "
            f"{document.artifact} is registered with payload {_short(subject.payload_sha256)}; nothing recorded"
        )
    return document.artifact, record_evidence(registry, subject, document.items, document.run)
