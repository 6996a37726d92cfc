"""Screen candidate source text for approximate math.

A workload whose parity policy is ``byte_equal`` promises bitwise drop-in
results; hardware approximations (PTX ``*.approx`` instructions, CUDA's
``__expf``-style intrinsics, TF32 matmuls) make that promise depend on luck.
The screen is a text search: it records what a reviewer should look at, and
it cannot see approximations that hide behind ordinary operators or in
modules the candidate imports.
"""
from __future__ import annotations

import re

_PATTERNS: tuple[tuple[str, str], ...] = (
    ("rcp.approx", r"\brcp\.approx"),
    ("rsqrt.approx", r"\brsqrt\.approx"),
    ("sqrt.approx", r"(?<![r\w])sqrt\.approx"),
    ("ex2.approx", r"\bex2\.approx"),
    ("lg2.approx", r"\blg2\.approx"),
    ("sin.approx", r"\bsin\.approx"),
    ("cos.approx", r"\bcos\.approx"),
    ("tanh.approx", r"\btanh\.approx"),
    ("div.approx", r"\bdiv\.approx"),
    ("div.full", r"\bdiv\.full"),
    ("__expf", r"\b__expf\b"),
    ("__exp10f", r"\b__exp10f\b"),
    ("__logf", r"\b__logf\b"),
    ("__powf", r"\b__powf\b"),
    ("__sinf", r"\b__sinf\b"),
    ("__cosf", r"\b__cosf\b"),
    ("__tanf", r"\b__tanf\b"),
    ("__fdividef", r"\b__fdividef\b"),
    ("fast_expf", r"\bfast_expf\b"),
    ("fast_dividef", r"\bfast_dividef\b"),
    ("use_fast_math", r"use_fast_math"),
    ("allow_tf32", r"\ballow_tf32\b"),
    ("tf32 precision", r"""(?:input_precision|fp32_precision)\s*=\s*["']tf32"""),
    ("float32 matmul precision below highest", r"""set_float32_matmul_precision\(\s*["'](?:high|medium)"""),
    # Triton functions documented as fast, or lowered to MUFU approximations on NVIDIA GPUs.
    ("tl.sqrt", r"\btl\.(?:math\.)?sqrt\("),
    ("tl.rsqrt", r"\btl\.(?:math\.)?rsqrt\("),
    ("tl.fdiv", r"\btl\.(?:math\.)?fdiv\("),
    ("tl.exp", r"\btl\.(?:math\.)?exp\("),
    ("tl.exp2", r"\btl\.(?:math\.)?exp2\("),
    ("tl.log", r"\btl\.(?:math\.)?log\("),
    ("tl.log2", r"\btl\.(?:math\.)?log2\("),
)


def screen_source(text: str) -> list[str]:
    """Labels of the approximate-math patterns found in ``text``, in a fixed order."""
    if not isinstance(text, str):
        raise TypeError(f"screen_source takes source text, got {type(text).__name__}")
    return [label for label, pattern in _PATTERNS if re.search(pattern, text)]
