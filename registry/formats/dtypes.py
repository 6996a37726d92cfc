"""Tensor element types by name, as manifests and evidence write them (`bfloat16` or `torch.bfloat16`).

A name outside the known sets is a typo, refused rather than treated as some
type; only floating types can carry a parity tolerance.
"""
from __future__ import annotations

import re

_FLOATING = re.compile(r"^(bfloat16|float(16|32|64)|float8_\w+|float4_\w+|complex(32|64|128))$")
# Every other tensor element type torch names: integers (including its sub-byte
# ones), bool, and the quantized and raw-bit types. A name outside both is a typo.
_NOT_FLOATING = re.compile(r"^(bool|u?int([1-7]|8|16|32|64)|q(u?int\w+)|bits\w+)$")


def normalize_dtype(name: str) -> str:
    """`torch.bfloat16` and `bfloat16` name the same dtype."""
    return name.removeprefix("torch.")


def is_floating_dtype(name: str) -> bool:
    """Only floating dtypes can carry a tolerance; integers and bools need byte equality."""
    return bool(_FLOATING.match(normalize_dtype(name)))


def is_known_dtype(name: str) -> bool:
    """Whether `name` (with or without `torch.`) is a tensor element type, floating or not."""
    return is_floating_dtype(name) or bool(_NOT_FLOATING.match(normalize_dtype(name)))


ELEMENT_BYTES = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2,
                 "float32": 4, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}
"""The bytes of one element of each dtype a shipped tensor may have (a bundle's tensor signatures, a launch spec)."""
