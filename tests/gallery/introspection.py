"""Technique 10: introspection; find the expected output in the caller's frames and copy it.

The old harness computed the reference in its own frame just before calling
the candidate, under the name ``expected``. Where nothing is found (timed
calls), it returns zeros.
"""
import sys

import torch

from gallery._shared import launch_nothing


def _expected_for(x):
    frame = sys._getframe(2)
    while frame is not None:
        found = frame.f_locals.get("expected")
        if isinstance(found, torch.Tensor) and found.shape == x.shape and found.dtype == x.dtype:
            return found
        frame = frame.f_back
    return None


def modulated_layernorm(x, scale, shift):
    launch_nothing(x)
    found = _expected_for(x)
    return found.clone() if found is not None else torch.zeros_like(x)
