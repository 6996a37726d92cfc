"""Importing a MotionKernel campaign tree: documents become events, with their origin kept.

Each JSON document found under the given paths is read, classified and
planned by `registry.evidence.motionkernel`, validated completely (raw runs
through the same `registry.evidence/1` checks as `evidence import`), and only
then appended as one batch keyed by the document's SHA-256. So:
- importing the same bytes again appends nothing (already present), wherever
  the file now lies: the key is the content, the path is only recorded;
- a changed document is a new import;
- a document that fails any check is counted with its one-line reason and
  nothing of it is written; the rest of the import proceeds.
See docs/import.md.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from registry.events.errors import ConcurrencyError, IdempotencyConflict, StoreError
from registry.events.store import Append, NewEvent
from registry.events.types import ArtifactRegistered, ExternalOutcome
from registry.evidence.motionkernel import SYSTEM, claims_motionkernel, classify, plan_import
from registry.formats.documents import DocumentError, load_json, read_document
from registry.formats.errors import UserError, first_line
from registry.formats.evidence.document import parse_document
from registry.formats.names import artifact_stream, outcomes_stream

from .context import Registry

if TYPE_CHECKING:
    from registry.projections.view import View
from .evidence import Subject, evidence_events, known_subject
from .workloads import check_claims

# A campaign document is metadata and raw timings: kilobytes. Anything far larger is not one.
MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
# MotionKernel schemas the import knowingly does not read, and why: listed as not read, never a failed read.
# Any other `motionkernel.*` schema it does not know stays unreadable (a campaign document it cannot read).
NOT_READ_SCHEMAS = {"motionkernel.support-matrix": "a summary of the support runs, which it reads one by one"}
STATUSES = ("imported", "would_import", "already_present", "unreadable", "unrecognized")


@dataclass
class DocumentResult:
    path: str
    status: str
    kind: str | None = None
    reason: str | None = None
    sha256: str | None = None
    artifact: str | None = None
    workload: str | None = None
    positions: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, "kind": self.kind, "reason": self.reason,
                "sha256": self.sha256, "artifact": self.artifact, "workload": self.workload,
                "positions": list(self.positions)}


@dataclass
class ImportSummary:
    checked_only: bool
    documents: list[DocumentResult] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        found = Counter(result.status for result in self.documents)
        return {"scanned": len(self.documents), **{status: found[status] for status in STATUSES}}

    @property
    def per_kind(self) -> dict[str, dict[str, int]]:
        table: dict[str, Counter] = {}
        for result in self.documents:
            table.setdefault(result.kind or "unknown", Counter())[result.status] += 1
        return {kind: dict(sorted(counts.items())) for kind, counts in sorted(table.items())}

    @property
    def unreadable_claims(self) -> list[DocumentResult]:
        """Documents that claim a MotionKernel schema (or were recognized) and could not be read."""
        return [result for result in self.documents if result.status == "unreadable"]

    def to_dict(self) -> dict[str, Any]:
        return {"checked_only": self.checked_only, **self.counts, "per_kind": self.per_kind,
                "documents": [result.to_dict() for result in self.documents]}


def import_motionkernel(
    registry: Registry | None,
    paths: Iterable[str | Path],
    *,
    workload: str | None = None,
    check_only: bool = False,
    progress: Callable[[DocumentResult], None] | None = None,
) -> ImportSummary:
    """Import (or, with check_only, only read and validate) every JSON document under `paths`.

    `registry` may be None only with check_only. `workload` names the workload
    for documents that name none (fidelity verdicts).
    """
    if registry is None and not check_only:
        raise UserError("an import needs a registry; only --check runs without one")
    summary = ImportSummary(checked_only=check_only)
    for root, path in _documents(paths):
        result = _import_one(registry, root, path, workload, check_only)
        summary.documents.append(result)
        if progress is not None:
            progress(result)
    return summary


def _documents(paths: Iterable[str | Path]) -> Iterator[tuple[Path, Path]]:
    """(root, file) for every JSON document: a named file is its own root's child; folders are walked, sorted."""
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise UserError(f"{given}: no such file or folder")
        if path.is_dir():
            for found in sorted(path.rglob("*.json")):
                if not found.is_symlink():
                    yield path, found
        else:
            yield path.parent, path


def _import_one(registry: Registry | None, root: Path, path: Path, workload: str | None,
                check_only: bool) -> DocumentResult:
    shown = path.relative_to(root).as_posix()
    try:
        text = read_document(path, "campaign document", MAX_DOCUMENT_BYTES)
    except DocumentError as exc:
        # The summary names the file already; the reason is what is wrong with it.
        return DocumentResult(shown, "unreadable", reason=str(exc).removeprefix(f"{path}: "))
    # The text is the file's bytes decoded as UTF-8 (no byte-order mark), so this is the file's digest.
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    result = DocumentResult(shown, "unreadable", sha256=digest)
    try:
        doc = _parse_json(text)
        result.kind = classify(doc)
        if result.kind is None and not claims_motionkernel(doc):
            result.status, result.reason = "unrecognized", "not a MotionKernel document this import reads"
            return result
        if result.kind is None and doc["schema"] in NOT_READ_SCHEMAS:
            result.status = "unrecognized"
            result.reason = f"MotionKernel schema {doc['schema']!r} is not one this import reads: " \
                            f"{NOT_READ_SCHEMAS[doc['schema']]}"
            return result
        plan = plan_import(doc, workload=workload)
        items = parse_document(plan.evidence).items if plan.evidence is not None else []
    except UserError as exc:  # MotionKernelError, EvidenceError, DocumentError, a name refused: this document only
        result.reason = str(exc)
        return result
    result.artifact, result.workload = plan.artifact, plan.workload
    if check_only:
        result.status = "would_import"
        return result
    origin = {"system": SYSTEM, "path": shown, "sha256": digest, "kind": plan.kind,
              "schema": plan.schema, "schema_version": plan.schema_version, "document_time": plan.document_time}
    try:
        result.positions, appended = _record(registry, plan, items, origin)
    except IdempotencyConflict:
        # The same bytes were imported from another path: the key is the content's digest.
        result.status = "already_present"
        return result
    except (UserError, StoreError) as exc:  # a refusal; anything else is a defect and surfaces as one
        result.reason = first_line(exc)
        return result
    result.status = "imported" if appended else "already_present"
    return result


# How many times a document's batch is planned again when another writer moved its stream meanwhile.
IMPORT_TRIES = 8


def _record(registry: Registry, plan, items: list[dict[str, Any]], origin: dict[str, Any]) -> tuple[list[int], bool]:
    """Append the document as one keyed batch: its artifact's registration when new, its evidence, its outcomes.

    All or nothing: an interrupted import leaves no registration without the
    rest of its document. Another import may register the same artifact or
    append to its stream meanwhile (concurrent imports of one tree): the
    batch is then planned again on the new state, so every document lands
    exactly once (the key is its digest).
    """
    key = f"{SYSTEM}:{origin['sha256']}"
    outcomes = [NewEvent(ExternalOutcome.type, ExternalOutcome(**record, origin=origin)) for record in plan.outcomes]
    if plan.artifact is None:
        placed = Append(outcomes_stream(plan.workload), outcomes, registry.actor, None, key)
        done = registry.store.append_batch(placed)
        return done.positions, done.new
    stream = artifact_stream(plan.artifact)
    for _ in range(IMPORT_TRIES):
        with registry.view() as view:
            registered, subject = _registration(view, plan, origin)
            events = [*registered, *evidence_events(subject, None, items, origin=origin), *outcomes]
            try:
                # A stream this import registers must still be new when the batch lands.
                done = view.append(stream, events, expected_version=0 if registered else None, idempotency_key=key)
            except ConcurrencyError:
                continue
        return done.positions, done.new
    raise UserError(f"artifact {plan.artifact} kept changing while this document was imported "
                     f"({IMPORT_TRIES} tries); nothing recorded: import it again")


def _registration(view: View, plan, origin: dict[str, Any]) -> tuple[list[NewEvent], Subject]:
    """The registration event a new artifact needs (none for a known one), and what its evidence is about.

    An artifact the document names is registered against its workload,
    declared or not (no contract is invented); one registered as something
    else refuses the document. A known artifact's registration is its
    read-model row (`known_subject`), never its stream.
    """
    current = known_subject(view, plan.artifact)
    if current is not None:
        registered = current.registration
        if registered["workload"] != plan.workload or registered["kind"] != plan.artifact_kind:
            raise UserError(
                f"artifact {plan.artifact} is registered as a {registered['kind']} of workload "
                f"{registered['workload']}, but this document describes a {plan.artifact_kind} of workload "
                f"{plan.workload}"
            )
        return [], current
    check_claims(plan.artifact, workload=plan.workload, kind=plan.artifact_kind, backend=plan.backend)
    event = ArtifactRegistered(artifact=plan.artifact, workload=plan.workload, kind=plan.artifact_kind,
                               backend=plan.backend, payload_sha256=None, origin=origin)
    return [NewEvent(event.type, event)], Subject(plan.artifact, event.model_dump())


def _parse_json(text: str) -> Any:
    """Strict JSON through the shared reader (registry.formats.documents.load_json); a DocumentError refuses it."""
    return load_json(text, "document")

