"""The trusted loader: import a resolved bundle's entry point only if every byte is what was promoted.

`load(match, trusted_root=...)`, immediately before importing:
- finds the bundle at `<trusted_root>/<artifact id>` and refuses it if that
  path, or anything in it, resolves outside the trusted root (symlinks,
  `..`), or if the directory is not exactly the bundle the match names
  (manifest digest, every file's size and SHA-256, no undeclared file);
- reads the entry file once, checks those bytes' hash again, and executes
  exactly those bytes as a module under a private name, so a file swapped
  between the check and the import is never run; `sys.path` is not touched
  and nothing else in the bundle is importable by name;
- returns the entry point's callable.

Any refusal raises LoadError with one line naming the artifact and the reason.
"""
from __future__ import annotations

import hashlib
import linecache
import os
import sys
import types
from pathlib import Path

from registry.bundles import BundleError, KernelBundleManifest, bundle_directory, verify_directory
from registry.formats.errors import first_line
from registry.bundles.files import read_regular

from .resolve import Match


class LoadError(RuntimeError):
    """A bundle that may not be loaded; the message names the artifact and why."""


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def module_name(match: Match) -> str:
    """The private module name a bundle's entry file is imported under (never a name on sys.path)."""
    return f"_registry_bundle_{match.bundle_sha256[:16]}"


def load(match: Match, *, trusted_root: str | os.PathLike, driver: object = None) -> object:
    """Verify the bundle under `trusted_root` against `match`, import its entry file privately, return the symbol.

    A `registry.triton-kernel/1` bundle imports nothing: its cubins (checked like every file) are loaded into
    the trusted launcher on this process's device and the returned `ShippedKernel` launches them as its spec
    plans each call (runtime/compiled.py); `driver` is NVIDIA's bindings unless a test passes the simulated one.
    """
    name = match.artifact
    root = os.path.realpath(trusted_root)
    if not os.path.isdir(root):
        raise LoadError(f"{name}: trusted root {trusted_root} is not a directory")
    try:
        directory = bundle_directory(root, name)
    except BundleError as exc:
        raise LoadError(f"{name}: {exc}") from None
    real = os.path.realpath(directory)
    if real != str(directory) or not _inside(root, real):
        raise LoadError(f"{name}: {directory} resolves to {real}, outside the trusted root {root}")
    if match.manifest.digest != match.bundle_sha256:
        raise LoadError(f"{name}: the match's manifest does not hash to its bundle digest")
    if isinstance(match.manifest, KernelBundleManifest):
        return _launchable(match, directory, driver)
    try:
        verify_directory(directory, match.manifest)
        entry_path = directory / match.manifest.entry_file
        declared = match.manifest.file(match.manifest.entry_file)
        source = read_regular(entry_path, declared.size)
    except (BundleError, OSError) as exc:
        raise LoadError(f"{name}: refused: {first_line(exc)}") from None
    if hashlib.sha256(source).hexdigest() != declared.sha256 or len(source) != declared.size:
        raise LoadError(f"{name}: refused: {match.manifest.entry_file} changed while it was being loaded")
    return _execute(match, entry_path, source)


def _launchable(match: Match, directory: Path, driver: object) -> object:
    """The promoted compiled kernel, its every file checked and its cubins read once and re-hashed, loaded into the
    launcher (a cubin built for another arch than this device's is never loaded: none for it is a LoadError)."""
    from registry.app.compiled import read_bundle_kernel
    from registry.formats.errors import UserError
    from registry.kernels.launcher import DriverError, PlanRefused

    from .compiled import ShippedKernel

    try:
        return ShippedKernel(read_bundle_kernel(directory, match.manifest), driver=driver)
    except (UserError, PlanRefused, DriverError) as exc:
        raise LoadError(f"{match.artifact}: refused: {first_line(exc)}") from None


def _execute(match: Match, entry_path: Path, source: bytes) -> object:
    name = module_name(match)
    filename = str(entry_path)
    text = source.decode("utf-8")
    # Tools that read a function's source (inspect, Triton's JIT) must see the verified bytes, not the file now.
    linecache.cache[filename] = (len(source), None, text.splitlines(keepends=True), filename)
    module = types.ModuleType(name, f"entry point of bundle {match.artifact} ({match.bundle_sha256[:12]})")
    module.__file__ = filename
    sys.modules[name] = module  # dataclasses and pickling look a module up by name
    try:
        exec(compile(text, filename, "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    symbol = match.manifest.entry_symbol
    found = getattr(module, symbol, None)
    if not callable(found):
        raise LoadError(f"{match.artifact}: {match.manifest.entry_file} defines no callable {symbol!r}")
    return found
