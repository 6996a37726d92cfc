"""Recording evidence: imported documents and measurements become events bound to what was measured.

Evidence is about one identity of an artifact (events.identity.artifact_identity):
the registration is captured once, before anything is measured, and every
event carries that identity and its payload hash. The append refuses (one
line, nothing written) when the registration has changed since the capture;
if a re-registration lands between that check and the append, the event still
names the identity it measured and the projection does not count it for the
new one. A measurement is never lent to a registration it did not measure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from registry.formats.errors import UserError
from registry.events.identity import IDENTITY_FIELDS, artifact_identity
from registry.events.store import NewEvent
from registry.events.types import EVIDENCE_EVENT_BY_KIND, EvaluationFailed
from registry.formats.names import artifact_stream, check_name
from registry.formats.text import text_arguments

from .context import Registry

if TYPE_CHECKING:
    from registry.projections.view import View

# The registration facts an artifact's read model keeps (projections/read_models/artifacts.py, `describe`).
REGISTRATION_FIELDS = ("artifact", "workload", "kind", "backend", "op", "entry", "payload_sha256", "bundle")


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


@text_arguments
def capture_subject(registry: Registry, artifact: str) -> Subject:
    """The artifact's current registration, from its caught-up read model (a one-line error for an unknown one).

    One indexed row, however long the artifact's stream: the read model keeps
    the latest registration's facts, which are what its identity is made of.
    """
    with registry.view() as view:
        return subject_of(artifact, view.artifact(artifact))


def subject_of(artifact: str, state: dict[str, Any] | None) -> Subject:
    """The registration an artifact's read-model row holds; a one-line error for an artifact without one."""
    if state is None:
        raise UserError(f"unknown artifact {artifact!r} (register it with `registry artifact register`)")
    return Subject(artifact, {key: state.get(key) for key in REGISTRATION_FIELDS})


def known_subject(view: View, artifact: str) -> Subject | None:
    """The artifact's current registration as `view` reads it, or None if it was never registered."""
    state = view.artifact(artifact)
    return None if state is None else subject_of(artifact, state)


def _digest_text(digest: str | None) -> str:
    """A payload digest in full: the user types it back into the document's payload_sha256."""
    return "none" if digest is None else digest


def _changed_fields(before: dict[str, Any], after: dict[str, Any]) -> str:
    return ", ".join(key for key in IDENTITY_FIELDS if before.get(key) != after.get(key))


def evidence_events(subject: Subject, run: str | None, items: list[dict[str, Any]],
                    origin: dict[str, Any] | None = None) -> list[NewEvent]:
    """One event per parsed evidence item, bound to `subject`; a `failure` item becomes EvaluationFailed.

    `origin` names the imported document the items came from (docs/import.md).
    """
    bound = {"artifact": subject.artifact, "identity": subject.identity, "payload_sha256": subject.payload_sha256,
             "run": run, "origin": origin}
    events = []
    for item in items:
        if item["kind"] == "failure":
            payload = EvaluationFailed(**bound, stage=item["stage"], error=item["error"])
        else:
            payload = EVIDENCE_EVENT_BY_KIND[item["kind"]](**bound, item=item)
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


@text_arguments
def record_evidence(registry: Registry, subject: Subject, items: list[dict[str, Any]],
                    run: str | None = None) -> Recorded:
    """Append parsed items measured on `subject` as one atomic batch, if it is still the registration.

    A run id makes the append idempotent: a worker that retries the same run
    after a timeout appends it once, and hears that it did not append it again.
    """
    with registry.view() as view:
        return _recorded(view, subject, items, run)


def _recorded(view: View, subject: Subject, items: list[dict[str, Any]], run: str | None) -> Recorded:
    """`record_evidence` in a unit of work: the registration read again, then the batch appended."""
    if run is not None:
        check_name(run, "run id")
    if not items:
        raise UserError("an evidence document needs at least one item")
    now = subject_of(subject.artifact, view.artifact(subject.artifact))
    if now.identity != subject.identity:
        raise UserError(
            f"artifact {subject.artifact} was re-registered while its evidence was measured "
            f"({_changed_fields(subject.registration, now.registration)} changed); nothing recorded: measure it again"
        )
    key = f"evidence:{subject.artifact}:{run}" if run else None
    placed = view.append(artifact_stream(subject.artifact), evidence_events(subject, run, items),
                         idempotency_key=key)
    return Recorded(placed.positions, placed.new)


@text_arguments
def import_document(registry: Registry, text: str, *,
                    authorize: Callable[[str], None] | None = None) -> tuple[str, Recorded]:
    """Validate a `registry.evidence/1` document completely, then append it for the payload it names.

    `authorize(workload)` (the server's scope check) runs once the artifact's workload is known, before anything
    is appended."""
    from registry.formats.evidence.document import parse_document_text

    document = parse_document_text(text)
    with registry.view() as view:
        state = view.artifact(document.artifact)
        subject = subject_of(document.artifact, state)
        if authorize is not None:
            authorize(subject.registration["workload"])
        if document.payload_sha256 is not None and document.payload_sha256 != subject.payload_sha256:
            raise UserError(
                f"payload_sha256: the document measured payload {_digest_text(document.payload_sha256)}, but artifact "
                f"{document.artifact} is registered with payload {_digest_text(subject.payload_sha256)}; nothing recorded"
            )
        if document.payload_sha256 is None:
            _check_unambiguous(state or {}, subject)
        return document.artifact, _recorded(view, subject, document.items, document.run)


def _check_unambiguous(state: dict[str, Any], subject: Subject) -> None:
    """A document that names no payload binds only where no other bytes were ever registered under its artifact.

    Once an artifact has been registered with more than one payload, nothing
    shows which of them an unnamed measurement ran on, so the document must
    name the payload it measured (docs/gate.md, "Evidence is bound to what
    was measured").
    """
    payloads = state.get("registered_payloads") or [subject.payload_sha256]
    if len(payloads) > 1:
        raise UserError(
            f"payload_sha256: artifact {subject.artifact} has been registered with {len(payloads)} payloads, so a "
            "document that names none cannot show which one it measured; nothing recorded: add payload_sha256"
        )
