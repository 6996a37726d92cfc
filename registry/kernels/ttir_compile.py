"""TTIR to cubin with the pinned Triton: the one compile both the build of a kernel bundle and its rebuild run.

A `registry.triton-kernel/1` bundle's cubins are what the registry compiles
from the bundle's TTIR, never bytes taken on trust. `compile_ttir` hands the
TTIR text to Triton as an IR file (`triton.compiler.IRSource`): MLIR's
parser reads it (a parser, no Python of anyone's), and Triton lowers it
through TTGIR, LLVM IR and PTX to a cubin with its bundled ptxas. Nothing
from the TTIR decides how it is compiled: the options come from the
caller, from a fixed list (`REBUILD_OPTIONS`), and a process whose
environment holds a `TRITON_*` variable that changes Triton's output (an
override directory, ptxas options, a line-info switch) refuses to compile.

The cubin's line table names the TTIR's source files, and ptxas, finding
such a file from where it runs, writes that file's modification time and
size into the cubin. So the compile runs in an empty directory, and a
bundle's TTIR may name its sources only by relative paths without `..`
(registry/bundles/ttir.py): no file a location names is found, and the
bytes depend on nothing of the machine compiling them.

It imports Triton, not torch, and runs in a process of its own: the build
of the built-in kernels (registry/kernels/builtin_bundles.py) and, for
registration, the sandboxed rebuild (registry/kernels/rebuild.py).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from registry.formats.errors import UserError
from registry.formats.launch_spec import TARGET_ARCHES, TRITON_VERSION

REBUILD_OPTIONS = ("num_warps", "num_ctas", "num_stages", "maxnreg", "enable_fp_fusion", "enable_reflect_ftz",
                   "sanitize_overflow", "debug", "default_dot_input_precision", "launch_cooperative_grid",
                   "launch_pdl")
"""The compile options a rebuild takes (from a bundle's metadata, checked by registry/bundles/triton_metadata.py);
every other option is Triton's default, which the rebuilt metadata must then show the bundle's equals."""

_ALLOWED_ENV = ("TRITON_CACHE_DIR", "TRITON_INTERPRET", "TRITON_HOME")


class CompileRefused(UserError):
    """This process cannot compile as the registry requires (another Triton, a Triton knob set)."""


def check_compile_environment() -> None:
    """The pinned Triton, and no TRITON_* variable that changes what it writes."""
    import triton

    if triton.__version__ != TRITON_VERSION:
        raise CompileRefused(f"Triton {triton.__version__} is installed; kernels are built and rebuilt with "
                             f"{TRITON_VERSION} only")
    knobs = sorted(name for name in os.environ if name.startswith("TRITON_") and name not in _ALLOWED_ENV)
    if knobs:
        raise CompileRefused(f"{knobs[0]} is set; it changes what Triton compiles, so nothing is compiled")


def compile_ttir(ttir: str, arch: str, options: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """The cubin and Triton's metadata (as JSON values) of `ttir` compiled for `arch` (`sm_90a`, `sm_100a`)."""
    import triton
    from triton.backends.compiler import GPUTarget

    check_compile_environment()
    unknown = sorted(set(options) - set(REBUILD_OPTIONS))
    if unknown:
        raise CompileRefused(f"compile option {unknown[0]!r} is not one a rebuild takes")
    with tempfile.TemporaryDirectory(prefix="registry-ttir-") as folder:
        path = Path(folder) / "kernel.ttir"
        path.write_text(ttir, encoding="utf-8")
        empty = Path(folder) / "cwd"
        empty.mkdir()
        previous = os.getcwd()
        os.chdir(empty)  # ptxas reads the times of the source files the TTIR names, where it finds them: nowhere here
        try:
            compiled = triton.compile(str(path), target=GPUTarget("cuda", TARGET_ARCHES[arch][1], 32),
                                      options=dict(options))
        finally:
            os.chdir(previous)
    return compiled.asm["cubin"], metadata_json(compiled.metadata._asdict())


def key_private_cache_by_version() -> None:
    """Let Triton name this process's cache entries without hashing its own installation first.

    Only for a process whose Triton cache is its own and ends with it: the
    build of the built-in kernels (a temporary folder) and the sandboxed
    rebuild (the jail's private /tmp). Triton's cache key starts with a hash
    of every compiler source and the whole libtriton (460 MB): about 0.4 s
    of CPU a process, two thirds of a one-job rebuild. In such a process the
    key only names entries nobody else reads, and its one other use, the
    metadata's `hash`, is left out when a rebuild is compared with a bundle
    (registry/bundles/triton_metadata.py). The cubin and the rest of the
    metadata do not depend on it. The Triton is the pinned one
    (`check_compile_environment`), so its version names it; the rest of the
    key (the TTIR, the target, the options) is Triton's own.
    """
    import triton
    from triton.runtime import cache

    cache.triton_key = lambda: f"{triton.__version__}-registry-private-cache"


def metadata_json(metadata: dict[str, Any]) -> dict[str, Any]:
    """Triton's metadata as the JSON Triton writes beside a cubin (its target as an object, tuples as lists)."""
    target = metadata["target"]
    values = dict(metadata, target={"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size})
    return json.loads(json.dumps(values))
