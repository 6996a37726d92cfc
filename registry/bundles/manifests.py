"""Which manifest a bundle carries: `registry.bundle/1` (a Python entry point) or `registry.triton-kernel/1`.

Both declare every file with its SHA-256 and size, the operation replaced
and a compatibility window, and both are identified by the SHA-256 of their
canonical form; `parse_manifest` reads either by its `format` and refuses
any other. Everything that reads a manifest (a bundle on disk, a lock file's
entries, a stored registration) reads it here.
"""
from __future__ import annotations

from typing import Any, Union

from registry.formats.kinds import TRITON_KERNEL_FORMAT

from .fields import BundleFieldError
from .kernel_manifest import KernelBundleManifest, parse_kernel_manifest
from .manifest import FORMAT, MANIFEST_NAME, BundleError, BundleManifest, parse_bundle_manifest

Manifest = Union[BundleManifest, KernelBundleManifest]
FORMATS = (FORMAT, TRITON_KERNEL_FORMAT)


def parse_manifest(data: Any, source: str = MANIFEST_NAME) -> Manifest:
    """Build a manifest of either format from parsed JSON; any problem is a BundleError `source: field: problem`."""
    try:
        if isinstance(data, dict) and data.get("format") == TRITON_KERNEL_FORMAT:
            return parse_kernel_manifest(data)
        return parse_bundle_manifest(data)
    except BundleFieldError as exc:
        raise BundleError(f"{source}: {exc}") from None
