"""The cheat gallery: candidate kernels that lie, one module per technique (docs/kernels.md, "Threat model"),
and the escape gallery (``escape_*.py``): candidates that attack the harness, the log or the install.

Each module exports the op function a CLI user would register. A candidate is
registered by its one file (``path/to/kernel.py:function``; the registry never
imports a module from the candidate's folder), so :func:`candidate_file`
writes a module and the private helpers it imports (``_shared.py``,
``_escape.py``) into one file, as its author would have had to. Most cheats
behave honestly on the first call per shape, which is what the harness before
the isolation change checked, and cheat on the calls it only timed.
tests/kernels/test_cheat_gallery.py and tests/kernels/test_escape_gallery.py run them through
`registry evaluate` and `registry promote`.
"""
from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).parent
_HELPER_IMPORT = re.compile(r"from gallery\.(_[a-z]+) import .*")
_FUTURE = "from __future__ import annotations"


def candidate_source(module: str) -> str:
    """The text of ``module`` with each private helper it imports inlined ahead of it."""
    source = (HERE / f"{module}.py").read_text()
    helpers = [match.group(1) for line in source.splitlines() if (match := _HELPER_IMPORT.fullmatch(line))]
    if not helpers:
        return source
    own = [line for line in source.splitlines() if not (_HELPER_IMPORT.fullmatch(line) or line == _FUTURE)]
    inlined = [(HERE / f"{helper}.py").read_text() for helper in helpers]
    return _FUTURE + "\n" + "\n\n".join(text.replace(_FUTURE, "") for text in inlined) + "\n\n" + "\n".join(own) + "\n"


def candidate_file(module: str, folder: Path) -> Path:
    """``module`` of this gallery as one self-contained candidate file in ``folder``."""
    target = folder / f"{module}.py"
    target.write_text(candidate_source(module))
    return target
