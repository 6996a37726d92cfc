"""A graph fingerprint for an operation defined by a Python reference implementation.

A bundle names the operation it replaces by fingerprint; a runtime computes
the same fingerprint for the operation it is about to replace. For an op
whose meaning is a reference function, the fingerprint is the SHA-256 of the
function's qualified name and source: any change to what the reference
computes is another operation, and bundles made for the old one stop matching.
"""
from __future__ import annotations

import inspect
from typing import Callable

from registry.events.canonical import sha256_hex


def reference_fingerprint(function: Callable) -> str:
    """`sha256:<hex>` over `module:qualname` and the source of the reference implementation."""
    return fingerprint_of(function.__module__, function.__qualname__, inspect.getsource(function))


def fingerprint_of(module: str, qualname: str, source: str) -> str:
    """The fingerprint of a reference read elsewhere (a process that imported it sent its name and source)."""
    return "sha256:" + sha256_hex(f"{module}:{qualname}\n{source}")
