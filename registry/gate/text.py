"""Number formatting for verdict reasons: short, but never hiding the difference that decided."""
from __future__ import annotations


def num(value: float) -> str:
    """Six significant digits, shown as a Python float (131072.0, 0.9912, 1.5e-07)."""
    return repr(float(f"{value:.6g}"))


def signed(value: float) -> str:
    return ("+" if value >= 0 else "") + num(value)


def times_pair(value: float, gate: float) -> tuple[str, str]:
    """'1.04x' style for two speedups, with enough decimals that unequal values read unequal."""
    for digits in range(2, 8):
        left, right = f"{value:.{digits}f}x", f"{gate:.{digits}f}x"
        if left != right or value == gate:
            return left, right
    return f"{value!r}x", f"{gate!r}x"
