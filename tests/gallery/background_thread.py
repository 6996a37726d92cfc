"""Technique 9: return at once and let a thread finish the work after the timer stopped.

Honest on the first call per shape; afterwards the output is written by a
thread that starts computing a moment after the call has returned.
"""
import threading
import time

import torch

from registry.kernels.reference import modulated_layernorm as reference

from gallery._shared import first_call_on_shape, honest_modln, launch_nothing


def _finish(out, x, scale, shift):
    time.sleep(0.5)  # Triton's interpreter is not thread-safe, so the late work is torch's
    out.copy_(reference(x, scale, shift))


def modulated_layernorm(x, scale, shift):
    if first_call_on_shape(x):
        return honest_modln(x, scale, shift)
    launch_nothing(x)
    out = torch.empty_like(x)
    threading.Thread(target=_finish, args=(out, x, scale, shift)).start()
    return out
