"""Compiled Triton kernel bundles read as data: the manifest, and a corpus of mutated cubins and metadata files.

The cubins are real: the built-in RMS norm for D=128 bf16, built for sm_90a
and sm_100a by the registry's own build (about 3 s of compiling, once per
run: `kernel_bundle_helpers.small_bundle`), and small kernels compiled with
the options version 1 refuses (num_ctas 2, a device printf, PDL, a
cooperative grid: eight compiles, about 3 s). Each mutation is made from
those bytes by editing the ELF in place (a symbol's flags, a string, a
parameter entry, a header field) and must be refused with its named reason;
random damage must be refused or checked, never crash the reader.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_bundle_helpers import (ARCHES, KEY, block_size, small_bundle, cluster_attribute, device_launch,
                                   extra_entry, flipped_arch, kernel_file, malformed_info, not_accelerated,
                                   other_machine, parameter_size, renamed_entry, undefined_symbol, unknown_attribute,
                                   with_bytes)
from registry.bundles import BundleError, CallSite, Candidate, Profile, parse_manifest, resolve, verify_directory
from registry.bundles.cubin import ATTRIBUTES, CUBIN_REFUSALS, CubinRefused, check_cubin
from registry.bundles.triton_metadata import FIELDS, METADATA_REFUSALS, MetadataRefused, check_metadata
from registry.bundles.ttir import TtirRefused, check_ttir_locations
from registry.bundles.manifest import TensorSignature
from registry.formats.launch_spec import KernelDecl, KernelTarget
from registry.kernels.ttir_compile import REBUILD_OPTIONS
from paths import ROOT

@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The built-in RMS norm bundle, D=128 bf16 only, both targets."""
    return small_bundle(tmp_path_factory)


@pytest.fixture(scope="module")
def manifest(bundle):
    return verify_directory(bundle).manifest


def cubin(bundle: Path, arch: str) -> bytes:
    return (bundle / "kernels" / KEY / f"{arch}.cubin").read_bytes()


def metadata(bundle: Path, arch: str) -> dict:
    return json.loads((bundle / "kernels" / KEY / f"{arch}.json").read_text())


MUTATIONS = {
    "extra_entry": (extra_entry, "sm_90a"), "renamed_entry": (renamed_entry, "sm_90a"),
    "parameter_size": (parameter_size, "sm_90a"), "parameter_size_sm100": (parameter_size, "sm_100a"),
    "flipped_arch": (flipped_arch, "sm_90a"), "not_accelerated": (not_accelerated, "sm_90a"),
    "undefined_symbol": (undefined_symbol, "sm_90a"), "device_launch": (device_launch, "sm_100a"),
    "truncated": (lambda d: d[:len(d) // 2], "sm_90a"), "truncated_header": (lambda d: d[:40], "sm_100a"),
    "not_elf": (lambda d: b"\0" * 64 + d[64:], "sm_90a"), "other_machine": (other_machine, "sm_90a"),
    "elf32": (lambda d: with_bytes(d, 4, b"\x01"), "sm_90a"), "unknown_attribute": (unknown_attribute, "sm_90a"),
    "cluster_attribute": (cluster_attribute, "sm_100a"), "block_size": (block_size, "sm_90a"),
    "malformed_info": (malformed_info, "sm_90a"),
}
EXPECTED = {
    "extra_entry": "extra_entry", "renamed_entry": "renamed_entry", "parameter_size": "parameter_layout",
    "parameter_size_sm100": "parameter_layout", "flipped_arch": "wrong_arch", "not_accelerated": "wrong_arch",
    "undefined_symbol": "undefined_symbol", "device_launch": "device_launch", "truncated": "truncated",
    "truncated_header": "truncated", "not_elf": "not_elf", "other_machine": "not_cuda", "elf32": "not_cuda",
    "unknown_attribute": "unknown_attribute", "cluster_attribute": "cluster", "block_size": "block_size",
    "malformed_info": "malformed_info",
}


def test_the_built_cubins_pass_every_check(bundle, manifest):
    kernel = manifest.spec.kernels[KEY]
    for arch in ARCHES:
        facts = check_cubin(cubin(bundle, arch), kernel, arch, "x")
        assert facts.arch == arch and facts.entries == ("_rms_norm_kernel",)
        assert facts.param_bytes == (8, 8, 8, 4, 8, 8)  # x, weight, y, eps, then Triton's two scratch pointers
        assert facts.attributes <= set(ATTRIBUTES)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_mutated_cubin_is_refused_with_its_named_reason(bundle, manifest, name):
    mutate, arch = MUTATIONS[name]
    data = mutate(cubin(bundle, arch))
    with pytest.raises(CubinRefused) as caught:
        check_cubin(data, manifest.spec.kernels[KEY], arch, "bundle: k@arch")
    assert caught.value.reason == EXPECTED[name], caught.value
    assert caught.value.reason in CUBIN_REFUSALS
    assert f"cubin refused ({EXPECTED[name]})" in str(caught.value) and "\n" not in str(caught.value)


def test_a_real_cubin_declared_for_the_other_target_is_refused(bundle, manifest):
    kernel = manifest.spec.kernels[KEY]
    for built, declared in (("sm_90a", "sm_100a"), ("sm_100a", "sm_90a")):
        with pytest.raises(CubinRefused) as caught:
            check_cubin(cubin(bundle, built), kernel, declared, "x")
        assert caught.value.reason == "wrong_arch" and f"built for {built}" in str(caught.value)


def test_a_cubin_under_another_declared_entry_or_parameter_list_is_refused(bundle, manifest):
    kernel = manifest.spec.kernels[KEY]
    other_entry = KernelDecl(KEY, "_modln_kernel", kernel.num_warps, kernel.params, kernel.targets)
    with pytest.raises(CubinRefused, match="renamed_entry"):
        check_cubin(cubin(bundle, "sm_90a"), other_entry, "sm_90a", "x")
    extra_param = KernelDecl(KEY, kernel.entry, kernel.num_warps, kernel.params + ("i32",), kernel.targets)
    with pytest.raises(CubinRefused, match="parameter_layout"):
        check_cubin(cubin(bundle, "sm_90a"), extra_param, "sm_90a", "x")
    other_warps = KernelDecl(KEY, kernel.entry, 4, kernel.params, kernel.targets)
    with pytest.raises(CubinRefused, match="block_size"):
        check_cubin(cubin(bundle, "sm_90a"), other_warps, "sm_90a", "x")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_damage_is_refused_or_checked_never_a_crash(bundle, manifest, data):
    arch = data.draw(st.sampled_from(ARCHES))
    raw = bytearray(cubin(bundle, arch))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    try:
        check_cubin(bytes(raw), manifest.spec.kernels[KEY], arch, "x")
    except CubinRefused as exc:
        assert exc.reason in CUBIN_REFUSALS and "\n" not in str(exc)


# ---- kernels compiled with what version 1 refuses ----------------------------------------------------------------

_HOSTILE = '''
import json, os, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def simple(x, y, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + i, tl.load(x + i, mask=i < n) * 2, mask=i < n)

@triton.jit
def printer(x, y, n, B: tl.constexpr):
    tl.device_print("x", tl.load(x + tl.program_id(0)))

out = sys.argv[1]
signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "B": "constexpr"}
for name, fn, options in (("ctas2", simple, {"num_ctas": 2}), ("printer", printer, {}),
                          ("pdl", simple, {"launch_pdl": True}), ("coop", simple, {"launch_cooperative_grid": True})):
    for cap in (90, 100):
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs={"B": 128}),
                                  target=GPUTarget("cuda", cap, 32), options=options)
        open(os.path.join(out, f"{name}_{cap}.cubin"), "wb").write(compiled.asm["cubin"])
        meta = compiled.metadata._asdict()
        meta["target"] = {"backend": "cuda", "arch": cap, "warp_size": 32}
        open(os.path.join(out, f"{name}_{cap}.json"), "w").write(json.dumps(meta))
'''


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile-kernels")
    script = folder / "hostile_kernels.py"
    script.write_text(textwrap.dedent(_HOSTILE))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    env["TRITON_CACHE_DIR"] = str(folder / "cache")
    done = subprocess.run([sys.executable, str(script), str(folder)], env=env, capture_output=True, text=True,
                          timeout=300)  # eight compiles
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def simple_kernel(arch: str, num_warps: int = 4) -> KernelDecl:
    return KernelDecl("k", "simple", num_warps, ("ptr", "ptr", "i32"),
                      {arch: KernelTarget(arch, 0, "k.ttir", "k.cubin", "k.json")})


@pytest.mark.parametrize("name, reason", [("ctas2", "cluster"), ("printer", "extern_call")])
def test_a_compiled_cluster_or_printf_kernel_is_refused_at_its_cubin(hostile, name, reason):
    for cap, arch in ((90, "sm_90a"), (100, "sm_100a")):
        decl = simple_kernel(arch)
        if name == "printer":
            decl = KernelDecl("k", "printer", 4, ("ptr", "ptr", "i32"), decl.targets)
        with pytest.raises(CubinRefused) as caught:
            check_cubin((hostile / f"{name}_{cap}.cubin").read_bytes(), decl, arch, "x")
        assert caught.value.reason == reason, caught.value


@pytest.mark.parametrize("name, reason", [("ctas2", "cluster"), ("pdl", "pdl"), ("coop", "cooperative")])
def test_compiled_metadata_of_num_ctas_2_pdl_or_a_cooperative_grid_is_refused(hostile, name, reason):
    for cap, arch in ((90, "sm_90a"), (100, "sm_100a")):
        meta = json.loads((hostile / f"{name}_{cap}.json").read_text())
        decl = simple_kernel(arch)
        with pytest.raises(MetadataRefused) as caught:
            check_metadata(meta, decl, decl.targets[arch], "x")
        assert caught.value.reason == reason, caught.value


def test_the_unrefused_compiles_pass_their_cubin_checks(hostile):
    """The same kernel without the refused option passes (the refusal is the option's, not the kernel's)."""
    for cap, arch in ((90, "sm_90a"), (100, "sm_100a")):
        check_cubin((hostile / f"pdl_{cap}.cubin").read_bytes(), simple_kernel(arch), arch, "x")


# ---- metadata ----------------------------------------------------------------------------------------------------

METADATA_EDITS = [
    ("num_ctas", 2, "cluster"), ("launch_pdl", True, "pdl"), ("launch_cooperative_grid", True, "cooperative"),
    ("global_scratch_size", 64, "scratch"), ("profile_scratch_size", 1, "scratch"),
    ("ir_override", "elsewhere/kernel.ttgir", "compile_option"), ("ptx_options", "-O0", "compile_option"),
    ("instrumentation_mode", "consan", "compile_option"), ("ptx_version", 80, "compile_option"),
    ("extern_libs", [["libdevice", "/opt/lib/evil.bc"]], "compile_option"),
    ("extern_libs", [["libdevice", "triton/backends/nvidia/lib/libdevice.10.bc"], ["x", "y.bc"]], "compile_option"),
    ("name", "_other", "metadata_disagrees"), ("num_warps", 2, "metadata_disagrees"),
    ("shared", 16, "metadata_disagrees"), ("triton_version", "3.6.0", "metadata_disagrees"),
    ("arch", "sm100", "metadata_disagrees"), ("target", {"backend": "cuda", "arch": 100, "warp_size": 32},
                                                "metadata_disagrees"),
    ("num_warps", True, "metadata_disagrees"), ("num_stages", 99, "metadata_fields"),
    ("maxnreg", 1000, "metadata_fields"), ("enable_fp_fusion", "no", "metadata_fields"),
    ("default_dot_input_precision", "fast", "metadata_fields"), ("surprise", 1, "metadata_fields"),
]


@pytest.mark.parametrize("field, value, reason", METADATA_EDITS)
def test_each_edited_metadata_file_is_refused_with_its_named_reason(bundle, manifest, field, value, reason):
    kernel = manifest.spec.kernels[KEY]
    meta = dict(metadata(bundle, "sm_90a"), **{field: value})
    with pytest.raises(MetadataRefused) as caught:
        check_metadata(meta, kernel, kernel.targets["sm_90a"], "bundle: k@sm_90a")
    assert caught.value.reason == reason and caught.value.reason in METADATA_REFUSALS, caught.value
    assert "\n" not in str(caught.value)


def test_metadata_missing_a_field_or_not_an_object_is_refused(bundle, manifest):
    kernel = manifest.spec.kernels[KEY]
    for broken in ({k: v for k, v in metadata(bundle, "sm_90a").items() if k != "hash"}, [], "x", None):
        with pytest.raises(MetadataRefused, match="metadata_fields"):
            check_metadata(broken, kernel, kernel.targets["sm_90a"], "x")


def test_the_built_metadata_passes_and_gives_the_rebuild_its_options(bundle, manifest):
    kernel = manifest.spec.kernels[KEY]
    for arch in ARCHES:
        options = check_metadata(metadata(bundle, arch), kernel, kernel.targets[arch], "x")
        assert set(options) == set(REBUILD_OPTIONS) and options["enable_fp_fusion"] is False
        assert set(metadata(bundle, arch)) == set(FIELDS)


# ---- the manifest ------------------------------------------------------------------------------------------------

def rewritten(bundle: Path, tmp_path: Path, change) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(bundle, copy)
    data = json.loads((copy / "bundle.json").read_text())
    change(data)
    (copy / "bundle.json").write_text(json.dumps(data))
    return copy


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d.update(triton="3.6.0"), "triton: '3.6.0'; the registry rebuilds kernels with Triton 3.7.1 only"),
    (lambda d: d.update(entry_point={"file": "x.py", "symbol": "f"}), "entry_point: unknown field"),
    (lambda d: d.update(sources=[]), "sources: expected a non-empty list"),
    (lambda d: d.update(sources=["kernels/rms_d128_bfloat16/sm_90a.ttir"]), "is not a Python source file"),
    (lambda d: d.update(sources=["registry/kernels/none.py"]), "is not one of the declared files"),
    (lambda d: d["compatibility"].update(gpu_architectures=["sm90"]), "the kernels' targets run on exactly"),
    (lambda d: d["replaces"].update(inputs=[]), "replaces.inputs: unknown field"),
    (lambda d: d["spec"]["kernels"][KEY]["targets"]["sm_90a"].update(cubin="registry/kernels/rmsnorm.py"),
     "does not end in .cubin"),
    (lambda d: d["spec"]["kernels"][KEY]["targets"]["sm_90a"].update(
        ttir="kernels/rms_d128_bfloat16/sm_100a.ttir"), "is named by another kernel target too"),
    (lambda d: d["spec"]["kernels"][KEY]["targets"]["sm_90a"].update(ttir="elsewhere.ttir"),
     "is not one of the declared files"),
    (lambda d: d["spec"].update(variants=[]), "spec.variants: empty list"),
    (lambda d: next(f for f in d["files"] if f["path"].endswith("sm_90a.json")).update(size=(1 << 20) + 1),
     "a metadata file may hold 1048576"),
    (lambda d: d["spec"]["tensors"][0].update(align=4), "spec.tensors[0].align"),
])
def test_a_malformed_kernel_manifest_is_refused_in_one_line(bundle, tmp_path, change, fragment):
    with pytest.raises(BundleError) as caught:
        verify_directory(rewritten(bundle, tmp_path, change))
    assert fragment in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_a_file_that_is_neither_source_nor_kernel_is_refused(bundle, tmp_path):
    def add(data):
        data["files"].append({"path": "notes.txt", "sha256": "0" * 64, "size": 0})
    with pytest.raises(BundleError, match="'notes.txt' is neither a source nor a kernel's file"):
        verify_directory(rewritten(bundle, tmp_path, add))


def test_the_kernel_manifest_round_trips_and_names_no_path_of_this_machine(bundle, manifest):
    assert parse_manifest(manifest.canonical()).digest == manifest.digest
    assert manifest.sources == ("registry/kernels/rmsnorm.py", "registry/kernels/rowwise.py")
    for path in (bundle / "kernels").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for root in (str(ROOT), sys.prefix, "/tmp/", "/root/"):
                assert root.encode() not in data, (path, root)


def test_resolution_asks_the_spec_whether_a_call_site_fits(manifest):
    candidate = Candidate("k", "promoted", manifest, 1.5, (1.2, 1.8))
    profile = Profile("sm90", "2.13.0", "12.8", None)

    def site(*inputs):
        return CallSite(inputs=tuple(TensorSignature(shape=s, stride=st_, dtype=d, device=dev)
                                     for s, st_, d, dev in inputs))
    fits = site(((1, 8, 128), (1024, 128, 1), "bfloat16", "cuda"), ((128,), (1,), "float32", "cuda"))
    assert resolve([candidate], profile, fits).chosen is candidate
    for inputs, fragment in (
            ((((1, 8, 256), (2048, 256, 1), "bfloat16", "cuda"), ((256,), (1,), "float32", "cuda")), "no variant"),
            ((((1, 8, 128), (1024, 128, 1), "bfloat16", "cpu"), ((128,), (1,), "float32", "cuda")), "device cpu"),
            ((((1, 8, 128), (1024, 128, 1), "bfloat16", "cuda"),), "1 inputs; the bundle takes 2"),
            ((((1, 8, 128), (128, 1024, 1), "bfloat16", "cuda"), ((128,), (1,), "float32", "cuda")),
             "contiguous")):
        (outcome,) = resolve([candidate], profile, site(*inputs)).outcomes
        assert outcome.code == "input_signature_mismatch" and fragment in outcome.detail, outcome.detail
    (outcome,) = resolve([candidate], Profile("sm80", "2.13.0", "12.8", None), fits).outcomes
    assert outcome.code == "gpu_architecture_mismatch"


# ---- TTIR locations ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("location", ['"/home/me/kernels/k.py":3:4', '"../../usr/lib/os.py":1:1',
                                      '"registry/../../x.py":1:1', '"~/k.py":1:1', '"C:/k.py":1:1',
                                      '"a\\\\b.py":1:1', '"/abs/with \\"quote\\".py":2:3'])
def test_a_ttir_location_a_rebuild_could_find_is_refused(bundle, location):
    text = kernel_file(bundle, "sm_90a", "ttir").read_text() + f"\n#locX = loc({location})\n"
    with pytest.raises(TtirRefused) as caught:
        check_ttir_locations(text, "bundle: k@sm_90a: k.ttir")
    assert "ttir refused (location)" in str(caught.value) and "\n" not in str(caught.value)


def test_the_built_ttir_names_its_sources_by_relative_paths(bundle):
    for arch in ARCHES:
        check_ttir_locations(kernel_file(bundle, arch, "ttir").read_text(), "x")
