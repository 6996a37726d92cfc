"""Pieces the gallery's cheats share: the honest kernel, a kernel that does nothing, a per-shape call count."""
from __future__ import annotations

from collections import Counter

import torch
import triton
import triton.language as tl

from registry.kernels.launches import launch
from registry.kernels.modln import modulated_layernorm_triton as honest_modln

__all__ = ["honest_modln", "launch_nothing", "first_call_on_shape"]

_SEEN: Counter = Counter()


@triton.jit
def _nothing_kernel(x_ptr):
    tl.load(x_ptr)


def launch_nothing(x: torch.Tensor) -> None:
    """A real, counted Triton launch that computes nothing: credit for the launch counter."""
    launch(_nothing_kernel, (1,), x)


def first_call_on_shape(x: torch.Tensor) -> bool:
    """True on the first call for this shape and dtype: the call the old harness compared."""
    key = (tuple(x.shape), x.dtype)
    _SEEN[key] += 1
    return _SEEN[key] == 1
