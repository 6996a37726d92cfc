"""Registering a bundle: verify every file against the manifest, then append one registration.

Nothing is appended unless the whole directory checks out (registry.bundles.files):
an undeclared or missing file, a size or hash mismatch, a path or symlink
leaving the bundle, or an unknown manifest field is a one-line refusal. A
compiled Triton kernel bundle (`registry.triton-kernel/1`, kind
`triton_kernel`) is then checked kernel by kernel and rebuilt by the
registry (app/kernel_bundles.py), still before anything is appended.
"""
from __future__ import annotations

from pathlib import Path

from registry.bundles import KernelBundleManifest, bundle_directory, verify_directory
from registry.formats.errors import UserError
from registry.formats.kinds import TRITON_KERNEL_FORMAT
from registry.formats.text import text_arguments

from .context import Registry
from .kernel_bundles import check_kernel_bundle
from .workloads import Registration, check_claims, current_contract, register_artifact


@text_arguments
def register_bundle(registry: Registry, artifact: str, directory: str | Path, *, workload: str, kind: str,
                    backend: str | None = None, op: str | None = None, entry: str | None = None) -> Registration:
    """Register ARTIFACT as the bundle in DIRECTORY; its identity is the manifest's digest."""
    bundle_directory(".", artifact)  # the id must be able to name the bundle's directory on a runtime node
    verified = verify_directory(directory)
    check_claims(artifact, workload=workload, kind=kind, backend=backend, op=op, entry=entry)
    if isinstance(verified.manifest, KernelBundleManifest) != (kind == "triton_kernel"):
        raise UserError(f"a triton_kernel artifact is registered from a {TRITON_KERNEL_FORMAT} bundle, and such a "
                        f"bundle only as a triton_kernel (this is a {verified.manifest.format} bundle, --kind {kind})")
    if kind == "triton_kernel":
        if op is not None or entry is not None:
            raise UserError("a triton_kernel bundle declares its own launches; give no --op or --entry")
        current_contract(registry, workload)  # an unknown workload is refused before the rebuild's seconds
        check_kernel_bundle(verified)
    return register_artifact(registry, artifact, workload=workload, kind=kind, backend=backend, op=op, entry=entry,
                             payload_sha256=verified.digest, bundle=verified.manifest.canonical())
