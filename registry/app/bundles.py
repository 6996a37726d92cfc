"""Registering a bundle: verify every file against the manifest, then append one registration.

Nothing is appended unless the whole directory checks out (registry.bundles.files):
an undeclared or missing file, a size or hash mismatch, a path or symlink
leaving the bundle, or an unknown manifest field is a one-line refusal.
"""
from __future__ import annotations

from pathlib import Path

from registry.bundles import bundle_directory, verify_directory
from registry.formats.text import text_arguments

from .context import Registry
from .workloads import Registration, register_artifact


@text_arguments
def register_bundle(registry: Registry, artifact: str, directory: str | Path, *, workload: str, kind: str,
                    backend: str | None = None, op: str | None = None, entry: str | None = None) -> Registration:
    """Register ARTIFACT as the bundle in DIRECTORY; its identity is the manifest's digest."""
    bundle_directory(".", artifact)  # the id must be able to name the bundle's directory on a runtime node
    verified = verify_directory(directory)
    return register_artifact(registry, artifact, workload=workload, kind=kind, backend=backend, op=op, entry=entry,
                             payload_sha256=verified.digest, bundle=verified.manifest.canonical())
