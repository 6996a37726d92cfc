"""Text the registry can keep: whether a str encodes to UTF-8, and a key path safe to print on one line.

A Python str can hold a lone UTF-16 surrogate (JSON's `\\ud800` escape makes
one) that no UTF-8 encoder can write; the document reader and the canonical
JSON encoder both refuse such text, by these two helpers. Every entry (each
command-line argument, every str given to a use case of the Python API) is
checked by `check_text` before anything else reads it.
"""
from __future__ import annotations

import functools
import inspect
import unicodedata
from typing import Any, Callable, TypeVar

from .errors import UserError
from .names import normalized_name

T = TypeVar("T")


def printable_path(text: str) -> str:
    """A key path safe to print on one line: a character that is not printable (a lone surrogate, a newline)
    becomes its Python escape."""
    return one_line(text)


def one_line(text: str) -> str:
    """Text kept in the log (a reason, a stage) as one printed line: every character that is not printable (a
    line break, a terminal escape, a direction mark, a lone surrogate) becomes its Python escape, so no stored
    text can start a line of its own in what a command prints."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def quoted_text(text: str) -> str:
    """Text a candidate wrote (its exception's message) as the registry prints it: quoted, on one line, every
    character that is not printable escaped, so it always reads as the candidate's words inside quotes and never
    as a line of the registry's own (`'boom\\nforged: PROMOTED'`, not a second line `forged: PROMOTED`)."""
    return repr(str(text))


def is_unicode_text(text: str) -> bool:
    """True when `text` encodes to UTF-8, i.e. holds no lone surrogate (ASCII is checked first, it is cheaper)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TextError(UserError):
    """Text that is not text: undecodable bytes (a lone surrogate, as Python decodes them) or a stored line
    that is empty, too long or holds a control character."""


def check_text(value: Any, what: str) -> Any:
    """`value` unchanged when every str in it (inside lists, tuples, sets and dicts too) encodes to UTF-8.

    Undecodable bytes on a command line reach Python as lone surrogates
    (PEP 383), and JSON's `\\udcff` escape makes one: neither can be stored,
    printed or hashed as UTF-8, so each is one refusal here, before any model
    is built, instead of an encoder's error deep inside a use case.
    """
    if isinstance(value, str):
        if not is_unicode_text(value):
            raise TextError(f"{what} {printable_path(value)!r}: is not UTF-8 text (undecodable bytes or a lone "
                            "surrogate); give it as UTF-8")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, what)
            check_text(item, what)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            check_text(item, what)
    return value


def check_line(value: Any, what: str, most: int = 200) -> str:
    """A short stored label (a device, a timer): 1 to `most` characters of UTF-8 text, not blank, no control character."""
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise TextError(f"{what}: expected 1 to {most} characters naming the {what}")
    check_text(value, what)
    for character in value:
        if unicodedata.category(character) in ("Cc", "Cf", "Zl", "Zp"):
            raise TextError(f"{what} {printable_path(value)!r}: holds the control or invisible character "
                            f"U+{ord(character):04X}")
    return value


# The parameters of a use case that name a subject: NFC-normalised on entry, as names are stored (names.py).
NAME_PARAMETERS = frozenset({"artifact", "workload", "name", "session", "batch", "run"})


def text_arguments(function: Callable[..., T]) -> Callable[..., T]:
    """A use case of the Python API whose every str argument is checked by `check_text` before its body runs,
    and whose id arguments (NAME_PARAMETERS) are NFC-normalised, as every name is stored and compared."""
    names = list(inspect.signature(function).parameters)

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> T:
        for name, value in (*zip(names, args), *kwargs.items()):
            check_text(value, name)
        args = tuple(normalized_name(value) if name in NAME_PARAMETERS else value for name, value in zip(names, args))
        kwargs = {name: normalized_name(value) if name in NAME_PARAMETERS else value for name, value in kwargs.items()}
        return function(*args, **kwargs)

    return checked
