"""`registry verify --install`: the installed package and start-up hooks against the manifest written at install.

Real files throughout: a small package and site folder in tmp_path for what
each change looks like, and the CLI against the real installed package.
"""
from __future__ import annotations

import json
import os
import py_compile

import pytest

from registry.app.install import check_install, write_manifest
from registry.formats.errors import UserError


@pytest.fixture
def installed(tmp_path):
    """A package with a module and its compiled .pyc, a site folder with a .pth; the manifest written beside."""
    package, site = tmp_path / "pkg", tmp_path / "site"
    package.mkdir()
    site.mkdir()
    (package / "__init__.py").write_text("")
    (package / "gate.py").write_text("def promote():\n    return False\n")
    (site / "pkg.pth").write_text(str(tmp_path) + "\n")
    manifest = tmp_path / "manifest.json"
    written = write_manifest(manifest, package, [site])
    return package, site, manifest, written


def check(installed, **kwargs):
    package, site, manifest, _ = installed
    return check_install(manifest, package=package, site_folders=[site], **kwargs)


def test_an_untouched_install_matches_and_every_module_s_pyc_is_covered(installed):
    package, _, _, written = installed
    report = check(installed)
    assert report.intact and report.summary().startswith("install intact: ")
    names = json.loads(installed[2].read_text())["files"]
    assert any(name.startswith("package/__pycache__/gate.") and name.endswith(".pyc") for name in names)
    assert written.files == len(names)


def test_a_patched_source_is_named(installed):
    (installed[0] / "gate.py").write_text("def promote():\n    return True\n")
    report = check(installed)
    assert not report.intact and report.differences == ["package/gate.py changed"]


def test_a_forged_pyc_with_the_original_s_mtime_and_size_is_named(installed):
    """Python trusts a .pyc whose header holds the source's mtime and size; the manifest hashes its content."""
    package = installed[0]
    (pyc,) = (package / "__pycache__").glob("gate.*.pyc")
    source = package / "gate.py"
    info = source.stat()
    original = source.read_text()
    source.write_text("def promote():\n    return not 0\n")  # the same length as the original
    assert len(source.read_text()) == len(original)
    py_compile.compile(str(source), cfile=str(pyc))
    source.write_text(original)
    os.utime(source, ns=(info.st_atime_ns, info.st_mtime_ns))
    report = check(installed)
    assert report.differences == [f"package/__pycache__/{pyc.name} changed"]


def test_a_new_start_up_hook_and_a_removed_module_are_named(installed):
    package, site, _, _ = installed
    (site / "sitecustomize.py").write_text("import os\n")
    (package / "gate.py").unlink()
    report = check(installed)
    assert report.differences == ["site0/sitecustomize.py added", "package/gate.py removed"]
    assert "site0/sitecustomize.py added, package/gate.py removed" in report.summary()


def test_a_manifest_rewritten_to_match_is_caught_by_its_noted_digest(installed):
    package, site, manifest, written = installed
    (package / "gate.py").write_text("def promote():\n    return True\n")
    os.chmod(manifest, 0o644)
    write_manifest(manifest, package, [site])  # what a process that could write both would do
    assert check(installed).intact
    report = check(installed, expect_sha256=written.sha256)
    assert not report.intact and report.differences[0].startswith("the manifest itself")


def test_a_manifest_inside_the_tree_or_through_a_link_is_refused(installed, tmp_path):
    package, site, manifest, _ = installed
    with pytest.raises(UserError, match="inside the package's own tree"):
        write_manifest(package / "manifest.json", package, [site])
    link = tmp_path / "link.json"
    link.symlink_to(manifest)
    with pytest.raises(UserError, match="a symlink"):
        write_manifest(link, package, [site])
    with pytest.raises(UserError, match="cannot read install manifest"):
        check_install(link, package=package, site_folders=[site])


def test_the_cli_writes_the_manifest_and_verify_install_says_what_differs(registry_cli, tmp_path):
    """The real installed package (compiled once by `install-manifest`, about 2 s)."""
    manifest = tmp_path / "install.json"
    written = registry_cli("install-manifest", "--manifest", str(manifest))
    assert written.exit_code == 0, written.output
    digest = written.output.strip().rsplit(" ", 1)[-1]
    passed = registry_cli("verify", "--install", "--manifest", str(manifest), "--expect-manifest", digest)
    assert passed.exit_code == 0 and passed.output.startswith("install intact: "), passed.output
    document = json.loads(manifest.read_text())
    name = next(iter(document["files"]))
    document["files"][name] = "sha256:" + "0" * 64
    os.chmod(manifest, 0o644)
    manifest.write_text(json.dumps(document))
    failed = registry_cli("verify", "--install", "--manifest", str(manifest))
    assert failed.exit_code == 3 and f"install differs from its manifest: {name} changed" in failed.output
    rewritten = registry_cli("verify", "--install", "--manifest", str(manifest), "--expect-manifest", digest)
    assert rewritten.exit_code == 3 and "the manifest itself" in rewritten.output
