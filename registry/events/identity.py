"""The identity of a candidate artifact: one definition, read by the app layer and the projections.

Kept apart from the pydantic models (types.py) so that reading projected
state never pays for importing them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .canonical import canonical_json, sha256_hex

# What a registration claims. A bundle's manifest is covered by its digest, the payload hash.
IDENTITY_FIELDS = ("workload", "kind", "payload_sha256", "backend", "op", "entry")


def artifact_identity(registration: Mapping[str, Any]) -> str:
    """The digest of everything a registration claims: what one decision is about.

    Two registrations with the same identity describe the same candidate; any
    other change (payload, kind, backend, operation, entry point, workload)
    is a new candidate whose evidence and verdicts start from nothing.
    """
    return sha256_hex(canonical_json({key: registration.get(key) for key in IDENTITY_FIELDS}))
