"""The built-in kernels as bundles: built by the registry, rebuilt byte for byte in the sandbox, for every target.

The module builds every built-in operation for sm_90a and sm_100a once,
through `registry kernels build` (4 ops x 7 corpus cases x 2 targets = 56
cubins, each compiled from the portable TTIR), and rebuilds every cubin from
its TTIR in a sandbox, as a registration does. That is the slow part of the
file: about 8 s of CPU for the build and 5 s for the rebuilds here (more
wall time on a busy machine); the rest reads what they produced, but for a
compile under an audit hook (about 1.5 s) and a build from a copy of the
registry elsewhere (about 4 s).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from registry.app.kernel_bundles import build_builtin_bundles, check_kernel_bundle
from registry.bundles import verify_directory
from registry.formats.launch_spec import TARGET_ARCHES
from registry.kernels.builtin_build import portable_ttir
from registry.kernels.builtin_bundles import BUILTIN, BuildFailed, corpus_dims, kernel_key
from registry.kernels.rebuild import RebuildJob, rebuild
from registry.kernels.ttir_compile import CompileRefused, check_compile_environment
from paths import ROOT



def cli(*args: str):
    from click.testing import CliRunner

    from registry.cli.main import main

    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """Every built-in bundle, built by `registry kernels build OUT --json`: {op: (directory, manifest)}."""
    out = tmp_path_factory.mktemp("builtin-bundles")
    result = cli("kernels", "build", str(out), "--json")
    assert result.exit_code == 0, result.output
    found = {}
    for row in json.loads(result.output):
        manifest = verify_directory(row["bundle"]).manifest
        assert row == {"op": row["op"], "bundle": str(out / row["op"]), "digest": manifest.digest,
                       "kernels": len(corpus_dims()), "targets": ["sm_100a", "sm_90a"]}
        found[row["op"]] = (out / row["op"], manifest)
    return found


def test_every_built_in_kernel_and_target_rebuilds_byte_identical_in_the_sandbox(built):
    assert set(built) == set(BUILTIN)
    for op, (directory, manifest) in built.items():
        verified = verify_directory(directory)
        assert verified.digest == manifest.digest
        rebuilt = check_kernel_bundle(verified)
        expected = {(kernel_key(op, dim, dtype), arch) for dim, dtype in corpus_dims() for arch in TARGET_ARCHES}
        assert set(rebuilt) == expected
        for (key, arch), cubin in rebuilt.items():
            assert cubin == (directory / "kernels" / key / f"{arch}.cubin").read_bytes(), (op, key, arch)


def test_the_bundles_carry_no_path_of_the_building_machine(built):
    machine = [str(ROOT), sys.prefix, os.path.realpath(sys.prefix), "/tmp/", "/root/", "/home/"]
    for directory, _ in built.values():
        for path in directory.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert not [root for root in machine if root.encode() in data], path
                if path.suffix == ".ttir":
                    assert 'loc("/' not in data.decode()


def test_the_sources_shipped_are_the_registrys_own_files(built):
    for op, (directory, manifest) in built.items():
        assert "registry/kernels/rowwise.py" in manifest.sources
        for source in manifest.sources:
            assert (directory / source).read_bytes() == (ROOT / source).read_bytes()
        assert BUILTIN[op].module.replace(".", "/") + ".py" in manifest.sources


def test_the_window_is_the_devices_of_the_targets(built):
    for _, manifest in built.values():
        assert manifest.window.gpu_architectures == ("sm100", "sm90")
        assert manifest.spec.arches == ("sm_100a", "sm_90a")


def test_a_build_writes_only_into_new_directories_and_refuses_unknown_ops_and_targets(built, tmp_path):
    existing = next(iter(built.values()))[0].parent
    again = cli("kernels", "build", str(existing), "--op", "rms_norm")
    assert again.exit_code == 1 and "exists; bundles are written only into new directories" in again.stderr
    with pytest.raises(BuildFailed, match="exists; bundles are written only into new directories"):
        build_builtin_bundles(existing, ["rms_norm"])
    with pytest.raises(BuildFailed, match="is not a built-in operation"):
        build_builtin_bundles(tmp_path, ["softmax"])
    with pytest.raises(BuildFailed, match="is not a target"):
        build_builtin_bundles(tmp_path, ["rms_norm"], ["sm_80"])
    assert list(tmp_path.iterdir()) == []


def test_portable_ttir_refuses_a_location_outside_the_packages():
    roots = {"/a/registry": "registry"}
    assert portable_ttir('#loc = loc("/a/registry/k.py":1:2)', roots) == '#loc = loc("registry/k.py":1:2)'
    with pytest.raises(ValueError, match="outside the registry and Triton packages"):
        portable_ttir('#loc = loc("/b/k.py":1:2)', roots)


@pytest.mark.parametrize("knob", ["TRITON_PTXAS_OPTIONS", "TRITON_KERNEL_OVERRIDE", "TRITON_DISABLE_LINE_INFO"])
def test_a_triton_knob_in_the_environment_stops_any_compile(monkeypatch, knob):
    monkeypatch.setenv(knob, "1")
    with pytest.raises(CompileRefused, match=f"{knob} is set"):
        check_compile_environment()


# Runs compile_ttir once to import everything, then again on a TTIR whose locations name a Python file that
# writes a marker when run, and whose names hold Python code, under an audit hook.
_AUDITED = '''
import json, os, sys
from registry.kernels.ttir_compile import compile_ttir
ttir, marker, sentinel = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(ttir).read()
options = {"num_warps": 1, "enable_fp_fusion": False}
compile_ttir(text, "sm_90a", options)
hostile = text.replace('loc("registry/kernels/', 'loc("' + os.path.dirname(sentinel) + '/')
hostile = hostile.replace('loc("x_ptr"', 'loc("__import__(\\'os\\').system(\\'touch ' + marker + '\\')"')
assert hostile != text
events = []
def hook(event, args):
    if event in ("exec", "compile", "import", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn") or (
            event == "open" and isinstance(args[0], str) and not args[0].startswith(("/proc/", "/dev/"))):
        frame, where = sys._getframe(1), []
        while frame is not None and len(where) < 8:
            where.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
            frame = frame.f_back
        events.append([event, args[0] if event == "open" else repr(args)[:300], where])
sys.addaudithook(hook)
cubin, metadata = compile_ttir(hostile, "sm_90a", options)
sys.stdout.write(json.dumps({"events": events, "name": metadata["name"]}))
'''


def _run(script: str, *args: str, tmp: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    env["TRITON_CACHE_DIR"] = str(tmp / "cache")
    path = tmp / "script.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run([sys.executable, str(path), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_compiling_a_ttir_runs_no_python_of_its_and_opens_no_file_it_names(built, tmp_path):
    """triton.compiler.IRSource reads a TTIR with MLIR's parser: under an audit hook, compiling a TTIR whose
    locations name a Python file (which would leave a marker if run) and whose names hold Python code imports
    nothing, compiles and executes only the namedtuple Triton builds from its own metadata's field names, opens
    nothing but its own temporary files and Triton's, and starts only ptxas."""
    directory, _ = built["rms_norm"]
    ttir = directory / "kernels" / kernel_key("rms_norm", 128, "bfloat16") / "sm_90a.ttir"
    marker, sentinel = tmp_path / "ran", tmp_path / "sentinel" / "rmsnorm.py"
    sentinel.parent.mkdir()
    sentinel.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    answer = json.loads(_run(_AUDITED, str(ttir), str(marker), str(sentinel), tmp=tmp_path))
    assert answer["name"] == "_rms_norm_kernel" and not marker.exists()
    kinds = {event for event, *_ in answer["events"]}
    assert kinds <= {"open", "subprocess.Popen", "os.posix_spawn", "compile", "exec"}, kinds
    for event, args, where in answer["events"]:
        if event in ("compile", "exec"):  # only the namedtuple Triton makes of its own metadata keys
            assert where[0].rsplit(":", 1)[0].endswith("/collections/__init__.py"), (event, where)
            assert where[1].rsplit(":", 1)[0].endswith("/triton/compiler/compiler.py"), (event, where)
            assert "__import__" not in args and "sentinel" not in args, args
            assert event == "exec" or args.startswith("(b'lambda _cls, allowed_dot_input_precisions, arch, "), args
    opened = [args for event, args, _ in answer["events"] if event == "open"]
    assert not [args for args in opened if str(sentinel.parent) in args], opened
    import tempfile

    import triton

    allowed = (str(Path(triton.__file__).resolve().parent), str(tmp_path / "cache"), tempfile.gettempdir())
    own = {"cwd", "kernel.ttir"}  # compile_ttir's temporary folder, removed through its descriptor
    assert [path for path in opened if not path.startswith(allowed) and path not in own] == []
    spawned = [args for event, args, _ in answer["events"] if event in ("subprocess.Popen", "os.posix_spawn")]
    assert spawned and all("ptxas" in args for args in spawned), spawned


_ELSEWHERE = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import registry
assert registry.__file__.startswith(sys.argv[1]), registry.__file__
from registry.kernels.builtin_build import build, source_ttir
answer = build({"ops": ["rms_norm"], "arches": ["sm_90a", "sm_100a"], "cases": [[128, "bfloat16"]]})

# the TTIR the build reads is the text triton.compile writes
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from registry.kernels import rmsnorm
from registry.kernels.builtin_bundles import triton_signature
signature, pointers = triton_signature("rms_norm", "bfloat16")
constants = {"D": 200, "BLOCK_D": 256, "IS_BF16": True}
source = ASTSource(fn=rmsnorm._rms_norm_kernel, signature={**signature, **{k: "constexpr" for k in constants}},
                   constexprs=constants, attrs={(i,): [["tt.divisibility", 16]] for i in pointers})
target, options = GPUTarget("cuda", 100, 32), {"num_warps": 1, "enable_fp_fusion": False}
answer["source_ttir_is_tritons"] = source_ttir(source, target, options) == triton.compile(
    source, target=target, options=options).asm["ttir"]
json.dump(answer, sys.stdout)
'''


def test_a_copy_of_the_registry_at_another_path_builds_the_same_bytes(built, tmp_path):
    """Where the registry was installed is in no built file: the same kernel built from a copy of the package at
    another path gives the same TTIR, cubin and metadata. (The same process shows that the build's TTIR is the
    text `triton.compile` writes for a kernel.)"""
    import base64
    import shutil

    elsewhere = tmp_path / "another" / "checkout"
    shutil.copytree(ROOT / "registry", elsewhere / "registry", ignore=shutil.ignore_patterns("__pycache__"))
    whole = json.loads(_run(_ELSEWHERE, str(elsewhere), tmp=tmp_path))
    assert whole["source_ttir_is_tritons"] is True  # the build reads the TTIR exactly as triton.compile writes it
    answer = whole["rms_norm"]
    directory, _ = built["rms_norm"]
    for arch in ("sm_90a", "sm_100a"):
        compiled = answer["kernels"][f"128/bfloat16/{arch}"]
        folder = directory / "kernels" / kernel_key("rms_norm", 128, "bfloat16")
        assert compiled["ttir"] == (folder / f"{arch}.ttir").read_text()
        assert base64.b64decode(compiled["cubin"]) == (folder / f"{arch}.cubin").read_bytes()
        assert compiled["metadata"] == json.loads((folder / f"{arch}.json").read_text())


_BAD_PTX_TTIR = """module {
  tt.func public @bad(%x: !tt.ptr<i32>, %y: !tt.ptr<i32>) attributes {noinline = false} {
    %v = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %v_0 = tt.splat %x : !tt.ptr<i32> -> tensor<128x!tt.ptr<i32>>
    %v_1 = tt.addptr %v_0, %v : tensor<128x!tt.ptr<i32>>, tensor<128xi32>
    %v_2 = tt.load %v_1 : tensor<128x!tt.ptr<i32>>
    %w = tt.elementwise_inline_asm "bogus.instruction $0, $1;" {constraints = "=r,r", packed_element = 1 : i32, \
pure = true} %v_2 : tensor<128xi32> -> tensor<128xi32>
    %0 = tt.splat %y : !tt.ptr<i32> -> tensor<128x!tt.ptr<i32>>
    %1 = tt.addptr %0, %v : tensor<128x!tt.ptr<i32>>, tensor<128xi32>
    tt.store %1, %w : tensor<128x!tt.ptr<i32>>
    tt.return
  }
}
"""


def test_a_compile_that_prints_on_failing_does_not_garble_the_rebuilds_answer(built):
    """Triton prints a failed ptxas run's PTX on standard output; the jailed rebuild answers on a descriptor of its
    own, so the job's answer is ptxas's error and the next job's cubin is still read."""
    directory, _ = built["rms_norm"]
    folder = directory / "kernels" / kernel_key("rms_norm", 128, "bfloat16")
    good = RebuildJob((folder / "sm_90a.ttir").read_text(), "sm_90a", {"num_warps": 1, "enable_fp_fusion": False})
    failed, rebuilt = rebuild([RebuildJob(_BAD_PTX_TTIR, "sm_90a", {"num_warps": 4}), good])
    assert failed.cubin is None and failed.error.startswith("PTXASError"), failed.error
    assert rebuilt.cubin == (folder / "sm_90a.cubin").read_bytes()
