"""Registering a compiled Triton kernel bundle: every check, then the registry's own rebuild, before any event.

`register_bundle` (app/bundles.py) sends a `registry.triton-kernel/1`
bundle here after its files matched its manifest (registry/bundles/files.py)
and its manifest and spec parsed (registry/bundles/kernel_manifest.py). For
each kernel and target, in order, each file read once (and hashed again
against the manifest, so a file swapped after the directory check is
refused, not checked in its new form):

1. the cubin is a CUDA ELF for its declared target with exactly the spec's
   entry, its parameters, no undefined symbol or device-side launch, no
   cluster (registry/bundles/cubin.py);
2. Triton's metadata agrees with the spec and stays in version 1's limits
   (registry/bundles/triton_metadata.py);
3. the TTIR names its sources by relative paths only (registry/bundles/ttir.py);
4. then all of the bundle's TTIR is rebuilt with the pinned Triton in the
   sandbox (registry/kernels/rebuild.py), and every rebuilt cubin must equal
   the bundle's byte for byte, and its metadata the bundle's.

Any refusal is one line, and nothing is appended. What is returned are the
rebuilt cubins: the only bytes a launcher is ever given.

`build_builtin_bundles` builds the registry's own kernels as such bundles
(`registry kernels build`; registry/kernels/builtin_bundles.py).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from registry.bundles import BundleError, KernelBundleManifest, VerifiedBundle, write_kernel_manifest
from registry.bundles.cubin import check_cubin
from registry.bundles.files import read_regular
from registry.bundles.fingerprint import fingerprint_of
from registry.bundles.triton_metadata import MetadataRefused, check_metadata, rebuild_difference
from registry.bundles.ttir import check_ttir_locations
from registry.formats.documents import DocumentError, load_json
from registry.formats.launch_spec import TARGET_ARCHES, TRITON_VERSION
from registry.kernels.builtin_bundles import (BUILTIN, BuildFailed, check_request, compatibility, compile_builtins,
                                              write_kernel_files)
from registry.kernels.rebuild import RebuildJob, rebuild


def check_kernel_bundle(verified: VerifiedBundle) -> dict[tuple[str, str], bytes]:
    """Every check of the module docstring; the registry's rebuilt cubin of each (kernel, target)."""
    manifest = verified.manifest
    if not isinstance(manifest, KernelBundleManifest):
        raise BundleError(f"{verified.directory}: not a {KernelBundleManifest.format} bundle")
    checked, jobs = [], []
    for key, target in manifest.targets():
        kernel = manifest.spec.kernels[key]
        where = f"{verified.directory}: {key}@{target.arch}"
        cubin = _declared_bytes(verified, target.cubin)
        check_cubin(cubin, kernel, target.arch, f"{where}: {target.cubin}")
        metadata_where = f"{where}: {target.metadata}"
        try:
            metadata = load_json(_text(verified, target.metadata), metadata_where)
        except DocumentError as exc:
            raise MetadataRefused(metadata_where, "metadata_fields", str(exc)) from None
        options = check_metadata(metadata, kernel, target, metadata_where)
        ttir = _text(verified, target.ttir)
        check_ttir_locations(ttir, f"{where}: {target.ttir}")
        jobs.append(RebuildJob(ttir, target.arch, options))
        checked.append((key, target, cubin, metadata, where))
    rebuilt = {}
    for (key, target, cubin, metadata, where), result in zip(checked, rebuild(jobs)):
        if result.error is not None:
            raise MetadataRefused(where, "rebuild_differs", f"the registry's rebuild of {target.ttir} failed: "
                                                            f"{result.error}")
        if result.cubin != cubin:
            at = next((i for i, (a, b) in enumerate(zip(cubin, result.cubin)) if a != b),
                      min(len(cubin), len(result.cubin)))
            raise MetadataRefused(where, "rebuild_differs", f"{target.cubin} ({len(cubin)} bytes) differs from the "
                                                            f"registry's rebuild of {target.ttir} ({len(result.cubin)} "
                                                            f"bytes) from byte {at}")
        difference = rebuild_difference(metadata, result.metadata)
        if difference is not None:
            raise MetadataRefused(where, "rebuild_differs", f"{target.metadata}: {difference}")
        rebuilt[(key, target.arch)] = result.cubin
    return rebuilt


def _declared_bytes(verified: VerifiedBundle, path: str) -> bytes:
    """A declared file's bytes, read once and hashed again: what was checked is what the manifest declares."""
    declared = verified.manifest.file(path)
    data = read_regular(verified.directory / path, declared.size)
    if hashlib.sha256(data).hexdigest() != declared.sha256:
        raise BundleError(f"{verified.directory}: {path} changed while the bundle was being registered")
    return data


def _text(verified: VerifiedBundle, path: str) -> str:
    try:
        return _declared_bytes(verified, path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{verified.directory}: {path} is not UTF-8 text (byte {exc.start})") from None


def build_builtin_bundles(out: str | Path, ops: list[str] | None = None, arches: list[str] | None = None,
                          cases: list[tuple[int, str]] | None = None) -> dict[str, KernelBundleManifest]:
    """One bundle directory per built-in operation under `out` (each must not exist yet); their manifests by op.

    `cases` keeps only those (D, dtype) of the corpora (a smaller bundle, for a test); by default every one.
    """
    ops = list(BUILTIN) if ops is None else list(ops)
    arches = sorted(TARGET_ARCHES) if arches is None else sorted(set(arches))
    check_request(ops, arches)
    out = Path(out)
    for op in ops:
        if os.path.lexists(out / op):
            raise BuildFailed(f"{out / op} exists; bundles are written only into new directories")
    built = compile_builtins(ops, arches, None if cases is None else sorted(set(cases)))
    manifests = {}
    for op in ops:
        directory = out / op
        spec, sources = write_kernel_files(directory, op, built[op], arches)
        reference = built[op]["reference"]
        manifests[op] = write_kernel_manifest(
            directory, sources=sources, triton=TRITON_VERSION, spec=spec,
            replaces={"fingerprint": fingerprint_of(reference["module"], reference["qualname"], reference["source"])},
            compatibility=compatibility(arches))
    return manifests
