"""The hostile-cubin gallery (tests/gallery/compiled_hostile.py) built as registry.triton-kernel/1 bundles.

Each hostile kernel ships exactly as an honest modulated LayerNorm bundle
would: the built-in kernel's launch spec (one case: D 128, bf16) with the
hostile kernel as its entry, its portable TTIR, the cubin compiled from that
TTIR (the registry's own compile, so registration's rebuild reproduces it
byte for byte) and Triton's metadata, its source file declared. Compiling
runs in a process of its own with Triton's compiler (never its interpreter,
which the test process turns on), as the built-in kernels are built.

    python tests/support/hostile_bundles.py compile   # stdin: {"names": [...], "arch": ...}; stdout: the compiled JSON

Used by tests/kernels/test_hostile_bundles.py (registration checks each, on CPU) and
benchmarks/gpu_launcher.py (evaluates each on a GPU).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from paths import GALLERY, ROOT

SOURCE = "gallery/compiled_hostile.py"
NAMES = ("spin_kernel", "overrun_kernel", "unmapped_read_kernel", "scan_kernel")
EXPECTED = {"spin_kernel": "launch deadline", "overrun_kernel": "out-of-bounds write",
            "unmapped_read_kernel": "kernel fault", "scan_kernel": "kernel fault|stale result|non-finite output"}
"""The refusal class each one's evaluation must name on a GPU (compiled_hostile.py's table)."""
CASE = (128, "bfloat16")


def _compile(names: list[str], arch: str) -> dict:
    """In the compiling process: each hostile kernel to portable TTIR, then cubin and metadata from that TTIR."""
    import importlib.util

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from registry.formats.launch_spec import TARGET_ARCHES
    from registry.kernels.builtin_build import package_roots, portable_path, portable_ttir, source_ttir
    from registry.kernels.builtin_bundles import triton_signature
    from registry.kernels.rowwise import row_launch_meta
    from registry.kernels.ttir_compile import compile_ttir, key_private_cache_by_version

    key_private_cache_by_version()  # a temporary cache of its own, as the registry's build has
    spec = importlib.util.spec_from_file_location("compiled_hostile", GALLERY / "compiled_hostile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    roots = {**package_roots(), str(GALLERY): "gallery"}
    dim, dtype = CASE
    meta = row_launch_meta(dim)
    signature, pointers = triton_signature("modulated_layernorm", dtype)
    constants = {"D": dim, "BLOCK_D": meta["BLOCK_D"], "IS_BF16": True}
    options = {"num_warps": meta["num_warps"], "enable_fp_fusion": meta["enable_fp_fusion"]}
    built = {}
    for name in names:
        source = ASTSource(fn=getattr(module, name), signature={**signature, **dict.fromkeys(constants, "constexpr")},
                           constexprs=constants, attrs={(index,): [["tt.divisibility", 16]] for index in pointers})
        ttir = portable_ttir(source_ttir(source, GPUTarget("cuda", TARGET_ARCHES[arch][1], 32), options), roots)
        cubin, metadata = compile_ttir(ttir, arch, options)
        metadata["extern_libs"] = [[lib, portable_path(path, roots)] for lib, path in metadata["extern_libs"]]
        built[name] = {"ttir": ttir, "cubin": base64.b64encode(cubin).decode("ascii"), "metadata": metadata}
    return built


def build_hostile_bundles(out: Path, arch: str = "sm_90a", names: tuple[str, ...] = NAMES) -> dict[str, Path]:
    """One bundle directory per hostile kernel under ``out`` (``out/<name>``)."""
    from registry.bundles.files import write_kernel_manifest
    from registry.bundles.fingerprint import reference_fingerprint
    from registry.formats.launch_spec import TRITON_VERSION
    from registry.kernels.builtin_bundles import compatibility, kernel_key, spec_for
    from registry.kernels.reference import modulated_layernorm

    cache = Path(tempfile.mkdtemp(prefix="hostile-build-"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "HOME": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
           "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run([sys.executable, __file__, "compile"], input=json.dumps({"names": list(names),
                                                                                        "arch": arch}),
                              capture_output=True, text=True, env=env, timeout=600, cwd=str(cache))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"the hostile kernels did not compile: {done.stderr[-2000:]}")
    built = json.loads(done.stdout)
    key = kernel_key("modulated_layernorm", *CASE)
    bundles = {}
    for name, compiled in built.items():
        directory = out / name
        folder = directory / "kernels" / key
        folder.mkdir(parents=True)
        (folder / f"{arch}.ttir").write_text(compiled["ttir"], encoding="utf-8")
        (folder / f"{arch}.cubin").write_bytes(base64.b64decode(compiled["cubin"]))
        metadata = compiled["metadata"]
        (folder / f"{arch}.json").write_text(json.dumps(metadata, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        (directory / "gallery").mkdir()
        shutil.copyfile(GALLERY / "compiled_hostile.py", directory / SOURCE)
        spec = spec_for("modulated_layernorm", [CASE], [arch], {(key, arch): metadata["shared"]}, metadata["name"],
                        {key: metadata["num_warps"]})
        write_kernel_manifest(directory, sources=[SOURCE], triton=TRITON_VERSION, spec=spec,
                              replaces={"fingerprint": reference_fingerprint(modulated_layernorm)},
                              compatibility=compatibility([arch]))
        bundles[name] = directory
    return bundles


if __name__ == "__main__" and sys.argv[1:] == ["compile"]:
    request = json.loads(sys.stdin.read())
    print(json.dumps(_compile(request["names"], request["arch"])))
