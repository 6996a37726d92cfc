"""Evidence documents (format `registry.evidence/1`): the file, its text, and the document around the items.

Evidence is raw measurement (docs/architecture.md, "Events"). A document
names the artifact it measured, optionally the run and the payload digest it
measured, and carries at least one item (registry.formats.evidence.items),
each checked and given the statistics the registry derives itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.formats.documents import MAX_EVIDENCE_BYTES, DocumentError, load_json, read_document
from registry.formats.evidence.errors import KIT, EvidenceError, only_known
from registry.formats.evidence.schemas import SANDBOX_PROFILES, UNREPORTED, check_confinement, confinement
from registry.formats.evidence.items import parse_item
from registry.formats.fields import describe, quoted

FORMAT = "registry.evidence/1"


@dataclass(frozen=True)
class EvidenceDocument:
    artifact: str
    run: str | None
    items: list[dict[str, Any]]
    # The payload the items were measured on; the registry refuses it for any other.
    payload_sha256: str | None = None
    # The sandbox profile and harness digest of the run that wrote it (registry evaluate), or None.
    sandbox: str | None = None
    harness_sha256: str | None = None
    # What the sandbox's launcher reported it achieved: {identity, memory} (docs/evidence-format.md), or None.
    confinement: dict[str, str] | None = None


def read_document_file(path: str | Path) -> str:
    """The text of an evidence document file: a regular UTF-8 file of at most MAX_EVIDENCE_BYTES."""
    return read_document(path, "evidence document", MAX_EVIDENCE_BYTES)


def parse_document_text(text: str) -> EvidenceDocument:
    """Strict JSON, then `parse_document`.

    Refused while parsing: the NaN/Infinity tokens, a key repeated in one
    object (JSON readers keep the last silently), integers past
    MAX_INTEGER_DIGITS, and (registry.formats.documents.check_tree) nesting past
    MAX_DEPTH and strings holding a lone surrogate.
    """
    try:
        obj = load_json(text, "document")
    except DocumentError as exc:
        raise EvidenceError(str(exc)) from None
    return parse_document(obj)


def parse_document(obj: Any) -> EvidenceDocument:
    doc = KIT.mapping(obj, "document")
    only_known(doc, ("format", "artifact", "run", "payload_sha256", "sandbox", "harness_sha256", "confinement",
                     "evidence"),
               "document")
    if doc.get("format") != FORMAT:
        raise EvidenceError(f"format: expected {FORMAT!r}, got {quoted(doc.get('format'))}")
    artifact = KIT.name(KIT.required(doc, "artifact", ""), "artifact")
    run = KIT.optional(doc, "run", "", KIT.name)
    payload_sha256 = KIT.optional(doc, "payload_sha256", "", KIT.sha256)
    sandbox = KIT.optional(doc, "sandbox", "", KIT.one_of(SANDBOX_PROFILES))
    harness = KIT.optional(doc, "harness_sha256", "", KIT.sha256)
    if (sandbox is None) != (harness is None):
        raise EvidenceError("sandbox and harness_sha256 name the harness together; one without the other says nothing")
    bounds = KIT.optional(doc, "confinement", "", confinement)
    check_confinement(sandbox, bounds, "document")
    items = KIT.required(doc, "evidence", "")
    if not isinstance(items, list):
        raise EvidenceError(f"evidence: expected a list, got {describe(items)}")
    if not items:
        raise EvidenceError("evidence: empty list; a document must carry at least one item")
    parsed = [parse_item(item, f"evidence[{i}]") for i, item in enumerate(items)]
    if bounds is not None and bounds["identity"] == UNREPORTED:
        ran = next((i for i, item in enumerate(parsed) if item["kind"] != "failure"), None)
        if ran is not None:
            raise EvidenceError(f"evidence[{ran}]: a {parsed[ran]['kind']} item, and the document's confinement "
                                "is unreported: no jail was built, so nothing of the candidate's ran")
    for i, item in enumerate(parsed):
        named = (item.get("sandbox"), item.get("harness_sha256"), item.get("confinement"))
        if sandbox is not None and named != (None, None, None) and named != (sandbox, harness, bounds):
            raise EvidenceError(f"evidence[{i}]: names another sandbox, harness or confinement than the document does")
    return EvidenceDocument(artifact=artifact, run=run, items=parsed, payload_sha256=payload_sha256,
                            sandbox=sandbox, harness_sha256=harness, confinement=bounds)
