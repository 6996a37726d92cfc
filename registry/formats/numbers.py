"""Numbers typed by a person: ASCII decimal notation only.

Python's int() and float() also accept underscores (`1_5` is 15) and any
Unicode decimal digit (full-width `１５`, Arabic-Indic, ...), so a typo or a
pasted look-alike would be stored as a number nobody wrote, in a log that
never forgets. A number on the command line is therefore an optional sign,
ASCII digits, for a real number an optional fraction and exponent; nothing
else (no `nan`, `inf`, underscores, spaces inside, or other digits).
docs/names.md, "Numbers", states the rule.
"""
from __future__ import annotations

import math
import re

from .errors import UserError

_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_REAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
# Longer than any number a person types; int() of a huge string is quadratic (CVE-2020-10735).
MAX_DIGITS = 400


class NumberError(UserError):
    """A number not written in ASCII decimal notation."""


def parse_integer(text: str, what: str) -> int:
    """`text` as an integer written in ASCII decimal digits with an optional sign; refused otherwise."""
    value = text.strip()
    if len(value) > MAX_DIGITS or not _INTEGER.fullmatch(value):
        raise NumberError(f"{what} {text!r}: expected a whole number in ASCII decimal digits (e.g. 15), "
                          "without underscores or other digits")
    return int(value)


def parse_real(text: str, what: str) -> float:
    """`text` as a real number in ASCII decimal notation (e.g. 1.5, -2, 3e-4); refused otherwise."""
    value = text.strip()
    if len(value) > MAX_DIGITS or not _REAL.fullmatch(value):
        raise NumberError(f"{what} {text!r}: expected a number in ASCII decimal notation (e.g. 1.5 or 2e-3), "
                          "without underscores, other digits, nan or inf")
    number = float(value)
    if not math.isfinite(number):
        raise NumberError(f"{what} {text!r}: is beyond the largest number a float holds")
    return number
