"""Canonical JSON: the one byte form of a payload that hashes and compares.

Sorted keys, no insignificant whitespace, UTF-8, and no NaN or Infinity
(JSON has no such numbers; Python's encoder would otherwise write them).
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Any


class CanonicalError(ValueError):
    """A value cannot be represented in canonical JSON."""


def _check_finite(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise CanonicalError(f"{path or 'payload'}: {value!r} is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError(f"{path or 'payload'}: key {key!r} is not a string")
            _check_finite(item, f"{path}.{key}" if path else key)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_finite(item, f"{path}[{index}]")


# One encoder for the process: `json.dumps` with options builds a new one per call.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_json(value: Any) -> str:
    """Serialise `value` canonically, refusing non-finite numbers by path.

    The encoder itself refuses NaN and infinities; only when it does is the
    value walked again to name where the bad number is.
    """
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        _check_finite(value, "")
        raise CanonicalError(f"payload is not JSON-serialisable: {exc}") from exc


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def strict_json_loads(text: str) -> Any:
    """Parse JSON, refusing the NaN/Infinity tokens Python's parser accepts by default."""

    def refuse(token: str) -> Any:
        raise CanonicalError(f"{token} is not a JSON number")

    return json.loads(text, parse_constant=refuse)
