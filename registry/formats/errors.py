"""The root of every refusal: input the registry will not take, as opposed to a defect in the registry.

A command that refuses prints one line and exits 1 (registry.cli.main). Any
other exception is a bug and must not look like a refusal: the CLI prints a
crash report asking for a bug report instead. So every refusal raises a
`UserError` (or a subclass: ContractError, DocumentError, EvidenceError, ...).
It stays a ValueError, so code that catches ValueError around a check keeps
working. `first_line` words any error's message as the one line a refusal prints.
Pure: imports nothing; it sits in formats/, the bottom layer, so every layer can raise it.
"""
from __future__ import annotations


class UserError(ValueError):
    """A refusal: the input, the request or the state asked about is not acceptable; one line says why."""


def first_line(error: object) -> str:
    """The first line of an error's message, for a one-line refusal or report; its type's name when it has none.

    A message may be empty (`KeyError()`, a driver's bare error) or start with
    a line break; neither may turn into a crash while a refusal is worded.
    """
    for line in str(error).splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__
