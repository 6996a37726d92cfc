"""The manifest's field readers: the shared kit (registry.formats.fields) bound to ContractError.

YAML hands us loosely typed data (a bool is an int to Python, `1e-2` is a
string to YAML 1.1); these readers refuse everything that is not exactly the
type the field declares, so no value is ever coerced into meaning. What is
the manifest's own: a block is called a mapping, as YAML calls it, and a
number YAML read as text is refused saying why YAML read it so.
"""
from __future__ import annotations

import re
from typing import Any

from registry.contracts.errors import ContractError
from registry.formats.fields import FieldKit

_KIT = FieldKit(ContractError, mapping="a mapping")
_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_EXPONENT = re.compile(r"[0-9.][eE][-+]?[0-9]")

block = _KIT.mapping
only_known = _KIT.only_known
required = _KIT.required
integer = _KIT.integer
text = _KIT.text
flag = _KIT.flag
choice = _KIT.choice
name = _KIT.name
sha256 = _KIT.sha256
__all__ = ["block", "choice", "flag", "integer", "name", "number", "only_known", "required", "sha256", "text"]


def number(value: Any, path: str) -> float:
    """A finite real number; bools and numeric-looking strings are refused, saying why YAML read text."""
    if isinstance(value, str) and _looks_numeric(value):
        raise ContractError(f"{path}: {value!r} is text, not a number: {_why_text(value)}")
    return _KIT.number(value, path)


def _why_text(value: str) -> str:
    """Why YAML gave a number-like value as text: it was quoted, or YAML 1.1 does not read it as a number."""
    import yaml  # only on this error path: registry.contracts is imported on every open

    if yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False)) in (_INT, _FLOAT):
        return "it is quoted in the manifest; remove the quotes"
    if _EXPONENT.search(value):
        return "YAML reads a number with an exponent only with a decimal point and a signed exponent (1.0e+3, 2.5e-2)"
    return "YAML does not read this spelling as a number; write digits with a decimal point (0.5, 1.0e+3)"


def _looks_numeric(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True
