"""Hostile manifests and lock documents: whatever the JSON, parsing refuses in one line or builds a valid object."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from registry.bundles import BundleError, parse_lock, parse_manifest
from ship_helpers import make_bundle

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10 ** 400), max_value=10 ** 400),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=20)


def _valid_manifest(tmp_path_factory) -> dict:
    return json.loads((make_bundle(tmp_path_factory.mktemp("b"), "x") / "bundle.json").read_text())


@settings(max_examples=150, deadline=None, derandomize=True)
@given(document=JSON)
def test_arbitrary_json_is_refused_in_one_line(document):
    for parse in (parse_manifest, parse_lock):
        try:
            parse(document)
        except BundleError as exc:
            assert len(str(exc).splitlines()) == 1


@settings(max_examples=150, deadline=None, derandomize=True)
@given(path=st.lists(st.sampled_from(["files", 0, "path", "sha256", "size", "entry_point", "symbol", "replaces",
                                      "inputs", "shape", "stride", "compatibility", "torch", "min", "model", "id"]),
                     min_size=1, max_size=4),
       value=JSON)
def test_a_valid_manifest_with_one_value_replaced(tmp_path_factory, path, value):
    document = _valid_manifest(tmp_path_factory)
    target = document
    for key in path[:-1]:
        if isinstance(target, dict) and key in target:
            target = target[key]
        elif isinstance(target, list) and isinstance(key, int) and target:
            target = target[key]
        else:
            return
    if isinstance(target, dict) and isinstance(path[-1], str):
        target[path[-1]] = value
    try:
        manifest = parse_manifest(document)
    except BundleError as exc:
        assert len(str(exc).splitlines()) == 1
    else:
        assert parse_manifest(manifest.canonical()).digest == manifest.digest  # what is accepted round-trips
