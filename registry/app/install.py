"""The installed registry's digest manifest: written at install time, compared by `registry verify --install`.

A candidate that could write the registry's own code (the installed package,
an editable install's source tree, their ``__pycache__``) would poison every
later `registry` process, and the event log could not show it. The sandbox is
the first line (the candidate sees none of those paths); this is the second:
a manifest of every file that decides what the registry runs, and a check
that says in one line what differs.

What it covers: every file under the package folder, ``.pyc`` files included
(the install step compiles them all before hashing, so a forged ``.pyc`` with
the original's mtime and size differs by content), symlinks as their targets;
and the start-up hooks of the interpreter's site folders (``*.pth``,
``sitecustomize.py``, ``usercustomize.py``), which run before any registry
code. It does not cover torch, Triton or the interpreter itself.

Where it lives: beside the interpreter's environment (``sys.prefix``), never
inside the package's tree, so rewriting the tree does not rewrite it. A
process that could write both could write a matching manifest; against that
the install step prints the manifest's own digest, to be noted out of band
and given back as ``--expect-manifest`` (as ``--expect-head`` does for the
log's end).
"""
from __future__ import annotations

import compileall
import hashlib
import json
import os
import site
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import registry
from registry.formats.documents import read_document
from registry.formats.errors import UserError

MANIFEST_FORMAT = "registry.install-manifest/1"
MANIFEST_NAME = "registry-install-manifest.json"
MAX_MANIFEST_BYTES = 64 << 20
_HOOKS = ("sitecustomize.py", "usercustomize.py")
DIFFERENCES_SHOWN = 5


def default_manifest_path() -> Path:
    """Where the install step writes the manifest: the environment's root, outside the package's tree."""
    return Path(sys.prefix) / MANIFEST_NAME


def package_folder() -> Path:
    """The folder the running registry package was imported from."""
    return Path(registry.__file__).resolve().parent


def _site_folders() -> list[Path]:
    folders = [Path(p) for p in site.getsitepackages()]
    return [folder for folder in folders if folder.is_dir()]


def _digest(path: Path) -> str:
    """``sha256:<hex>`` of a regular file, ``link:<target>`` of a symlink, ``other:<kind>`` of anything else."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"link:{os.readlink(path)}"
    if not stat.S_ISREG(info.st_mode):
        return f"other:{stat.S_IFMT(info.st_mode):o}"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def installed_files(package: Path | None = None, site_folders: list[Path] | None = None) -> dict[str, str]:
    """Every covered file by a stable name (``package/…`` or ``site<i>/…``) and its digest."""
    package = package_folder() if package is None else package
    site_folders = _site_folders() if site_folders is None else site_folders
    found: dict[str, str] = {}
    for root, folders, files in os.walk(package, followlinks=False):
        folders.sort()
        for name in sorted(files) + [f for f in folders if os.path.islink(os.path.join(root, f))]:
            path = Path(root, name)
            found[f"package/{path.relative_to(package).as_posix()}"] = _digest(path)
    for index, folder in enumerate(site_folders):
        for path in sorted(folder.iterdir()):
            if path.name.endswith(".pth") or path.name in _HOOKS:
                found[f"site{index}/{path.name}"] = _digest(path)
    return found


@dataclass(frozen=True)
class ManifestWritten:
    path: Path
    files: int
    sha256: str


def write_manifest(path: Path | None = None, package: Path | None = None,
                   site_folders: list[Path] | None = None) -> ManifestWritten:
    """Compile every module of the package (so each ``.pyc`` exists and is covered), then write the manifest.

    Replaced atomically (a new file renamed over the old one); a symlink in
    the manifest's place is refused rather than followed.
    """
    path = default_manifest_path() if path is None else path
    package = package_folder() if package is None else package
    if path.is_symlink():
        raise UserError(f"{path}: a symlink; the install manifest is written only as a regular file")
    if path.resolve().is_relative_to(package):
        raise UserError(f"{path}: inside the package's own tree; the manifest must live outside what it covers")
    compileall.compile_dir(str(package), quiet=1)
    document = {"format": MANIFEST_FORMAT, "package": str(package),
                "files": installed_files(package, site_folders)}
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    partial = path.with_name(path.name + ".partial")
    try:
        partial.unlink(missing_ok=True)
        with open(partial, "x", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(partial, 0o444)
        os.replace(partial, path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write the install manifest: {exc.strerror}") from None
    return ManifestWritten(path, len(document["files"]), hashlib.sha256(text.encode()).hexdigest())


@dataclass(frozen=True)
class InstallCheck:
    path: Path
    sha256: str
    files: int
    differences: list[str]

    @property
    def intact(self) -> bool:
        return not self.differences

    def summary(self) -> str:
        """One line: what differs (the first few), or that everything matches."""
        if self.intact:
            return f"install intact: {self.files} files match the manifest {self.path} (sha256 {self.sha256[:12]})"
        shown = ", ".join(self.differences[:DIFFERENCES_SHOWN])
        more = len(self.differences) - DIFFERENCES_SHOWN
        return f"install differs from its manifest: {shown}" + (f" (and {more} more)" if more > 0 else "")


def check_install(path: Path | None = None, *, expect_sha256: str | None = None, package: Path | None = None,
                  site_folders: list[Path] | None = None) -> InstallCheck:
    """Compare the installed files with the manifest at ``path``; a manifest that cannot be read is refused."""
    path = default_manifest_path() if path is None else path
    text = read_document(path, "install manifest", MAX_MANIFEST_BYTES, follow_symlinks=False)
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        document = json.loads(text)
    except ValueError:
        raise UserError(f"{path}: the install manifest is not JSON") from None
    files = document.get("files") if isinstance(document, dict) else None
    if document.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
        raise UserError(f"{path}: not a {MANIFEST_FORMAT} document")
    if expect_sha256 is not None and digest != expect_sha256:
        return InstallCheck(path, digest, len(files), [f"the manifest itself (sha256 {digest[:12]}, "
                                                       f"expected {expect_sha256[:12]})"])
    now = installed_files(package, site_folders)
    differences = [f"{name} changed" for name in sorted(files) if name in now and now[name] != files[name]]
    differences += [f"{name} added" for name in sorted(now) if name not in files]
    differences += [f"{name} removed" for name in sorted(files) if name not in now]
    return InstallCheck(path, digest, len(files), differences)
