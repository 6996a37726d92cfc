"""The request bodies of `registry serve`: pydantic models, strict and closed, so the OpenAPI schema is exact.

Strict: a number is a JSON number (never `true`, never a string such as
`"1_5"` or `" 2.0 "`), a string is a JSON string; closed: a field the model
does not name is refused, as the CLI refuses an option it does not know.
What a value must be beyond its type (a positive finite time, a name by the
naming rule, a label's length) is the use case's to check, so a refusal
there is the CLI's own line. Query numbers follow the CLI's number rule
(registry/formats/numbers.py: ASCII decimal digits, no `1_0`).

Responses are the JSON the CLI's `--json` prints for the same question.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from registry.formats.documents import MAX_MANIFEST_BYTES, document_text
from registry.formats.errors import UserError
from registry.formats.kinds import ARTIFACT_KINDS
from registry.formats.numbers import NumberError, parse_integer

Name = Field(min_length=1, max_length=128)
# The most pairs one batch may carry (each arm's times one list).
MOST_BATCH_PAIRS = 10_000


def _decimal_integer(value: Any) -> Any:
    """A query parameter's text read by the CLI's number rule (`1_0`, `１０` and `10.0` refused, not read as 10)."""
    if isinstance(value, str):
        try:
            return parse_integer(value, "value")
        except NumberError as refusal:
            raise ValueError(str(refusal)) from None
    return value


QueryInteger = Annotated[int, BeforeValidator(_decimal_integer)]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SessionOpen(Body):
    """Open a benchmark session for an artifact's current identity, before anything is measured."""

    device: str = Field(min_length=1, max_length=200)
    timer: str = Field(min_length=1, max_length=200)
    arch: str | None = Field(default=None, max_length=32)  # the device's architecture (sm90, cpu), as `bench open --arch`


class PairBatch(Body):
    """One batch of paired timings (seconds); `batch` is its idempotency key: a retry appends nothing."""

    batch: str = Name
    baseline_s: list[float] = Field(min_length=1, max_length=MOST_BATCH_PAIRS)
    candidate_s: list[float] = Field(min_length=1, max_length=MOST_BATCH_PAIRS)


class Registration(Body):
    """Register (or re-register with new claims) an artifact; the payload is named by its SHA-256."""

    artifact: str = Name
    workload: str = Name
    kind: Literal[ARTIFACT_KINDS]  # type: ignore[valid-type]
    backend: str | None = Field(default=None, min_length=1, max_length=200)
    payload_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    op: str | None = Field(default=None, min_length=1, max_length=200)
    entry: str | None = Field(default=None, min_length=1, max_length=400)
    # Other claims for a registered id are a new identity, refused unless asked for (`--new-identity`).
    new_identity: bool = False

    def refuse_file_entry(self) -> None:
        """A candidate file entry (`path/to/kernel.py:function`) is refused: the server would have to read and hash
        a file of its own filesystem, which no request may make it do. A built-in kernel (`registry.module:
        function`) names the server's own installed code and is taken."""
        from registry.kernels.entries import parse_entry

        if self.entry is not None and parse_entry(self.entry).path is not None:
            raise UserError(f"entry {self.entry!r} is a candidate file: the server registers only what the request "
                            "carries and reads no file of its own; register it with `registry artifact register "
                            "--entry` where the file is")


class HumanDecisionBody(Body):
    """A person's approval or revocation, with the reason and (optionally) the verdict event it answers."""

    reason: str = Field(min_length=1, max_length=10_000)
    verdict: str | None = Field(default=None, min_length=1, max_length=64)


class Declaration(Body):
    """A workload contract as the YAML text of its manifest (the file `registry workload declare` reads)."""

    manifest: str = Field(min_length=1)

    def manifest_text(self) -> str:
        """The manifest's text, within the CLI's bound on a manifest file (MAX_MANIFEST_BYTES of UTF-8)."""
        document_text(self.manifest.encode("utf-8"), "manifest", "manifest", MAX_MANIFEST_BYTES)
        return self.manifest


class LockRequest(Body):
    """Export a workload's promoted bundles to a lock signed by the server's key."""

    workload: str = Name
    valid_for: str = Field(default="7d", min_length=2, max_length=16)


# The body of POST /api/evidence: a registry.evidence/1 document (docs/evidence-format.md), checked as a whole by
# the evidence format's own reader, as `registry evidence import` checks a file.
EVIDENCE_SCHEMA: dict[str, Any] = {
    "title": "EvidenceDocument", "type": "object", "required": ["format", "artifact", "evidence"],
    "properties": {"format": {"const": "registry.evidence/1"}, "artifact": {"type": "string"},
                   "run": {"type": "string"}, "payload_sha256": {"type": "string"},
                   "evidence": {"type": "array", "minItems": 1, "items": {"type": "object"}}},
}
