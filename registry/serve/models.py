"""The request bodies of `registry serve`: pydantic models, strict and closed, so the OpenAPI schema is exact.

Responses are the JSON the CLI's `--json` prints for the same question.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from registry.formats.kinds import ARTIFACT_KINDS

Name = Field(min_length=1, max_length=128)


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionOpen(Body):
    """Open a benchmark session for an artifact's current identity, before anything is measured."""

    device: str = Field(min_length=1, max_length=200)
    timer: str = Field(min_length=1, max_length=200)
    arch: str | None = Field(default=None, max_length=32)  # the device's architecture (sm90, cpu), as `bench open --arch`


class PairBatch(Body):
    """One batch of paired timings (seconds); `batch` is its idempotency key: a retry appends nothing."""

    batch: str = Name
    baseline_s: list[float] = Field(min_length=1, max_length=10_000)
    candidate_s: list[float] = Field(min_length=1, max_length=10_000)


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


class HumanDecisionBody(Body):
    """A person's approval or revocation, with the reason and (optionally) the verdict event it answers."""

    reason: str = Field(min_length=1, max_length=10_000)
    verdict: str | None = Field(default=None, min_length=1, max_length=64)


class Declaration(Body):
    """A workload contract as the YAML text of its manifest (the file `registry workload declare` reads)."""

    manifest: str = Field(min_length=1, max_length=1_000_000)


class LockRequest(Body):
    """Export a workload's promoted bundles to a lock signed by the server's key."""

    workload: str = Name
    valid_for: str = Field(default="7d", min_length=2, max_length=16)


EvidenceDocument = dict[str, Any]
