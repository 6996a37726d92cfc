"""A bundle on disk checked against its manifest, byte for byte.

A bundle directory holds regular files and directories only: every file is
declared, every declared file is present with its size and SHA-256, and no
path leaves the directory. A symlink is refused wherever it is (named as an
escape when it points outside), since what it names can change after the
check. Each refusal is one BundleError line naming the bundle and the path.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from registry.formats.documents import DocumentError, load_json, open_regular, read_document, sha256_file
from registry.formats.kinds import TRITON_KERNEL_FORMAT
from registry.formats.output_files import write_output

from .kernel_manifest import KernelBundleManifest
from .manifest import FORMAT, MANIFEST_NAME, MAX_MANIFEST_BYTES, BundleError, BundleManifest
from .manifests import Manifest, parse_manifest

_BLOCK = 1 << 20


@dataclass(frozen=True)
class VerifiedBundle:
    """A bundle whose files matched its manifest when checked."""

    directory: Path
    manifest: Manifest

    @property
    def digest(self) -> str:
        return self.manifest.digest


# The largest file a bundle may hold (a compiled kernel or a small table, never a model's weights).
MAX_BUNDLE_FILE_BYTES = 1 << 30


def sha256_of(path: Path, max_bytes: int = MAX_BUNDLE_FILE_BYTES) -> tuple[str, int]:
    """SHA-256 and size of a regular file, never through a symlink, refused past `max_bytes` before reading."""
    try:
        return sha256_file(path, "bundle file", max_bytes, follow_symlinks=False)
    except DocumentError as exc:
        raise BundleError(str(exc)) from None


def read_regular(path: Path, limit: int = MAX_BUNDLE_FILE_BYTES, what: str = "bundle file") -> bytes:
    """The bytes of a regular file (never through a symlink, never a FIFO), refusing one larger than `limit`."""
    try:
        fd = open_regular(path, what, limit, follow_symlinks=False)
    except DocumentError as exc:
        raise BundleError(str(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise BundleError(f"{path}: larger than {limit} bytes")
    return data


def read_manifest(directory: Path) -> Manifest:
    """Parse `bundle.json` in `directory` (which must be a regular file, not a link) as a strict JSON document."""
    path = directory / MANIFEST_NAME
    if not path.is_symlink() and not path.exists():
        raise BundleError(f"{directory}: no {MANIFEST_NAME} (a bundle is a directory with a manifest)")
    if path.is_symlink():
        raise BundleError(f"{path}: the manifest is a symlink; a bundle holds regular files only")
    try:
        parsed = load_json(read_document(path, "bundle manifest", MAX_MANIFEST_BYTES, follow_symlinks=False), str(path))
    except DocumentError as exc:
        raise BundleError(str(exc)) from None
    return parse_manifest(parsed, str(path))


def _walk(directory: Path) -> list[str]:
    """Every regular file under `directory`, as a relative POSIX path; links and special files refused."""
    found: list[str] = []
    root = os.path.realpath(directory)
    pending = [directory]
    while pending:
        current = pending.pop()
        with os.scandir(current) as entries:
            for entry in entries:
                path = Path(entry.path)
                relative = path.relative_to(directory).as_posix()
                if entry.is_symlink():
                    target = os.path.realpath(path)
                    inside = os.path.commonpath([root, target]) == root
                    where = "inside the bundle" if inside else "outside the bundle (escapes it)"
                    raise BundleError(f"{directory}: {relative} is a symlink to {where}; a bundle holds "
                                      "regular files only")
                if entry.is_dir(follow_symlinks=False):
                    pending.append(path)
                elif entry.is_file(follow_symlinks=False):
                    found.append(relative)
                else:
                    raise BundleError(f"{directory}: {relative} is not a regular file")
    return sorted(found)


def verify_directory(directory: str | Path, manifest: Manifest | None = None) -> VerifiedBundle:
    """Check a bundle directory: its manifest (or the one given must equal it) and every file.

    With `manifest`, the bundle on disk must carry exactly that manifest (same
    digest): this is how a lock file or a resolved match is checked against
    the directory a runtime is about to load.
    """
    directory = Path(directory)
    if directory.is_symlink():
        raise BundleError(f"{directory}: the bundle directory is a symlink; name the directory itself")
    if not directory.is_dir():
        raise BundleError(f"{directory}: not a directory")
    on_disk = read_manifest(directory)
    if manifest is not None and on_disk.digest != manifest.digest:
        raise BundleError(f"{directory}: its manifest digest {on_disk.digest[:12]} differs from the expected "
                          f"{manifest.digest[:12]}")
    present = set(_walk(directory)) - {MANIFEST_NAME}
    declared = {x.path for x in on_disk.files}
    undeclared = sorted(present - declared)
    if undeclared:
        raise BundleError(f"{directory}: {undeclared[0]} is not declared in {MANIFEST_NAME}")
    missing = sorted(declared - present)
    if missing:
        raise BundleError(f"{directory}: {missing[0]} is declared in {MANIFEST_NAME} but missing")
    for declared_file in on_disk.files:
        path = directory / declared_file.path
        size = os.lstat(path).st_size
        if size != declared_file.size:
            raise BundleError(f"{directory}: {declared_file.path} is {size} bytes; the manifest declares "
                              f"{declared_file.size}")
        digest, size = sha256_of(path, declared_file.size)  # the declared size bounds what is read
        if digest != declared_file.sha256:
            raise BundleError(f"{directory}: {declared_file.path} has sha256 {digest[:12]}; the manifest declares "
                              f"{declared_file.sha256[:12]}")
    return VerifiedBundle(directory, on_disk)


def write_manifest(directory: str | Path, *, entry_point: dict, replaces: dict, compatibility: dict) -> BundleManifest:
    """Declare every regular file now in `directory` and write its `bundle.json`; returns the manifest.

    For whoever builds a bundle (the demo, tests, a packaging step): the
    manifest is validated exactly as registration will validate it.
    """
    return _write(directory, {"format": FORMAT, "entry_point": entry_point, "replaces": replaces,
                              "compatibility": compatibility})


def write_kernel_manifest(directory: str | Path, *, sources: list[str], triton: str, spec: dict, replaces: dict,
                          compatibility: dict) -> KernelBundleManifest:
    """The same for a compiled Triton kernel bundle (`registry.triton-kernel/1`): every regular file declared."""
    return _write(directory, {"format": TRITON_KERNEL_FORMAT, "sources": sources, "triton": triton, "spec": spec,
                              "replaces": replaces, "compatibility": compatibility})


def _write(directory: str | Path, fields: dict) -> Manifest:
    directory = Path(directory)
    files = []
    for relative in _walk(directory):
        if relative != MANIFEST_NAME:
            digest, size = sha256_of(directory / relative)
            files.append({"path": relative, "sha256": digest, "size": size})
    manifest = parse_manifest({**fields, "files": files}, str(directory / MANIFEST_NAME))
    text = json.dumps(manifest.canonical(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_output(directory / MANIFEST_NAME, text, force=True, option="bundle manifest", error=BundleError)
    return manifest
