"""Canonical JSON: the one byte form of a payload that hashes and compares.

Sorted keys, no insignificant whitespace, UTF-8, and no NaN or Infinity
(JSON has no such numbers; Python's encoder would otherwise write them), nor
a lone surrogate (a str can hold one, UTF-8 cannot: it would fail only when
the text is hashed or stored, inside the append lock).
"""
from __future__ import annotations

import hashlib
import json
import math
from json.encoder import c_make_encoder, encode_basestring
from typing import Any

from registry.formats.text import is_unicode_text, printable_path
from registry.formats.errors import UserError



class CanonicalError(UserError):
    """A value cannot be represented in canonical JSON."""


def _check_value(value: Any, path: str) -> None:
    """Find where `value` cannot be canonical JSON: a non-finite number, a non-string key, a lone surrogate."""
    where = printable_path(path) or "payload"
    if isinstance(value, float) and not math.isfinite(value):
        raise CanonicalError(f"{where}: {value!r} is not a finite number")
    if isinstance(value, str) and not is_unicode_text(value):
        raise CanonicalError(f"{where}: text holds a lone surrogate (U+D800 to U+DFFF), which is not valid Unicode")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise CanonicalError(f"{where}: key {key!r} is not a string")
            inner = f"{path}.{key}" if path else key
            if not is_unicode_text(key):
                raise CanonicalError(f"{printable_path(inner)}: the key holds a lone surrogate (U+D800 to U+DFFF), "
                                     "which is not valid Unicode")
            _check_value(item, inner)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]")


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# One encoder for the process, CPython's C encoder called directly: `JSONEncoder.encode` builds a new one
# and a closure on every call, a fifth of an encoding. Without a table of the containers it is inside
# (`markers`) it keeps no state between calls, so threads share it; a container that holds itself recurses
# until Python's recursion limit, refused below like any value nested too deeply.
_C_ENCODER = c_make_encoder(None, _not_json, encode_basestring, None, ":", ",", True, False, False)


def encode_json(value: Any) -> str:
    """The canonical text of a value the encoder takes, without the checks `canonical_json` makes when it
    refuses one: for callers that handle a refusal themselves (plain_payloads.py)."""
    return "".join(_C_ENCODER(value, 0))


def canonical_json(value: Any) -> str:
    """Serialise `value` canonically, refusing non-finite numbers and lone surrogates by path.

    The encoder itself refuses NaN and infinities; only when it does, or when
    the text it wrote is not ASCII and does not encode to UTF-8, is the value
    walked again to name where the bad value is.
    """
    try:
        text = encode_json(value)
    except RecursionError:
        raise CanonicalError("payload is nested too deeply (or holds itself)") from None
    except (TypeError, ValueError) as exc:
        _check_value(value, "")
        raise CanonicalError(f"payload is not JSON-serialisable: {exc}") from exc
    if not is_unicode_text(text):
        _check_value(value, "")
        raise CanonicalError("payload holds text that is not valid Unicode")
    return text


def sha256_hex(text: str | bytes) -> str:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def _refuse_constant(token: str) -> Any:
    raise CanonicalError(f"{token} is not a JSON number")


# One decoder for the process, as `json.loads` keeps one for calls without options: with an option it
# builds a new decoder and scanner on every call, about a tenth of decoding a 1 kB payload (a replay
# decodes hundreds of thousands). The scanner keeps no state between calls but a cache of key strings.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_SCAN = _STRICT_DECODER.scan_once


def strict_json_loads(text: str) -> Any:
    """Parse JSON, refusing the NaN/Infinity tokens Python's parser accepts by default.

    A text that is one JSON value from its first character to its last (all
    canonical JSON) is scanned directly; any other (whitespace around the
    value, extra data, no value) goes through the decoder's full path, which
    accepts or refuses it exactly as `json.loads` does.
    """
    if not isinstance(text, str):
        return json.loads(text, parse_constant=_refuse_constant)  # bytes: json.loads detects their encoding
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _STRICT_DECODER.decode(text)
    return value if end == len(text) else _STRICT_DECODER.decode(text)
