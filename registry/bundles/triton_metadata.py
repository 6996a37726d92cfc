"""Triton's metadata file of one compiled kernel, read as data: what it must say, and which options a rebuild takes.

Triton writes a JSON object beside each cubin (its compile options and what
the compile found: the entry's name, the dynamic shared memory, scratch
sizes). A `registry.triton-kernel/1` bundle carries it per kernel and
target; registration (docs/bundles.md) refuses it in one line naming the
reason (`METADATA_REFUSALS`) unless:

- it is a JSON object with exactly Triton 3.7.1's fields;
- it agrees with the spec: `name` is the kernel's entry, `num_warps` and
  `shared` are the spec's, `target` and `arch` are the declared target's,
  `triton_version` is the pinned one;
- it stays inside version 1's limits: `num_ctas` 1 (one CTA per cluster),
  no cooperative launch, no programmatic dependent launch (PDL), no global
  or profile scratch;
- it names no compile input outside Triton's own: no `ir_override` (a file
  Triton would read in place of a stage), no extra ptxas options, no
  instrumentation, no PTX version of its own, only Triton's libdevice.

The rebuild then compiles with the options `rebuild_options` takes from it,
and the rebuilt metadata must equal it in every field but `hash` (Triton's
cache key, which differs between a compile from source and one from TTIR)
and `extern_libs` (the building machine's path to Triton's libdevice).
Pure: JSON in, one-line refusals out.
"""
from __future__ import annotations

from typing import Any

from registry.formats.launch_spec import NUM_WARPS, TARGET_ARCHES, TRITON_VERSION, KernelDecl, KernelTarget

from .manifest import BundleError

METADATA_REFUSALS = {
    "metadata_fields": "not Triton 3.7.1's metadata: a field missing, unknown or of the wrong type",
    "metadata_disagrees": "says another entry, num_warps, shared memory, target or Triton than the spec",
    "cluster": "num_ctas above 1 (version 1 launches one CTA per cluster)",
    "cooperative": "a cooperative launch",
    "pdl": "a programmatic dependent launch",
    "scratch": "global or profile scratch memory (version 1 passes none)",
    "compile_option": "a compile input outside Triton's own (an IR override, ptxas options, instrumentation, "
                      "a PTX version, another libdevice)",
    "rebuild_differs": "the registry's rebuild from the TTIR gives another cubin or other metadata",
}
"""Every reason a kernel's metadata (or its rebuild) is refused for, by the name its refusal carries."""

FIELDS = ("allowed_dot_input_precisions", "arch", "backend_name", "debug", "default_dot_input_precision",
          "deprecated_fp8_dot_operand_dtypes", "enable_fp_fusion", "enable_reflect_ftz", "extern_libs",
          "global_scratch_align", "global_scratch_size", "hash", "instrumentation_mode", "ir_override",
          "launch_cooperative_grid", "launch_pdl", "max_num_imprecise_acc_default", "maxnreg", "name", "num_ctas",
          "num_stages", "num_warps", "profile_scratch_align", "profile_scratch_size", "ptx_options", "ptx_version",
          "sanitize_overflow", "shared", "supported_fp8_dtypes", "target", "tensordesc_meta", "tmem_size",
          "triton_version", "warp_size")
"""The fields of Triton 3.7.1's metadata file, every one of them."""
IGNORED_IN_REBUILD = ("hash", "extern_libs")
LIBDEVICE = "triton/backends/nvidia/lib/libdevice.10.bc"
DOT_PRECISIONS = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")
MAX_STAGES = 8


class MetadataRefused(BundleError):
    """A kernel's metadata refused: `where: metadata refused (reason): detail`, the reason one of METADATA_REFUSALS."""

    def __init__(self, where: str, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{where}: metadata refused ({reason}): {detail}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_metadata(metadata: Any, kernel: KernelDecl, target: KernelTarget, where: str) -> dict[str, Any]:
    """Every check of the module docstring; returns the options a rebuild compiles with."""
    def refuse(reason: str, detail: str) -> MetadataRefused:
        return MetadataRefused(where, reason, detail)

    if not isinstance(metadata, dict):
        raise refuse("metadata_fields", f"expected a JSON object, got {type(metadata).__name__}")
    missing, unknown = sorted(set(FIELDS) - set(metadata)), sorted(set(metadata) - set(FIELDS))
    if missing or unknown:
        raise refuse("metadata_fields", f"field {(missing or unknown)[0]!r} is {'missing' if missing else 'unknown'}")
    capability = TARGET_ARCHES[target.arch][1]
    for name, want in (("name", kernel.entry), ("num_warps", kernel.num_warps), ("shared", target.shared),
                       ("triton_version", TRITON_VERSION), ("arch", f"sm{capability}"), ("backend_name", "cuda"),
                       ("target", {"backend": "cuda", "arch": capability, "warp_size": 32}), ("warp_size", 32)):
        if metadata[name] != want or type(metadata[name]) is not type(want):
            raise refuse("metadata_disagrees", f"{name} is {metadata[name]!r}; the spec gives {want!r}")
    if metadata["num_ctas"] != 1 or not _is_int(metadata["num_ctas"]):
        raise refuse("cluster", f"num_ctas is {metadata['num_ctas']!r}")
    if metadata["launch_cooperative_grid"] is not False:
        raise refuse("cooperative", f"launch_cooperative_grid is {metadata['launch_cooperative_grid']!r}")
    if metadata["launch_pdl"] is not False:
        raise refuse("pdl", f"launch_pdl is {metadata['launch_pdl']!r}")
    for name in ("global_scratch_size", "profile_scratch_size"):
        if metadata[name] != 0 or not _is_int(metadata[name]):
            raise refuse("scratch", f"{name} is {metadata[name]!r}")
    for name, want in (("ir_override", None), ("ptx_options", None), ("ptx_version", None),
                       ("instrumentation_mode", "")):
        if metadata[name] != want or type(metadata[name]) is not type(want):
            raise refuse("compile_option", f"{name} is {metadata[name]!r}")
    libs = metadata["extern_libs"]
    if not (isinstance(libs, list) and len(libs) == 1 and isinstance(libs[0], list) and len(libs[0]) == 2
            and libs[0][0] == "libdevice" and isinstance(libs[0][1], str)
            and (libs[0][1] == LIBDEVICE or libs[0][1].endswith("/" + LIBDEVICE))):
        raise refuse("compile_option", f"extern_libs is {str(libs)[:120]}; only Triton's own libdevice is linked")
    return _rebuild_options(metadata, refuse)


def _rebuild_options(metadata: dict[str, Any], refuse) -> dict[str, Any]:
    checks = {
        "num_warps": lambda v: _is_int(v) and v in NUM_WARPS,
        "num_ctas": lambda v: v == 1 and _is_int(v),
        "num_stages": lambda v: _is_int(v) and 1 <= v <= MAX_STAGES,
        "maxnreg": lambda v: v is None or (_is_int(v) and 16 <= v <= 255),
        "enable_fp_fusion": lambda v: isinstance(v, bool),
        "enable_reflect_ftz": lambda v: isinstance(v, bool),
        "sanitize_overflow": lambda v: isinstance(v, bool),
        "debug": lambda v: isinstance(v, bool),
        "default_dot_input_precision": lambda v: v in DOT_PRECISIONS,
        "launch_cooperative_grid": lambda v: v is False,
        "launch_pdl": lambda v: v is False,
    }
    for name, good in checks.items():
        if not good(metadata[name]):
            raise refuse("metadata_fields", f"{name} is {str(metadata[name])[:60]}, not a value a rebuild takes")
    return {name: metadata[name] for name in checks}


def rebuild_difference(declared: dict[str, Any], rebuilt: dict[str, Any]) -> str | None:
    """The first field (but `hash` and `extern_libs`) where the rebuilt metadata differs from the bundle's."""
    for name in sorted(set(declared) | set(rebuilt)):
        if name in IGNORED_IN_REBUILD:
            continue
        if declared.get(name) != rebuilt.get(name):
            return f"{name}: the bundle says {str(declared.get(name))[:60]}; the rebuild gives {str(rebuilt.get(name))[:60]}"
    return None
