"""The root of every refusal: input the registry will not take, as opposed to a defect in the registry.

A command that refuses prints one line and exits 1 (registry.cli.main). Any
other exception is a bug and must not look like a refusal: the CLI prints a
crash report asking for a bug report instead. So every refusal raises a
`UserError` (or a subclass: ContractError, DocumentError, EvidenceError, ...).
It stays a ValueError, so code that catches ValueError around a check keeps
working. Pure: imports nothing; it sits in formats/, the bottom layer, so every layer can raise it.
"""
from __future__ import annotations


class UserError(ValueError):
    """A refusal: the input, the request or the state asked about is not acceptable; one line says why."""
