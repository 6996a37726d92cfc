"""Shipping: bundle manifests, bundles on disk, compatibility resolution and lock files.

Pure (no database, no torch), so the runtime can read a lock file and check a
bundle on a node that has neither a registry nor the registry's dependencies
beyond `packaging`. See docs/bundles.md and docs/runtime.md.
"""
from .files import VerifiedBundle, verify_directory, write_kernel_manifest, write_manifest
from .fingerprint import reference_fingerprint
from .kernel_manifest import KernelBundleManifest
from .lock import Lock, LockedArtifact, LockProblem, bundle_directory, check_bundles, parse_lock, read_lock
from .manifest import FORMAT, MANIFEST_NAME, BundleError, BundleManifest, TensorSignature
from .manifests import Manifest, parse_manifest
from .resolution import REASON_CODES, CallSite, Candidate, Profile, Resolution, parse_input_spec, resolve

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "REASON_CODES",
    "BundleError",
    "BundleManifest",
    "CallSite",
    "Candidate",
    "KernelBundleManifest",
    "Lock",
    "LockProblem",
    "LockedArtifact",
    "Manifest",
    "Profile",
    "Resolution",
    "TensorSignature",
    "VerifiedBundle",
    "bundle_directory",
    "check_bundles",
    "parse_input_spec",
    "parse_lock",
    "parse_manifest",
    "read_lock",
    "reference_fingerprint",
    "resolve",
    "verify_directory",
    "write_kernel_manifest",
    "write_manifest",
]
