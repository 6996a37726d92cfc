"""Technique 9: return at once and let a thread finish the work after the timer stopped.

Honest on the first call per shape; afterwards the output is written by a
thread that starts computing LATE_S after the call has returned.
"""
import threading
import time

import torch

from registry.kernels.reference import modulated_layernorm as reference

from gallery._shared import first_call_on_shape, honest_modln, launch_nothing


LATE_S = 60.0
"""Far past the moment the harness counts the worker's threads after a call, however loaded the machine: with
half a second, a harness that read /proc later than that would find the thread gone and refuse the unwritten
output instead (a non-finite output or a stale result, as a thread that ends at once is refused), not the
background work (the worker ends with os._exit, so the sleeping thread delays nothing)."""


def _finish(out, x, scale, shift):
    time.sleep(LATE_S)  # Triton's interpreter is not thread-safe, so the late work is torch's
    out.copy_(reference(x, scale, shift))


def modulated_layernorm(x, scale, shift):
    if first_call_on_shape(x):
        return honest_modln(x, scale, shift)
    launch_nothing(x)
    out = torch.empty_like(x)
    threading.Thread(target=_finish, args=(out, x, scale, shift)).start()
    return out
