"""The process that compiles the built-in kernels for their bundles (run by registry/kernels/builtin_bundles.py).

`python -I -m registry.kernels.builtin_build` reads one JSON request on
standard input (the ops, the target architectures) and answers one JSON
document on standard output: per operation, the reference's name and source,
the (hidden size, dtype) cases of both corpora, and per case and target the
portable TTIR, the cubin (base64) and Triton's metadata. It runs with
Triton's compiler (never its interpreter) in an environment of its own
(builtin_bundles.py passes no TRITON_* knob), importing the registry's own
kernel modules: the only Python a compile runs is the registry's.

Each kernel is compiled from its `@triton.jit` function to TTIR (Triton's
code generator and TTIR stage only: `source_ttir`); the TTIR's
source locations are made relative (`registry/kernels/modln.py`,
`triton/language/standard.py`) so that no path of the building machine is
in the bundle, and the cubin is then compiled from that portable TTIR by
registry/kernels/ttir_compile.py, the same compile a registration's rebuild
runs. So the cubin a bundle ships is, by construction, the rebuild of its
TTIR on the machine that built it; registration checks it again in the
sandbox.
"""
from __future__ import annotations

import base64
import json
import os
import re
import sys
from pathlib import Path

_FILE_LOCATION = re.compile(r'loc\("([^"]*)":([0-9]+):([0-9]+)\)')


def portable_ttir(ttir: str, roots: dict[str, str]) -> str:
    """`ttir` with every file location under one of `roots` (absolute folder -> its relative name) made relative;
    a location outside them, or one that cannot be rewritten exactly, is an error (the bundle would carry it)."""

    def relative(match: re.Match) -> str:
        path = match.group(1)
        for root, name in roots.items():
            if path.startswith(root + "/") and "\\" not in path:
                return f'loc("{name}/{path[len(root) + 1:]}":{match.group(2)}:{match.group(3)})'
        raise ValueError(f"a TTIR location names {path!r}, outside the registry and Triton packages")

    portable = _FILE_LOCATION.sub(relative, ttir)
    if re.search(r'loc\("/', portable):
        raise ValueError("a TTIR location still names an absolute path")
    return portable


def portable_path(path: str, roots: dict[str, str]) -> str:
    """A file of one of `roots` by its relative name (Triton's libdevice, named in its metadata)."""
    for root, name in roots.items():
        if path.startswith(root + "/"):
            return f"{name}/{path[len(root) + 1:]}"
    raise ValueError(f"{path!r} is outside the registry and Triton packages")


def package_roots() -> dict[str, str]:
    """The folders holding the registry and Triton packages, each named by its package's own name."""
    import triton

    import registry

    return {str(Path(registry.__file__).resolve().parent): "registry",
            str(Path(triton.__file__).resolve().parent): "triton"}


def source_ttir(source, target, options: dict) -> str:
    """The TTIR `triton.compile(source, ...)` writes (its `asm["ttir"]`), without lowering it further: the code
    generator and the TTIR stage exactly as Triton 3.7.1's compile runs them (a test holds the two texts equal)."""
    from triton._C.libtriton import ir
    from triton.compiler.compiler import make_backend

    backend = make_backend(target)
    parsed = backend.parse_options(dict(options))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, parsed, backend.get_codegen_implementation(parsed), backend.get_module_map(),
                            context)
    stages: dict = {}
    backend.add_stages(stages, parsed, source.language)
    return str(stages["ttir"](module, {}))


def _compile(kernel, op_name: str, dim: int, dtype: str, arch: str, roots: dict[str, str]) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from registry.formats.launch_spec import TARGET_ARCHES
    from registry.kernels.builtin_bundles import triton_signature
    from registry.kernels.rowwise import row_launch_meta
    from registry.kernels.ttir_compile import compile_ttir

    meta = row_launch_meta(dim)
    signature, pointers = triton_signature(op_name, dtype)
    constants = {"D": dim, "BLOCK_D": meta["BLOCK_D"], "IS_BF16": dtype == "bfloat16"}
    source = ASTSource(fn=kernel, signature={**signature, **{name: "constexpr" for name in constants}},
                       constexprs=constants, attrs={(index,): [["tt.divisibility", 16]] for index in pointers})
    options = {"num_warps": meta["num_warps"], "enable_fp_fusion": meta["enable_fp_fusion"]}
    ttir = portable_ttir(source_ttir(source, GPUTarget("cuda", TARGET_ARCHES[arch][1], 32), options), roots)
    cubin, metadata = compile_ttir(ttir, arch, options)
    metadata["extern_libs"] = [[name, portable_path(path, roots)] for name, path in metadata["extern_libs"]]
    return {"ttir": ttir, "cubin": base64.b64encode(cubin).decode("ascii"), "metadata": metadata}


def build(request: dict) -> dict:
    """Compile every case of every requested op for every requested arch (see the module docstring)."""
    import importlib

    import inspect

    from registry.kernels.builtin_bundles import BUILTIN, corpus_dims
    from registry.kernels.ops import get_operation
    from registry.kernels.ttir_compile import key_private_cache_by_version

    key_private_cache_by_version()  # the build's cache is a temporary folder of its own (builtin_bundles.py)
    roots = package_roots()
    answer = {}
    for op_name in request["ops"]:
        entry = BUILTIN[op_name]
        kernel = getattr(importlib.import_module(entry.module), entry.function)
        module, _, name = get_operation(op_name).reference.partition(":")
        reference = getattr(importlib.import_module(module), name)
        cases = corpus_dims()
        if request.get("cases") is not None:
            wanted = {tuple(case) for case in request["cases"]}
            cases = [case for case in cases if case in wanted]
            if len(cases) != len(wanted):
                raise ValueError(f"cases {sorted(wanted)} are not all among the corpora's {corpus_dims()}")
        answer[op_name] = {
            "reference": {"module": reference.__module__, "qualname": reference.__qualname__,
                          "source": inspect.getsource(reference)},
            "cases": [list(case) for case in cases],
            "kernels": {f"{dim}/{dtype}/{arch}": _compile(kernel, op_name, dim, dtype, arch, roots)
                        for dim, dtype in cases for arch in request["arches"]},
        }
    return answer


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    request = json.loads(sys.stdin.read())
    json.dump(build(request), sys.stdout)


if __name__ == "__main__":
    main()
