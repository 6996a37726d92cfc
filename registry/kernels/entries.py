"""Kernel entry points, parsed and read as text: nothing here imports, executes or puts anything on a path.

An entry names the function a fused-kernel artifact runs, in one of two forms:

- ``path/to/kernel.py:function``: a candidate, given as its file. The file is
  read (a regular file, never through a symlink, UTF-8, at most
  MAX_CANDIDATE_BYTES) and hashed as text; only the evaluation worker ever
  loads it, from a private copy of that one file, under a private module name.
  The candidate's directory is on no process's import path, so nothing it
  leaves there (a ``sitecustomize.py``, a module shadowing a library) is ever
  imported.
- ``registry.module:function``: a kernel of the installed registry package
  (the built-in kernels and references), located inside that package without
  importing it.

Any other ``module:function`` would make the registry import a module from
wherever its import path reaches (the working directory, PYTHONPATH), which is
how a candidate's directory used to end up on the import path of every later
``registry`` process; it is refused in one line that names the file form.
"""
from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import registry
from registry.formats.documents import read_document
from registry.formats.errors import UserError

MAX_CANDIDATE_BYTES = 1 << 20
"""Largest candidate file registration or evaluation reads: a kernel's source, not a data file."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
PACKAGE = "registry"


class EntryError(UserError):
    """An entry string that does not name a kernel function the registry can run."""


@dataclass(frozen=True)
class Entry:
    """A parsed entry: a candidate file (``path`` set) or a module of the registry package (``module`` set)."""

    function: str
    path: Path | None = None
    module: str | None = None

    @property
    def text(self) -> str:
        """The entry as registration stores it: a candidate's file by its absolute path."""
        return f"{self.path}:{self.function}" if self.path is not None else f"{self.module}:{self.function}"

    @property
    def identity_text(self) -> str:
        """What the content hash covers besides the source: the file's name, not the folder it was found in."""
        return f"{self.path.name}:{self.function}" if self.path is not None else self.text


def parse_entry(entry: str) -> Entry:
    """The entry's form checked, without reading or importing anything; one EntryError line otherwise."""
    if not isinstance(entry, str) or ":" not in entry:
        raise EntryError(f"entry {entry!r} must have the form 'path/to/kernel.py:function' "
                         "(or 'registry.module:function' for a built-in kernel)")
    target, _, function = entry.rpartition(":")
    if not _IDENTIFIER.fullmatch(function):
        raise EntryError(f"entry {entry!r}: {function!r} is not a Python function name")
    if target.endswith(".py"):
        if "\x00" in target:
            raise EntryError(f"entry {entry!r}: the file name holds a NUL character")
        return Entry(function, path=Path(target).absolute())
    if not _DOTTED.fullmatch(target):
        raise EntryError(f"entry {entry!r} must have the form 'path/to/kernel.py:function' "
                         "(or 'registry.module:function' for a built-in kernel)")
    if target.split(".")[0] != PACKAGE:
        raise EntryError(f"entry {entry!r}: module {target!r} is not part of the registry package; a candidate is "
                         "given as its file ('path/to/kernel.py:function') and never imported from an import path")
    return Entry(function, module=target)


def _module_file(module: str) -> Path:
    """The source file of a module of the registry package, found by path (no import)."""
    base = Path(registry.__file__).parent.joinpath(*module.split(".")[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    raise EntryError(f"entry {module!r}: the registry package has no module {module!r}")


def entry_source(entry: Entry) -> str:
    """The text the entry's function is defined in, read as a document; it must define the function at top level.

    Parsing (``ast``) executes nothing; the check catches a misspelt name at
    registration. Whether it is a Python function at run time is decided by
    the worker that loads it.
    """
    path = entry.path if entry.path is not None else _module_file(entry.module)
    source = read_document(path, "kernel source", MAX_CANDIDATE_BYTES, follow_symlinks=False)
    try:
        tree = ast.parse(source, filename=path.name)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise EntryError(f"entry {entry.text!r}: {path.name} is not Python source ({type(exc).__name__})") from None
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    if entry.function not in defined:
        raise EntryError(f"entry {entry.text!r}: {path.name} defines no top-level function {entry.function!r}")
    return source


def entry_sha256(entry: Entry, source: str) -> str:
    """The content hash of a kernel entry: the file's name, the function, and the source that defines it."""
    return hashlib.sha256(f"{entry.identity_text}\n{source}".encode()).hexdigest()
