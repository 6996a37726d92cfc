"""Bundle registration: every way a bundle can differ from its manifest is refused in one line, nothing written."""
from __future__ import annotations

import json
import os

import pytest
from registry.bundles import BundleError, parse_manifest, verify_directory, write_manifest
from ship_helpers import declare, make_bundle, register
from cli_helpers import head


@pytest.fixture
def cli(registry_cli):
    declare(registry_cli)
    return registry_cli


def refused(cli, directory, fragment: str) -> None:
    before = head(cli)
    result = register(cli, "candidate", directory)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert head(cli) == before


def rewrite_manifest(directory, change) -> None:
    path = directory / "bundle.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_verified_bundle_registers_with_its_manifest_digest(cli):
    directory = make_bundle(cli.tmp, "candidate")
    result = cli("artifact", "register", "candidate", "--workload", "wan", "--kind", "step_cache",
                 "--bundle", str(directory), "--json")
    assert result.exit_code == 0, result.output
    digest = json.loads(result.output)["payload_sha256"]
    assert digest == verify_directory(directory).digest
    shown = json.loads(cli("show", "candidate", "--json").output)
    assert shown["payload_sha256"] == digest
    assert shown["bundle"]["compatibility"]["gpu_architectures"] == ["sm90", "sm100"]


def test_changing_any_file_is_a_new_identity(cli):
    directory = make_bundle(cli.tmp, "candidate")
    first = verify_directory(directory).digest
    (directory / "op.py").write_text("def replacement(x):\n    return x  # changed\n")
    refused(cli, directory, "op.py")  # the manifest still names the old bytes
    manifest = json.loads((directory / "bundle.json").read_text())
    write_manifest(directory, entry_point=manifest["entry_point"], replaces=manifest["replaces"],
                   compatibility=manifest["compatibility"])
    assert verify_directory(directory).digest != first


def test_undeclared_file(cli):
    directory = make_bundle(cli.tmp, "candidate")
    (directory / "extra.py").write_text("print('not declared')\n")
    refused(cli, directory, "extra.py is not declared")


def test_missing_file(cli):
    directory = make_bundle(cli.tmp, "candidate", extra_files={"data/table.bin": "x"})
    (directory / "data" / "table.bin").unlink()
    refused(cli, directory, "data/table.bin is declared in bundle.json but missing")


def test_size_mismatch(cli):
    directory = make_bundle(cli.tmp, "candidate")
    (directory / "op.py").write_text(open(directory / "op.py").read() + "# appended\n")
    refused(cli, directory, "op.py is")


def test_hash_mismatch_of_the_same_size(cli):
    directory = make_bundle(cli.tmp, "candidate")
    text = (directory / "op.py").read_text()
    (directory / "op.py").write_text(text.replace("replaced", "REPLACED"))
    refused(cli, directory, "op.py has sha256")


@pytest.mark.parametrize("path, fragment", [
    ("../outside.py", "escapes"), ("sub/../../outside.py", "escapes"), ("/etc/passwd", "absolute path"),
    ("./op.py", "escapes"), ("a\\b.py", "escapes")])
def test_paths_leaving_the_bundle(cli, path, fragment):
    directory = make_bundle(cli.tmp, "candidate")
    rewrite_manifest(directory, lambda d: d["files"].append({"path": path, "sha256": "0" * 64, "size": 1}))
    refused(cli, directory, fragment)


def test_symlink_out_of_the_bundle(cli):
    outside = cli.tmp / "secret.py"
    outside.write_text("x = 1\n")
    directory = make_bundle(cli.tmp, "candidate")
    os.symlink(outside, directory / "linked.py")
    refused(cli, directory, "linked.py is a symlink to outside the bundle (escapes it)")


def test_symlinked_entry_file_is_refused_even_when_declared(cli):
    outside = cli.tmp / "op_outside.py"
    directory = make_bundle(cli.tmp, "candidate")
    os.replace(directory / "op.py", outside)
    os.symlink(outside, directory / "op.py")
    refused(cli, directory, "op.py is a symlink")


def test_symlinked_bundle_directory(cli):
    directory = make_bundle(cli.tmp, "candidate")
    os.symlink(directory, cli.tmp / "alias")
    refused(cli, cli.tmp / "alias", "is a symlink")


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d.update(signed_by="me"), "signed_by: unknown field"),
    (lambda d: d["compatibility"].update(rocm={"min": "6"}), "compatibility.rocm: unknown field"),
    (lambda d: d["files"][0].update(mode=420), "files[0].mode: unknown field"),
    (lambda d: d["replaces"]["inputs"][0].update(layout="nhwc"), "replaces.inputs[0].layout: unknown field"),
    (lambda d: d["compatibility"]["torch"].update(max="3"), "compatibility.torch.max: unknown field"),
])
def test_unknown_manifest_fields(cli, change, fragment):
    directory = make_bundle(cli.tmp, "candidate")
    rewrite_manifest(directory, change)
    refused(cli, directory, fragment)


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d["compatibility"].update(torch={"min": "2.5", "max_exclusive": "2.5"}), "the range is empty"),
    (lambda d: d["compatibility"].update(cuda={"min": "twelve"}), "is not a version"),
    (lambda d: d["compatibility"].update(gpu_architectures=["hopper"]), "is not a GPU architecture"),
    (lambda d: d["entry_point"].update(file="missing.py"), "is not one of the declared files"),
    (lambda d: d["entry_point"].update(symbol="not an identifier"), "is not a Python identifier"),
    (lambda d: d.update(format="registry.bundle/2"), "format"),
    (lambda d: d["files"][0].update(size=True), "files[0].size: expected an integer"),
    (lambda d: d["files"].append(dict(d["files"][0])), "declared twice"),
    (lambda d: d["replaces"]["inputs"][0].update(stride=[1]), "strides for 3 dimensions"),
])
def test_malformed_manifests(cli, change, fragment):
    directory = make_bundle(cli.tmp, "candidate")
    rewrite_manifest(directory, change)
    refused(cli, directory, fragment)


def test_manifest_that_is_not_json_or_has_duplicate_keys(cli):
    directory = make_bundle(cli.tmp, "candidate")
    text = (directory / "bundle.json").read_text()
    (directory / "bundle.json").write_text(text.replace('"format"', '"format": "x", "format"', 1))
    refused(cli, directory, "duplicate key 'format' in one object")
    (directory / "bundle.json").write_text("{not json")
    refused(cli, directory, "bundle.json: invalid JSON: ")


def test_no_manifest_and_not_a_directory(cli):
    (cli.tmp / "empty").mkdir()
    refused(cli, cli.tmp / "empty", "no bundle.json")
    refused(cli, cli.tmp / "nowhere", "not a directory")


def test_an_id_that_cannot_name_a_directory_is_refused(cli):
    directory = make_bundle(cli.tmp, "candidate")
    before = head(cli)
    result = cli("artifact", "register", "a/b", "--workload", "wan", "--kind", "step_cache", "--bundle", str(directory))
    assert result.exit_code == 1 and "cannot name a bundle directory" in result.stderr
    assert head(cli) == before


def test_bundle_and_payload_together_are_refused(cli):
    directory = make_bundle(cli.tmp, "candidate")
    result = cli("artifact", "register", "candidate", "--workload", "wan", "--kind", "step_cache",
                 "--bundle", str(directory), "--payload", str(directory / "op.py"))
    assert result.exit_code == 1 and "give one" in result.stderr


def test_the_digest_covers_every_field_of_the_manifest(tmp_path):
    directory = make_bundle(tmp_path, "candidate")
    data = json.loads((directory / "bundle.json").read_text())
    base = parse_manifest(data).digest
    data["compatibility"]["gpu_architectures"] = ["sm90"]
    assert parse_manifest(data).digest != base
    with pytest.raises(BundleError):
        parse_manifest({**data, "files": []})
