"""The small vocabularies of registry.formats: stream names, digests, dtypes, artifact kinds, storable text.

Each is defined once and used by every layer above; these tests pin the
meaning each layer relies on (a stream name splits back into its kind and
id, a digest has exactly one spelling, a dtype name is known or refused).
"""
from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.formats.digests import SHA256_PATTERN, is_sha256
from registry.formats.dtypes import is_floating_dtype, is_known_dtype, normalize_dtype
from registry.formats.kinds import ARTIFACT_KINDS
from registry.formats.names import (
    ARTIFACT_PREFIX,
    FRAMESET_PREFIX,
    STREAM_PREFIXES,
    WORKLOAD_PREFIX,
    artifact_stream,
    frameset_stream,
    name_problem,
    workload_stream,
)
from registry.formats.text import is_unicode_text, printable_path


@given(st.text(min_size=1, max_size=128))
def test_a_stream_name_splits_back_into_its_kind_and_a_valid_name(name):
    for build, prefix in ((artifact_stream, ARTIFACT_PREFIX), (workload_stream, WORKLOAD_PREFIX),
                          (frameset_stream, FRAMESET_PREFIX)):
        stream = build(name)
        if name_problem(name) is None:
            # a name holds no ':', so the first colon always ends the prefix
            kind, _, rest = stream.partition(":")
            assert f"{kind}:" == prefix and rest == name
            assert sum(stream.startswith(other) for other in STREAM_PREFIXES) == 1


def test_the_stream_names_are_those_of_the_log():
    assert (artifact_stream("a1"), workload_stream("w"), frameset_stream("f")) == \
        ("artifact:a1", "workload:w", "frameset:f")


def test_a_stream_name_fits_the_store_s_limit_for_every_valid_name():
    # the store refuses stream names over 200 characters; a name is at most 128
    assert max(len(build("n" * 128)) for build in (artifact_stream, workload_stream, frameset_stream)) <= 200


@given(st.binary(max_size=64))
def test_every_digest_the_registry_computes_is_a_sha256_and_only_that_spelling_is(data):
    digest = hashlib.sha256(data).hexdigest()
    assert is_sha256(digest)
    assert not is_sha256(digest.upper()) or digest.upper() == digest  # hex digits only: upper differs if a-f
    assert not is_sha256(digest[:-1]) and not is_sha256(digest + "0") and not is_sha256(digest.encode())


@pytest.mark.parametrize("value", [None, 64, "g" * 64, " " + "a" * 63, "a" * 63 + "\n", "a" * 64 + "\n"])
def test_near_digests_are_not_digests(value):
    assert not is_sha256(value)


@pytest.mark.parametrize("value", ["a" * 64, "a" * 64 + "\n", "A" * 64, "a" * 63])
def test_the_pattern_for_payload_schemas_agrees_with_the_check(value):
    """The event payloads' identity field (pydantic, `pattern=SHA256_PATTERN`) takes exactly the digests is_sha256 does."""
    from pydantic import BaseModel, Field, ValidationError

    class Digest(BaseModel):
        value: str = Field(pattern=SHA256_PATTERN)

    try:
        Digest(value=value)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted is is_sha256(value)


@pytest.mark.parametrize("name, known, floating", [
    ("bfloat16", True, True), ("torch.float32", True, True), ("float8_e4m3fn", True, True),
    ("int8", True, False), ("uint4", True, False), ("bool", True, False), ("torch.qint8", True, False),
    ("float", False, False), ("fp16", False, False), ("int128", False, False), ("", False, False),
])
def test_dtype_names_are_known_or_typos_and_only_floating_ones_take_tolerances(name, known, floating):
    assert is_known_dtype(name) is known and is_floating_dtype(name) is floating
    assert normalize_dtype(name) == name.removeprefix("torch.")


def test_artifact_kinds_are_the_ones_events_gate_and_cli_accept():
    from registry.events.types import ArtifactRegistered
    from registry.gate import ArtifactFacts

    assert ARTIFACT_KINDS == ("fused_kernel", "attention_backend", "step_cache", "module", "triton_kernel")
    for kind in ARTIFACT_KINDS:
        ArtifactFacts("a", kind)
        ArtifactRegistered(artifact="a", kind=kind, workload="w")
    with pytest.raises(ValueError):
        ArtifactFacts("a", "kernel")


@given(st.text())
def test_text_is_storable_exactly_when_it_encodes_to_utf8(text):
    try:
        text.encode("utf-8")
        encodes = True
    except UnicodeEncodeError:
        encodes = False
    assert is_unicode_text(text) is encodes
    shown = printable_path(text)
    assert shown.isprintable() and is_unicode_text(shown)


@pytest.mark.parametrize("error,line", [
    (ValueError("bad field\nmore detail"), "bad field"),
    (KeyError(), "KeyError"),  # an empty message: the type's name, never an IndexError
    (RuntimeError(""), "RuntimeError"),
    (OSError("\n  \nafter blank lines"), "after blank lines"),
])
def test_first_line_of_any_error_is_one_printable_line(error, line):
    from registry.formats.errors import first_line

    assert first_line(error) == line
