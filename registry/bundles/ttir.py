"""A bundle's TTIR read as text, before the registry compiles it: the source files its locations name.

TTIR carries MLIR locations, `loc("registry/kernels/modln.py":23:10)`, and
the cubin compiled from it names those files in its line table. ptxas,
where it finds such a file from the directory it runs in, writes that
file's modification time and size into the cubin, so a location that could
be found (an absolute path, or a relative one climbing out with `..`) makes
the cubin depend on the files of the machine compiling it. The registry
compiles in an empty directory (registry/kernels/ttir_compile.py) and
refuses such a location here, in one line naming it: no absolute path of
the machine that built a bundle is shipped, and no rebuild depends on where
it runs. Pure: text in, a refusal out.
"""
from __future__ import annotations

import re

from .manifest import BundleError

# An MLIR file location: a string literal (escapes allowed) followed by :line (and :column, or a range).
_FILE_LOCATION = re.compile(r'"((?:[^"\\]|\\.)*)":[0-9]')


class TtirRefused(BundleError):
    """A TTIR file refused before it is compiled: `where: ttir refused (location): detail`."""

    def __init__(self, where: str, detail: str) -> None:
        self.reason = "location"
        super().__init__(f"{where}: ttir refused (location): {detail}")


def check_ttir_locations(text: str, where: str) -> None:
    """Every file location of `text` a relative path without `..` (or a backslash, or a drive)."""
    for match in _FILE_LOCATION.finditer(text):
        path = match.group(1)
        parts = path.split("/")
        if path.startswith(("/", "~")) or re.match(r"[A-Za-z]:", path) or "\\" in path or ".." in parts:
            shown = path if len(path) <= 80 else path[:77] + "..."
            raise TtirRefused(where, f"a location names {shown!r}: an absolute path, '..' or an escape; a bundle's "
                                     "TTIR names its sources by relative paths, which no rebuild can find")
