"""Text the registry can keep: whether a str encodes to UTF-8, and a key path safe to print on one line.

A Python str can hold a lone UTF-16 surrogate (JSON's `\\ud800` escape makes
one) that no UTF-8 encoder can write; the document reader and the canonical
JSON encoder both refuse such text, by these two helpers.
"""
from __future__ import annotations


def printable_path(text: str) -> str:
    """A key path safe to print on one line: a character that is not printable (a lone surrogate, a newline)
    becomes its Python escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def is_unicode_text(text: str) -> bool:
    """True when `text` encodes to UTF-8, i.e. holds no lone surrogate (ASCII is checked first, it is cheaper)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
