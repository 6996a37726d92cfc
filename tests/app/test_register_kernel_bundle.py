"""`registry artifact register --kind triton_kernel --bundle DIR`, through the CLI on a SQLite registry.

A compiled kernel bundle is registered under its manifest's digest only
after every cubin and metadata file is checked and every cubin is rebuilt
from its TTIR in the sandbox, byte for byte; every refusal is one line,
exit 1, and the log's head does not move. The bundle is the built-in RMS
norm for D=128 bf16 (built once per run, about 3 s: `kernel_bundle_helpers`);
each registration that reaches the rebuild spends 1-2 s in the sandbox.
"""
from __future__ import annotations

import io
import json
import shutil

import pytest
from elftools.elf.elffile import ELFFile

from kernel_bundle_helpers import small_bundle, extra_entry, kernel_file, refresh_manifest, with_bytes
from registry.bundles import verify_directory
from ship_helpers import WORKLOAD, declare, make_bundle
from cli_helpers import head


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return small_bundle(tmp_path_factory)


@pytest.fixture
def cli(registry_cli):
    declare(registry_cli)
    return registry_cli


@pytest.fixture
def bundle(built, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(built, copy)
    return copy


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
    assert json.loads(result.output) == {"artifact": "rms", "payload_sha256": digest, "appended": True, "ships": True,
                                         "note": None}
    shown = json.loads(cli("show", "rms", "--json").output)
    assert shown["kind"] == "triton_kernel" and shown["payload_sha256"] == digest
    assert shown["bundle"]["format"] == "registry.triton-kernel/1"
    assert shown["bundle"]["spec"]["variants"][0]["name"] == "d128_bfloat16"
    again = register(cli, bundle, "--json")
    assert again.exit_code == 0 and json.loads(again.output)["appended"] is False
    resolved = cli("resolve", "--workload", WORKLOAD, "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8", "--json")
    (other,) = json.loads(resolved.output)["others"]  # exit 3: nothing promoted yet, and no crash on the format
    assert resolved.exit_code == 3 and other["artifact"] == "rms" and other["code"] == "not_promoted"
    assert other["payload_sha256"] == digest and other["entry_point"] is None


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


def flip_text_byte(data: bytes) -> bytes:
    """One instruction byte changed: every ELF check passes, only the rebuild differs."""
    text = ELFFile(io.BytesIO(data)).get_section_by_name(".text._rms_norm_kernel")
    at = text["sh_offset"] + 16
    return with_bytes(data, at, bytes([data[at] ^ 0x01]))


def metadata_with(**fields):
    return lambda data: json.dumps(dict(json.loads(data), **fields)).encode()


EDITS = {
    "extra_entry": ("sm_90a", "cubin", extra_entry, "cubin refused (extra_entry)"),
    "num_ctas_2": ("sm_100a", "json", metadata_with(num_ctas=2), "metadata refused (cluster): num_ctas is 2"),
    "absolute_location": ("sm_90a", "ttir", lambda d: d.replace(b'loc("registry/kernels/rmsnorm.py"',
                                                                   b'loc("/home/me/rmsnorm.py"', 1),
                          "ttir refused (location): a location names '/home/me/rmsnorm.py'"),
    "cubin_not_its_ttirs": ("sm_90a", "cubin", flip_text_byte,
                            "differs from the registry's rebuild of kernels/rms_d128_bfloat16/sm_90a.ttir"),
    "ttir_edited": ("sm_100a", "ttir", lambda d: d.replace(b"1.000000e+00", b"2.000000e+00", 1),
                    "metadata refused (rebuild_differs)"),
    "ttir_not_compiling": ("sm_90a", "ttir", lambda d: d.replace(b"tt.func public", b"tt.func nonsense", 1),
                           "the registry's rebuild of kernels/rms_d128_bfloat16/sm_90a.ttir failed"),
    # a field no check before the rebuild reads: only the rebuilt metadata shows it false
    "metadata_not_reproduced": ("sm_90a", "json", metadata_with(max_num_imprecise_acc_default=7),
                                "max_num_imprecise_acc_default: the bundle says 7; the rebuild gives"),
}


@pytest.mark.parametrize("name", list(EDITS))
def test_an_edited_kernel_file_is_refused_with_nothing_written(cli, bundle, name):
    arch, suffix, change, fragment = EDITS[name]
    path = kernel_file(bundle, arch, suffix)
    edited = change(path.read_bytes())
    assert edited != path.read_bytes()
    path.write_bytes(edited)
    refresh_manifest(bundle)
    refused(cli, fragment, bundle)
