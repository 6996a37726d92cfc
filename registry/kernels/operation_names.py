"""The built-in operations' names, checkable without importing torch (registration must not import it).

registry.kernels.ops holds each operation's spec; its list is in the same
order as this one, and a test holds the two together.
"""
from __future__ import annotations

from registry.formats.errors import UserError

OPERATION_NAMES = ("modulated_layernorm", "gated_residual", "gated_residual_layernorm", "rms_norm")


def check_operation(name: str) -> str:
    """``name`` when it is a built-in operation; an unknown name is an error listing the known ones."""
    if name not in OPERATION_NAMES:
        raise UserError(f"unknown operation {name!r}; known: {list(OPERATION_NAMES)}")
    return name
