"""registry/events/canonical.py: the strict JSON reader agrees with `json.loads` on every text, good or bad."""
from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.events.canonical import CanonicalError, canonical_json, strict_json_loads


def _reference(text):
    """What the reader did before it kept one decoder: `json.loads` with a refusing parse_constant."""
    def refuse(token):
        raise CanonicalError(f"{token} is not a JSON number")
    return json.loads(text, parse_constant=refuse)


def _outcome(read, text):
    try:
        return "value", read(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and CanonicalError are ValueErrors
        return type(exc).__name__, str(exc)


# Pieces of JSON and of things that are not: whitespace around and inside, extra data, the constants
# Python's parser would accept, unterminated strings and containers, escapes.
_PIECES = ["{", "}", "[", "]", ":", ",", '"a"', '"b"', '"\\"', '"\\u00e9"', '"', "1", "-0", "1.5e3", "0.1",
           "NaN", "Infinity", "-Infinity", "true", "null", " ", "\n", "\t", "x", "\\"]
_texts = st.lists(st.sampled_from(_PIECES), max_size=14).map("".join)
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)


def _same(left, right) -> bool:
    """Equal outcomes, with -0.0 and 0.0 told apart (== would not)."""
    if isinstance(left, float) and isinstance(right, float):
        return left == right and math.copysign(1, left) == math.copysign(1, right)
    return left == right and type(left) is type(right)


@settings(max_examples=500, deadline=None)
@given(text=_texts)
def test_any_text_reads_as_json_loads_reads_it(text):
    assert _outcome(strict_json_loads, text) == _outcome(_reference, text)


@settings(max_examples=200, deadline=None)
@given(value=_values, before=st.sampled_from(["", " ", "\n"]), after=st.sampled_from(["", " ", "\n", "x", "1"]))
def test_canonical_text_with_or_without_surroundings_reads_as_json_loads_reads_it(value, before, after):
    text = before + canonical_json(value) + after
    ours, theirs = _outcome(strict_json_loads, text), _outcome(_reference, text)
    assert ours[0] == theirs[0] and (ours[1] == theirs[1] or _same(ours[1], theirs[1]))


def test_bytes_are_read_as_json_loads_reads_them():
    assert strict_json_loads('{"a":[1,2.5]}'.encode("utf-16")) == {"a": [1, 2.5]}
