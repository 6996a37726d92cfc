"""`registry artifact register --kind triton_kernel --bundle DIR`, through the CLI on a SQLite registry.

A compiled kernel bundle is registered under its manifest's digest only
after every cubin and metadata file is checked and every cubin is rebuilt
from its TTIR in the sandbox, byte for byte; every refusal is one line,
exit 1, and the log's head does not move. The bundle is the built-in RMS
norm for D=128 bf16 (built once for the file, about 5 s); each registration
that reaches the rebuild spends about 2 s in the sandbox.
"""
from __future__ import annotations

import io
import json
import shutil

import pytest
from elftools.elf.elffile import ELFFile

from kernel_bundle_helpers import build_small_bundle, extra_entry, kernel_file, refresh_manifest, with_bytes
from registry.app import open_registry
from registry.bundles import verify_directory
from ship_helpers import WORKLOAD, declare, make_bundle


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_small_bundle(tmp_path_factory.mktemp("registered-bundle"))


@pytest.fixture
def cli(registry_cli):
    declare(registry_cli)
    return registry_cli


@pytest.fixture
def bundle(built, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(built, copy)
    return copy


def head(cli) -> int:
    return open_registry(cli.url).store.head_position()


def register(cli, directory, *extra, kind="triton_kernel", artifact="rms"):
    return cli("artifact", "register", artifact, "--workload", WORKLOAD, "--kind", kind, "--bundle", str(directory),
               *extra)


def refused(cli, fragment: str, *args, **kwargs) -> None:
    before = head(cli)
    result = register(cli, *args, **kwargs)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert head(cli) == before


def test_a_checked_and_rebuilt_bundle_registers_under_its_manifest_digest(cli, bundle):
    digest = verify_directory(bundle).digest
    result = register(cli, bundle, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"artifact": "rms", "payload_sha256": digest, "appended": True}
    shown = json.loads(cli("show", "rms", "--json").output)
    assert shown["kind"] == "triton_kernel" and shown["payload_sha256"] == digest
    assert shown["bundle"]["format"] == "registry.triton-kernel/1"
    assert shown["bundle"]["spec"]["variants"][0]["name"] == "d128_bfloat16"
    again = register(cli, bundle, "--json")
    assert again.exit_code == 0 and json.loads(again.output)["appended"] is False


def test_a_kernel_bundle_under_another_kind_or_with_an_entry_is_refused(cli, bundle):
    refused(cli, "such a bundle only as a triton_kernel", bundle, kind="fused_kernel")
    refused(cli, "give no --op or --entry", bundle, "--op", "rms_norm", "--entry",
            "registry.kernels.rmsnorm:rms_norm_triton")


def test_a_triton_kernel_needs_a_kernel_bundle(cli, tmp_path):
    python_bundle = make_bundle(tmp_path, "python")
    refused(cli, "a triton_kernel artifact is registered from a registry.triton-kernel/1 bundle", python_bundle)
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"x")
    before = head(cli)
    result = cli("artifact", "register", "rms", "--workload", WORKLOAD, "--kind", "triton_kernel", "--payload",
                 str(payload))
    assert result.exit_code == 1 and "registry.triton-kernel/1 bundle" in result.stderr and head(cli) == before


def test_an_unknown_workload_is_refused_before_any_rebuild(cli, bundle):
    before = head(cli)
    result = cli("artifact", "register", "rms", "--workload", "nobody", "--kind", "triton_kernel", "--bundle",
                 str(bundle))
    assert result.exit_code == 1 and "unknown workload 'nobody'" in result.stderr and head(cli) == before


def test_a_cubin_with_an_extra_entry_is_refused_before_the_rebuild(cli, bundle):
    path = kernel_file(bundle, "sm_90a", "cubin")
    path.write_bytes(extra_entry(path.read_bytes()))
    refresh_manifest(bundle)
    refused(cli, "cubin refused (extra_entry)", bundle)


def test_metadata_of_two_ctas_per_cluster_is_refused(cli, bundle):
    path = kernel_file(bundle, "sm_100a", "json")
    path.write_text(json.dumps(dict(json.loads(path.read_text()), num_ctas=2)))
    refresh_manifest(bundle)
    refused(cli, "metadata refused (cluster): num_ctas is 2", bundle)


def test_a_cubin_its_ttir_does_not_rebuild_to_is_refused(cli, bundle):
    """One instruction byte changed: every ELF check passes, the rebuild differs."""
    path = kernel_file(bundle, "sm_90a", "cubin")
    data = path.read_bytes()
    text = ELFFile(io.BytesIO(data)).get_section_by_name(".text._rms_norm_kernel")
    at = text["sh_offset"] + 16
    path.write_bytes(with_bytes(data, at, bytes([data[at] ^ 0x01])))
    refresh_manifest(bundle)
    refused(cli, "differs from the registry's rebuild of kernels/rms_d128_bfloat16/sm_90a.ttir", bundle)


def test_a_ttir_edited_after_its_cubin_was_built_is_refused(cli, bundle):
    path = kernel_file(bundle, "sm_100a", "ttir")
    text = path.read_text()
    assert "1.000000e+00" in text
    path.write_text(text.replace("1.000000e+00", "2.000000e+00", 1))
    refresh_manifest(bundle)
    refused(cli, "metadata refused (rebuild_differs)", bundle)


def test_a_ttir_that_does_not_compile_is_refused_naming_the_failure(cli, bundle):
    path = kernel_file(bundle, "sm_90a", "ttir")
    path.write_text(path.read_text().replace("tt.func public", "tt.func nonsense", 1))
    refresh_manifest(bundle)
    refused(cli, "the registry's rebuild of kernels/rms_d128_bfloat16/sm_90a.ttir failed", bundle)


def test_metadata_the_rebuild_does_not_reproduce_is_refused(cli, bundle):
    """A field the checks before the rebuild do not read: only the rebuilt metadata shows it false."""
    path = kernel_file(bundle, "sm_90a", "json")
    path.write_text(json.dumps(dict(json.loads(path.read_text()), max_num_imprecise_acc_default=7)))
    refresh_manifest(bundle)
    refused(cli, "max_num_imprecise_acc_default: the bundle says 7; the rebuild gives", bundle)


def test_a_ttir_naming_an_absolute_source_path_is_refused_before_the_rebuild(cli, bundle):
    path = kernel_file(bundle, "sm_90a", "ttir")
    path.write_text(path.read_text().replace('loc("registry/kernels/rmsnorm.py"', 'loc("/home/me/rmsnorm.py"', 1))
    refresh_manifest(bundle)
    refused(cli, "ttir refused (location): a location names '/home/me/rmsnorm.py'", bundle)
