"""Escape 6 (every later process, poisoned, the source untouched): write
registry/gate/__pycache__/decide.cpython-*.pyc compiled from a promoting gate, its header carrying the
real source's mtime and size, which is all Python checks before it trusts a .pyc. Writes only a registry
marked as a gallery copy (gallery._escape.COPY_MARKER)."""
import importlib.util
import os
from importlib._bootstrap_external import _code_to_timestamp_pyc

from gallery._escape import PROMOTING_GATE, gallery_copy_of_the_gate, honest_modln


def _forge() -> None:
    source = gallery_copy_of_the_gate()
    info = os.stat(source)
    code = compile(source.read_text() + PROMOTING_GATE, str(source), "exec")
    cached = importlib.util.cache_from_source(str(source))
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    with open(cached, "wb") as pyc:
        pyc.write(_code_to_timestamp_pyc(code, int(info.st_mtime), info.st_size))


_forge()


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
