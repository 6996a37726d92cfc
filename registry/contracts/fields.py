"""Typed readers for manifest values; each failure names the field path.

YAML hands us loosely typed data (a bool is an int to Python, `1e-2` is a
string to YAML 1.1); these readers refuse everything that is not exactly the
type the field declares, so no value is ever coerced into meaning.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from registry.contracts.errors import ContractError
from registry.contracts.names import name_refusal

_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_EXPONENT = re.compile(r"[0-9.][eE][-+]?[0-9]")


def block(value: Any, path: str) -> dict[str, Any]:
    """A mapping with string keys (a manifest block)."""
    if not isinstance(value, Mapping):
        raise ContractError(f"{path}: expected a mapping, got {_type(value)}")
    for key in value:
        if not isinstance(key, str):
            raise ContractError(f"{path}: keys must be strings, got {key!r}")
    return dict(value)


def only_known(obj: Mapping[str, Any], allowed: Iterable[str], path: str) -> None:
    """Refuse unknown fields: a misspelt threshold must not be silently ignored."""
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise ContractError(f"{where}: unknown field (allowed: {', '.join(sorted(allowed))})")


def required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj or obj[key] is None:
        raise ContractError(f"{join(path, key)}: required")
    return obj[key]


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def number(value: Any, path: str) -> float:
    """A finite real number; bools and numeric-looking strings are refused, saying why YAML read text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str) and _looks_numeric(value):
            raise ContractError(f"{path}: {value!r} is text, not a number: {_why_text(value)}")
        raise ContractError(f"{path}: expected a number, got {_type(value)}")
    try:
        result = float(value)
    except OverflowError:  # an integer past float's range (about 1.8e308)
        raise ContractError(f"{path}: an integer too large to be a finite number") from None
    if not math.isfinite(result):
        raise ContractError(f"{path}: {value} is not a finite number")
    return result


def integer(value: Any, path: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(f"{path}: expected an integer, got {_type(value)}")
    if minimum is not None and value < minimum:
        raise ContractError(f"{path}: {value} is below the minimum {minimum}")
    return value


def text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ContractError(f"{path}: expected a non-empty string, got {_type(value)}")
    return value


def flag(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ContractError(f"{path}: expected true or false, got {_type(value)}")
    return value


def choice(value: Any, options: tuple[str, ...], path: str) -> str:
    if value not in options:
        raise ContractError(f"{path}: {value!r} is not one of {', '.join(options)}")
    return value


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


def _type(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, (str, bool, int, float)):
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def name(value: Any, path: str) -> str:
    """An id (a workload, a frame set): the registry's one naming rule (registry.contracts.names)."""
    refusal = name_refusal(value)
    if refusal is not None:
        raise ContractError(f"{path}: {refusal}")
    return value
