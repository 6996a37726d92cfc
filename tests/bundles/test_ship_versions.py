"""Compatibility windows follow PEP 440's specifier semantics (packaging), not a plain version sort."""
from __future__ import annotations

import json

import pytest

from registry.bundles import BundleError, CallSite, Candidate, Profile, parse_manifest, resolve
from registry.bundles.manifest import VersionRange
from ship_helpers import make_bundle

WINDOW = VersionRange(min="2.4", max_exclusive="3.0")


@pytest.mark.parametrize("version", ["3.0.0rc1", "3.0.0a1", "3.0.0b2", "3.0.0.dev1", "3.0.0.dev20260101",
                                     "3.0.0rc1+cu128", "3.0.0", "3.0.0+cu128", "3.0.0.post1", "2.3.9",
                                     "2.4.0.dev1", "2.4.0rc1", "nightly", "", None])
def test_versions_outside_the_window(version):
    assert not WINDOW.contains(version)


@pytest.mark.parametrize("version", ["2.4", "2.4.0", "2.13.0", "2.13.0+cu128", "2.13.0+cpu", "2.9.post1",
                                     "2.99.99", "2.13.0rc1"])
def test_versions_inside_the_window(version):
    assert WINDOW.contains(version)


def test_a_prerelease_of_the_excluded_bound_does_not_resolve(tmp_path):
    manifest = parse_manifest(json.loads((make_bundle(tmp_path, "x") / "bundle.json").read_text()))
    for torch_version in ("3.0.0rc1", "3.0.0a1", "3.0.0.dev1"):
        found = resolve([Candidate("x", "promoted", manifest)], Profile("sm90", torch_version, "12.8"), CallSite())
        assert found.chosen is None
        assert [o.code for o in found.outcomes] == ["torch_version_unsupported"], torch_version


def test_a_bound_with_a_local_version_is_refused_in_one_line(tmp_path):
    with pytest.raises(BundleError, match="compatibility.torch: '>=2.4\\+cu1' is not a PEP 440 version range"):
        make_bundle(tmp_path, "x", torch={"min": "2.4+cu1"})
