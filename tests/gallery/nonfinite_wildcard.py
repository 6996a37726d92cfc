"""Technique 11: NaN as a wildcard; outputs that are NaN where the work was skipped.

A comparator that takes errors only over finite elements, or an allclose with
equal_nan, reads a NaN as a match. Honest on the first call per shape.
"""
import torch

from gallery._shared import first_call_on_shape, honest_modln, launch_nothing


def modulated_layernorm(x, scale, shift):
    if first_call_on_shape(x):
        return honest_modln(x, scale, shift)
    launch_nothing(x)
    return torch.full_like(x, float("nan"))
