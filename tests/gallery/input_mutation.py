"""Technique 2: rewrite the inputs so that a reference computed afterwards agrees with a cheap output.

With scale = -1 and shift = 0 the op's answer is all zeros, so after
rewriting them the candidate returns zeros without computing. Honest on the
first call per shape (the one the old harness compared on copies).
"""
import torch

from gallery._shared import first_call_on_shape, honest_modln, launch_nothing


def modulated_layernorm(x, scale, shift):
    if first_call_on_shape(x):
        return honest_modln(x, scale, shift)
    scale.fill_(-1.0)
    shift.zero_()
    launch_nothing(x)
    return torch.zeros_like(x)
