"""SHA-256 digests as the registry writes them: 64 lowercase hex digits.

Payload digests, identities, chain hashes and bundle file digests are all
compared as text, so one spelling is the only one accepted: an uppercase or
shortened digest would name the same bytes and compare unequal.
"""
from __future__ import annotations

import re
from typing import Any

# The pattern as a string, for schemas that take one (pydantic's `pattern=`, whose `$` ends the text).
SHA256_PATTERN = r"^[0-9a-f]{64}$"
# Python's `$` also matches before a final newline, so the check here matches the whole string.
_SHA256 = re.compile(r"[0-9a-f]{64}")


def is_sha256(value: Any) -> bool:
    """Whether `value` is a str of exactly 64 lowercase hex digits."""
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None
