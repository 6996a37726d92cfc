"""The built-in kernels as `registry.triton-kernel/1` bundles, built by the registry's own code.

Each built-in operation (registry/kernels/ops.py) has a Triton kernel whose
wrapper (modln.py, gated.py, rmsnorm.py, with rowwise.py's launch rule)
decides at run time what to launch: one program per row (grid B*S), the
hidden size D and the dtype as compile-time constants, `num_warps` from D,
`enable_fp_fusion` off. A bundle declares those decisions instead (the
launch spec, registry/formats/launch_spec.py): one compiled kernel per
(D, dtype) of the cpu and gpu corpora (registry/kernels/corpus.py) and per
target, and one variant per (D, dtype) choosing it, so every corpus case
has a variant and any other D is refused, never launched.

`compile_builtins(ops, arches)` compiles them in a process of its own
(registry/kernels/builtin_build.py: Triton's compiler, no knob of the
caller's environment) and `write_kernel_files` writes one operation's files;
registry/app/kernel_bundles.py `build_builtin_bundles` writes each bundle
directory, manifest last. Bundles are generated, not committed: the cubins are
derived files of the sources and the pinned Triton, and registration
rebuilds them anyway (docs/kernels.md, "Compiled kernel bundles").
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from registry.formats.errors import UserError
from registry.formats.launch_spec import TARGET_ARCHES

EPS = 1e-6
"""LayerNorm's and RMSNorm's epsilon, as registry/kernels/reference.py declares it (a test holds the two equal)."""
TRITON_TYPES = {"bfloat16": "bf16", "float16": "fp16"}
BUILD_TIMEOUT_S = 900


class BuildFailed(UserError):
    """The built-in kernels could not be compiled here (no ptxas, another Triton); nothing was written."""


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel: its name in the @triton.jit signature, its Triton type (T: the activation's), and
    what a launch passes: a tensor (`tensor`) or a scalar (`scalar` type and `value`)."""

    name: str
    triton: str
    tensor: str | None = None
    scalar: str | None = None
    value: str | float | None = None


@dataclass(frozen=True)
class Builtin:
    op: str
    short: str  # the kernels' key prefix
    module: str
    function: str
    tensors: tuple[tuple[str, str, str, tuple[str, ...]], ...]  # (name, role, dtype or "T", shape)
    params: tuple[Param, ...]


_ACT = ("B", "S", "D")
_ROW = ("B", "D")
_SEQ = Param("seq", "i32", scalar="i32", value="S")
_EPS = Param("eps", "fp32", scalar="fp32", value=EPS)

BUILTIN = {b.op: b for b in (
    Builtin("modulated_layernorm", "modln", "registry.kernels.modln", "_modln_kernel",
            (("x", "input", "T", _ACT), ("scale", "input", "float32", _ROW), ("shift", "input", "float32", _ROW),
             ("y", "output", "T", _ACT)),
            (Param("x_ptr", "*T", "x"), Param("scale_ptr", "*fp32", "scale"), Param("shift_ptr", "*fp32", "shift"),
             Param("y_ptr", "*i16", "y"), _SEQ, _EPS)),
    Builtin("gated_residual", "gated", "registry.kernels.gated", "_gated_residual_kernel",
            (("residual", "input", "T", _ACT), ("x", "input", "T", _ACT), ("gate", "input", "float32", _ROW),
             ("out", "output", "T", _ACT)),
            (Param("res_ptr", "*T", "residual"), Param("x_ptr", "*T", "x"), Param("gate_ptr", "*fp32", "gate"),
             Param("out_ptr", "*i16", "out"), _SEQ)),
    Builtin("gated_residual_layernorm", "gated_ln", "registry.kernels.gated", "_gated_residual_ln_kernel",
            (("residual", "input", "T", _ACT), ("x", "input", "T", _ACT), ("gate", "input", "float32", _ROW),
             ("weight", "input", "float32", ("D",)), ("bias", "input", "float32", ("D",)),
             ("n", "output", "T", _ACT), ("u", "output", "T", _ACT)),
            (Param("res_ptr", "*T", "residual"), Param("x_ptr", "*T", "x"), Param("gate_ptr", "*fp32", "gate"),
             Param("w_ptr", "*fp32", "weight"), Param("b_ptr", "*fp32", "bias"), Param("n_ptr", "*i16", "n"),
             Param("u_ptr", "*i16", "u"), _SEQ, _EPS)),
    Builtin("rms_norm", "rms", "registry.kernels.rmsnorm", "_rms_norm_kernel",
            (("x", "input", "T", _ACT), ("weight", "input", "float32", ("D",)), ("y", "output", "T", _ACT)),
            (Param("x_ptr", "*T", "x"), Param("w_ptr", "*fp32", "weight"), Param("y_ptr", "*i16", "y"), _EPS)),
)}
"""Each built-in operation's kernel, its tensors (in the wrapper's order) and its parameters (in the kernel's)."""

CONSTRAINTS = ("B >= 1", "S >= 1", "B * S <= 2147483647")
"""What every built-in call meets: no empty activation (the wrappers launch nothing for one), and one program per
row within the grid's x limit. D is matched by the variants."""


def corpus_dims() -> list[tuple[int, str]]:
    """Every (hidden size, activation dtype) of the cpu and gpu corpora, sorted: one compiled kernel each."""
    from registry.kernels.corpus import CORPORA, corpus_cases

    return sorted({(case.dim, case.dtype) for corpus in CORPORA for case in corpus_cases(corpus)})


def triton_signature(op: str, dtype: str) -> tuple[dict[str, str], list[int]]:
    """The kernel's Triton signature for activations of `dtype`, and the indices of its pointer parameters."""
    params = BUILTIN[op].params
    signature = {p.name: p.triton.replace("T", TRITON_TYPES[dtype]) for p in params}
    return signature, [i for i, p in enumerate(params) if p.triton.startswith("*")]


def kernel_key(op: str, dim: int, dtype: str) -> str:
    return f"{BUILTIN[op].short}_d{dim}_{dtype}"


def spec_for(op: str, cases: list[tuple[int, str]], arches: list[str], shared: dict[tuple[str, str], int],
             entry: str, num_warps: dict[str, int]) -> dict:
    """The launch spec of one operation's bundle: tensors, symbols, constraints, one kernel and variant per case."""
    builtin = BUILTIN[op]
    kernels, variants = {}, []
    for dim, dtype in cases:
        key = kernel_key(op, dim, dtype)
        kernels[key] = {
            "entry": entry, "num_warps": num_warps[key],
            "params": ["ptr" if p.tensor else p.scalar for p in builtin.params],
            "targets": {arch: {"shared": shared[(key, arch)], **{kind: f"kernels/{key}/{arch}.{suffix}" for kind, suffix
                                                                  in (("ttir", "ttir"), ("cubin", "cubin"),
                                                                      ("metadata", "json"))}}
                        for arch in arches}}
        variants.append({"name": f"d{dim}_{dtype}", "dtypes": {"T": dtype}, "when": f"D == {dim}",
                         "launches": [{"kernel": key, "grid": ["B * S", 1, 1],
                                       "args": [{"buffer": p.tensor} if p.tensor else {"scalar": p.scalar,
                                                                                       "value": p.value}
                                                for p in builtin.params]}]})
    return {
        "dtypes": {"T": sorted({dtype for _, dtype in cases})},
        "tensors": [{"name": name, "role": role, "dtype": dtype, "shape": list(shape), "layout": "contiguous",
                     "align": 16} for name, role, dtype, shape in builtin.tensors],
        "symbols": {"B": {"tensor": builtin.tensors[0][0], "dim": 0}, "S": {"tensor": builtin.tensors[0][0], "dim": 1},
                    "D": {"tensor": builtin.tensors[0][0], "dim": 2}},
        "constraints": list(CONSTRAINTS),
        "kernels": kernels,
        "variants": variants,
    }


def compatibility(arches: list[str]) -> dict:
    """Where a built-in bundle runs: any model, the devices of its targets, single-process inference."""
    return {"model": {"id": "*", "revision": "*"},
            "gpu_architectures": sorted({TARGET_ARCHES[arch][0] for arch in arches}),
            "torch": {}, "cuda": {"min": "12.8"}, "triton": {},
            "execution_modes": ["inference"], "distributed_modes": ["single"]}


def compile_builtins(ops: list[str], arches: list[str], cases: list[tuple[int, str]] | None = None) -> dict:
    """Run registry/kernels/builtin_build.py for `ops` and `arches` (and only `cases` of the corpora's (D, dtype),
    when given); its answer (see there)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    cache = Path(tempfile.mkdtemp(prefix="registry-kernel-build-"))
    env.update(HOME=str(cache), TRITON_CACHE_DIR=str(cache / "triton"))
    try:
        done = subprocess.run([sys.executable, "-I", "-m", "registry.kernels.builtin_build"],
                              input=json.dumps({"ops": ops, "arches": arches, "cases": cases}), capture_output=True, text=True,
                              env=env, timeout=BUILD_TIMEOUT_S, cwd=str(cache))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise BuildFailed(f"the built-in kernels did not compile: {lines[-1] if lines else done.returncode}")
    return json.loads(done.stdout)


def check_request(ops: list[str], arches: list[str]) -> None:
    """Refuse an operation or target that is not built in, before anything compiles."""
    for op in ops:
        if op not in BUILTIN:
            raise BuildFailed(f"{op!r} is not a built-in operation ({', '.join(BUILTIN)})")
    for arch in arches:
        if arch not in TARGET_ARCHES:
            raise BuildFailed(f"{arch!r} is not a target ({', '.join(TARGET_ARCHES)})")


def write_kernel_files(directory: Path, op: str, built: dict, arches: list[str]) -> tuple[dict, list[str]]:
    """Write one operation's compiled kernels and its sources under `directory`; its spec and source paths (the
    manifest, which declares them, is written by the caller)."""
    import registry

    cases = [(dim, dtype) for dim, dtype in built["cases"]]
    shared, warps, entries, sources = {}, {}, set(), set()
    for dim, dtype in cases:
        key = kernel_key(op, dim, dtype)
        for arch in arches:
            compiled = built["kernels"][f"{dim}/{dtype}/{arch}"]
            folder = directory / "kernels" / key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{arch}.ttir").write_text(compiled["ttir"], encoding="utf-8")
            (folder / f"{arch}.cubin").write_bytes(base64.b64decode(compiled["cubin"]))
            metadata = compiled["metadata"]
            (folder / f"{arch}.json").write_text(json.dumps(metadata, indent=1, sort_keys=True) + "\n",
                                                 encoding="utf-8")
            shared[(key, arch)] = metadata["shared"]
            warps[key] = metadata["num_warps"]
            entries.add(metadata["name"])
            sources.update(_registry_sources(compiled["ttir"]))
    package = Path(registry.__file__).resolve().parent
    for source in sorted(sources):
        target = directory / source
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(package.joinpath(*source.split("/")[1:]), target)
    (entry,) = entries
    return spec_for(op, cases, arches, shared, entry, warps), sorted(sources)


def _registry_sources(ttir: str) -> set[str]:
    """The registry's source files a portable TTIR's locations name (`registry/kernels/modln.py`, ...)."""
    import re

    return {path for path in re.findall(r'loc\("(registry/[^"]+\.py)":', ttir)}
