"""One kit of field checkers for every document the registry parses, raising the error class it is given.

A workload manifest, an evidence document, a bundle manifest, a lock file and
a MotionKernel document are all trees of loosely typed values (a bool is an
int to Python, YAML hands some numbers over as text). Each parser binds this
kit to its own error class (`FieldKit(ContractError)`,
`FieldKit(EvidenceError)`) and so refuses a value in the same words whichever
document it came from: exactly the declared type or a one-line refusal naming
the field's path, never a coercion.

A checker takes `(value, path)` and returns the normalized value; the
combinators (`list_of`, `nullable`, `bounded`, `one_of`) build checkers from
checkers, so a document's schema is a table of them.

Pure: imports only the registry's naming rule and digest pattern.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn

from registry.formats.digests import is_sha256
from registry.formats.names import name_refusal

Check = Callable[[Any, str], Any]
# A device architecture: `sm` and the CUDA compute capability (sm90, sm100a), or `cpu`.
ARCH = re.compile(r"sm[0-9]{2,3}[a-z]?|cpu")
# How much of a refused value a message quotes; a string past _LONG_TEXT is described by its length.
_QUOTED = 40
_LONG_TEXT = 80


def join(path: str, key: str) -> str:
    """The path of field `key` inside the block at `path` (the top level has the empty path)."""
    return f"{path}.{key}" if path else key


def quoted(value: Any) -> str:
    """A value's repr as a refusal quotes it, shortened past 40 characters (a hostile value stays one short line)."""
    shown = repr(value)
    return shown if len(shown) <= _QUOTED else shown[:_QUOTED] + "…"


def describe(value: Any) -> str:
    """A value as a refusal shows it: its type, and for a scalar its (shortened) repr; a long string by its length."""
    if value is None:
        return "null"
    if isinstance(value, str) and len(value) > _LONG_TEXT:
        return f"a string of {len(value)} characters"
    if isinstance(value, (str, bool, int, float)):
        return f"{type(value).__name__} {quoted(value)}"
    return type(value).__name__


def is_count(value: Any) -> bool:
    """Whether `value` is a whole number >= 0 (an int, never a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_finite_number(value: Any) -> bool:
    """Whether `value` is an int or float (never a bool) with a finite value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past float's range
        return False


class FieldKit:
    """Field checkers that raise `error(path: problem)`; `mapping` names a block in the document's own terms."""

    def __init__(self, error: type[Exception], mapping: str = "an object") -> None:
        self.error = error
        self.mapping_word = mapping

    def refuse(self, path: str, problem: str) -> NoReturn:
        raise self.error(f"{path}: {problem}")

    # ---- blocks ----------------------------------------------------------------------

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        """A mapping with string keys (a block of named fields)."""
        if not isinstance(value, Mapping):
            self.refuse(path, f"expected {self.mapping_word}, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                self.refuse(path, f"keys must be strings, got {describe(key)}")
        return dict(value)

    def only_known(self, obj: Mapping[str, Any], allowed: Iterable[str], path: str,
                   explain: Callable[[str], str | None] | None = None) -> None:
        """Refuse the first unknown field (a misspelt threshold must not be silently ignored).

        `explain` may give a field its own reason (a client's summary statistic
        is refused as such rather than as unknown).
        """
        allowed = tuple(allowed)
        unknown = sorted(set(obj) - set(allowed))
        if unknown:
            reason = explain(unknown[0]) if explain is not None else None
            self.refuse(join(path, unknown[0]), reason or f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def required(self, obj: Mapping[str, Any], key: str, path: str) -> Any:
        """The value of `key`, refused when absent or null."""
        if key not in obj or obj[key] is None:
            self.refuse(join(path, key), "required")
        return obj[key]

    def optional(self, obj: Mapping[str, Any], key: str, path: str, check: Check) -> Any:
        """`check` of the value of `key`, or None when it is absent or null."""
        return None if obj.get(key) is None else check(obj[key], join(path, key))

    def fields(self, raw: Mapping[str, Any], spec: Mapping[str, tuple[bool, Check]], path: str) -> dict[str, Any]:
        """Check each field of `spec` ({name: (required, check)}) present in `raw`.

        An optional field may be omitted, and omitted stays omitted, so a stored
        item reads back exactly as sent; whether null is allowed is its checker's.
        """
        checked: dict[str, Any] = {}
        for name, (is_required, check) in spec.items():
            if name not in raw:
                if is_required:
                    self.refuse(join(path, name), "required")
                continue
            checked[name] = check(raw[name], join(path, name))
        return checked

    # ---- scalars ---------------------------------------------------------------------

    def number(self, value: Any, path: str) -> float:
        """A finite real number; bools and numeric-looking strings are refused."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.refuse(path, f"expected a number, got {describe(value)}")
        try:
            result = float(value)
        except OverflowError:  # an integer past float's range (about 1.8e308)
            self.refuse(path, "an integer too large to be a finite number")
        if not math.isfinite(result):
            self.refuse(path, f"{value} is not a finite number")
        return result

    def integer(self, value: Any, path: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.refuse(path, f"expected an integer, got {describe(value)}")
        if minimum is not None and value < minimum:
            self.refuse(path, f"{value} is below the minimum {minimum}")
        return value

    def count(self, value: Any, path: str) -> int:
        """An integer >= 0 (a number of calls, elements, frames)."""
        if self.integer(value, path) < 0:
            self.refuse(path, f"{value} is negative")
        return value

    def text(self, value: Any, path: str) -> str:
        """A string with something in it besides whitespace."""
        if not isinstance(value, str) or not value.strip():
            self.refuse(path, f"expected a non-empty string, got {describe(value)}")
        return value

    def note(self, value: Any, path: str) -> str:
        """Any string, empty included (free text)."""
        if not isinstance(value, str):
            self.refuse(path, f"expected a string, got {describe(value)}")
        return value

    def flag(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            self.refuse(path, f"expected true or false, got {describe(value)}")
        return value

    def choice(self, value: Any, options: Iterable[str], path: str) -> str:
        options = tuple(options)
        if value not in options:
            self.refuse(path, f"{quoted(value)} is not one of {', '.join(options)}")
        return value

    def name(self, value: Any, path: str) -> str:
        """An id (artifact, workload, frame set, run): the registry's one naming rule (registry.formats.names)."""
        refusal = name_refusal(value)
        if refusal is not None:
            self.refuse(path, refusal)
        return value

    def sha256(self, value: Any, path: str) -> str:
        """A SHA-256 digest as 64 lowercase hex digits (registry.formats.digests)."""
        if not is_sha256(value):
            self.refuse(path, f"expected 64 lowercase hex digits (a sha256), got {describe(value)}")
        return value

    def arch(self, value: Any, path: str, allow_cpu: bool = True) -> str:
        """A device architecture (sm90, sm100a), or `cpu` where `allow_cpu`."""
        text = self.text(value, path)
        if not ARCH.fullmatch(text) or (text == "cpu" and not allow_cpu):
            example = "a device architecture such as sm90, sm100 or cpu" if allow_cpu else \
                "a GPU architecture such as sm90 or sm100"
            self.refuse(path, f"{quoted(text)} is not {example}")
        return text

    # ---- combinators -----------------------------------------------------------------

    def one_of(self, options: Iterable[str]) -> Check:
        options = tuple(options)
        return lambda value, path: self.choice(value, options, path)

    def bounded(self, low: float | None, high: float | None, what: str) -> Check:
        """A finite number in [low, high] (an open side is None), refused naming `what`'s range."""
        shown = (f"[{low:g}" if low is not None else "(-inf") + (f", {high:g}]" if high is not None else ", inf)")

        def check(value: Any, path: str) -> float:
            number = self.number(value, path)
            if (low is not None and number < low) or (high is not None and number > high):
                self.refuse(path, f"{number} is outside the {what} range {shown}")
            return number
        return check

    def nullable(self, check: Check) -> Check:
        return lambda value, path: None if value is None else check(value, path)

    def list_of(self, check: Check, allow_empty: bool = False) -> Check:
        def check_list(value: Any, path: str) -> list[Any]:
            if not isinstance(value, list):
                self.refuse(path, f"expected a list, got {describe(value)}")
            if not value and not allow_empty:
                self.refuse(path, "empty list")
            return [check(element, f"{path}[{i}]") for i, element in enumerate(value)]
        return check_list
