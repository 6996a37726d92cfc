"""Technique 6: tell checked and warm-up calls from timed ones, and skip the work when timed.

The old harness timed inside ``_CpuTimer.__call__``/``_CudaTimer.__call__``,
visible on the call stack; where no timer frame shows, the cheat assumes the
usual layout (one checked call, one warm-up call per shape, then timed calls).
"""
import sys
from collections import Counter

import torch

from gallery._shared import honest_modln, launch_nothing

_CALLS: Counter = Counter()


def _timed_by_stack() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "__call__" and "Timer" in repr(frame.f_locals.get("self")):
            return True
        frame = frame.f_back
    return False


def modulated_layernorm(x, scale, shift):
    key = (tuple(x.shape), x.dtype)
    _CALLS[key] += 1
    if _timed_by_stack() or _CALLS[key] > 2:
        launch_nothing(x)
        return torch.zeros_like(x)
    return honest_modln(x, scale, shift)
